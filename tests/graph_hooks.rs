//! The `Graph` hooks a run-time front end (YAML) relies on, on a hand-written graph: updates
//! applied through the graph (and refused by it), the join keeping only some branch writes, a
//! pausing node keeping its update, the graph's own schema fingerprint, and checkpoint files
//! continued in a new thread with `Call::start_at`, routing that fails.

use serde::{Deserialize, Serialize};
use tea::__private::NodeStep;
use tea::prelude::*;
use tea::{decode_checkpoint, encode_checkpoint, BoxError, Fork, Graph, NodeId, SyncGraph};

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Doc {
    owner: String,
    #[reducer(append)]
    log: Vec<String>,
    answer: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum N {
    Fan,
    Left,
    Right,
    Join,
    Ask,
}

impl NodeId for N {
    type State = Doc;
}

const NODES: [(N, &str); 5] =
    [(N::Fan, "fan"), (N::Left, "left"), (N::Right, "right"), (N::Join, "join"), (N::Ask, "ask")];

/// fan => [left, right] -> join -> ask -> end. Both branches write `owner`; `strict` refuses
/// any `owner` longer than 5 bytes; `keep_owner` lets branch writes of `owner` reach the join.
struct Hand {
    keep_owner: bool,
    schema: u64,
}

impl SyncGraph for Hand {}

impl Graph for Hand {
    type State = Doc;
    type Node = N;

    fn name(&self) -> &str {
        "Hand"
    }

    fn fingerprint(&self) -> u64 {
        7
    }

    fn schema_fingerprint(&self) -> u64 {
        self.schema
    }

    fn node_name(&self, node: N) -> NodeName {
        NodeName::from_static(NODES.iter().find(|(n, _)| *n == node).map_or("?", |(_, name)| name))
    }

    fn start(&self, _: &Doc) -> Option<Goto<N>> {
        Some(Goto::Node(N::Fan))
    }

    fn run(&self, node: N, state: &Doc, _: &Ctx<Doc>, hitl: &mut Hitl) -> Result<NodeStep<Doc, N>, BoxError> {
        let update = match node {
            N::Fan => Doc::update().log(vec!["fan".into()]),
            N::Left => Doc::update().owner("left".into()).log(vec!["left".into()]),
            N::Right => Doc::update().owner(if state.log.len() > 5 { "far-too-long" } else { "right" }.into()),
            N::Join => Doc::update().log(vec![format!("join saw owner={:?}", state.owner)]),
            N::Ask => {
                // The question goes into the log before the pause; the answer after it.
                let asked = Doc::update().log(vec!["asked".into()]);
                if hitl.answered() == 0 {
                    let _ = hitl.interrupt::<String>("who?");
                    return Ok(NodeStep::new(Some(asked), None));
                }
                let answer: String = hitl.interrupt("who?")?;
                Doc::update().answer(answer)
            }
        };
        Ok(NodeStep::new(Some(update), None))
    }

    fn route(&self, node: N, _: &Doc) -> Option<Goto<N>> {
        match node {
            N::Fan | N::Left | N::Right => Some(Goto::Node(N::Join)),
            N::Join => Some(Goto::Node(N::Ask)),
            N::Ask => Some(Goto::End),
        }
    }

    fn try_route(&self, node: N, state: &Doc) -> Result<Option<Goto<N>>, BoxError> {
        if node == N::Ask && state.answer == "boom" {
            return Err("the route after `ask` does not evaluate".into());
        }
        Ok(self.route(node, state))
    }

    fn can_goto(&self, _: N, _: Goto<N>) -> bool {
        false
    }

    fn node_named(&self, name: &str) -> Option<N> {
        NODES.iter().find(|(_, n)| *n == name).map(|(node, _)| *node)
    }

    fn fork(&self, node: N) -> Option<Fork<'_, N>> {
        (node == N::Fan).then_some(Fork { heads: &[N::Left, N::Right], join: N::Join })
    }

    fn apply(&self, state: &mut Doc, update: DocUpdate) -> Result<(), BoxError> {
        let mut probe = Doc::default();
        probe.apply(update.clone());
        if probe.owner.len() > 5 {
            return Err(format!("owner {:?} is longer than 5 bytes", probe.owner).into());
        }
        state.apply(update);
        Ok(())
    }

    fn join_update(&self, _: N, update: DocUpdate) -> Option<DocUpdate> {
        if self.keep_owner {
            return Some(update);
        }
        // Drop the `owner` write, keep the log.
        let mut probe = Doc::default();
        probe.apply(update);
        Some(Doc::update().log(probe.log))
    }

    fn keeps_update_on_pause(&self, node: N) -> bool {
        node == N::Ask
    }
}

fn app(keep_owner: bool) -> App<Hand, MemoryStore> {
    tea::Builder::new(Hand { keep_owner, schema: 1 }).checkpointer(MemoryStore::new()).build()
}

#[test]
fn branch_writes_the_graph_drops_at_the_join_do_not_conflict() {
    let (state, _) = app(false).invoke(Doc::default()).unwrap().interrupted().unwrap();
    assert_eq!(state.owner, "");
    assert_eq!(state.log, ["fan", "left", "join saw owner=\"\"", "asked"]);
}

#[test]
fn branch_writes_the_graph_keeps_conflict_by_name() {
    match app(true).invoke(Doc::default()).unwrap_err() {
        Error::ConflictingWrites { field, branches } => {
            assert_eq!(field, "owner");
            assert_eq!(branches, ["left", "right"]);
        }
        other => panic!("expected ConflictingWrites, got {other:?}"),
    }
}

#[test]
fn a_pausing_node_keeps_its_update_when_the_graph_says_so_and_the_answer_follows() {
    let app = app(false);
    let (state, resume) = app.invoke(Doc::default()).unwrap().interrupted().unwrap();
    assert_eq!(state.log.last().map(String::as_str), Some("asked"));
    assert_eq!(resume.interrupts()[0].value(), "who?");
    let done = app.resume(resume.answer("Ada")).unwrap().done().unwrap();
    assert_eq!(done.answer, "Ada");
    // Asked once: the resumed run sees the kept update and does not ask again.
    assert_eq!(done.log.iter().filter(|l| *l == "asked").count(), 1);
}

#[test]
fn a_route_that_fails_is_the_nodes_failure() {
    let app = app(false);
    let (_, resume) = app.invoke(Doc::default()).unwrap().interrupted().unwrap();
    match app.resume(resume.clone().answer("boom")).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "ask");
            assert!(source.to_string().contains("does not evaluate"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
    // The failed resume put the pause back.
    assert!(app.resume(resume.answer("Ada")).unwrap().is_done());
}

#[test]
fn an_update_the_graph_refuses_fails_the_node_or_the_resume() {
    let app = app(false);
    let (_, resume) = app.invoke(Doc::default()).unwrap().interrupted().unwrap();
    let err = app.resume(resume.clone().answer("x").update(Doc::update().owner("far-too-long".into()))).unwrap_err();
    match &err {
        Error::BadResumeValue { node, reason, .. } => {
            assert_eq!(*node, "ask");
            assert!(reason.contains("longer than 5 bytes"), "{reason}");
        }
        other => panic!("expected BadResumeValue, got {other:?}"),
    }
    // The token is still good.
    assert_eq!(app.resume(resume.answer("Ada")).unwrap().done().unwrap().answer, "Ada");

    // A node's refused write is that node's failure: `right` writes a long owner once the log
    // is long enough (started at `right` with a long log).
    let long = Doc { log: vec!["x".into(); 6], ..Doc::default() };
    match app.run(Call::start_at("right", long).on("long")).unwrap_err() {
        Error::NodeFailed { node, source } => {
            assert_eq!(node, "right");
            assert!(source.to_string().contains("far-too-long"), "{source}");
        }
        other => panic!("expected NodeFailed, got {other:?}"),
    }
}

#[test]
fn tokens_and_checkpoints_carry_the_graphs_own_schema_fingerprint() {
    let store = MemoryStore::new();
    let old = tea::Builder::new(Hand { keep_owner: false, schema: 1 }).checkpointer(store.clone()).build();
    let new = tea::Builder::new(Hand { keep_owner: false, schema: 2 }).checkpointer(store).build();
    let (_, resume) = old.invoke(Doc::default()).unwrap().interrupted().unwrap();
    assert!(matches!(new.resume(resume.clone()), Err(Error::SchemaMismatch { what: "state struct", .. })));
    assert!(matches!(new.run(Call::recover(resume.thread())), Err(Error::SchemaMismatch { .. })));
    assert!(old.resume(resume.answer("Ada")).unwrap().is_done());
}

#[test]
fn a_checkpoint_file_continues_in_a_new_thread_at_its_node() {
    let app = app(false);
    let graph = app.graph();
    let saved = Doc { log: vec!["before".into()], ..Doc::default() };
    let bytes = encode_checkpoint(graph, &NodeName::from_static("join"), &saved).unwrap();
    let (node, state) = decode_checkpoint(graph, &bytes, "saved.ckpt").unwrap();
    assert_eq!(node, "join");
    assert_eq!(state.log, ["before"]);
    // Usable many times: each start is a new thread.
    for thread in ["one", "two"] {
        let (state, _) =
            app.run(Call::start_at(node.as_str(), state.clone()).on(thread)).unwrap().interrupted().unwrap();
        assert_eq!(state.log, ["before", "join saw owner=\"\"", "asked"]);
    }
    // Another shape of the graph's state refuses the file; altered bytes are corrupt.
    let other = Hand { keep_owner: false, schema: 9 };
    assert!(matches!(decode_checkpoint(&other, &bytes, "saved.ckpt"), Err(Error::SchemaMismatch { .. })));
    let mut altered = bytes.clone();
    let last = altered.len() - 2;
    altered[last] ^= 1;
    assert!(matches!(decode_checkpoint(graph, &altered, "saved.ckpt"), Err(Error::CorruptCheckpoint { .. })));
    assert!(matches!(app.run(Call::start_at("nowhere", state).on("three")), Err(Error::NoRoute { .. })));
}
