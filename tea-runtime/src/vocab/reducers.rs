//! The built-in reducers, as traits over the field types they fit.
//!
//! Generated `apply` code calls them with the span of the `#[reducer(…)]` token, so a reducer
//! that does not fit its field (`append` on a `u32`) is reported there, with the message below.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hash};

/// Fields that `#[reducer(append)]` fits: the new items are appended.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(append)]` does not fit a field of type `{Self}`",
    label = "`append` needs a sequence",
    note = "`append` fits `Vec<T>`, `VecDeque<T>` and `String`; use `sum` for numbers or `with = your_fn` for anything else"
)]
pub trait Append {
    /// Appends `new` to `self`.
    fn append(&mut self, new: Self);
}

impl<T> Append for Vec<T> {
    fn append(&mut self, mut new: Self) {
        Vec::append(self, &mut new)
    }
}

impl<T> Append for VecDeque<T> {
    fn append(&mut self, mut new: Self) {
        VecDeque::append(self, &mut new)
    }
}

impl Append for String {
    fn append(&mut self, new: Self) {
        self.push_str(&new)
    }
}

/// Fields that `#[reducer(sum)]` fits: the new value is added.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(sum)]` does not fit a field of type `{Self}`",
    label = "`sum` needs a number",
    note = "`sum` fits the integer and float types and `Duration`; use `with = your_fn` for anything else"
)]
pub trait Sum {
    /// Adds `new` to `self`.
    ///
    /// # Panics
    /// On integer overflow, in every build profile (the engine reports it as `NodePanicked`).
    fn sum(&mut self, new: Self);
}

macro_rules! sum_int {
    ($($t:ty)*) => {$(
        impl Sum for $t {
            fn sum(&mut self, new: Self) {
                *self = match self.checked_add(new) {
                    Some(total) => total,
                    None => panic!("`sum` reducer overflowed: {} + {} does not fit in {}", self, new, stringify!($t)),
                };
            }
        }
    )*};
}
sum_int!(u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize);

impl Sum for f32 {
    fn sum(&mut self, new: Self) {
        *self += new
    }
}

impl Sum for f64 {
    fn sum(&mut self, new: Self) {
        *self += new
    }
}

impl Sum for std::time::Duration {
    fn sum(&mut self, new: Self) {
        *self = match self.checked_add(new) {
            Some(total) => total,
            None => panic!("`sum` reducer overflowed a Duration"),
        };
    }
}

/// Fields that `#[reducer(max)]` and `#[reducer(min)]` fit: anything ordered.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(max)]` / `#[reducer(min)]` do not fit a field of type `{Self}`",
    label = "this type has no order",
    note = "`max` and `min` fit types that implement `PartialOrd`"
)]
pub trait Extremum {
    /// Keeps the larger of `self` and `new`.
    fn max(&mut self, new: Self);
    /// Keeps the smaller of `self` and `new`.
    fn min(&mut self, new: Self);
}

impl<T: PartialOrd> Extremum for T {
    fn max(&mut self, new: Self) {
        if new > *self {
            *self = new;
        }
    }
    fn min(&mut self, new: Self) {
        if new < *self {
            *self = new;
        }
    }
}

/// Fields that `#[reducer(union)]` fits: sets.
#[diagnostic::on_unimplemented(
    message = "`#[reducer(union)]` does not fit a field of type `{Self}`",
    label = "`union` needs a set",
    note = "`union` fits `BTreeSet<T>` and `HashSet<T>`; use `append` for `Vec<T>`"
)]
pub trait Union {
    /// Adds every element of `new` to `self`.
    fn union(&mut self, new: Self);
}

impl<T: Ord> Union for BTreeSet<T> {
    fn union(&mut self, mut new: Self) {
        self.append(&mut new)
    }
}

impl<T: Eq + Hash, H: BuildHasher> Union for HashSet<T, H> {
    fn union(&mut self, new: Self) {
        self.extend(new)
    }
}

/// Fields that `#[reducer(merge)]` fits: maps, merged key-wise (new entries win).
#[diagnostic::on_unimplemented(
    message = "`#[reducer(merge)]` does not fit a field of type `{Self}`",
    label = "`merge` needs a map",
    note = "`merge` fits `BTreeMap<K, V>` and `HashMap<K, V>`"
)]
pub trait Merge {
    /// Inserts every entry of `new` into `self`, replacing entries with the same key.
    fn merge(&mut self, new: Self);
}

impl<K: Ord, V> Merge for BTreeMap<K, V> {
    fn merge(&mut self, mut new: Self) {
        self.append(&mut new)
    }
}

impl<K: Eq + Hash, V, H: BuildHasher> Merge for HashMap<K, V, H> {
    fn merge(&mut self, new: Self) {
        self.extend(new)
    }
}

/// A custom reducer `fn(&mut T, T)` named by `#[reducer(with = path)]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a reducer for a field of type `{T}`",
    label = "expected a function `fn(&mut {T}, {T})`",
    note = "a custom reducer merges the new value into the current one: `fn keep_longer(current: &mut String, new: String)`"
)]
pub trait CustomReducer<T> {
    /// Merges `new` into `current`.
    fn reduce(&self, current: &mut T, new: T);
}

impl<T, F: Fn(&mut T, T)> CustomReducer<T> for F {
    fn reduce(&self, current: &mut T, new: T) {
        self(current, new)
    }
}
