//! Delta records: a checkpoint written as what changed since the record before it.
//!
//! A thread's checkpoints form a chain. A *full* record holds the whole payload (the format of
//! [`checkpoint`](super::checkpoint), magic `TEAc`, what every earlier tea wrote); a *delta*
//! record (the same envelope with magic `TEAd`) holds the id of the newest full record before
//! it and a [patch](diff) that turns the payload of the record just before it into its own. A
//! record is read by folding: the full record, then each delta after it up to the one asked
//! for ([`fold`]).
//!
//! A patch is JSON, made by comparing two payloads as JSON values, so it is read without the
//! state's type (a front end, a fork copying a child graph's thread) and it stores only what
//! changed: a field of the state that did not change is not written, an appended list writes
//! its new elements, and a fan-out's write names only the branches whose progress moved. Its
//! forms:
//!
//! - `{"v": VALUE}`: the value is `VALUE`;
//! - `{"o": {KEY: PATCH, …}, "r": [KEY, …]}`: an object, each key in `o` patched (added when
//!   absent), each key in `r` removed;
//! - `{"a": [[INDEX, PATCH], …], "n": LEN}`: an array, resized to `LEN` (new elements are
//!   given in `a` as `{"v": …}`) and each listed element patched.

use serde_json::{Map, Value};

/// How deep [`diff`] compares before it writes what differs whole.
const MAX_DIFF_DEPTH: usize = 48;

/// The patch that turns `old` into `new`, or `None` if they are equal.
pub(crate) fn diff(old: &Value, new: &Value) -> Option<Value> {
    diff_at(old, new, 0)
}

fn whole(new: &Value) -> Value {
    let mut map = Map::with_capacity(1);
    map.insert("v".to_owned(), new.clone());
    Value::Object(map)
}

fn diff_at(old: &Value, new: &Value, depth: usize) -> Option<Value> {
    if depth >= MAX_DIFF_DEPTH {
        return (old != new).then(|| whole(new));
    }
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut changed = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) => {
                        if let Some(patch) = diff_at(before, value, depth + 1) {
                            changed.insert(key.clone(), patch);
                        }
                    }
                    None => {
                        changed.insert(key.clone(), whole(value));
                    }
                }
            }
            let removed: Vec<Value> =
                old.keys().filter(|key| !new.contains_key(*key)).map(|key| Value::String(key.clone())).collect();
            if changed.is_empty() && removed.is_empty() {
                return None;
            }
            let mut patch = Map::with_capacity(2);
            if !changed.is_empty() {
                patch.insert("o".to_owned(), Value::Object(changed));
            }
            if !removed.is_empty() {
                patch.insert("r".to_owned(), Value::Array(removed));
            }
            Some(Value::Object(patch))
        }
        (Value::Array(old), Value::Array(new)) if !old.is_empty() && !new.is_empty() => {
            let mut changed = Vec::new();
            for (i, value) in new.iter().enumerate() {
                let patch = match old.get(i) {
                    Some(before) => diff_at(before, value, depth + 1),
                    None => Some(whole(value)),
                };
                if let Some(patch) = patch {
                    changed.push(Value::Array(vec![Value::from(i), patch]));
                }
            }
            if changed.is_empty() && old.len() == new.len() {
                return None;
            }
            // Most elements changed: the array whole is as short, and simpler to read.
            if changed.len() * 2 > new.len() + 1 {
                return Some(whole(&Value::Array(new.clone())));
            }
            Some(array_patch(changed, new.len()))
        }
        _ => (old != new).then(|| whole(new)),
    }
}

/// An array's patch: `changed` (each `[index, patch]`), the array resized to `len`.
pub(crate) fn array_patch(changed: Vec<Value>, len: usize) -> Value {
    let mut patch = Map::with_capacity(2);
    patch.insert("a".to_owned(), Value::Array(changed));
    patch.insert("n".to_owned(), Value::from(len));
    Value::Object(patch)
}

/// An object's patch: each of `changed` (key, patch) set, each of `removed` removed.
pub(crate) fn object_patch(changed: Map<String, Value>, removed: &[&str]) -> Value {
    let mut patch = Map::with_capacity(2);
    if !changed.is_empty() {
        patch.insert("o".to_owned(), Value::Object(changed));
    }
    if !removed.is_empty() {
        patch.insert("r".to_owned(), removed.iter().map(|key| Value::from(*key)).collect());
    }
    Value::Object(patch)
}

/// A patch that sets the value whole.
pub(crate) fn set(value: Value) -> Value {
    let mut map = Map::with_capacity(1);
    map.insert("v".to_owned(), value);
    Value::Object(map)
}

/// Applies `patch` (made by [`diff`]) to `target`; what is wrong with it otherwise (the
/// target is then partly patched, and must not be used).
pub(crate) fn apply(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(patch) = patch else { return Err("a patch is not a JSON object".into()) };
    if let Some(value) = patch.get("v") {
        *target = value.clone();
        return Ok(());
    }
    if patch.contains_key("a") || patch.contains_key("n") {
        let Value::Array(array) = target else {
            return Err("an array patch meets a value that is not an array".into());
        };
        let len = patch.get("n").and_then(Value::as_u64).ok_or("an array patch has no length")?;
        let len = usize::try_from(len).map_err(|_| "an array patch's length is too large")?;
        let old_len = array.len();
        if len > old_len.saturating_add(patch.get("a").and_then(Value::as_array).map_or(0, Vec::len)) {
            return Err(format!("an array patch grows an array of {old_len} to {len} with fewer new elements"));
        }
        array.resize(len, Value::Null);
        let mut given = vec![false; len.saturating_sub(old_len)];
        for entry in patch.get("a").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            let (Some(index), Some(element)) = (entry.get(0).and_then(Value::as_u64), entry.get(1)) else {
                return Err("an array patch's entry is not [index, patch]".into());
            };
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            let Some(slot) = array.get_mut(index) else {
                return Err(format!("an array patch names element {index} of an array of {len}"));
            };
            if index >= old_len {
                given[index - old_len] = true;
            }
            apply(slot, element)?;
        }
        if given.iter().any(|g| !g) {
            return Err(format!(
                "an array patch grows an array of {old_len} to {len} without giving every new element"
            ));
        }
        return Ok(());
    }
    let Value::Object(object) = target else {
        return Err("an object patch meets a value that is not an object".into());
    };
    if let Some(removed) = patch.get("r") {
        let Value::Array(removed) = removed else { return Err("an object patch's removed keys are not a list".into()) };
        for key in removed {
            let Value::String(key) = key else {
                return Err("an object patch removes a key that is not a string".into());
            };
            object.remove(key);
        }
    }
    if let Some(changed) = patch.get("o") {
        let Value::Object(changed) = changed else { return Err("an object patch's changes are not an object".into()) };
        for (key, element) in changed {
            match object.get_mut(key) {
                Some(slot) => apply(slot, element)?,
                None => {
                    let Some(value) = element.get("v") else {
                        return Err(format!("an object patch patches key `{key}`, which is absent"));
                    };
                    object.insert(key.clone(), value.clone());
                }
            }
        }
    }
    Ok(())
}

/// Whether a value that `patch` writes holds a `null` (which a float that is NaN or infinite
/// serializes to, and which then may not read back).
pub(crate) fn writes_null(patch: &Value) -> bool {
    match patch {
        Value::Object(patch) => {
            patch.get("v").is_some_and(holds_null)
                || patch.get("o").and_then(Value::as_object).is_some_and(|o| o.values().any(writes_null))
                || patch
                    .get("a")
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().filter_map(|entry| entry.get(1)).any(writes_null))
        }
        _ => false,
    }
}

/// Whether a JSON value holds a `null` anywhere.
pub(crate) fn holds_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(holds_null),
        Value::Object(map) => map.values().any(holds_null),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(old: Value, new: Value) -> Option<Value> {
        let patch = diff(&old, &new);
        let mut target = old.clone();
        if let Some(patch) = &patch {
            apply(&mut target, patch).unwrap();
        }
        assert_eq!(target, new, "patch {patch:?}");
        patch
    }

    #[test]
    fn a_patch_turns_the_old_value_into_the_new() {
        assert_eq!(round_trip(json!({"a": 1}), json!({"a": 1})), None);
        let patch = round_trip(json!({"big": "x".repeat(1000), "n": 1}), json!({"big": "x".repeat(1000), "n": 2}));
        assert!(serde_json::to_string(&patch).unwrap().len() < 50, "{patch:?}");
        round_trip(json!({"a": 1, "b": null}), json!({"a": 1}));
        round_trip(json!({"a": 1}), json!({"a": 1, "b": null}));
        let patch = round_trip(json!({"log": [1, 2, 3, 4, 5, 6]}), json!({"log": [1, 2, 3, 4, 5, 6, 7]})).unwrap();
        assert_eq!(patch, json!({"o": {"log": {"a": [[6, {"v": 7}]], "n": 7}}}));
        round_trip(json!({"log": [1, 2, 3]}), json!({"log": [1]}));
        round_trip(json!({"log": []}), json!({"log": [1]}));
        round_trip(json!([1, {"x": [1, 2]}]), json!([1, {"x": [1, 3]}]));
        round_trip(json!("a"), json!({"a": 1}));
        round_trip(json!({"a": {"b": {"c": 1}}}), json!({"a": {"b": {"c": 2, "d": 3}}}));
    }

    #[test]
    fn a_patch_that_does_not_fit_is_an_error_not_a_panic() {
        for (target, patch) in [
            (json!({"a": 1}), json!({"o": {"b": {"o": {}}}})),
            (json!([1]), json!({"a": [[5, {"v": 1}]], "n": 1})),
            (json!([1]), json!({"a": [], "n": 3})),
            (json!([1]), json!({"a": [[2, {"v": 1}], [2, {"v": 1}]], "n": 3})),
            (json!(1), json!({"o": {}})),
            (json!({}), json!(3)),
            (json!([1]), json!({"a": [["x", {"v": 1}]], "n": 1})),
            (json!([1]), json!({"a": [], "n": u64::MAX})),
        ] {
            let mut target = target;
            assert!(apply(&mut target, &patch).is_err(), "{patch}");
        }
    }

    #[test]
    fn a_null_written_is_found() {
        assert!(writes_null(&diff(&json!({"a": 1.0}), &json!({"a": null})).unwrap()));
        assert!(!writes_null(&diff(&json!({"a": null, "b": 1}), &json!({"a": null, "b": 2})).unwrap()));
    }
}
