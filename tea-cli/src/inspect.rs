//! `tea inspect`: an agent's nodes, edges, state schema, settings and breakpoints, laid out as
//! The Edge Agent's `tea inspect` lays them out (`text`, `json`, `dot`).
//!
//! `text` and `json` describe the file as written, as The Edge Agent's do; `dot` draws the graph
//! tea runs. A file tea cannot load is still described (from what it says), its problems on
//! stderr as `tea validate` shows them; only a file that is not YAML fails.

use crate::output;
use crate::watch;
use crate::{InspectFormat, EXIT_DONE};
use saphyr_parser::{Event, Parser, ScalarStyle};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt::Write;
use std::io::IsTerminal;
use std::path::Path;
use tea_yaml::Agent;

/// `tea inspect FILE --format FORMAT`; `loaded` is the file loaded as `tea validate` loads it.
pub fn inspect(
    file: &Path,
    format: InspectFormat,
    loaded: impl FnOnce() -> Result<Agent, tea_yaml::LoadError>,
) -> Result<u8, String> {
    let config = structure(file)?;
    let agent = match loaded() {
        Ok(agent) => Some(agent),
        Err(problems) => {
            watch::note(&format!("note: `{}` does not load here; described as written:", file.display()));
            if watch::chatty() {
                eprint!("{}", crate::diagnostics::render_to(&problems, std::io::stderr().is_terminal()));
            }
            None
        }
    };
    match (format, &agent) {
        (InspectFormat::Text, _) => output::line(describe(&config, agent.as_ref()).trim_end()),
        (InspectFormat::Json, _) => output::pretty(&config),
        (InspectFormat::Dot, Some(agent)) => output::line(dot(agent).trim_end()),
        (InspectFormat::Dot, None) => output::line(dot_as_written(&config).trim_end()),
    }
    Ok(EXIT_DONE)
}

/// The file as JSON: its own keys and values, as The Edge Agent's `inspect --format json`
/// prints them.
pub fn structure(file: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("cannot read the agent file `{}`: {e}", file.display()))?;
    yaml_to_json(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// The summary of a loaded agent's file (`tea validate --detailed`).
pub fn text(file: &Path, agent: &Agent) -> Result<String, String> {
    Ok(describe(&structure(file)?, Some(agent)))
}

/// The summary: `Workflow:`, `Description:`, `Nodes (N):`, `Edges (N):` as The Edge Agent prints
/// them, then the state schema, variables, settings, and (for an agent that loads) its
/// breakpoints and interrupt nodes.
fn describe(config: &Value, agent: Option<&Agent>) -> String {
    let empty = Vec::new();
    let list = |key: &str| config.get(key).and_then(Value::as_array).unwrap_or(&empty);
    let mut out = String::new();
    let name = match agent {
        Some(agent) => agent.name(),
        None => config.get("name").and_then(Value::as_str).unwrap_or("unnamed"),
    };
    let _ = writeln!(out, "Workflow: {name}");
    if let Some(description) = config.get("description").and_then(Value::as_str) {
        let _ = writeln!(out, "Description: {description}");
    }

    let nodes = list("nodes");
    let _ = writeln!(out, "\nNodes ({}):", nodes.len());
    for node in nodes {
        let _ = writeln!(out, "{}", node_line(node));
    }

    // `edges:` and each node's `goto:`, the two ways a file routes.
    let routes = routes(config);
    let _ = writeln!(out, "\nEdges ({}):", routes.len());
    if routes.is_empty() && nodes.len() > 1 {
        let _ = writeln!(out, "  (none written: each node hands over to the next, in file order)");
    }
    for route in &routes {
        let _ = writeln!(out, "{}", route.line());
    }

    for (key, title) in [("state_schema", "State schema"), ("state", "State schema"), ("variables", "Variables")] {
        if let Some(Value::Object(map)) = config.get(key).filter(|v| v.as_object().is_some_and(|m| !m.is_empty())) {
            let _ = writeln!(out, "\n{title}:");
            for (name, value) in map {
                let _ = writeln!(out, "  {name}: {}", shown(value));
            }
        }
    }
    for (key, title) in [("settings", "Settings"), ("config", "Config")] {
        if let Some(Value::Object(map)) = config.get(key).filter(|v| v.as_object().is_some_and(|m| !m.is_empty())) {
            let _ = writeln!(out, "\n{title}:");
            for (name, value) in map {
                let _ = writeln!(out, "  {name}: {}", shown(value));
            }
        }
    }

    let Some(agent) = agent else { return out };
    let (before, after, interrupts) = pauses(agent);
    if !before.is_empty() || !after.is_empty() {
        let _ = writeln!(out, "\nBreakpoints:");
        if !before.is_empty() {
            let _ = writeln!(out, "  before: {}", before.join(", "));
        }
        if !after.is_empty() {
            let _ = writeln!(out, "  after: {}", after.join(", "));
        }
    }
    if !interrupts.is_empty() {
        let _ = writeln!(out, "\nInterrupt nodes: {}", interrupts.join(", "));
    }
    out
}

/// A node as The Edge Agent lists it: `  name [action] (lua) (retry) (fallback: x)`, and its
/// `type:` when it has one.
fn node_line(node: &Value) -> String {
    let mut parts = vec![format!("  {}", node.get("name").and_then(Value::as_str).unwrap_or("unnamed"))];
    if let Some(action) = node.get("uses").or_else(|| node.get("action")).and_then(Value::as_str) {
        parts.push(format!("[{action}]"));
    }
    if let Some(kind) = node.get("type").and_then(Value::as_str) {
        parts.push(format!("({kind})"));
    }
    match node.get("run") {
        Some(Value::String(_)) => {
            let language = node.get("language").and_then(Value::as_str).unwrap_or("lua");
            parts.push(format!("({language})"));
        }
        Some(Value::Object(run)) => {
            let kind = run.get("type").and_then(Value::as_str).unwrap_or("run");
            parts.push(format!("({kind})"));
        }
        _ => {}
    }
    if node.get("retry").is_some_and(|r| !r.is_null()) {
        parts.push("(retry)".to_owned());
    }
    if let Some(fallback) = node.get("fallback").and_then(Value::as_str) {
        parts.push(format!("(fallback: {fallback})"));
    }
    parts.join(" ")
}

/// One route a file writes: an `edges:` entry (or one of its `targets:`/`parallel:`), or a
/// node's `goto:` rule.
struct Route {
    from: String,
    to: String,
    how: How,
}

enum How {
    /// `a -> b`, with its condition (`condition:`, `when:`, a `goto:` rule's `if:`).
    Plain(Option<String>),
    /// `targets: { result: b }`: `a --[result]--> b`.
    Target(String),
    /// A fan-out branch (`parallel: [...]`, or `type: parallel` with its `fan_in`).
    Branch(Option<String>),
}

impl Route {
    /// The route as The Edge Agent's `inspect` lists it.
    fn line(&self) -> String {
        let Route { from, to, how } = self;
        match how {
            How::Plain(None) => format!("  {from} -> {to}"),
            How::Plain(Some(condition)) => format!("  {from} -> {to} [when: {condition}]"),
            How::Target(result) => format!("  {from} --[{result}]--> {to}"),
            How::Branch(None) => format!("  {from} => [{to}]"),
            How::Branch(Some(fan_in)) => format!("  {from} => [{to}] (fan_in: {fan_in})"),
        }
    }
}

/// The routes an `edges:` entry writes.
fn edge_routes(edge: &Value) -> Vec<Route> {
    let from = edge.get("from").map_or_else(|| "?".to_owned(), shown);
    let mut routes = Vec::new();
    if let Some(to) = edge.get("to").filter(|t| !t.is_null()) {
        let how = if edge.get("type").and_then(Value::as_str) == Some("parallel") {
            How::Branch(edge.get("fan_in").map(shown))
        } else {
            How::Plain(edge.get("condition").or_else(|| edge.get("when")).filter(|c| !c.is_null()).map(shown))
        };
        routes.push(Route { from: from.clone(), to: shown(to), how });
    }
    if let Some(Value::Object(targets)) = edge.get("targets") {
        for (result, target) in targets {
            routes.push(Route { from: from.clone(), to: shown(target), how: How::Target(result.clone()) });
        }
    }
    if let Some(Value::Array(branches)) = edge.get("parallel") {
        for branch in branches {
            routes.push(Route { from: from.clone(), to: shown(branch), how: How::Branch(None) });
        }
    }
    routes
}

/// The routes a node's `goto:` writes: a node name, or rules `{ if: COND, to: NODE }`.
fn goto_routes(node: &Value) -> Vec<Route> {
    let from = node.get("name").and_then(Value::as_str).unwrap_or("unnamed").to_owned();
    match node.get("goto") {
        Some(Value::String(to)) => vec![Route { from, to: to.clone(), how: How::Plain(None) }],
        Some(Value::Array(rules)) => rules
            .iter()
            .map(|rule| Route {
                from: from.clone(),
                to: rule.get("to").map_or_else(|| "?".to_owned(), shown),
                how: How::Plain(rule.get("if").filter(|c| !c.is_null()).map(shown)),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Every route the file writes: `edges:`, then each node's `goto:`.
fn routes(config: &Value) -> Vec<Route> {
    let list = |key: &str| config.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    list("edges").iter().flat_map(edge_routes).chain(list("nodes").iter().flat_map(goto_routes)).collect()
}

/// A value on one line: strings as they are, the rest as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The nodes with a breakpoint before, after, and the interrupt nodes, in file order.
fn pauses(agent: &Agent) -> (Vec<String>, Vec<String>, Vec<String>) {
    use tea_runtime::Graph;
    let graph = agent.graph();
    let (mut before, mut after, mut interrupts) = (Vec::new(), Vec::new(), Vec::new());
    for name in agent.nodes() {
        let Some(node) = graph.node_named(name) else { continue };
        if graph.interrupt_before(node) {
            before.push(name.to_owned());
        }
        if graph.interrupt_after(node) {
            after.push(name.to_owned());
        }
        if agent.resume_key(name).is_some() {
            interrupts.push(name.to_owned());
        }
    }
    (before, after, interrupts)
}

/// The graph tea runs, in Graphviz DOT with The Edge Agent's layout (`rankdir=TB`, boxes), its
/// breakpoints and interrupt nodes marked as `tea draw` marks them.
fn dot(agent: &Agent) -> String {
    let drawn = output::dot_marked(agent);
    match drawn.split_once('\n') {
        Some((head, body)) => format!("{head}\n    rankdir=TB;\n    node [shape=box];\n{body}"),
        None => drawn,
    }
}

/// The graph as the file writes it, in The Edge Agent's DOT layout: each node (its action, or
/// its language), each `edges:` entry and `goto:` rule; for a file tea cannot load.
fn dot_as_written(config: &Value) -> String {
    let quote = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let name = config.get("name").and_then(Value::as_str).unwrap_or("workflow");
    let mut out = format!("digraph \"{}\" {{\n    rankdir=TB;\n    node [shape=box];\n", quote(name));
    out.push_str(
        "    \"__start__\" [label=\"START\", shape=ellipse];\n    \"__end__\" [label=\"END\", shape=ellipse];\n",
    );
    let nodes = config.get("nodes").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for node in nodes {
        let name = node.get("name").and_then(Value::as_str).unwrap_or("unnamed");
        let action = node.get("uses").or_else(|| node.get("action")).and_then(Value::as_str);
        let label = match (action, node.get("run")) {
            (Some(action), _) => format!("{}\\n[{}]", quote(name), quote(action)),
            (None, Some(_)) => {
                format!("{}\\n({})", quote(name), quote(node.get("language").and_then(Value::as_str).unwrap_or("lua")))
            }
            (None, None) => quote(name),
        };
        let _ = writeln!(out, "    \"{}\" [label=\"{label}\"];", quote(name));
    }
    for Route { from, to, how } in routes(config) {
        let attributes = match how {
            How::Plain(None) => String::new(),
            How::Plain(Some(condition)) => format!(" [label=\"when: {}\"]", quote(&condition)),
            How::Target(result) => format!(" [label=\"{}\"]", quote(&result)),
            How::Branch(_) => " [style=dashed]".to_owned(),
        };
        let _ = writeln!(out, "    \"{}\" -> \"{}\"{attributes};", quote(&from), quote(&to));
    }
    out.push_str("}\n");
    out
}

/// YAML text to JSON: plain scalars resolved with the YAML 1.2 core schema (as tea's loader
/// resolves them), quoted and block scalars as strings, aliases as copies of their anchor.
fn yaml_to_json(text: &str) -> Result<Value, String> {
    enum Open {
        Seq(Vec<Value>, usize),
        Map(Map<String, Value>, Option<String>, usize),
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut anchors: HashMap<usize, Value> = HashMap::new();
    let mut root = None;
    let place = |stack: &mut Vec<Open>,
                 anchors: &mut HashMap<usize, Value>,
                 value: Value,
                 anchor: usize,
                 root: &mut Option<Value>| {
        if anchor != 0 {
            anchors.insert(anchor, value.clone());
        }
        match stack.last_mut() {
            None => *root = Some(value),
            Some(Open::Seq(items, _)) => items.push(value),
            Some(Open::Map(map, pending, _)) => match pending.take() {
                None => *pending = Some(shown(&value)),
                Some(key) => {
                    map.insert(key, value);
                }
            },
        }
    };
    for event in Parser::new_from_str(text) {
        let (event, _) =
            event.map_err(|e| format!("{}:{}: YAML syntax: {}", e.marker().line(), e.marker().col() + 1, e.info()))?;
        match event {
            Event::Scalar(value, style, anchor, _) => {
                let value = if matches!(style, ScalarStyle::Plain) {
                    resolve(&value)
                } else {
                    Value::String(value.into_owned())
                };
                place(&mut stack, &mut anchors, value, anchor, &mut root);
            }
            Event::SequenceStart(anchor, _) => stack.push(Open::Seq(Vec::new(), anchor)),
            Event::MappingStart(anchor, _) => stack.push(Open::Map(Map::new(), None, anchor)),
            Event::SequenceEnd => {
                if let Some(Open::Seq(items, anchor)) = stack.pop() {
                    place(&mut stack, &mut anchors, Value::Array(items), anchor, &mut root);
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(map, _, anchor)) = stack.pop() {
                    place(&mut stack, &mut anchors, Value::Object(map), anchor, &mut root);
                }
            }
            Event::Alias(id) => {
                let value = anchors.get(&id).cloned().unwrap_or(Value::Null);
                place(&mut stack, &mut anchors, value, 0, &mut root);
            }
            // One document: the first one's end ends the agent.
            Event::DocumentEnd if root.is_some() => break,
            _ => {}
        }
    }
    Ok(root.unwrap_or(Value::Null))
}

/// A plain scalar by the YAML 1.2 core schema.
fn resolve(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let digits = |s: &str, radix| !s.is_empty() && s.chars().all(|c| c.is_digit(radix));
    let int = if let Some(hex) = text.strip_prefix("0x").filter(|s| digits(s, 16)) {
        i64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = text.strip_prefix("0o").filter(|s| digits(s, 8)) {
        i64::from_str_radix(oct, 8).ok()
    } else if digits(text.strip_prefix(['-', '+']).unwrap_or(text), 10) {
        text.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(n) = int {
        return Value::from(n);
    }
    let number = text.strip_prefix(['-', '+']).unwrap_or(text);
    let float_like = number.chars().any(|c| c.is_ascii_digit())
        && number.chars().all(|c| c.is_ascii_digit() || ".eE+-".contains(c))
        && number.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if float_like {
        if let Some(n) = text.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
            return Value::Number(n);
        }
    }
    Value::String(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_becomes_the_json_the_file_means() {
        let text = "name: a\nn: [1, -2, 0x1f, 1.5, .5, true, ~, 'true', yes, 1e3]\nm: &m { k: v }\nc: *m\nb: |\n  x\n";
        let value = yaml_to_json(text).unwrap();
        assert_eq!(
            value,
            json!({"name": "a", "n": [1, -2, 31, 1.5, 0.5, true, null, "true", "yes", 1000.0], "m": {"k": "v"}, "c": {"k": "v"}, "b": "x\n"})
        );
        assert!(yaml_to_json("a: [1,\n").unwrap_err().contains("YAML syntax"));
    }
}
