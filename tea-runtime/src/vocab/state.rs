//! The state a graph carries from node to node, the partial updates nodes return, and the
//! per-field metadata (`Field`, `Reducer`) that checkpoints and the join merge rely on.
//!
//! `#[derive(GraphState)]` implements both traits; the engine only ever talks to them.
//!
//! Also here: [`Write`] (how an update writes a field, which the join's conflict check reads
//! with `StateUpdate::replaced`), `Slot` (a field of a generated update), and [`fingerprint`]
//! (FNV-1a, a `const fn`, for schema and graph fingerprints).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The typed state of a graph.
///
/// Implemented by `#[derive(GraphState)]`; the derive also writes the matching
/// [`StateUpdate`] type (`Review` gets `ReviewUpdate`).
///
/// A state is what every node reads and what checkpoints store, so it must be cloneable
/// (parallel branches each get a copy), shareable across threads, and serializable.
pub trait GraphState: Clone + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// The partial update nodes return: one optional slot per field.
    type Update: StateUpdate<State = Self>;

    /// The fields in declaration order, with their types and reducers.
    const FIELDS: &'static [Field];

    /// A fingerprint of [`FIELDS`](Self::FIELDS): names, types and reducers. A checkpoint
    /// written under another fingerprint was written by another shape of the state.
    const SCHEMA_FINGERPRINT: u64;

    /// Applies `update` field by field, each written field through its reducer.
    fn apply(&mut self, update: Self::Update);

    /// An empty update (`Review::update()` is `ReviewUpdate::default()`), to chain setters on.
    fn update() -> Self::Update {
        Self::Update::default()
    }
}

/// A partial update of a [`GraphState`]: what a node returns.
///
/// Each field of the state has a slot that is either empty (no change), set (merged through the
/// field's reducer) or, for fields with a reducer, overwritten (bypassing the reducer).
pub trait StateUpdate: Default + Clone + fmt::Debug + Send + Sync + Serialize + DeserializeOwned + 'static {
    /// The state this update applies to.
    type State: GraphState<Update = Self>;

    /// How this update writes the field at `index` in [`GraphState::FIELDS`], if it does.
    fn writes(&self, index: usize) -> Option<Write>;

    /// Calls `f` with the name of each field this update *replaces* ([`Write::Replace`]): the
    /// writes two parallel branches may not both make. The default walks
    /// [`GraphState::FIELDS`] with [`writes`](Self::writes); an update whose keys are known
    /// only at run time reports its own.
    fn replaced<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        for (index, field) in Self::State::FIELDS.iter().enumerate() {
            if self.writes(index) == Some(Write::Replace) {
                f(field.name);
            }
        }
    }

    /// True when the update writes no field.
    fn is_empty(&self) -> bool {
        (0..Self::State::FIELDS.len()).all(|i| self.writes(i).is_none())
    }
}

/// How an update writes one field: see [`StateUpdate::writes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// The value replaces the field: a `replace` field, or an `overwrite_…` of a reducer field.
    /// Two parallel branches replacing the same field conflict.
    Replace,
    /// The value is merged into the field by its reducer (`append`, `sum`, …).
    Reduce,
}

/// One field of a state, as [`GraphState::FIELDS`] describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name.
    pub name: &'static str,
    /// The field's type, as written in the struct.
    pub ty: &'static str,
    /// How updates to the field are merged.
    pub reducer: Reducer,
}

/// How an update to a field is merged into the current value (`#[reducer(…)]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reducer {
    /// The new value replaces the old one (the default).
    Replace,
    /// `Vec`, `VecDeque` or `String`: the new items are appended.
    Append,
    /// Numbers: the new value is added.
    Sum,
    /// The larger of the two values is kept.
    Max,
    /// The smaller of the two values is kept.
    Min,
    /// Sets: the union is kept.
    Union,
    /// Maps: the new entries are inserted, replacing entries with the same key.
    Merge,
    /// A function `fn(&mut T, T)`, named by its path.
    With(&'static str),
    /// `Vec<Message>`: chat messages merged by id ([`add_messages`](crate::add_messages)).
    Messages,
}

impl fmt::Display for Reducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reducer::Replace => f.write_str("replace"),
            Reducer::Append => f.write_str("append"),
            Reducer::Sum => f.write_str("sum"),
            Reducer::Max => f.write_str("max"),
            Reducer::Min => f.write_str("min"),
            Reducer::Union => f.write_str("union"),
            Reducer::Merge => f.write_str("merge"),
            Reducer::With(path) => write!(f, "with = {path}"),
            Reducer::Messages => f.write_str("messages"),
        }
    }
}

/// The slot of a reducer field in a generated update type.
///
/// Generated code uses it; users go through the update's setters (`log(…)` merges through the
/// reducer, `overwrite_log(…)` replaces).
#[doc(hidden)]
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot<T> {
    /// No change.
    Unset,
    /// Merge through the field's reducer.
    Reduce(T),
    /// Replace, bypassing the reducer.
    Overwrite(T),
}

// Not derived: `#[derive(Default)]` would require `T: Default`.
#[allow(clippy::derivable_impls)]
impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot::Unset
    }
}

impl<T> Slot<T> {
    /// True for [`Slot::Unset`] (used by serde's `skip_serializing_if`).
    pub fn is_unset(&self) -> bool {
        matches!(self, Slot::Unset)
    }

    /// How this slot writes its field.
    pub fn write(&self) -> Option<Write> {
        match self {
            Slot::Unset => None,
            Slot::Reduce(_) => Some(Write::Reduce),
            Slot::Overwrite(_) => Some(Write::Replace),
        }
    }
}

/// Reads a present update slot as `Some(value)`, even when the value is `null`.
///
/// A `replace` field's slot is an `Option<T>`: absent means "not written". serde would read a
/// written `null` (a field of type `Option<_>` set to `None`) back as absent, losing the write;
/// generated update types read present slots through this instead.
#[doc(hidden)]
pub fn deserialize_some<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// Whether `fields` has one named `name` (usable in constants: `graph!` checks a `cache`
/// statement's `reads` with it at compile time).
#[doc(hidden)]
pub const fn has_field(fields: &[Field], name: &str) -> bool {
    let mut i = 0;
    while i < fields.len() {
        let (a, b) = (fields[i].name.as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// FNV-1a over `bytes`, usable in constants: the fingerprint of schemas and graphs.
#[doc(hidden)]
pub const fn fingerprint(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}
