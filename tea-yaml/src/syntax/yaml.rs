//! YAML text to a tree of values that each know their line and column.
//!
//! Built on saphyr's YAML 1.2 event parser. Plain scalars are resolved with the YAML 1.2 core
//! schema (`null`/`~`, `true`/`false`, integers, floats; `yes` stays a string); quoted and block
//! scalars are strings. Duplicate keys in a mapping are reported rather than silently merged.
//!
//! YAML text to a tree whose every node keeps its line and column (saphyr's event parser, YAML 1.2
//! core schema; duplicate keys are reported). The tree is built with an explicit stack under
//! budgets (values and text once aliases are expanded, counted before an alias is copied; nesting
//! depth; keys per mapping), so nothing later recurses deeper than the limit.

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde_json::Value;
use std::collections::HashMap;

/// How deep collections may nest in an agent file (a list in a mapping in a list …).
pub(crate) const MAX_DEPTH: usize = 128;
/// How many values (scalars, lists, mappings) a file may hold once its aliases are expanded.
pub(crate) const MAX_VALUES: usize = 1_000_000;
/// How many bytes of scalar text a file may hold once its aliases are expanded.
pub(crate) const MAX_TEXT: usize = 64 << 20;
/// How many keys one mapping may have.
pub(crate) const MAX_KEYS: usize = 100_000;

/// A position in the file: 1-based line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pos {
    pub(crate) line: usize,
    pub(crate) column: usize,
}

/// A YAML value with its position.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) pos: Pos,
    pub(crate) kind: Kind,
}

#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A string; `block`: a literal or folded block scalar (`pos` is its first content line).
    Str {
        text: String,
        block: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str { text, .. } => Some(text),
            _ => None,
        }
    }

    pub(crate) fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    pub(crate) fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// A scalar as text (`3` as "3"); `None` for collections and null.
    pub(crate) fn scalar_text(&self) -> Option<String> {
        match &self.kind {
            Kind::Str { text, .. } => Some(text.clone()),
            Kind::Bool(b) => Some(b.to_string()),
            Kind::Int(i) => Some(i.to_string()),
            Kind::Float(f) => Some(f.to_string()),
            _ => None,
        }
    }

    /// What kind of value this is, for messages.
    pub(crate) fn what(&self) -> &'static str {
        match self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a bool",
            Kind::Int(_) => "an integer",
            Kind::Float(_) => "a number",
            Kind::Str { .. } => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }

    /// The value as JSON (mapping keys as their text).
    pub(crate) fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => Value::from(*i),
            Kind::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Kind::Str { text, .. } => Value::String(text.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => {
                Value::Object(entries.iter().map(|(k, v)| (k.scalar_text().unwrap_or_default(), v.to_json())).collect())
            }
        }
    }
}

/// A syntax problem: position and message.
#[derive(Debug)]
pub(crate) struct SyntaxError {
    pub(crate) pos: Pos,
    pub(crate) message: String,
}

/// Parses `text` (one document; an empty text is null). Duplicate mapping keys are returned as
/// problems beside the tree.
pub(crate) fn parse(text: &str) -> Result<(Node, Vec<SyntaxError>), SyntaxError> {
    let mut builder =
        Builder { stack: Vec::new(), anchors: HashMap::new(), root: None, duplicates: Vec::new(), values: 0, text: 0 };
    let mut documents = 0;
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| SyntaxError {
            pos: Pos { line: e.marker().line(), column: e.marker().col() + 1 },
            message: format!("YAML syntax: {}", e.info()),
        })?;
        let pos = pos_of(&span);
        match event {
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(SyntaxError {
                        pos,
                        message: "the file holds several YAML documents (`---`); an agent is one document".into(),
                    });
                }
            }
            Event::Scalar(value, style, anchor, _tag) => {
                builder.count(pos, 1, value.len())?;
                let kind = resolve(&value, style);
                builder.push(Node { pos, kind }, anchor, Size { values: 1, text: value.len() })?;
            }
            Event::SequenceStart(anchor, _) => builder.open(pos, anchor, Collection::Seq(Vec::new()))?,
            Event::MappingStart(anchor, _) => {
                builder.open(pos, anchor, Collection::Map(Vec::new(), HashMap::new(), None))?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(open) = builder.stack.pop() {
                    let size = Size { values: builder.values - open.values, text: builder.text - open.text };
                    let kind = match open.items {
                        Collection::Seq(items) => Kind::Seq(items),
                        Collection::Map(entries, _, _) => Kind::Map(entries),
                    };
                    builder.push(Node { pos: open.pos, kind }, open.anchor, size)?;
                }
            }
            Event::Alias(id) => {
                let size = builder.anchors.get(&id).map_or(Size { values: 1, text: 0 }, |(_, size)| *size);
                // Counted before the copy: an alias of an alias of … ("billion laughs") is
                // refused before it takes memory.
                builder.count(pos, size.values, size.text)?;
                let node = match builder.anchors.get(&id) {
                    Some((node, _)) => node.clone(),
                    None => Node { pos, kind: Kind::Null },
                };
                builder.push(Node { pos, ..node }, 0, size)?;
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
    let root = builder.root.unwrap_or(Node { pos: Pos { line: 1, column: 1 }, kind: Kind::Null });
    Ok((root, builder.duplicates))
}

fn pos_of(span: &Span) -> Pos {
    Pos { line: span.start.line(), column: span.start.col() + 1 }
}

/// A list or mapping being read.
struct Open {
    pos: Pos,
    anchor: usize,
    /// The builder's counts when it opened: what it holds is the difference when it closes.
    values: usize,
    text: usize,
    items: Collection,
}

enum Collection {
    Seq(Vec<Node>),
    /// Entries so far, the line of each key's first use (by its text), and a key waiting for
    /// its value.
    Map(Vec<(Node, Node)>, HashMap<String, usize>, Option<Node>),
}

/// What a value holds once expanded: values (itself included) and bytes of scalar text.
#[derive(Clone, Copy)]
struct Size {
    values: usize,
    text: usize,
}

struct Builder {
    stack: Vec<Open>,
    anchors: HashMap<usize, (Node, Size)>,
    root: Option<Node>,
    duplicates: Vec<SyntaxError>,
    /// Values and bytes of text read so far, aliases expanded.
    values: usize,
    text: usize,
}

impl Builder {
    /// Counts `values` more values and `text` more bytes against the file's budgets.
    fn count(&mut self, pos: Pos, values: usize, text: usize) -> Result<(), SyntaxError> {
        self.values = self.values.saturating_add(values);
        self.text = self.text.saturating_add(text);
        if self.values > MAX_VALUES {
            return Err(SyntaxError {
                pos,
                message: format!(
                    "the file holds more than {MAX_VALUES} values once its aliases are expanded (the limit); \
                     does an alias repeat a large value?"
                ),
            });
        }
        if self.text > MAX_TEXT {
            return Err(SyntaxError {
                pos,
                message: format!(
                    "the file holds more than {MAX_TEXT} bytes of text once its aliases are expanded (the limit); \
                     does an alias repeat a large value?"
                ),
            });
        }
        Ok(())
    }

    fn open(&mut self, pos: Pos, anchor: usize, items: Collection) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError {
                pos,
                message: format!("lists and mappings nest more than {MAX_DEPTH} deep here (the limit)"),
            });
        }
        self.count(pos, 1, 0)?;
        self.stack.push(Open { pos, anchor, values: self.values - 1, text: self.text, items });
        Ok(())
    }

    fn push(&mut self, node: Node, anchor: usize, size: Size) -> Result<(), SyntaxError> {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open { items: Collection::Seq(items), .. }) => items.push(node),
            Some(Open { items: Collection::Map(entries, keys, pending), .. }) => match pending.take() {
                None => *pending = Some(node),
                Some(key) => {
                    if let Some(text) = key.scalar_text() {
                        if let Some(first) = keys.get(&text) {
                            self.duplicates.push(SyntaxError {
                                pos: key.pos,
                                message: format!(
                                    "duplicate key `{text}` (first at line {first}); a mapping names each key once"
                                ),
                            });
                            return Ok(());
                        }
                        if keys.len() >= MAX_KEYS {
                            return Err(SyntaxError {
                                pos: key.pos,
                                message: format!("a mapping has more than {MAX_KEYS} keys (the limit)"),
                            });
                        }
                        keys.insert(text, key.pos.line);
                    }
                    entries.push((key, node));
                }
            },
        }
        Ok(())
    }
}

/// The YAML 1.2 core schema for plain scalars; everything else is a string.
fn resolve(value: &str, style: ScalarStyle) -> Kind {
    let block = matches!(style, ScalarStyle::Literal | ScalarStyle::Folded);
    if style != ScalarStyle::Plain {
        return Kind::Str { text: value.to_owned(), block };
    }
    match value {
        "" | "~" | "null" | "Null" | "NULL" => return Kind::Null,
        "true" | "True" | "TRUE" => return Kind::Bool(true),
        "false" | "False" | "FALSE" => return Kind::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Kind::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Kind::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Kind::Float(f64::NAN),
        _ => {}
    }
    if let Some(hex) = value.strip_prefix("0x") {
        if let Ok(i) = i64::from_str_radix(hex, 16) {
            return Kind::Int(i);
        }
    }
    if let Some(oct) = value.strip_prefix("0o") {
        if let Ok(i) = i64::from_str_radix(oct, 8) {
            return Kind::Int(i);
        }
    }
    let digits = value.strip_prefix(['-', '+']).unwrap_or(value);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(i) = value.parse::<i64>() {
            return Kind::Int(i);
        }
    }
    let numeric = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && digits.bytes().next().is_some_and(|b| b.is_ascii_digit() || b == b'.');
    if numeric {
        if let Ok(f) = value.parse::<f64>() {
            return Kind::Float(f);
        }
    }
    Kind::Str { text: value.to_owned(), block: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_resolve_with_the_core_schema_and_keep_positions() {
        let (root, dups) = parse("a: 1\nb: yes\nc: 'true'\nd: 1.5\ne: ~\nf:\n  - x\n").unwrap();
        assert!(dups.is_empty());
        let map = root.as_map().unwrap();
        assert!(matches!(map[0].1.kind, Kind::Int(1)));
        assert_eq!(map[1].1.as_str(), Some("yes"));
        assert_eq!(map[2].1.as_str(), Some("true"));
        assert!(matches!(map[3].1.kind, Kind::Float(f) if f == 1.5));
        assert!(matches!(map[4].1.kind, Kind::Null));
        let seq = map[5].1.as_seq().unwrap();
        assert_eq!(seq[0].pos, Pos { line: 7, column: 5 });
        assert_eq!(map[1].0.pos, Pos { line: 2, column: 1 });
    }

    #[test]
    fn duplicate_keys_and_syntax_errors_are_reported_with_lines() {
        let (_, dups) = parse("a: 1\nb: 2\na: 3\n").unwrap();
        assert_eq!(dups[0].pos.line, 3);
        assert!(dups[0].message.contains("duplicate key `a`"));
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.message.starts_with("YAML syntax"), "{}", err.message);
    }

    #[test]
    fn block_scalars_are_marked() {
        let (root, _) = parse("run: |\n  return {}\n").unwrap();
        let run = &root.as_map().unwrap()[0].1;
        assert!(matches!(&run.kind, Kind::Str { block: true, .. }));
        assert_eq!(run.as_str(), Some("return {}\n"));
        assert_eq!(run.pos.line, 2);
    }
}
