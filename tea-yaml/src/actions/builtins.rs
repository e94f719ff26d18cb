//! The Edge Agent's small built-in actions that need nothing beyond the state and the files
//! beside the agent: `json.parse`, `json.stringify`, `file.exists`, `file.delete`, `file.list`,
//! `schema.merge` (`schema_merge.rs`), with its engines' arguments and results (`registry.rs`
//! dispatches to them).
//!
//! `json.parse`, `json.stringify`, `file.exists`, `file.delete`, `file.list` with The Edge Agent's
//! arguments and results.

use crate::grants::{Access, AgentGrants};
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use tea_runtime::BoxError;

/// One of the actions of this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Builtin {
    JsonParse,
    JsonStringify,
    FileExists,
    FileDelete,
    FileList,
    /// `schema.merge` (`schema_merge.rs`).
    SchemaMerge,
}

/// The most entries `file.list` returns.
const MAX_LISTED: usize = 100_000;

impl Builtin {
    /// The action named `name`.
    pub(crate) fn named(name: &str) -> Option<Builtin> {
        Some(match name {
            "json.parse" => Builtin::JsonParse,
            "json.stringify" => Builtin::JsonStringify,
            "file.exists" => Builtin::FileExists,
            "file.delete" => Builtin::FileDelete,
            "file.list" => Builtin::FileList,
            "schema.merge" => Builtin::SchemaMerge,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Builtin::JsonParse => "json.parse",
            Builtin::JsonStringify => "json.stringify",
            Builtin::FileExists => "file.exists",
            Builtin::FileDelete => "file.delete",
            Builtin::FileList => "file.list",
            Builtin::SchemaMerge => "schema.merge",
        }
    }

    /// Runs it with the rendered `args`; relative paths start at the agent's folder, and
    /// every path is confined by `grants`.
    pub(crate) fn call(self, grants: &AgentGrants, args: &Value) -> Result<Value, BoxError> {
        let what = self.name();
        match self {
            Builtin::JsonParse => Ok(json_parse(args)),
            Builtin::SchemaMerge => crate::actions::schema_merge::merge_action(grants, args),
            Builtin::JsonStringify => json_stringify(args),
            Builtin::FileExists => {
                let path = path(what, grants, args, Access::Read)?;
                Ok(json!({ "exists": path.exists(), "is_file": path.is_file(), "is_dir": path.is_dir() }))
            }
            Builtin::FileDelete => {
                let path = path(what, grants, args, Access::Write)?;
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(format!("{what}: cannot delete `{}`: {e}", path.display()).into()),
                }
                Ok(json!({ "deleted": true }))
            }
            Builtin::FileList => {
                let dir = path(what, grants, args, Access::Read)?;
                let pattern = args.get("pattern").and_then(Value::as_str).unwrap_or_default();
                let entries =
                    std::fs::read_dir(&dir).map_err(|e| format!("{what}: cannot list `{}`: {e}", dir.display()))?;
                let mut files: Vec<(String, Value)> = Vec::new();
                for entry in entries.flatten().take(MAX_LISTED) {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if !name.contains(pattern) {
                        continue;
                    }
                    let path = entry.path();
                    let file = json!({
                        "name": name,
                        "path": path.display().to_string(),
                        "is_file": path.is_file(),
                        "is_dir": path.is_dir(),
                    });
                    files.push((name, file));
                }
                // In name order, whatever order the directory gives.
                files.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(json!({ "files": files.into_iter().map(|(_, f)| f).collect::<Vec<_>>() }))
            }
        }
    }
}

/// `with.path` (a non-empty string), relative to the agent's folder, confined to what the
/// agent may `access`. To be written, a symbolic link is itself the path (deleting one removes
/// the link, not what it points to): its folder is confined.
fn path(what: &str, grants: &AgentGrants, args: &Value, access: Access) -> Result<PathBuf, BoxError> {
    match args.get("path") {
        Some(Value::String(p)) if !p.is_empty() => {
            let raw = crate::grants::files::resolve(&grants.base_dir, p);
            let link = std::fs::symlink_metadata(&raw).is_ok_and(|m| m.file_type().is_symlink());
            let confined = match (access, link, raw.parent(), raw.file_name()) {
                (Access::Write, true, Some(parent), Some(name)) => {
                    grants.confine_path(parent, access).map(|parent| parent.join(name))
                }
                _ => grants.confine_path(&raw, access),
            };
            Ok(confined.map_err(|e| format!("{what}: {e}"))?)
        }
        _ => Err(format!("{what} needs `with: {{ path: … }}`, a non-empty string").into()),
    }
}

/// `json.parse { text, strict, default }`: `{data, success: true}`, or `{success: false,
/// error, error_type: "parse", position: {line, column}}`; with `strict: false`, `default` is
/// the data of a text that does not parse.
fn json_parse(args: &Value) -> Value {
    let text = match args.get("text") {
        Some(Value::String(t)) => t.clone(),
        // The Edge Agent's templates render to text; a value that is already JSON is its data.
        Some(Value::Null) | None => {
            return json!({ "success": false, "error": "Input text is None", "error_type": "parse" });
        }
        Some(other) => return json!({ "data": other, "success": true }),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(data) => json!({ "data": data, "success": true }),
        Err(e) => {
            let strict = args.get("strict").and_then(Value::as_bool).unwrap_or(true);
            match args.get("default").filter(|d| !strict && !d.is_null()) {
                Some(default) => json!({ "data": default, "success": true }),
                None => json!({
                    "success": false,
                    "error": format!("JSON parse error: {e}"),
                    "error_type": "parse",
                    "position": { "line": e.line(), "column": e.column() },
                }),
            }
        }
    }
}

/// `json.stringify { data, indent, sort_keys }`: `{text, success: true}`.
fn json_stringify(args: &Value) -> Result<Value, BoxError> {
    let mut data = args.get("data").cloned().unwrap_or(Value::Null);
    if args.get("sort_keys").and_then(Value::as_bool) == Some(true) {
        data = sorted(data);
    }
    let text = match args.get("indent").and_then(Value::as_u64) {
        Some(n) => {
            let indent = " ".repeat(n.min(16) as usize);
            let mut out = Vec::new();
            let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
            let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
            serde::Serialize::serialize(&data, &mut serializer)
                .map_err(|e| format!("json.stringify: JSON serialization error: {e}"))?;
            String::from_utf8_lossy(&out).into_owned()
        }
        None => data.to_string(),
    };
    Ok(json!({ "text": text, "success": true }))
}

/// `value` with every mapping's keys in order.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect::<Map<_, _>>())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_parse_gives_data_or_the_position_of_the_error() {
        assert_eq!(json_parse(&json!({ "text": "{\"a\": [1]}" })), json!({ "data": { "a": [1] }, "success": true }));
        let bad = json_parse(&json!({ "text": "{\"a\": }" }));
        assert_eq!(bad["success"], false);
        assert_eq!(bad["position"]["line"], 1);
        assert_eq!(json_parse(&json!({ "text": "nope", "strict": false, "default": [] }))["data"], json!([]));
    }

    #[test]
    fn json_stringify_indents_and_sorts() {
        let out = json_stringify(&json!({ "data": { "b": 1, "a": [2] }, "sort_keys": true, "indent": 2 })).unwrap();
        assert_eq!(out["text"], "{\n  \"a\": [\n    2\n  ],\n  \"b\": 1\n}");
    }
}
