//! Names of nodes and threads as they appear in events, errors and tokens, checkpoint ids, and
//! the names of the entry and the exit (`START`, `END`).
//!
//! Both are cheap to clone: a node name is usually a `&'static str` from generated code (a
//! front end that reads names at run time shares them), and a thread id is reference-counted,
//! so the executor never allocates to pass them around.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;

/// The number of a checkpoint in its thread's history: 1 for the first, then 2, 3, ….
pub type CheckpointId = u64;

/// The graph's entry, as events, errors and tokens name it.
pub(crate) const START: NodeName = NodeName::from_static("start");
/// The graph's exit.
pub(crate) const END: NodeName = NodeName::from_static("end");

/// The name of a node, as written in the graph.
///
/// Events, errors and snapshots are generic over the state only, so they name nodes with this
/// type rather than with a graph's node enum.
///
/// ```
/// use tea::NodeName;
/// let name = NodeName::from_static("review");
/// assert_eq!(name, "review");
/// assert_eq!(name.to_string(), "review");
/// ```
#[derive(Clone)]
pub struct NodeName(Repr);

#[derive(Clone)]
enum Repr {
    Static(&'static str),
    Shared(Arc<str>),
}

impl NodeName {
    /// A name known at compile time (what `graph!` generates).
    pub const fn from_static(name: &'static str) -> Self {
        NodeName(Repr::Static(name))
    }

    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(s) => s,
            Repr::Shared(s) => s,
        }
    }
}

impl NodeName {
    /// `{base}#{index}`, the name of a send's branch (`worker#3`), made with one allocation
    /// (a fan-out by sends names each of its branches).
    pub(crate) fn numbered(base: &str, index: usize) -> NodeName {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut n = index;
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = &digits[at..];
        let mut buf = [0u8; 128];
        let len = base.len() + 1 + digits.len();
        if len > buf.len() {
            return NodeName::from(format!("{base}#{index}"));
        }
        buf[..base.len()].copy_from_slice(base.as_bytes());
        buf[base.len()] = b'#';
        buf[base.len() + 1..len].copy_from_slice(digits);
        match std::str::from_utf8(&buf[..len]) {
            Ok(name) => NodeName(Repr::Shared(Arc::from(name))),
            Err(_) => NodeName::from(format!("{base}#{index}")),
        }
    }
}

impl From<&'static str> for NodeName {
    fn from(name: &'static str) -> Self {
        NodeName::from_static(name)
    }
}

impl From<String> for NodeName {
    fn from(name: String) -> Self {
        NodeName(Repr::Shared(name.into()))
    }
}

impl AsRef<str> for NodeName {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for NodeName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for NodeName {}

impl std::hash::Hash for NodeName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialEq<str> for NodeName {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for NodeName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<NodeName> for &str {
    fn eq(&self, other: &NodeName) -> bool {
        *self == other.as_str()
    }
}

impl Serialize for NodeName {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NodeName {
    /// A name read from text without escapes is copied once, into its shared string (a
    /// `String` first would be a second allocation and copy, for every node a checkpoint names).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl serde::de::Visitor<'_> for Name {
            type Value = NodeName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a node name")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<NodeName, E> {
                Ok(NodeName(Repr::Shared(Arc::from(name))))
            }
            fn visit_string<E: serde::de::Error>(self, name: String) -> Result<NodeName, E> {
                Ok(NodeName::from(name))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The id of a thread: one run of a graph, with its checkpoints, across pauses and resumes.
///
/// ```
/// use tea::ThreadId;
/// let thread = ThreadId::from("order-1234");
/// assert_eq!(thread.as_str(), "order-1234");
/// assert_eq!(thread, ThreadId::from(String::from("order-1234")));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadId(Arc<str>);

impl ThreadId {
    /// The longest thread id a run accepts, in bytes.
    pub const MAX_LEN: usize = 1024;

    /// A new random id (a UUID v4), as `invoke` gives each new thread.
    pub fn random() -> Self {
        // Its 122 random bits drawn as a lease owner's are, without a system call each.
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&crate::vocab::clock::system_random().to_le_bytes());
        bytes[8..].copy_from_slice(&crate::vocab::clock::system_random().to_le_bytes());
        let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
        ThreadId::from(&*uuid.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for ThreadId {
    fn from(id: &str) -> Self {
        ThreadId(id.into())
    }
}

impl From<String> for ThreadId {
    fn from(id: String) -> Self {
        ThreadId(id.into())
    }
}

impl From<&ThreadId> for ThreadId {
    fn from(id: &ThreadId) -> Self {
        id.clone()
    }
}

impl AsRef<str> for ThreadId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for ThreadId {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ThreadId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(ThreadId::from)
    }
}

#[cfg(test)]
mod tests {
    use super::NodeName;

    #[test]
    fn names_read_from_text_values_and_escapes() {
        let read = |json: &str| serde_json::from_str::<NodeName>(json);
        assert_eq!(read(r#""review""#).unwrap(), "review");
        assert_eq!(read(r#""tab\there""#).unwrap(), "tab\there");
        assert_eq!(read(r#""\u00fcber""#).unwrap(), "über");
        assert_eq!(serde_json::from_value::<NodeName>(serde_json::json!("worker#3")).unwrap(), "worker#3");
        let error = read("3").unwrap_err().to_string();
        assert!(error.contains("expected a node name"), "{error}");
    }

    #[test]
    fn numbered_names_read_like_formatted_ones() {
        for (base, index) in [("worker", 0), ("worker", 7), ("w", 10), ("ünïcode", 123_456), ("x", usize::MAX)] {
            assert_eq!(NodeName::numbered(base, index).as_str(), format!("{base}#{index}"));
        }
        let long = "n".repeat(200);
        assert_eq!(NodeName::numbered(&long, 42).as_str(), format!("{long}#42"));
    }
}
