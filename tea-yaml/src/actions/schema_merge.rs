//! The Edge Agent's `schema.merge`: JSON Schemas from files and from the agent file, deep-merged
//! into one, kubectl-style (its `schema_actions.py` and `schema/deep_merge.py`).
//!
//! `with:`
//!
//! - `schemas` (required): a list; each item is `{inline: SCHEMA}` (used as written),
//!   `{path: FILE}` (`.yaml`/`.yml` read as YAML, anything else as JSON) or `{uses: REF}`. The
//!   keys are looked at in that order, so `{inline, path}` is the inline schema. A schema that
//!   is null (`inline: null`, an empty YAML file) is skipped.
//! - `validate` (default false): check the merged schema against the JSON Schema 2020-12
//!   meta-schema.
//! - `output_key` (default `merged_schema`): the key of the merged schema *in the result* (with
//!   `output: x` it lands at `state.x.<output_key>`).
//!
//! The result is `{success: true, <output_key>: merged}`; with `validate` also
//! `validation: {valid, errors, schema}` (`schema` is the merged schema, or null when it is not
//! valid), and an invalid schema turns it into `success: false` with
//! `error: "Merged schema is not valid JSON Schema"`, the merged schema still under
//! `output_key`. Items that cannot be loaded are all reported, none stopping the others:
//! `{success: false, error: "Failed to load schemas", errors: ["Schema 0: …", …]}`; nothing
//! loaded gives `{success: false, error: "No schemas provided"}`. A missing `schemas` (or a
//! non-string `output_key`) fails the node.
//!
//! The merge ([`merge_all`], [`deep_merge`]): later schemas win; mappings merge recursively;
//! scalars and mismatched types are replaced; null replaces anything; lists are replaced, except
//! lists under a key named `nodes` (merged by their items' `name`), `edges` (by `from` and
//! `to`) and `goto` (by `to`): an item whose key matches a base item is merged into it, one with
//! `"__delete__": true` removes it, any other is appended. It knows nothing of JSON Schema:
//! `required` and `enum` are replaced, not joined, and `$ref` and `allOf` are left as they are.
//!
//! Differences from The Edge Agent:
//!
//! - `path` is relative to the agent file's directory, as every path in tea, where The Edge
//!   Agent takes it from the process's working directory. Files are read as `file.read` reads
//!   them (regular files of at most 64 MiB), and YAML with tea's YAML 1.2 reader, which reports
//!   a key written twice rather than keeping the last.
//! - `uses:` (a git reference or an fsspec URI, fetched by The Edge Agent) is refused.
//! - Mapping keys are kept in sorted order (serde_json without `preserve_order`), not base keys
//!   first and then the new ones.
//! - Items of a keyed list match when their key values are equal JSON (`1` is not `1.0` or
//!   `true`, which Python takes as equal); a key that is a list or a mapping (which Python
//!   refuses) is compared the same way.
//! - `validate` checks the meta-schema without asserting `format` (an invalid `pattern` regular
//!   expression passes), and an error names where it is (`at /type`).
//! - A `schemas` that is not a list, and an item that is not a mapping, are reported in
//!   `errors` with The Edge Agent's "Invalid schema spec" message rather than a Python error.
//!
//! `schema.merge` (a `actions/builtins.rs` action): JSON Schemas from files and inline parts,
//! deep-merged as The Edge Agent's `deep_merge`.

use crate::grants::files::{read_regular, MAX_READ_FILE};
use crate::grants::AgentGrants;
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap};
use tea_runtime::BoxError;

/// The keys `schema.merge` takes under `with:`; `schemas` is required.
pub(crate) const KEYS: &[&str] = &["schemas", "validate", "output_key"];

/// The result's key for the merged schema when `output_key` is not given.
const DEFAULT_OUTPUT_KEY: &str = "merged_schema";

/// The key of a keyed list's item that removes the base item it matches.
const DELETE_MARKER: &str = "__delete__";

/// The start of The Edge Agent's message for a spec it cannot read.
const INVALID_SPEC: &str = "Invalid schema spec: must have 'path', 'uses', or 'inline' key.";

/// Runs `schema.merge` with the rendered `with:` arguments `args`; relative `path`s start at
/// the agent file's directory, and are confined by its grants `base`. Problems with the schemas are reported in the result
/// (`success: false`); only a missing `schemas` or a bad `output_key` is an error.
pub(crate) fn merge_action(base: &AgentGrants, args: &Value) -> Result<Value, BoxError> {
    let schemas = match args.get("schemas") {
        None | Some(Value::Null) => {
            return Err("schema.merge needs `with: { schemas: [...] }`, a list of `{ path: FILE }` \
                        and `{ inline: SCHEMA }` items"
                .into())
        }
        Some(schemas) => schemas,
    };
    let output_key = match args.get("output_key") {
        None | Some(Value::Null) => DEFAULT_OUTPUT_KEY,
        Some(Value::String(key)) => key.as_str(),
        Some(other) => {
            return Err(format!("schema.merge: `output_key` is a string, not {}", crate::state::describe(other)).into())
        }
    };
    let validate = args.get("validate").is_some_and(crate::state::truthy);

    let Value::Array(specs) = schemas else {
        let got = crate::state::describe(schemas);
        return Ok(failed(vec![format!("{INVALID_SPEC} `schemas` must be a list of such specs. Got: {got}")]));
    };
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        match load(base, spec) {
            Ok(Value::Null) => {}
            Ok(schema) => loaded.push(schema),
            Err(e) => errors.push(format!("Schema {i}: {e}")),
        }
    }
    if !errors.is_empty() {
        return Ok(failed(errors));
    }
    if loaded.is_empty() {
        return Ok(json!({ "success": false, "error": "No schemas provided" }));
    }

    let merged = merge_all(&loaded);
    let problems = validate.then(|| check_schema(&merged));
    let checked = problems.as_ref().filter(|p| p.is_empty()).map(|_| merged.clone());
    // Keys in The Edge Agent's order: an `output_key` of `success` replaces `success: true`.
    let mut result = Map::new();
    result.insert("success".into(), Value::Bool(true));
    result.insert(output_key.to_owned(), merged);
    if let Some(problems) = problems {
        let valid = problems.is_empty();
        let schema = checked.unwrap_or(Value::Null);
        result.insert("validation".into(), json!({ "valid": valid, "errors": problems, "schema": schema }));
        if !valid {
            result.insert("success".into(), Value::Bool(false));
            result.insert("error".into(), Value::from("Merged schema is not valid JSON Schema"));
        }
    }
    Ok(Value::Object(result))
}

/// The result when some schemas could not be loaded.
fn failed(errors: Vec<String>) -> Value {
    json!({ "success": false, "error": "Failed to load schemas", "errors": errors })
}

/// The schema a spec names (null: none, skipped), or why it cannot be had.
fn load(base: &AgentGrants, spec: &Value) -> Result<Value, String> {
    let Value::Object(map) = spec else {
        return Err(format!("{INVALID_SPEC} Got: {}", crate::state::describe(spec)));
    };
    if let Some(inline) = map.get("inline") {
        return Ok(inline.clone());
    }
    if let Some(path) = map.get("path") {
        return load_file(base, path);
    }
    if map.contains_key("uses") {
        return Err("`uses` (a remote or git reference) is not supported by tea; give `path` or `inline`".into());
    }
    let keys: Vec<String> = map.keys().map(|k| python_str(k)).collect();
    Err(format!("{INVALID_SPEC} Got: [{}]", keys.join(", ")))
}

/// A string as Python prints it in a list (`'name'`), for The Edge Agent's message.
fn python_str(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The schema in the file `path` names (relative to `base`): YAML for `.yaml` and `.yml`, JSON
/// otherwise.
fn load_file(base: &AgentGrants, path: &Value) -> Result<Value, String> {
    let Value::String(name) = path else {
        return Err(format!("`path` is a file name (a string), not {}", crate::state::describe(path)));
    };
    let file = crate::grants::files::resolve(&base.base_dir, name);
    let shown = file.display();
    let confined = base.confine_path(&file, crate::grants::Access::Read)?;
    let bytes = read_regular(&confined, MAX_READ_FILE).map_err(|e| {
        if matches!(file.try_exists(), Ok(false)) {
            format!("Schema file not found: {shown}")
        } else {
            format!("cannot read the schema file `{shown}`: {e}")
        }
    })?;
    let text =
        String::from_utf8(bytes).map_err(|e| format!("cannot read the schema file `{shown}`: it is not UTF-8: {e}"))?;
    let yaml = file.extension().and_then(|e| e.to_str()).is_some_and(|e| e == "yaml" || e == "yml");
    if !yaml {
        return serde_json::from_str(&text).map_err(|e| format!("the schema file `{shown}` is not JSON: {e}"));
    }
    match crate::syntax::yaml::parse(&text) {
        Ok((tree, problems)) => match problems.first() {
            None => Ok(tree.to_json()),
            Some(p) => {
                Err(format!("the schema file `{shown}` does not parse: {}:{}: {}", p.pos.line, p.pos.column, p.message))
            }
        },
        Err(p) => {
            Err(format!("the schema file `{shown}` does not parse: {}:{}: {}", p.pos.line, p.pos.column, p.message))
        }
    }
}

/// Why `schema` is not a JSON Schema (Draft 2020-12, as The Edge Agent's
/// `Draft202012Validator.check_schema`): the first problem, or nothing.
fn check_schema(schema: &Value) -> Vec<String> {
    match jsonschema::draft202012::meta::validator().validate(schema) {
        Ok(()) => Vec::new(),
        Err(e) => {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { String::new() } else { format!(" (at {at})") };
            vec![format!("Schema validation error: {e}{at}")]
        }
    }
}

/// `schemas` merged in order, each over the ones before it ([`deep_merge`]); null entries are
/// skipped, and none left gives `{}`.
pub(crate) fn merge_all(schemas: &[Value]) -> Value {
    let mut present = schemas.iter().filter(|s| !s.is_null());
    let Some(first) = present.next() else { return Value::Object(Map::new()) };
    present.fold(first.clone(), |merged, schema| deep_merge(&merged, schema))
}

/// `overlay` merged over `base`, kubectl-style: mappings merge key by key (a `__delete__` key
/// is dropped), lists under `nodes`, `edges` and `goto` merge by their items' keys, anything
/// else (other lists, scalars, a null `overlay`, mismatched types) is `overlay`.
pub(crate) fn deep_merge(base: &Value, overlay: &Value) -> Value {
    merge_named(base, overlay, "")
}

/// [`deep_merge`] of values under the key `name` (the last `.`-part of the key; `""` at the
/// top), which decides how lists merge.
fn merge_named(base: &Value, overlay: &Value, name: &str) -> Value {
    match (base, overlay) {
        (_, Value::Null) => Value::Null,
        (Value::Array(base), Value::Array(overlay)) => match list_keys(name) {
            Some(keys) => Value::Array(merge_by_key(base, overlay, keys, name)),
            None => Value::Array(overlay.clone()),
        },
        (Value::Object(base), Value::Object(overlay)) => {
            let mut merged = base.clone();
            for (key, value) in overlay {
                if key == DELETE_MARKER {
                    continue;
                }
                let value = match merged.get(key) {
                    Some(old) => merge_named(old, value, key.rsplit_once('.').map_or(key.as_str(), |(_, last)| last)),
                    None => value.clone(),
                };
                merged.insert(key.clone(), value);
            }
            Value::Object(merged)
        }
        _ => overlay.clone(),
    }
}

/// The keys that identify the items of a list named `name`, if it merges by key.
fn list_keys(name: &str) -> Option<&'static [&'static str]> {
    match name {
        "nodes" => Some(&["name"]),
        "edges" => Some(&["from", "to"]),
        "goto" => Some(&["to"]),
        _ => None,
    }
}

/// An item's identity: its `keys`' values as JSON text, or `None` when it is not a mapping or
/// lacks one of them.
fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let map = item.as_object()?;
    let values = keys.iter().map(|k| map.get(*k).cloned()).collect::<Option<Vec<Value>>>()?;
    Some(Value::Array(values).to_string())
}

/// The Edge Agent's `merge_arrays_by_key`: `overlay`'s items merged into `base`'s by `keys`.
/// A mapping matching a base item (or one appended before it) is merged into it, or removes it
/// with a true `__delete__` (removals happen last); other items are appended (a deleting one
/// that matches nothing is dropped).
fn merge_by_key(base: &[Value], overlay: &[Value], keys: &[&str], name: &str) -> Vec<Value> {
    let mut merged = base.to_vec();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, item) in base.iter().enumerate() {
        if let Some(key) = item_key(item, keys) {
            index.insert(key, i);
        }
    }
    let mut removed = BTreeSet::new();
    for item in overlay {
        let Some(map) = item.as_object() else {
            merged.push(item.clone());
            continue;
        };
        let key = item_key(item, keys);
        let found = key.as_ref().and_then(|k| index.get(k).copied());
        if map.get(DELETE_MARKER).is_some_and(crate::state::truthy) {
            removed.extend(found);
            continue;
        }
        match found.and_then(|i| merged.get_mut(i)) {
            Some(slot) => {
                let value = merge_named(slot, item, name);
                *slot = value;
            }
            None => {
                merged.push(item.clone());
                if let Some(key) = key {
                    index.insert(key, merged.len() - 1);
                }
            }
        }
    }
    for i in removed.into_iter().rev() {
        if i < merged.len() {
            merged.remove(i);
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn mappings_merge_scalars_and_null_override() {
        let base = json!({ "a": 1, "b": { "x": 10, "y": 20 }, "keep": true, "gone": "here" });
        let overlay = json!({ "b": { "y": 30, "z": 40 }, "c": 3, "gone": null, "keep": { "now": "a map" } });
        assert_eq!(
            deep_merge(&base, &overlay),
            json!({ "a": 1, "b": { "x": 10, "y": 30, "z": 40 }, "c": 3, "gone": null, "keep": { "now": "a map" } })
        );
        assert_eq!(deep_merge(&json!({ "count": 10 }), &json!({ "count": 20 })), json!({ "count": 20 }));
        assert_eq!(deep_merge(&json!({ "a": 1 }), &Value::Null), Value::Null);
        assert_eq!(deep_merge(&Value::Null, &json!({ "a": 1 })), json!({ "a": 1 }));
        assert_eq!(deep_merge(&json!({ "a": 1 }), &json!({})), json!({ "a": 1 }));
        // A `__delete__` key of a mapping is dropped, never copied into an existing one.
        assert_eq!(deep_merge(&json!({ "a": 1 }), &json!({ "a": 2, "__delete__": true })), json!({ "a": 2 }));
    }

    #[test]
    fn other_lists_are_replaced() {
        assert_eq!(deep_merge(&json!({ "items": [1, 2, 3] }), &json!({ "items": [4, 5] })), json!({ "items": [4, 5] }));
        let base = json!({ "required": ["a", "b"], "enum": [1] });
        let merged = deep_merge(&base, &json!({ "required": ["c"] }));
        assert_eq!(merged, json!({ "required": ["c"], "enum": [1] }));
        // At the top a list has no name: replaced.
        assert_eq!(deep_merge(&json!([{ "name": "a" }]), &json!([{ "name": "b" }])), json!([{ "name": "b" }]));
    }

    #[test]
    fn nodes_merge_by_name_and_delete() {
        let base = json!({ "nodes": [{ "name": "a", "val": 1 }, { "name": "b", "val": 2 }, { "name": "c" }] });
        let overlay = json!({ "nodes": [
            { "name": "a", "val": 10, "extra": true },
            { "name": "c", "__delete__": true },
            { "name": "d", "val": 4 },
            { "name": "zzz", "__delete__": true },
            "plain",
            { "no_name": 1 },
        ] });
        assert_eq!(
            deep_merge(&base, &overlay),
            json!({ "nodes": [
                { "name": "a", "val": 10, "extra": true },
                { "name": "b", "val": 2 },
                { "name": "d", "val": 4 },
                "plain",
                { "no_name": 1 },
            ] })
        );
        // A false `__delete__` merges; on an appended item it is kept, as The Edge Agent does.
        let merged = deep_merge(
            &json!({ "nodes": [{ "name": "a" }] }),
            &json!({ "nodes": [{ "name": "a", "__delete__": false, "v": 1 }, { "name": "n", "__delete__": 0 }] }),
        );
        assert_eq!(merged, json!({ "nodes": [{ "name": "a", "v": 1 }, { "name": "n", "__delete__": 0 }] }));
        // A later item may delete one appended before it.
        let merged = deep_merge(
            &json!({ "nodes": [] }),
            &json!({ "nodes": [{ "name": "x" }, { "name": "x", "__delete__": true }] }),
        );
        assert_eq!(merged, json!({ "nodes": [] }));
    }

    #[test]
    fn edges_merge_by_from_and_to_and_goto_by_to() {
        let base = json!({
            "edges": [{ "from": "a", "to": "b" }, { "from": "b", "to": "c", "when": "x" }, { "from": "c", "to": "d" }],
            "nodes": [{ "name": "a", "goto": [{ "to": "b", "if": "p" }, { "to": "c" }] }],
        });
        let overlay = json!({
            "edges": [
                { "from": "b", "to": "c", "when": "y" },
                { "from": "a", "to": "b", "__delete__": true },
                { "from": "a", "to": "z" },
            ],
            "nodes": [{ "name": "a", "goto": [{ "to": "c", "__delete__": true }, { "to": "b", "if": "q" }, { "to": "e" }] }],
        });
        assert_eq!(
            deep_merge(&base, &overlay),
            json!({
                "edges": [{ "from": "b", "to": "c", "when": "y" }, { "from": "c", "to": "d" }, { "from": "a", "to": "z" }],
                "nodes": [{ "name": "a", "goto": [{ "to": "b", "if": "q" }, { "to": "e" }] }],
            })
        );
        // The name is the last `.`-part of the key, anywhere in the tree.
        let merged = deep_merge(
            &json!({ "x": { "my.goto": [{ "to": "a", "v": 1 }] } }),
            &json!({ "x": { "my.goto": [{ "to": "a", "w": 2 }] } }),
        );
        assert_eq!(merged, json!({ "x": { "my.goto": [{ "to": "a", "v": 1, "w": 2 }] } }));
    }

    #[test]
    fn merge_all_skips_nulls_and_later_wins() {
        assert_eq!(merge_all(&[]), json!({}));
        assert_eq!(merge_all(&[Value::Null]), json!({}));
        let merged = merge_all(&[
            json!({ "type": "object", "properties": { "a": { "type": "string" } } }),
            Value::Null,
            json!({ "properties": { "b": { "type": "number" } } }),
            json!({ "properties": { "a": { "maxLength": 100 } } }),
        ]);
        assert_eq!(
            merged,
            json!({ "type": "object", "properties": {
                "a": { "type": "string", "maxLength": 100 }, "b": { "type": "number" } } })
        );
    }

    /// The corpus's `examples/llamaextract` directory, if it is on this machine.
    fn corpus() -> Option<PathBuf> {
        let dir = PathBuf::from("/work/shared/edge-agent-corpus/examples/llamaextract");
        if dir.join("schemas/base-document.yaml").is_file() && dir.join("schemas/invoice-overlay.yaml").is_file() {
            Some(dir)
        } else {
            println!("note: the corpus's llamaextract schemas are not here; test skipped");
            None
        }
    }

    #[test]
    fn the_corpus_merge_of_two_files_and_an_inline_overlay() {
        let Some(base) = corpus() else { return };
        let args = json!({
            "schemas": [
                { "path": "schemas/base-document.yaml" },
                { "path": "./schemas/invoice-overlay.yaml" },
                { "inline": { "properties": {
                    "payment_status": { "type": "string", "description": "Payment status (paid, pending, overdue)" },
                    "notes": { "type": "string", "description": "Additional notes or comments" },
                } } },
            ],
            "validate": true,
            "output_key": "extraction_schema",
        });
        let result = merge_action(&grants(&base), &args).unwrap();
        assert_eq!(result["success"], true, "{result}");
        let schema = &result["extraction_schema"];
        assert_eq!(schema["type"], "object");
        let names: BTreeSet<&str> = schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = [
            "document_id",
            "document_date",
            "document_type",
            "invoice_number",
            "vendor",
            "line_items",
            "total_amount",
            "payment_status",
            "notes",
        ]
        .into_iter()
        .collect();
        assert_eq!(names, expected);
        let vendor: Vec<&String> = schema["properties"]["vendor"]["properties"].as_object().unwrap().keys().collect();
        assert_eq!(vendor, ["email", "name"]);
        assert_eq!(schema["properties"]["line_items"]["type"], "array");
        assert_eq!(result["validation"], json!({ "valid": true, "errors": [], "schema": schema }));
        assert!(result.get("merged_schema").is_none());

        // The other corpus file: one schema, the default key, no validation.
        if base.join("schemas/invoice-schema.yaml").is_file() {
            let one = merge_action(&grants(&base), &json!({ "schemas": [{ "path": "schemas/invoice-schema.yaml" }] }))
                .unwrap();
            assert_eq!(one["success"], true);
            assert!(one["merged_schema"]["properties"]["invoice_number"].is_object());
            assert!(one.get("validation").is_none());
        }
    }

    fn grants(dir: &Path) -> AgentGrants {
        AgentGrants::new(Default::default(), dir.to_path_buf(), Vec::new())
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tea-schema-merge-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn files_are_json_unless_yaml_and_null_schemas_are_skipped() {
        let dir = temp_dir("files");
        std::fs::write(dir.join("a.json"), r#"{"type": "object", "required": ["a"]}"#).unwrap();
        std::fs::write(dir.join("b.yml"), "required: [b]\n").unwrap();
        std::fs::write(dir.join("empty.yaml"), "").unwrap();
        let args = json!({ "schemas": [{ "path": "a.json" }, { "path": "empty.yaml" }, { "inline": null }, { "path": "b.yml" }] });
        let result = merge_action(&grants(&dir), &args).unwrap();
        assert_eq!(result, json!({ "success": true, "merged_schema": { "type": "object", "required": ["b"] } }));

        let only_null = merge_action(&grants(&dir), &json!({ "schemas": [{ "path": "empty.yaml" }] })).unwrap();
        assert_eq!(only_null, json!({ "success": false, "error": "No schemas provided" }));

        std::fs::write(dir.join("bad.json"), "{ nope").unwrap();
        std::fs::write(dir.join("twice.yaml"), "a: 1\na: 2\n").unwrap();
        let bad =
            merge_action(&grants(&dir), &json!({ "schemas": [{ "path": "bad.json" }, { "path": "twice.yaml" }] }))
                .unwrap();
        let errors = bad["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 2, "{bad}");
        assert!(errors[0].as_str().unwrap().starts_with("Schema 0: the schema file"), "{bad}");
        assert!(errors[0].as_str().unwrap().contains("is not JSON"), "{bad}");
        assert!(errors[1].as_str().unwrap().starts_with("Schema 1: the schema file"), "{bad}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_loading_error_is_collected() {
        let dir = temp_dir("errors");
        let args = json!({ "schemas": [
            { "path": "missing.yaml" },
            { "inline": { "type": "object" } },
            { "uses": "company/schemas@v1.0.0#overlay.json" },
            { "other": 1, "more": 2 },
            "just a string",
            { "path": 7 },
            { "path": "." },
        ] });
        let result = merge_action(&grants(&dir), &args).unwrap();
        assert_eq!(result["success"], false);
        assert_eq!(result["error"], "Failed to load schemas");
        assert!(result.get("merged_schema").is_none());
        let errors: Vec<&str> = result["errors"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(errors.len(), 6, "{errors:?}");
        assert_eq!(errors[0], format!("Schema 0: Schema file not found: {}", dir.join("missing.yaml").display()));
        assert_eq!(
            errors[1],
            "Schema 2: `uses` (a remote or git reference) is not supported by tea; give `path` or `inline`"
        );
        assert_eq!(
            errors[2],
            "Schema 3: Invalid schema spec: must have 'path', 'uses', or 'inline' key. Got: ['more', 'other']"
        );
        assert!(errors[3]
            .starts_with("Schema 4: Invalid schema spec: must have 'path', 'uses', or 'inline' key. Got: a string"));
        assert!(errors[4].starts_with("Schema 5: `path` is a file name"), "{}", errors[4]);
        assert!(errors[5].starts_with("Schema 6: cannot read the schema file"), "{}", errors[5]);
        assert!(errors[5].contains("a directory"), "{}", errors[5]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn empty_missing_and_malformed_arguments() {
        let here = &grants(Path::new("."));
        assert_eq!(
            merge_action(here, &json!({ "schemas": [] })).unwrap(),
            json!({ "success": false, "error": "No schemas provided" })
        );
        assert!(merge_action(here, &json!({})).is_err());
        assert!(merge_action(here, &json!({ "schemas": null })).is_err());
        assert!(merge_action(here, &json!({ "schemas": [{ "inline": {} }], "output_key": 3 })).is_err());
        let not_a_list = merge_action(here, &json!({ "schemas": { "path": "x.json" } })).unwrap();
        assert_eq!(not_a_list["error"], "Failed to load schemas");
        let message = not_a_list["errors"][0].as_str().unwrap();
        assert!(message.starts_with("Invalid schema spec: must have 'path', 'uses', or 'inline' key."), "{message}");
        // `inline` comes first, then `path`, then `uses`.
        let first =
            merge_action(here, &json!({ "schemas": [{ "inline": { "a": 1 }, "path": "nowhere.json", "uses": "x" }] }))
                .unwrap();
        assert_eq!(first, json!({ "success": true, "merged_schema": { "a": 1 } }));
    }

    #[test]
    fn validate_reports_a_broken_schema_and_keeps_the_merge() {
        let here = &grants(Path::new("."));
        let args = json!({
            "schemas": [{ "inline": { "type": "object" } }, { "inline": { "type": 12 } }],
            "validate": true,
            "output_key": "schema",
        });
        let result = merge_action(here, &args).unwrap();
        assert_eq!(result["success"], false);
        assert_eq!(result["error"], "Merged schema is not valid JSON Schema");
        assert_eq!(result["schema"], json!({ "type": 12 }));
        assert_eq!(result["validation"]["valid"], false);
        assert_eq!(result["validation"]["schema"], Value::Null);
        let errors = result["validation"]["errors"].as_array().unwrap();
        assert_eq!(errors.len(), 1);
        let message = errors[0].as_str().unwrap();
        assert!(message.starts_with("Schema validation error: "), "{message}");
        assert!(message.contains("/type"), "{message}");

        // A schema that is not a mapping (nor a bool) is no schema either.
        let scalar = merge_action(here, &json!({ "schemas": [{ "inline": 5 }], "validate": true })).unwrap();
        assert_eq!(scalar["success"], false);
        assert_eq!(scalar["merged_schema"], 5);

        let fine =
            merge_action(here, &json!({ "schemas": [{ "inline": { "type": "string" } }], "validate": true })).unwrap();
        assert_eq!(
            fine,
            json!({ "success": true, "merged_schema": { "type": "string" },
                "validation": { "valid": true, "errors": [], "schema": { "type": "string" } } })
        );
        // Without `validate` a broken schema is merged all the same.
        let unchecked = merge_action(here, &json!({ "schemas": [{ "inline": { "type": 12 } }] })).unwrap();
        assert_eq!(unchecked, json!({ "success": true, "merged_schema": { "type": 12 } }));
    }
}
