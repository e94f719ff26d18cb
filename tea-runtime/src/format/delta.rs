//! Delta records: a checkpoint written as what changed since the record before it.
//!
//! A thread's checkpoints form a chain. A *full* record holds the whole payload (the format of
//! [`checkpoint`](super::checkpoint), magic `TEAc`, what every earlier tea wrote); a *delta*
//! record (the same envelope with magic `TEAd`) holds the id of the newest full record before
//! it and a [patch](diff_text) that turns the payload of the record just before it into its own. A
//! record is read by folding: the full record, then each delta after it up to the one asked
//! for ([`fold`]).
//!
//! A patch is JSON, made by comparing two payloads' JSON texts (skipping by a byte comparison
//! what is the same in both, never building a JSON value of either), so it is read without the
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
use std::borrow::Cow;

/// How deep [`diff_text`] compares before it writes what differs whole.
const MAX_DIFF_DEPTH: usize = 48;

/// Writes to `out` the patch that turns `old` into `new`, JSON texts as serde_json writes them
/// (compact), without making a JSON value of either: a part whose text is the same in both
/// is skipped by comparing bytes, and only what differs is read further, so an unchanged field
/// costs a comparison. Where two texts differ only in an object's key order (a map that
/// serializes its keys in another order), no patch of it is written. Whether the texts differ
/// (`false`: nothing was written).
///
/// # Errors
/// A text that is not JSON (where it was read).
pub(crate) fn diff_text(old: &str, new: &str, out: &mut Vec<u8>) -> Result<bool, String> {
    diff_text_at(old, new, 0, out)
}

/// [`diff_text`] of two JSON values: for tests.
#[cfg(test)]
pub(crate) fn diff(old: &Value, new: &Value) -> Option<Value> {
    let mut out = Vec::new();
    let wrote = diff_text(&old.to_string(), &new.to_string(), &mut out).expect("values write JSON");
    wrote.then(|| serde_json::from_slice(&out).expect("a patch is JSON"))
}

fn diff_text_at(old: &str, new: &str, depth: usize, out: &mut Vec<u8>) -> Result<bool, String> {
    if old == new {
        return Ok(false);
    }
    if depth < MAX_DIFF_DEPTH {
        match (old.as_bytes().first(), new.as_bytes().first()) {
            (Some(b'{'), Some(b'{')) => return diff_objects(old, new, depth, out),
            (Some(b'['), Some(b'[')) => {
                if let Some(wrote) = diff_arrays(old, new, depth, out)? {
                    return Ok(wrote);
                }
            }
            _ => {}
        }
    }
    whole_text(new, out);
    Ok(true)
}

/// `{"v": RAW}`.
fn whole_text(raw: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"v\":");
    out.extend_from_slice(raw.as_bytes());
    out.push(b'}');
}

/// An object's members (`text` starts with `{`): each key and its value's text, sorted by key
/// (looked up by binary search).
fn members(text: &str) -> Result<Vec<(Cow<'_, str>, &str)>, String> {
    let bytes = text.as_bytes();
    let mut members = Vec::new();
    let mut i = skip_space(bytes, 1);
    if bytes.get(i) != Some(&b'}') {
        loop {
            if bytes.get(i) != Some(&b'"') {
                return Err(format!("an object's key is not a string at byte {i}"));
            }
            let end = skip_string(bytes, i)?;
            let quoted = &text[i..end];
            let key = if quoted.contains('\\') {
                Cow::Owned(serde_json::from_str::<String>(quoted).map_err(|e| e.to_string())?)
            } else {
                Cow::Borrowed(&text[i + 1..end - 1])
            };
            i = skip_space(bytes, end);
            if bytes.get(i) != Some(&b':') {
                return Err(format!("an object's key is not followed by `:` at byte {i}"));
            }
            let start = skip_space(bytes, i + 1);
            let end = skip_value(bytes, start)?;
            members.push((key, &text[start..end]));
            i = skip_space(bytes, end);
            match bytes.get(i) {
                Some(b',') => i = skip_space(bytes, i + 1),
                Some(b'}') => break,
                _ => return Err(format!("an object's member is not followed by `,` or `}}` at byte {i}")),
            }
        }
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(members)
}

/// An array's elements (`text` starts with `[`), as their texts.
fn elements(text: &str) -> Result<Vec<&str>, String> {
    let bytes = text.as_bytes();
    let mut elements = Vec::new();
    let mut i = skip_space(bytes, 1);
    if bytes.get(i) != Some(&b']') {
        loop {
            let end = skip_value(bytes, i)?;
            elements.push(&text[i..end]);
            i = skip_space(bytes, end);
            match bytes.get(i) {
                Some(b',') => i = skip_space(bytes, i + 1),
                Some(b']') => break,
                _ => return Err(format!("an array's element is not followed by `,` or `]` at byte {i}")),
            }
        }
    }
    Ok(elements)
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The end of the string whose opening quote is at `i`: the next quote or backslash found with
/// `memchr2` (a large text field of a state is skipped many bytes at a time, also in a debug
/// build), an escape stepped over.
fn skip_string(bytes: &[u8], mut i: usize) -> Result<usize, String> {
    i += 1;
    loop {
        let Some(found) = bytes.get(i..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) else {
            return Err("a string does not end".into());
        };
        i += found;
        if bytes[i] == b'"' {
            return Ok(i + 1);
        }
        i += 2;
    }
}

/// The end of the value that starts at `i`.
fn skip_value(bytes: &[u8], mut i: usize) -> Result<usize, String> {
    match bytes.get(i) {
        Some(b'"') => skip_string(bytes, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            loop {
                match bytes.get(i) {
                    Some(b'"') => {
                        i = skip_string(bytes, i)?;
                        continue;
                    }
                    Some(b'{' | b'[') => depth += 1,
                    Some(b'}' | b']') => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(i + 1);
                        }
                    }
                    Some(_) => {}
                    None => return Err("an object or array does not end".into()),
                }
                i += 1;
            }
        }
        Some(_) => {
            let start = i;
            while bytes.get(i).is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace()) {
                i += 1;
            }
            if i == start {
                return Err(format!("no value at byte {i}"));
            }
            Ok(i)
        }
        None => Err("a value is missing at the end".into()),
    }
}

fn member<'a>(members: &[(Cow<'_, str>, &'a str)], key: &str) -> Option<&'a str> {
    members.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok().map(|i| members[i].1)
}

fn diff_objects(old: &str, new: &str, depth: usize, out: &mut Vec<u8>) -> Result<bool, String> {
    let before = members(old)?;
    let after = members(new)?;
    let start = out.len();
    out.push(b'{');
    let changes = out.len();
    out.extend_from_slice(b"\"o\":{");
    let mut changed = false;
    for (key, value) in &after {
        let mark = out.len();
        if changed {
            out.push(b',');
        }
        serde_json::to_writer(&mut *out, key.as_ref()).map_err(|e| e.to_string())?;
        out.push(b':');
        let wrote = match member(&before, key) {
            Some(was) => diff_text_at(was, value, depth + 1, out)?,
            None => {
                whole_text(value, out);
                true
            }
        };
        if wrote {
            changed = true;
        } else {
            out.truncate(mark);
        }
    }
    if changed {
        out.push(b'}');
    } else {
        out.truncate(changes);
    }
    let mut removed = false;
    for (key, _) in before.iter().filter(|(key, _)| member(&after, key).is_none()) {
        out.extend_from_slice(match (removed, changed) {
            (true, _) => b",",
            (false, true) => b",\"r\":[",
            (false, false) => b"\"r\":[",
        });
        serde_json::to_writer(&mut *out, key.as_ref()).map_err(|e| e.to_string())?;
        removed = true;
    }
    if removed {
        out.push(b']');
    }
    if !changed && !removed {
        out.truncate(start);
        return Ok(false);
    }
    out.push(b'}');
    Ok(true)
}

/// `None` when either array is empty (written whole).
fn diff_arrays(old: &str, new: &str, depth: usize, out: &mut Vec<u8>) -> Result<Option<bool>, String> {
    let before = elements(old)?;
    let after = elements(new)?;
    if before.is_empty() || after.is_empty() {
        return Ok(None);
    }
    let start = out.len();
    out.extend_from_slice(b"{\"a\":[");
    let mut changed = 0usize;
    for (i, value) in after.iter().enumerate() {
        let mark = out.len();
        if changed > 0 {
            out.push(b',');
        }
        out.push(b'[');
        out.extend_from_slice(i.to_string().as_bytes());
        out.push(b',');
        let wrote = match before.get(i) {
            Some(was) => diff_text_at(was, value, depth + 1, out)?,
            None => {
                whole_text(value, out);
                true
            }
        };
        if wrote {
            out.push(b']');
            changed += 1;
        } else {
            out.truncate(mark);
        }
    }
    if changed == 0 && before.len() == after.len() {
        out.truncate(start);
        return Ok(Some(false));
    }
    // Most elements changed: the array whole is as short, and simpler to read.
    if changed * 2 > after.len() + 1 {
        out.truncate(start);
        whole_text(new, out);
        return Ok(Some(true));
    }
    out.extend_from_slice(b"],\"n\":");
    out.extend_from_slice(after.len().to_string().as_bytes());
    out.push(b'}');
    Ok(Some(true))
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

/// Applies `patch` (made by [`diff_text`]) to `target`, moving the values it sets into it;
/// what is wrong with it otherwise (the target is then partly patched, and must not be used).
pub(crate) fn apply(target: &mut Value, patch: Value) -> Result<(), String> {
    let Value::Object(mut patch) = patch else { return Err("a patch is not a JSON object".into()) };
    if let Some(value) = patch.remove("v") {
        *target = value;
        return Ok(());
    }
    if patch.contains_key("a") || patch.contains_key("n") {
        let Value::Array(array) = target else {
            return Err("an array patch meets a value that is not an array".into());
        };
        let len = patch.get("n").and_then(Value::as_u64).ok_or("an array patch has no length")?;
        let len = usize::try_from(len).map_err(|_| "an array patch's length is too large")?;
        let entries = match patch.remove("a") {
            Some(Value::Array(entries)) => entries,
            _ => Vec::new(),
        };
        let old_len = array.len();
        if len > old_len.saturating_add(entries.len()) {
            return Err(format!("an array patch grows an array of {old_len} to {len} with fewer new elements"));
        }
        array.resize(len, Value::Null);
        let mut given = vec![false; len.saturating_sub(old_len)];
        for entry in entries {
            let (Some(index), Some(element)) = (match entry {
                Value::Array(mut pair) if pair.len() >= 2 => {
                    let element = pair.swap_remove(1);
                    (pair[0].as_u64(), Some(element))
                }
                _ => (None, None),
            }) else {
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
    match patch.remove("o") {
        Some(Value::Object(changed)) => {
            for (key, element) in changed {
                match object.get_mut(&key) {
                    Some(slot) => apply(slot, element)?,
                    None => {
                        let Value::Object(mut element) = element else {
                            return Err(format!("an object patch patches key `{key}`, which is absent"));
                        };
                        let Some(value) = element.remove("v") else {
                            return Err(format!("an object patch patches key `{key}`, which is absent"));
                        };
                        object.insert(key, value);
                    }
                }
            }
        }
        Some(_) => return Err("an object patch's changes are not an object".into()),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// [`diff_text`] of the two values' texts, checked to turn the old into the new.
    fn text_round_trip(old: &Value, new: &Value, old_text: &str, new_text: &str) {
        let mut out = Vec::new();
        let wrote = diff_text(old_text, new_text, &mut out).unwrap();
        let mut target = old.clone();
        if wrote {
            let patch: Value = serde_json::from_slice(&out).unwrap();
            apply(&mut target, patch).unwrap();
        }
        assert_eq!(&target, new, "{old_text} -> {new_text}: {}", String::from_utf8_lossy(&out));
        assert!(wrote || old == new, "{old_text} -> {new_text}: nothing written");
        assert!(!wrote || old_text != new_text, "{old_text}: a patch of the same text");
    }

    #[test]
    fn a_text_patch_turns_the_old_text_into_the_new() {
        let pairs = [
            (json!({"a": 1}), json!({"a": 1})),
            (json!({"big": "x".repeat(1000), "n": 1}), json!({"big": "x".repeat(1000), "n": 2})),
            (json!({"a": 1, "b": null}), json!({"a": 1})),
            (json!({"a": 1}), json!({"a": 1, "b": null})),
            (json!({"log": [1, 2, 3, 4, 5, 6]}), json!({"log": [1, 2, 3, 4, 5, 6, 7]})),
            (json!({"log": [1, 2, 3]}), json!({"log": [1]})),
            (json!({"log": []}), json!({"log": [1]})),
            (json!([1, {"x": [1, 2]}]), json!([1, {"x": [1, 3]}])),
            (json!("a"), json!({"a": 1})),
            (json!({"a": {"b": {"c": 1}}}), json!({"a": {"b": {"c": 2, "d": 3}}})),
            (json!({"k\"ey\\": "}{][,\"", "\u{e9}": [1.5, -2e30]}), json!({"k\"ey\\": "}]", "\u{e9}": [1.5, 3]})),
            (json!({"a": {"x": 1}, "b": 2}), json!({"b": 2})),
        ];
        for (old, new) in &pairs {
            text_round_trip(old, new, &old.to_string(), &new.to_string());
            text_round_trip(old, new, &serde_json::to_string_pretty(old).unwrap(), &new.to_string());
        }
        // Fields in another order than the head's text (a struct's order against a map's).
        text_round_trip(
            &json!({"a": 1, "b": [2]}),
            &json!({"a": 1, "b": [2]}),
            r#"{"b":[2],"a":1}"#,
            r#"{"a":1,"b":[2]}"#,
        );
        let patch = {
            let mut out = Vec::new();
            assert!(diff_text(r#"{"log":[1,2,3,4,5,6]}"#, r#"{"log":[1,2,3,4,5,6,7]}"#, &mut out).unwrap());
            serde_json::from_slice::<Value>(&out).unwrap()
        };
        assert_eq!(patch, json!({"o": {"log": {"a": [[6, {"v": 7}]], "n": 7}}}));
    }

    #[test]
    fn a_text_that_is_not_json_is_an_error_not_a_panic() {
        for (old, new) in [
            ("{\"a\":1}", "{\"a\":"),
            ("{\"a\":1}", "{\"a\" 1}"),
            ("{\"a\":1}", "{a:1}"),
            ("[1,2]", "[1,2"),
            ("[1,2]", "[1 2]"),
            ("{\"a\":\"x}", "{\"a\":1}"),
            // A string whose last quote is escaped, and one that ends in a backslash.
            ("{\"a\":\"x\\\"}", "{\"a\":1}"),
            ("{\"a\":\"x\\", "{\"a\":1}"),
        ] {
            assert!(diff_text(old, new, &mut Vec::new()).is_err() || diff_text(new, old, &mut Vec::new()).is_err());
        }
    }

    /// A value drawn from `seed` (a few levels of objects, arrays and scalars).
    fn draw(seed: &mut u64, depth: usize) -> Value {
        *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pick = (*seed >> 33) % if depth == 0 { 4 } else { 6 };
        match pick {
            0 => Value::Null,
            1 => json!((*seed >> 40) % 5),
            2 => json!(format!("s{}", (*seed >> 40) % 4)),
            3 => json!(((*seed >> 40) % 3) as f64 / 2.0),
            4 => (0..(*seed >> 45) % 5).map(|_| draw(seed, depth - 1)).collect(),
            _ => (0..(*seed >> 45) % 5)
                .map(|i| (format!("k{}", (i + (*seed >> 50)) % 6), draw(seed, depth - 1)))
                .collect::<Map<String, Value>>()
                .into(),
        }
    }

    #[test]
    fn text_patches_of_drawn_values_fold_as_value_patches_do() {
        let mut seed = 7;
        for _ in 0..3000 {
            let old = draw(&mut seed, 4);
            let new = draw(&mut seed, 4);
            text_round_trip(&old, &new, &old.to_string(), &new.to_string());
            // And a small change of it, as a step makes.
            let mut changed = old.clone();
            if let Value::Object(map) = &mut changed {
                map.insert("k0".into(), draw(&mut seed, 2));
            }
            text_round_trip(&old, &changed, &old.to_string(), &changed.to_string());
        }
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
            assert!(apply(&mut target, patch.clone()).is_err(), "{patch}");
        }
    }
}
