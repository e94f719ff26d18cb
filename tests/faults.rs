//! Regression tests of faults found while the engine was laid out in layers (issue 22), one
//! each: a `Command::parent` jump stored by a stable name (and the old record by Rust type
//! name read or refused), a store-less child graph honouring its parent's recursion limit, and
//! a pause without a checkpointer reported as such. (The lease renewal through the driver is
//! tested inside tea-runtime, where a child run can be put on the tokio driver.)

use serde::{Deserialize, Serialize};
use tea::__private::NodeStep;
use tea::prelude::*;
use tea::{BoxError, Checkpointer, Graph, NodeId, PauseFree, SyncGraph};

// ---------------------------------------------------------------------------------------------
// `Command::parent` records the parent graph by its declared name.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    text: String,
    #[reducer(append)]
    trail: Vec<String>,
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Triage {
    text: String,
}

fn decide(_: &Triage) -> Command<TriagerNode> {
    Command::parent(DeskNode::Human).update(Ticket::update().trail(vec!["escalated".into()]))
}

fn fix(_: &Triage) {}

graph! {
    pub Triager for Triage {
        start -> decide;
        decide -> fix | end;
        fix -> end;
    }
}

fn to_triage(t: &Ticket) -> Triage {
    Triage { text: t.text.clone() }
}
fn from_triage(_: &Ticket, _: Triage) -> TicketUpdate {
    Ticket::update().trail(vec!["mapped".into()])
}
fn human(_: &Ticket) -> TicketUpdate {
    Ticket::update().trail(vec!["human".into()])
}
fn never(_: &Ticket) -> bool {
    false
}

graph! {
    pub Desk for Ticket {
        start -> triage;
        triage -> human if never;
        triage -> end;
        human -> end;
        subgraph triage = Triager(to_triage => from_triage);
    }
}

/// The payload of checkpoint envelope `bytes` as JSON, and the envelope's header and name.
fn open_envelope(bytes: &[u8]) -> (Vec<u8>, serde_json::Value) {
    let name_len = u16::from_le_bytes([bytes[6], bytes[7]]) as usize;
    let head = bytes[..32 + name_len].to_vec();
    (head, serde_json::from_slice(&bytes[32 + name_len..]).unwrap())
}

/// An envelope around `payload` with `head`'s header and name, its length and checksum set, as
/// tea writes them.
fn close_envelope(mut head: Vec<u8>, payload: &serde_json::Value) -> Vec<u8> {
    let body = serde_json::to_vec(payload).unwrap();
    head[24..28].copy_from_slice(&(body.len() as u32).to_le_bytes());
    head.extend_from_slice(&body);
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&head[..28]);
    hasher.update(&head[32..]);
    let checksum = hasher.finalize();
    head[28..32].copy_from_slice(&checksum.to_le_bytes());
    head
}

/// Runs `Desk` on a thread whose child ends with `Command::parent`, rewinds the parent to
/// before its subgraph node, lets `rewrite` change the child's final checkpoint's `parent`
/// record, and recovers the parent, which reads the jump back from that checkpoint.
fn recover_with_jump(rewrite: impl FnOnce(&mut serde_json::Value)) -> Result<Ticket, Error> {
    let store = MemoryStore::new();
    // Time passes on this clock only when the test says so.
    let clock = tea::Clock::manual(std::time::SystemTime::now());
    let app = Desk::builder()
        .checkpointer(store.clone())
        .lease(std::time::Duration::from_millis(1))
        .clock(clock.clone())
        .build();
    let thread = ThreadId::from("t");
    let done =
        app.run(Call::start(Ticket { text: "fire".into(), ..Ticket::default() }).on(thread.clone()))?.done().unwrap();
    assert_eq!(done.trail, ["escalated", "human"]);
    // The child's final checkpoint records the jump by the parent graph's declared name.
    let child = ThreadId::from("t/triage@1");
    let (head, bytes) = store.head(Triager::NAME, &child)?.unwrap();
    let (header, mut payload) = open_envelope(&bytes);
    assert_eq!(payload["parent"]["parent_graph"], "Desk", "{payload}");
    assert!(payload["parent"].get("graph").is_none(), "no Rust type name is stored: {payload}");
    rewrite(&mut payload["parent"]);
    let rewritten = close_envelope(header, &payload);
    // The child's history, its final checkpoint rewritten; the parent rewound to its first.
    let history = store.history(Triager::NAME, &child)?;
    store.delete(Triager::NAME, &child)?;
    for (id, old) in history.iter().rev() {
        let bytes = if *id == head { &rewritten } else { old };
        store.append(Triager::NAME, &child, id.checked_sub(1).filter(|&h| h > 0), *id, bytes, true)?;
    }
    let first = app.history(&thread)?.pop().unwrap();
    let rewound = store.get(Desk::NAME, &thread, first.checkpoint)?.unwrap();
    store.delete(Desk::NAME, &thread)?;
    store.append(Desk::NAME, &thread, None, 1, &rewound, true)?;
    clock.advance(std::time::Duration::from_millis(20));
    let parent = Desk::builder().checkpointer(store.clone()).clock(clock).build();
    Ok(parent.run(Call::recover(&thread))?.done().unwrap())
}

#[test]
fn a_parent_jump_is_stored_by_the_parent_graphs_name_and_read_back() {
    let done = recover_with_jump(|_| {}).unwrap();
    assert_eq!(done.trail, ["escalated", "human"]);
}

#[test]
fn a_parent_jump_recorded_for_another_parent_graph_is_refused() {
    let error = recover_with_jump(|jump| jump["parent_graph"] = "Elsewhere".into()).unwrap_err();
    assert!(matches!(&error, Error::NodeFailed { node, .. } if node == "triage"), "{error}");
    let reason = std::error::Error::source(&error).map(ToString::to_string).unwrap_or_default();
    assert!(reason.contains("`Elsewhere`") && reason.contains("runs inside `Desk`"), "{reason}");
}

#[test]
fn an_old_parent_jump_by_type_name_reads_where_the_type_is_the_same() {
    // What tea wrote before: the parent's node type by `std::any::type_name`.
    let done = recover_with_jump(|jump| {
        let record = jump.as_object_mut().unwrap();
        record.remove("parent_graph");
        record.insert("graph".into(), std::any::type_name::<DeskNode>().into());
    })
    .unwrap();
    assert_eq!(done.trail, ["escalated", "human"]);
}

#[test]
fn an_old_parent_jump_by_a_type_name_this_build_lacks_is_a_schema_mismatch() {
    let error = recover_with_jump(|jump| {
        let record = jump.as_object_mut().unwrap();
        record.remove("parent_graph");
        record.insert("graph".into(), "old_crate::flows::DeskNode".into());
    })
    .unwrap_err();
    match &error {
        Error::SchemaMismatch { graph, thread, what } => {
            assert_eq!(graph, "Triager");
            assert_eq!(thread.as_str(), "t/triage@1");
            assert!(what.contains("Command::parent"), "{what}");
        }
        other => panic!("expected SchemaMismatch, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// A child graph without a store works within its parent's recursion limit.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Count {
    #[reducer(sum)]
    n: u64,
}

fn tick(_: &Count) -> CountUpdate {
    Count::update().n(1)
}
fn far(c: &Count) -> bool {
    c.n >= 1_000
}

graph! {
    pub Looper for Count {
        start -> tick;
        tick -> end if far;
        tick -> tick;
    }
}

graph! {
    pub Outer for Count {
        start -> inner;
        inner -> end;
        subgraph inner = Looper;
    }
}

#[test]
fn a_child_without_a_store_honours_its_parents_recursion_limit() {
    let error = Outer::builder().recursion_limit(20).build().invoke(Count::default()).unwrap_err();
    assert!(matches!(&error, Error::NodeFailed { node, .. } if node == "inner"), "{error}");
    let source = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<Error>());
    assert!(matches!(source, Some(Error::RecursionLimit { limit: 20 })), "{error:?}");
    // With room for the loop, the same graph runs.
    let out = Outer::builder().recursion_limit(2_000).build().invoke(Count::default()).unwrap();
    assert_eq!(out.n, 1_000);
}

#[test]
fn a_child_with_a_store_honours_its_parents_recursion_limit_too() {
    let app = Outer::builder().checkpointer(MemoryStore::new()).recursion_limit(20).build();
    let error = app.invoke(Count::default()).unwrap_err();
    let source = std::error::Error::source(&error).and_then(|e| e.downcast_ref::<Error>());
    assert!(matches!(source, Some(Error::RecursionLimit { limit: 20 })), "{error:?}");
}

// ---------------------------------------------------------------------------------------------
// A pause where the app has no checkpointer is its own error.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AskNode {
    Ask,
}

impl NodeId for AskNode {
    type State = Count;
}

/// A graph built at run time that claims it cannot pause, and whose one node asks anyway.
struct Careless;

impl SyncGraph for Careless {}
impl PauseFree for Careless {}

impl Graph for Careless {
    type State = Count;
    type Node = AskNode;

    fn name(&self) -> &str {
        "Careless"
    }
    fn fingerprint(&self) -> u64 {
        1
    }
    fn node_name(&self, _: AskNode) -> NodeName {
        NodeName::from_static("ask")
    }
    fn start(&self, _: &Count) -> Option<Goto<AskNode>> {
        Some(Goto::Node(AskNode::Ask))
    }
    fn run(
        &self,
        _: AskNode,
        _: &Count,
        _: &Ctx<Count>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<Count, AskNode>, BoxError> {
        let _answer: String = hitl.interrupt("who?")?;
        Ok(NodeStep::new(None, None))
    }
    fn route(&self, _: AskNode, _: &Count) -> Option<Goto<AskNode>> {
        Some(Goto::End)
    }
    fn can_goto(&self, _: AskNode, _: Goto<AskNode>) -> bool {
        false
    }
    fn node_named(&self, name: &str) -> Option<AskNode> {
        (name == "ask").then_some(AskNode::Ask)
    }
}

#[test]
fn a_pause_without_a_checkpointer_is_paused_without_checkpointer() {
    let error = tea::Builder::new(Careless).build().invoke(Count::default()).unwrap_err();
    match &error {
        Error::PausedWithoutCheckpointer { graph, node } => {
            assert_eq!(graph, "Careless");
            assert_eq!(node, "ask");
        }
        other => panic!("expected PausedWithoutCheckpointer, got {other:?}"),
    }
    assert!(error.to_string().contains(".checkpointer("), "{error}");
    let app = tea::Builder::new(Careless).build();
    let mut stream = app.stream(Count::default());
    assert!(matches!(stream.next(), Some(Err(Error::PausedWithoutCheckpointer { .. }))));
}
