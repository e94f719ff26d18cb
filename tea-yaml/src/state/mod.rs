//! A YAML agent's state: a JSON object whose keys are known only at load time, and the updates
//! nodes return.
//!
//! The map sits behind an `Arc`, so handing the state to a template or a Lua block is a
//! reference-count increment, and applying an update copies the map only when someone else
//! still holds it (a parallel branch's base, an event). The keys a file declares (`state:`)
//! carry a type and a reducer; the graph applies updates with them ([`Schema::apply`]).
//!
//! `State` (a JSON object behind an `Arc`: handing it to Lua or a template is a reference count;
//! applying an update copies only when shared), `Update`, and the `Schema` of declared keys with
//! their reducers and type checks.
//!
//! - `initial.rs` — `initial_state:` and `version:`, read at load and merged under a run's input.

pub(crate) mod initial;

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};
use serde_json::{Map, Value};
use std::fmt;
use std::ops::Index;
use std::sync::Arc;
use tea_runtime::{BoxError, Field, GraphState, StateUpdate, Write};

/// The state of a YAML agent: a JSON object.
///
/// `state["count"]` is the value of key `count` (`Value::Null` when absent); `state.get(key)` is
/// `None` when absent; `state.to_json()` is the whole object.
#[derive(Clone, Default, PartialEq)]
pub struct State {
    map: Arc<Map<String, Value>>,
}

static NULL: Value = Value::Null;

impl State {
    /// An empty state.
    pub fn new() -> Self {
        State::default()
    }

    /// The value of `key`, if the state has it.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key)
    }

    /// The whole state as a JSON object.
    pub fn to_json(&self) -> Value {
        Value::Object((*self.map).clone())
    }

    /// The state's keys and values.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.map
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the state has no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub(crate) fn shared(&self) -> &Arc<Map<String, Value>> {
        &self.map
    }

    pub(crate) fn map_mut(&mut self) -> &mut Map<String, Value> {
        Arc::make_mut(&mut self.map)
    }

    pub(crate) fn from_map(map: Map<String, Value>) -> Self {
        State { map: Arc::new(map) }
    }
}

impl Index<&str> for State {
    type Output = Value;

    fn index(&self, key: &str) -> &Value {
        self.map.get(key).unwrap_or(&NULL)
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.map, f)
    }
}

impl Serialize for State {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for State {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(State::from_map)
    }
}

/// Without the agent's declarations (the engine always applies through the agent's graph,
/// which has them), every key is replaced.
impl GraphState for State {
    type Update = Update;
    const FIELDS: &'static [Field] = &[];
    const SCHEMA_FINGERPRINT: u64 = 0;

    fn apply(&mut self, update: Update) {
        if update.values.is_empty() {
            return;
        }
        let map = self.map_mut();
        for (key, value) in update.values {
            map.insert(key, value);
        }
    }
}

/// A partial update of a YAML agent's [`State`]: keys to write, each through its declared
/// reducer.
///
/// `Update::from(json!({ "approved": true }))`; a value that is not a JSON object makes an
/// update that the agent refuses (`Error::BadResumeValue` at resume).
#[derive(Clone, Default)]
pub struct Update {
    values: Map<String, Value>,
    /// Why this update cannot be applied (it was made from a non-object).
    invalid: Option<String>,
    /// The keys this update replaces, once the agent has sorted its writes at a join; `None`:
    /// every key.
    replaced: Option<Vec<String>>,
}

impl Update {
    /// An empty update.
    pub fn new() -> Self {
        Update::default()
    }

    /// Adds a write of `value` to `key`.
    pub fn set(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.values.insert(key.into(), value.into());
        self
    }

    /// The keys and values this update writes.
    pub fn values(&self) -> &Map<String, Value> {
        &self.values
    }

    pub(crate) fn from_map(values: Map<String, Value>) -> Self {
        Update { values, invalid: None, replaced: None }
    }

    pub(crate) fn into_values(self) -> Result<Map<String, Value>, String> {
        match self.invalid {
            Some(reason) => Err(reason),
            None => Ok(self.values),
        }
    }

    pub(crate) fn with_replaced(mut self, replaced: Vec<String>) -> Self {
        self.replaced = Some(replaced);
        self
    }
}

impl From<Value> for Update {
    fn from(value: Value) -> Self {
        match value {
            Value::Object(values) => Update::from_map(values),
            other => Update {
                values: Map::new(),
                invalid: Some(format!("an update must be a JSON object of keys to write, not `{other}`")),
                replaced: None,
            },
        }
    }
}

impl From<Map<String, Value>> for Update {
    fn from(values: Map<String, Value>) -> Self {
        Update::from_map(values)
    }
}

impl fmt::Debug for Update {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.invalid {
            Some(reason) => write!(f, "Update(invalid: {reason})"),
            None => fmt::Debug::fmt(&self.values, f),
        }
    }
}

impl Serialize for Update {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.values.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Update {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Map::deserialize(deserializer).map(Update::from_map)
    }
}

impl StateUpdate for Update {
    type State = State;

    fn writes(&self, _index: usize) -> Option<Write> {
        None
    }

    fn replaced<'a>(&'a self, f: &mut dyn FnMut(&'a str)) {
        match &self.replaced {
            Some(keys) => keys.iter().for_each(|k| f(k)),
            None => self.values.keys().for_each(|k| f(k)),
        }
    }

    fn is_empty(&self) -> bool {
        self.values.is_empty() && self.invalid.is_none()
    }
}

/// A declared key's type (`state: { count: int }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Str,
    Int,
    Float,
    Bool,
    List,
    Dict,
    Any,
}

impl Type {
    pub(crate) const NAMES: [&'static str; 7] = ["str", "int", "float", "bool", "list", "dict", "any"];

    pub(crate) fn parse(name: &str) -> Option<Type> {
        Some(match name {
            "str" | "string" => Type::Str,
            "int" | "integer" => Type::Int,
            "float" | "number" => Type::Float,
            "bool" | "boolean" => Type::Bool,
            "list" | "array" => Type::List,
            "dict" | "object" | "map" => Type::Dict,
            "any" => Type::Any,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Type::Str => "str",
            Type::Int => "int",
            Type::Float => "float",
            Type::Bool => "bool",
            Type::List => "list",
            Type::Dict => "dict",
            Type::Any => "any",
        }
    }

    /// Whether `value` is of this type (`null` fits every type: the key has no value).
    pub(crate) fn fits(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) | (Type::Any, _) => true,
            (Type::Str, Value::String(_)) | (Type::Bool, Value::Bool(_)) => true,
            (Type::Int, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Type::Float, Value::Number(_)) => true,
            (Type::List, Value::Array(_)) | (Type::Dict, Value::Object(_)) => true,
            _ => false,
        }
    }
}

/// How writes to a declared key merge into its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reducer {
    Replace,
    Append,
    Sum,
    Max,
    Min,
    Merge,
    /// Chat messages merged by id (`tea_runtime::add_messages`, LangGraph's `add_messages`).
    Messages,
}

impl Reducer {
    pub(crate) const NAMES: [&'static str; 7] = ["replace", "append", "sum", "max", "min", "merge", "messages"];

    pub(crate) fn parse(name: &str) -> Option<Reducer> {
        Some(match name {
            "replace" => Reducer::Replace,
            "append" => Reducer::Append,
            "sum" | "add" => Reducer::Sum,
            "max" => Reducer::Max,
            "min" => Reducer::Min,
            "merge" => Reducer::Merge,
            "messages" | "add_messages" => Reducer::Messages,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Reducer::Replace => "replace",
            Reducer::Append => "append",
            Reducer::Sum => "sum",
            Reducer::Max => "max",
            Reducer::Min => "min",
            Reducer::Merge => "merge",
            Reducer::Messages => "messages",
        }
    }

    /// Whether the reducer can work on values of type `ty`.
    pub(crate) fn fits(self, ty: Type) -> bool {
        match self {
            Reducer::Replace => true,
            Reducer::Append | Reducer::Messages => matches!(ty, Type::List | Type::Any),
            Reducer::Sum | Reducer::Max | Reducer::Min => matches!(ty, Type::Int | Type::Float | Type::Any),
            Reducer::Merge => matches!(ty, Type::Dict | Type::Any),
        }
    }
}

/// How [`Schema::apply`] writes one checked key.
enum Plan {
    /// The new value, reduced already.
    Set(Value),
    /// Items to append to the list in place.
    Append(Value),
    /// Entries to merge into the dict in place.
    Merge(Value),
}

/// One declared key.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decl {
    pub(crate) ty: Type,
    pub(crate) reducer: Reducer,
}

/// The keys a file declares.
#[derive(Clone, Debug, Default)]
pub(crate) struct Schema {
    keys: std::collections::HashMap<String, Decl>,
    /// `(name, type, reducer)` sorted by name: what the fingerprint covers.
    sorted: Vec<(String, Decl)>,
}

impl Schema {
    pub(crate) fn new(decls: Vec<(String, Decl)>) -> Self {
        let mut sorted = decls;
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        let keys = sorted.iter().cloned().collect();
        Schema { keys, sorted }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Decl> {
        if self.keys.is_empty() {
            return None;
        }
        self.keys.get(key)
    }

    pub(crate) fn is_declared(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The declared keys' names, sorted (none for an agent that declares no state).
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.sorted.iter().map(|(name, _)| name.as_str())
    }

    /// Names, types and reducers of the declared keys, in a stable order.
    pub(crate) fn describe(&self) -> String {
        let mut out = String::new();
        for (name, decl) in &self.sorted {
            out.push_str(name);
            out.push(':');
            out.push_str(decl.ty.name());
            out.push(':');
            out.push_str(decl.reducer.name());
            out.push(';');
        }
        out
    }

    /// Applies `update` to `state`, each declared key through its reducer and type check;
    /// undeclared keys are replaced. Nothing is written when a write is refused.
    pub(crate) fn apply(&self, state: &mut State, update: Update) -> Result<(), BoxError> {
        let values = update.into_values()?;
        if values.is_empty() {
            return Ok(());
        }
        if values.keys().all(|k| !self.is_declared(k)) {
            let map = state.map_mut();
            for (key, value) in values {
                map.insert(key, value);
            }
            return Ok(());
        }
        // Check every write first, so a refused write leaves the state as it was; lists and
        // dicts then grow in place rather than being copied.
        let mut planned = Vec::with_capacity(values.len());
        for (key, value) in values {
            // Lua's empty table is both an empty list and an empty dict: written to a `list`
            // key, an empty object is the empty list.
            let declared = self.get(&key);
            let value = match (declared, value) {
                (Some(decl), Value::Object(m)) if decl.ty == Type::List && m.is_empty() => Value::Array(Vec::new()),
                (_, value) => value,
            };
            let current = state.get(&key).filter(|v| !v.is_null());
            if let (Some(decl), Some(replacement)) = (declared, overwrite_of(&value)) {
                // `{"__overwrite__": value}` (LangGraph's `Overwrite`): replaces the value of a
                // key whatever its reducer; an empty table of Lua is an empty list for a list.
                let replacement = match (decl.ty, replacement) {
                    (Type::List, Value::Object(m)) if m.is_empty() => Value::Array(Vec::new()),
                    (_, other) => other.clone(),
                };
                if !decl.ty.fits(&replacement) {
                    return Err(type_error(&key, decl.ty, &replacement).into());
                }
                planned.push((key, Plan::Set(replacement)));
                continue;
            }
            let plan = match (declared, current) {
                (None, _) => Plan::Set(value),
                (Some(decl), Some(Value::Array(_))) if decl.reducer == Reducer::Append => Plan::Append(value),
                (Some(decl), Some(Value::Object(_))) if decl.reducer == Reducer::Merge && value.is_object() => {
                    Plan::Merge(value)
                }
                (Some(decl), current) => Plan::Set(reduce(&key, *decl, current, value)?),
            };
            planned.push((key, plan));
        }
        let map = state.map_mut();
        for (key, plan) in planned {
            match plan {
                Plan::Set(value) => {
                    map.insert(key, value);
                }
                Plan::Append(value) => {
                    if let Some(Value::Array(items)) = map.get_mut(&key) {
                        match value {
                            Value::Array(more) => items.extend(more),
                            Value::Null => {}
                            single => items.push(single),
                        }
                    }
                }
                Plan::Merge(Value::Object(more)) => {
                    if let Some(Value::Object(entries)) = map.get_mut(&key) {
                        entries.extend(more);
                    }
                }
                Plan::Merge(_) => {}
            }
        }
        Ok(())
    }

    /// What a child agent's final state `after` changed of `before` (the parent's state its
    /// subgraph node ran on), as writes that, applied to `before` through these reducers, give
    /// `after`'s values: keys whose value is unchanged are not written; a declared key with a
    /// reducer is written by what was added (an `append` list by its new items, a `sum` by the
    /// difference, a `max`/`min`/`merge` by its new value when that only grew), otherwise as
    /// `{"__overwrite__": value}`. As `graph!`'s subgraph over its parent's state, so the entries
    /// the child started with are not appended again, and sibling branches still merge.
    pub(crate) fn changes(&self, before: &State, after: Map<String, Value>) -> Map<String, Value> {
        let mut writes = Map::new();
        for (key, new) in after {
            let old = before.get(&key);
            if old == Some(&new) {
                continue;
            }
            let written = match (self.get(&key), old.filter(|v| !v.is_null())) {
                (Some(decl), Some(old)) if decl.reducer != Reducer::Replace => match added(decl.reducer, old, &new) {
                    Some(added) => added,
                    None => {
                        let mut overwrite = Map::new();
                        overwrite.insert("__overwrite__".to_owned(), new);
                        Value::Object(overwrite)
                    }
                },
                _ => new,
            };
            writes.insert(key, written);
        }
        writes
    }

    /// Checks `value` as a whole new value of `key` (an input, a resume answer).
    pub(crate) fn check(&self, key: &str, value: &Value) -> Result<(), String> {
        match self.get(key) {
            Some(decl) if !decl.ty.fits(value) => Err(type_error(key, decl.ty, value)),
            _ => Ok(()),
        }
    }
}

fn type_error(key: &str, ty: Type, value: &Value) -> String {
    format!("state key `{key}` is declared `{}`, but the value written is {}", ty.name(), describe(value))
}

/// The value a write `{"__overwrite__": value}` puts in place of its key's, whatever the key's
/// reducer (LangGraph's `Overwrite`).
pub(crate) fn overwrite_of(value: &Value) -> Option<&Value> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get("__overwrite__"),
        _ => None,
    }
}

/// A value's JSON type and a short rendering of it, for messages.
pub(crate) fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(n) if n.is_f64() => "a float",
        Value::Number(_) => "an int",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    };
    let mut text = value.to_string();
    if text.len() > 60 {
        let mut cut = 57;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    format!("{kind} ({text})")
}

/// The value that, written through `reducer` onto `old`, gives `new`; `None` when there is
/// none that surely does (the key is then overwritten).
fn added(reducer: Reducer, old: &Value, new: &Value) -> Option<Value> {
    match (reducer, old, new) {
        // Messages keyed by id: the new ones appended (a replaced or removed one overwrites).
        (Reducer::Append | Reducer::Messages, Value::Array(old), Value::Array(new)) if new.starts_with(old) => {
            Some(Value::Array(new[old.len()..].to_vec()))
        }
        (Reducer::Sum, Value::Number(old), Value::Number(new)) => {
            if let (Some(o), Some(n)) = (old.as_i64(), new.as_i64()) {
                n.checked_sub(o).map(Value::from)
            } else {
                let (o, n) = (old.as_f64()?, new.as_f64()?);
                let d = n - o;
                (o + d == n).then(|| serde_json::Number::from_f64(d).map(Value::Number)).flatten()
            }
        }
        (Reducer::Max, Value::Number(old), Value::Number(new)) => {
            (new.as_f64()? > old.as_f64()?).then(|| Value::Number(new.clone()))
        }
        (Reducer::Min, Value::Number(old), Value::Number(new)) => {
            (new.as_f64()? < old.as_f64()?).then(|| Value::Number(new.clone()))
        }
        (Reducer::Merge, Value::Object(old), Value::Object(new)) => {
            old.keys().all(|key| new.contains_key(key)).then(|| Value::Object(new.clone()))
        }
        _ => None,
    }
}

/// The new value of declared `key` after writing `value` through its reducer.
fn reduce(key: &str, decl: Decl, current: Option<&Value>, value: Value) -> Result<Value, BoxError> {
    let current = current.filter(|v| !v.is_null());
    let out = match (decl.reducer, current) {
        (Reducer::Append, current) => {
            let mut list = match current {
                None => Vec::new(),
                Some(Value::Array(items)) => items.clone(),
                Some(other) => {
                    return Err(
                        format!("state key `{key}` (reducer append) holds {}, not a list", describe(other)).into()
                    )
                }
            };
            match value {
                Value::Array(items) => list.extend(items),
                Value::Null => {}
                single => list.push(single),
            }
            Value::Array(list)
        }
        (Reducer::Messages, current) => messages(key, current, value)?,
        (Reducer::Sum, Some(current)) => match (current, &value) {
            (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
                (Some(a), Some(b)) => a
                    .checked_add(b)
                    .map(Value::from)
                    .ok_or_else(|| format!("state key `{key}` (reducer sum): {a} + {b} overflows a 64-bit integer"))?,
                _ => number(key, a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0))?,
            },
            (_, Value::Null) => current.clone(),
            _ => return Err(not_numbers(key, "sum", current, &value)),
        },
        (Reducer::Max | Reducer::Min, Some(current)) => match (current, &value) {
            (Value::Number(a), Value::Number(b)) => {
                let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                let keep_new = if decl.reducer == Reducer::Max { y > x } else { y < x };
                if keep_new {
                    value
                } else {
                    current.clone()
                }
            }
            (_, Value::Null) => current.clone(),
            _ => return Err(not_numbers(key, decl.reducer.name(), current, &value)),
        },
        (Reducer::Merge, Some(current)) => match (current, value) {
            (Value::Object(a), Value::Object(b)) => {
                let mut merged = a.clone();
                merged.extend(b);
                Value::Object(merged)
            }
            (_, Value::Null) => current.clone(),
            (current, other) => {
                return Err(format!(
                    "state key `{key}` (reducer merge) merges dicts, but it holds {} and the value written is {}",
                    describe(current),
                    describe(&other)
                )
                .into())
            }
        },
        (Reducer::Replace, _) | (Reducer::Sum | Reducer::Max | Reducer::Min | Reducer::Merge, None) => value,
    };
    if !decl.ty.fits(&out) {
        return Err(type_error(key, decl.ty, &out).into());
    }
    Ok(out)
}

/// The `messages` reducer: `value` (a message, or a list of them) merged into the list
/// `current` by `add_messages`' rules — a known id replaces, `{"role": "remove", "id"}`
/// deletes, a message without an id gets one.
fn messages(key: &str, current: Option<&Value>, value: Value) -> Result<Value, BoxError> {
    let read = |what: &str, items: Vec<Value>| -> Result<Vec<tea_runtime::Message>, BoxError> {
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                serde_json::from_value(item).map_err(|e| {
                    BoxError::from(format!(
                        "state key `{key}` (reducer messages): {what}[{i}] is not a chat message: {e}"
                    ))
                })
            })
            .collect()
    };
    let mut list = match current {
        None => Vec::new(),
        Some(Value::Array(items)) => read("its item", items.clone())?,
        Some(other) => {
            return Err(format!("state key `{key}` (reducer messages) holds {}, not a list", describe(other)).into())
        }
    };
    let new = match value {
        Value::Array(items) => read("the written item", items)?,
        Value::Null => Vec::new(),
        single => read("the written item", vec![single])?,
    };
    tea_runtime::try_add_messages(&mut list, new)
        .map_err(|why| format!("state key `{key}` (reducer messages): {why}"))?;
    serde_json::to_value(list).map_err(|e| format!("state key `{key}`: {e}").into())
}

fn number(key: &str, value: f64) -> Result<Value, BoxError> {
    serde_json::Number::from_f64(value)
        .map(Value::Number)
        .ok_or_else(|| format!("state key `{key}`: the result {value} is not a finite number").into())
}

fn not_numbers(key: &str, reducer: &str, current: &Value, value: &Value) -> BoxError {
    format!(
        "state key `{key}` (reducer {reducer}) works on numbers, but it holds {} and the value written is {}",
        describe(current),
        describe(value)
    )
    .into()
}

/// Whether a value counts as true, as Python and Jinja take it: not null, `false`, zero, an
/// empty string, list or mapping.
pub(crate) fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Schema {
        Schema::new(vec![
            ("log".into(), Decl { ty: Type::List, reducer: Reducer::Append }),
            ("count".into(), Decl { ty: Type::Int, reducer: Reducer::Sum }),
            ("best".into(), Decl { ty: Type::Float, reducer: Reducer::Max }),
            ("meta".into(), Decl { ty: Type::Dict, reducer: Reducer::Merge }),
            ("ok".into(), Decl { ty: Type::Bool, reducer: Reducer::Replace }),
        ])
    }

    fn apply(state: &mut State, value: Value) -> Result<(), String> {
        schema().apply(state, Update::from(value)).map_err(|e| e.to_string())
    }

    #[test]
    fn changes_write_what_a_child_added_and_give_its_values_back() {
        let schema = schema();
        let before = json!({ "log": ["a"], "count": 2, "best": 1.5, "meta": { "x": 1 }, "ok": true, "same": 1 });
        let before = State::from_map(before.as_object().unwrap().clone());
        let cases = [
            (
                json!({ "log": ["a", "b"], "count": 5, "best": 2.5, "meta": { "x": 1, "y": 2 }, "ok": false, "same": 1, "new": "n" }),
                json!({ "log": ["b"], "count": 3, "best": 2.5, "meta": { "x": 1, "y": 2 }, "ok": false, "new": "n" }),
            ),
            // Values the reducers cannot reach from the old ones are overwritten.
            (
                json!({ "log": ["z"], "count": 2, "best": 0.5, "meta": { "y": 2 }, "ok": true, "same": 1 }),
                json!({ "log": { "__overwrite__": ["z"] }, "best": { "__overwrite__": 0.5 }, "meta": { "__overwrite__": { "y": 2 } } }),
            ),
        ];
        for (after, expected) in cases {
            let writes = schema.changes(&before, after.as_object().unwrap().clone());
            assert_eq!(Value::Object(writes.clone()), expected);
            let mut state = before.clone();
            schema.apply(&mut state, Update::from_map(writes)).unwrap();
            assert_eq!(state.to_json(), after);
        }
    }

    #[test]
    fn the_messages_reducer_appends_replaces_by_id_and_removes() {
        let schema = Schema::new(vec![("messages".into(), Decl { ty: Type::List, reducer: Reducer::Messages })]);
        let mut s = State::new();
        let mut apply = |value: Value| schema.apply(&mut s, Update::from(value)).map_err(|e| e.to_string());
        apply(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        apply(json!({"messages": {"role": "assistant", "content": "hello"}})).unwrap();
        apply(json!({"messages": [{"role": "assistant", "content": "Hello!", "id": "msg-2"}]})).unwrap();
        apply(json!({"messages": [{"role": "remove", "id": "msg-1"}, {"role": "user", "content": "bye"}]})).unwrap();
        let error = apply(json!({"messages": [{"role": "remove", "id": "gone"}]})).unwrap_err();
        assert!(error.contains("state key `messages` (reducer messages): no message has id `gone`"), "{error}");
        let error = apply(json!({"messages": [{"role": "robot", "content": "x"}]})).unwrap_err();
        assert!(error.contains("the written item[0] is not a chat message"), "{error}");
        assert_eq!(
            s.to_json()["messages"],
            json!([{"role": "assistant", "content": "Hello!", "id": "msg-2"}, {"role": "user", "content": "bye", "id": "msg-3"}])
        );
        assert_eq!(Reducer::parse("messages"), Some(Reducer::Messages));
    }

    #[test]
    fn reducers_merge_and_undeclared_keys_replace() {
        let mut s = State::new();
        apply(&mut s, json!({"log": ["a"], "count": 2, "best": 1.5, "meta": {"a": 1}, "x": 1})).unwrap();
        apply(&mut s, json!({"log": "b", "count": 3, "best": 0.5, "meta": {"b": 2}, "x": "y"})).unwrap();
        assert_eq!(
            s.to_json(),
            json!({"log": ["a", "b"], "count": 5, "best": 1.5, "meta": {"a": 1, "b": 2}, "x": "y"})
        );
    }

    #[test]
    fn a_wrong_type_names_the_key_and_writes_nothing() {
        let mut s = State::new();
        let err = apply(&mut s, json!({"ok": "yes", "x": 1})).unwrap_err();
        assert!(err.contains("`ok`") && err.contains("`bool`") && err.contains("a string"), "{err}");
        assert!(s.is_empty());
        let err = apply(&mut s, json!({"count": 1.5})).unwrap_err();
        assert!(err.contains("`count`") && err.contains("`int`"), "{err}");
        let err = apply(&mut s, json!({"meta": [1]})).unwrap_err();
        assert!(err.contains("`meta`"), "{err}");
    }

    #[test]
    fn a_non_object_update_is_refused() {
        let err = apply(&mut State::new(), json!([1, 2])).unwrap_err();
        assert!(err.contains("JSON object"), "{err}");
    }
}
