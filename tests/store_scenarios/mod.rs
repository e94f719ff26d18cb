//! Checkpoint, breakpoint and resume scenarios, written once over any [`Checkpointer`] and run
//! for each store by `store_tests!` (see `tests/checkpoints.rs`, `checkpoints_sled.rs`, `checkpoints_dir.rs`).
//!
//! Nodes record every run in a table keyed by thread and node, so a scenario can tell how many
//! times a node ran in its own thread while other tests run at the same time.

#[path = "../store_forward/mod.rs"]
mod store_forward;
/// For the wrapping stores of the tests that include these scenarios (a module loaded twice
/// in one test crate is a lint error).
#[allow(unused_imports)]
pub(crate) use store_forward::forward;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Barrier, Mutex};
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    #[reducer(append)]
    pub trail: Vec<String>,
    #[reducer(sum)]
    pub total: u64,
    pub approved: bool,
    pub note: String,
}

// ---------------------------------------------------------------------------------------------
// Run counting and failure injection, per thread.

static RUNS: Mutex<BTreeMap<(String, String), usize>> = Mutex::new(BTreeMap::new());

/// How failure is injected into a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Error,
    Panic,
}

static ARMED: Mutex<BTreeMap<(String, String), Failure>> = Mutex::new(BTreeMap::new());

fn key(thread: &ThreadId, node: &str) -> (String, String) {
    (thread.as_str().to_owned(), node.to_owned())
}

/// How many times `node` ran in `thread` (in this process).
pub fn runs(thread: &ThreadId, node: &str) -> usize {
    RUNS.lock().unwrap_or_else(|e| e.into_inner()).get(&key(thread, node)).copied().unwrap_or(0)
}

/// The next run of `node` in `thread` fails (once).
pub fn arm(thread: &ThreadId, node: &str, how: Failure) {
    ARMED.lock().unwrap_or_else(|e| e.into_inner()).insert(key(thread, node), how);
}

fn take_armed(ctx: &Ctx<Doc>) -> Option<Failure> {
    let thread = ctx.thread()?;
    ARMED.lock().unwrap_or_else(|e| e.into_inner()).remove(&key(thread, ctx.node().as_str()))
}

/// Records a run of the current node and appends its name to the trail.
pub fn visit(ctx: &Ctx<Doc>) -> DocUpdate {
    let node = ctx.node().to_string();
    let thread = ctx.thread().expect("every run in these scenarios has a thread");
    *RUNS.lock().unwrap_or_else(|e| e.into_inner()).entry(key(thread, &node)).or_default() += 1;
    Doc::update().trail(vec![node]).total(1)
}

macro_rules! nodes {
    ($($name:ident),*) => {
        $( pub fn $name(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate { visit(ctx) } )*
    };
}
nodes!(a, b, c, d, e, f, g, h, i, j, k, l);

pub fn approved(s: &Doc) -> bool {
    s.approved
}

// ---------------------------------------------------------------------------------------------
// Graphs.

graph! {
    pub StopBefore for Doc {
        start -> a; a -> b; b -> c; c -> end;
        interrupt_before b;
    }
}

graph! {
    pub StopAfter for Doc {
        start -> a; a -> b; b -> c; c -> end;
        interrupt_after b;
    }
}

graph! {
    pub TwoStops for Doc {
        start -> a; a -> b; b -> c; c -> d; d -> end;
        interrupt_before b, d;
    }
}

graph! {
    pub BothSides for Doc {
        start -> a; a -> b; b -> c; c -> end;
        interrupt_before b;
        interrupt_after b;
    }
}

graph! {
    /// `interrupt_after b`, then a guard on `approved`.
    pub Routed for Doc {
        start -> a; a -> b;
        b -> c if approved;
        b -> d;
        c -> end; d -> end;
        interrupt_after b;
    }
}

graph! {
    /// The Edge Agent scenario: nodes A–L with breakpoints on B, E (inside a parallel branch),
    /// G (the join) and K.
    pub EdgeAgent for Doc {
        start -> a;
        a -> b;
        parallel b => [c, e] -> g;
        c -> d; d -> g;
        e -> f; f -> g;
        g -> h;
        h -> i if approved;
        h -> j;
        i -> k; j -> k;
        k -> l;
        l -> end;
        interrupt_before b, g;
        interrupt_after e, k;
    }
}

graph! {
    /// A breakpoint on `d`, the second node of branch `c`.
    pub Fan for Doc {
        start -> a;
        parallel a => [b, c, e] -> h;
        c -> d; d -> h;
        h -> end;
        interrupt_before d;
    }
}

/// A router that chooses by `approved`, with a breakpoint after it.
pub fn pick(s: &Doc, ctx: &Ctx<Doc>) -> Command<ChooserNode> {
    let next = if s.approved { ChooserNode::C } else { ChooserNode::B };
    Command::goto(next).update(visit(ctx))
}

graph! {
    pub Chooser for Doc {
        start -> pick;
        pick -> b | c;
        b -> end; c -> end;
        interrupt_after pick;
    }
}

graph! {
    /// A breakpoint after the source of a fan-out.
    pub ForkAfter for Doc {
        start -> a;
        parallel a => [b, c] -> h;
        h -> end;
        interrupt_after a;
    }
}

pub mod fragile {
    //! Node `b` fails once when armed for the thread.
    use super::*;

    pub fn b(_: &Doc, ctx: &Ctx<Doc>) -> Result<DocUpdate, String> {
        let update = visit(ctx);
        match take_armed(ctx) {
            Some(Failure::Panic) => panic!("b blew up"),
            Some(Failure::Error) => Err("b failed".to_owned()),
            None => Ok(update),
        }
    }

    graph! {
        pub Fragile for Doc { start -> a; a -> b; b -> c; c -> end; }
    }

    graph! {
        pub FragileStop for Doc { start -> a; a -> b; b -> c; c -> end; interrupt_before b; }
    }
}

/// Version 1 of a graph `Flow` over a state `Form`.
pub mod v1 {
    use super::*;

    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    pub struct Form {
        #[reducer(append)]
        pub trail: Vec<String>,
    }

    pub fn fill(_: &Form) -> FormUpdate {
        Form::update().trail(vec!["fill".into()])
    }
    pub fn send(_: &Form) -> FormUpdate {
        Form::update().trail(vec!["send".into()])
    }

    graph! {
        pub Flow for Form { start -> fill; fill -> send; send -> end; interrupt_before send; }
    }
}

/// The same graph, over a state struct of the same name with one more field.
pub mod v2 {
    use super::*;

    #[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
    pub struct Form {
        #[reducer(append)]
        pub trail: Vec<String>,
        pub extra: u32,
    }

    pub fn fill(_: &Form) -> FormUpdate {
        Form::update().trail(vec!["fill".into()])
    }
    pub fn send(_: &Form) -> FormUpdate {
        Form::update().trail(vec!["send".into()])
    }

    graph! {
        pub Flow for Form { start -> fill; fill -> send; send -> end; interrupt_before send; }
    }
}

/// The same state as v1, and a graph of the same name with one more node.
pub mod v3 {
    use super::v1::{fill, send, Form, FormUpdate};
    use tea::prelude::*;

    pub fn check(_: &Form) -> FormUpdate {
        Form::update().trail(vec!["check".into()])
    }

    graph! {
        pub Flow for Form { start -> fill; fill -> check; check -> send; send -> end; interrupt_before send; }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

#[track_caller]
pub fn paused<S: GraphState + Debug>(outcome: Result<Outcome<S>, Error>) -> (S, Resume<S>) {
    match outcome {
        Ok(Outcome::Interrupted { state, resume }) => (state, resume),
        other => panic!("expected a pause, got {other:?}"),
    }
}

#[track_caller]
pub fn done<S: GraphState + Debug>(outcome: Result<Outcome<S>, Error>) -> S {
    match outcome {
        Ok(Outcome::Done(state)) => state,
        other => panic!("expected the run to finish, got {other:?}"),
    }
}

pub fn ids<S: GraphState>(resume: &Resume<S>) -> Vec<String> {
    resume.interrupts().iter().map(|i| i.id().to_owned()).collect()
}

pub fn names(nodes: &[NodeName]) -> Vec<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

fn trail(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// A fresh thread id for a scenario.
pub fn thread(label: &str) -> ThreadId {
    ThreadId::from(format!("{label}-{}", ThreadId::random()))
}

/// What a streamed run yielded, in a comparable form: `node@branch`, `interrupted`, `done`.
pub fn describe(event: &Result<Event<Doc>, Error>) -> String {
    match event {
        Ok(Event::Step { node, branch: None, .. }) => node.to_string(),
        Ok(Event::Step { node, branch: Some(branch), .. }) => format!("{node}@{branch}"),
        Ok(Event::Interrupted { resume, .. }) => format!("interrupted {}", ids(resume).join(",")),
        Ok(Event::Done(state)) => format!("done {}", state.trail.join(",")),
        Ok(other) => format!("{other:?}"),
        Err(error) => format!("error {error:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// `interrupt_before b`: the run stops before `b` runs; resuming runs it.
pub fn stop_before<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let t = thread("before");
    let (state, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(state.trail, ["a"]);
    assert_eq!(*resume.thread(), t);
    assert_eq!(*resume.node(), "b");
    assert_eq!(ids(&resume), ["before:b"]);
    assert_eq!(resume.interrupts()[0].node(), &"b");
    assert_eq!(runs(&t, "b"), 0, "b must not run before the resume");
    let out = done(app.resume(resume));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!(out.total, 3);
    for node in ["a", "b", "c"] {
        assert_eq!(runs(&t, node), 1, "{node}");
    }
}

/// `interrupt_after b`: the run stops after `b` ran and its update was applied.
pub fn stop_after<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopAfter::builder().checkpointer(make()).build();
    let t = thread("after");
    let (state, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(state.trail, ["a", "b"], "b's update is applied before the pause");
    assert_eq!(*resume.node(), "b");
    assert_eq!(ids(&resume), ["after:b"]);
    assert_eq!(runs(&t, "b"), 1);
    assert_eq!(runs(&t, "c"), 0);
    let out = done(app.resume(resume));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!(runs(&t, "b"), 1, "resuming after b does not run b again");
    assert_eq!(runs(&t, "c"), 1);
}

/// A resume update goes through the reducers before the run continues; without one the state
/// is as it paused.
pub fn resume_with_and_without_update<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();

    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(thread("plain"))));
    let out = done(app.resume(resume));
    assert_eq!(out, Doc { trail: trail(&["a", "b", "c"]), total: 3, approved: false, note: String::new() });

    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(thread("updated"))));
    let update = Doc::update().trail(vec!["human".into()]).total(10).note("from the reviewer".into());
    let out = done(app.resume(resume.update(update)));
    assert_eq!(out.trail, ["a", "human", "b", "c"], "append reducer, applied before b runs");
    assert_eq!(out.total, 13, "sum reducer");
    assert_eq!(out.note, "from the reviewer");
}

/// Two breakpoints need two resumes, whether on two nodes or before and after one node.
pub fn two_breakpoints_need_two_resumes<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let app = TwoStops::builder().checkpointer(store.clone()).build();
    let t = thread("two");
    let (state, first) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!((state.trail.clone(), ids(&first)), (trail(&["a"]), trail(&["before:b"])));
    let (state, second) = paused(app.resume(first.clone()));
    assert_eq!((state.trail.clone(), ids(&second)), (trail(&["a", "b", "c"]), trail(&["before:d"])));
    assert!(matches!(app.resume(first), Err(Error::StaleResume { .. })), "the first token is used up");
    let out = done(app.resume(second));
    assert_eq!(out.trail, ["a", "b", "c", "d"]);

    let app = BothSides::builder().checkpointer(store).build();
    let t = thread("both");
    let (state, first) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!((state.trail.clone(), ids(&first)), (trail(&["a"]), trail(&["before:b"])));
    let (state, second) = paused(app.resume(first));
    assert_eq!((state.trail.clone(), ids(&second)), (trail(&["a", "b"]), trail(&["after:b"])));
    let out = done(app.resume(second));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!(runs(&t, "b"), 1);
}

/// The Edge Agent scenario: nodes A–L, breakpoints on B, E (in a branch), G (the join) and K,
/// resumed (through token strings) until done.
pub fn edge_agent<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = EdgeAgent::builder().checkpointer(make()).build();
    let t = thread("edge-agent");
    let mut outcome = app.run(Call::start(Doc::default()).on(t.clone())).unwrap();
    let mut stops = Vec::new();
    let final_state = loop {
        match outcome {
            Outcome::Done(state) => break state,
            Outcome::Interrupted { state, resume } => {
                let snapshot = app.state(&t).unwrap().expect("a paused thread has a checkpoint");
                stops.push((ids(&resume), state.trail.clone(), names(&snapshot.next)));
                assert_eq!(snapshot.interrupts, resume.interrupts());
                let token: Resume<Doc> = resume.to_string().parse().unwrap();
                // Approve at G, so that H takes the guarded edge to I.
                let token = if resume.node() == "g" { token.update(Doc::update().approved(true)) } else { token };
                outcome = app.resume(token).unwrap();
            }
        }
    };
    let expected = vec![
        (trail(&["before:b"]), trail(&["a"]), trail(&["b"])),
        // The fan-out paused as a whole: the main state does not have the branches' writes yet;
        // branch c reached the join, branch e continues with f.
        (trail(&["after:e@e"]), trail(&["a", "b"]), trail(&["f"])),
        (trail(&["before:g"]), trail(&["a", "b", "c", "d", "e", "f"]), trail(&["g"])),
        (trail(&["after:k"]), trail(&["a", "b", "c", "d", "e", "f", "g", "h", "i", "k"]), trail(&["l"])),
    ];
    assert_eq!(stops, expected);
    assert_eq!(final_state.trail, ["a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l"]);
    assert_eq!(final_state.total, 11);
    for node in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "k", "l"] {
        assert_eq!(runs(&t, node), 1, "node {node} ran {} times", runs(&t, node));
    }
    assert_eq!(runs(&t, "j"), 0);
    let snapshot = app.state(&t).unwrap().unwrap();
    assert!(snapshot.next.is_empty() && snapshot.interrupts.is_empty());
    assert_eq!(snapshot.state, final_state);
}

/// A token whose thread has moved on is `StaleResume`, and leaves the thread alone.
pub fn stale_token<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let t = thread("stale");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let text = resume.to_string();
    let out = done(app.resume(resume.clone()));
    let head = app.state(&t).unwrap().unwrap().checkpoint;
    for attempt in [resume.clone(), text.parse().unwrap(), resume.update(Doc::update().note("late".into()))] {
        match app.resume(attempt) {
            Err(Error::StaleResume { thread }) => assert_eq!(thread, t),
            other => panic!("expected StaleResume, got {other:?}"),
        }
    }
    let snapshot = app.state(&t).unwrap().unwrap();
    assert_eq!(snapshot.checkpoint, head, "a stale resume writes nothing");
    assert_eq!(snapshot.state, out);
    assert_eq!(runs(&t, "b"), 1);
}

/// A thread deleted and started again under the same id pauses at the same checkpoint id as
/// before: a token of the first pause never resumes the second, even from the app that wrote the
/// first (which, on a store that resumes without a read, remembers its bytes), and writes
/// nothing; the new token resumes from that app all the same.
pub fn remembered_pause_of_a_restarted_thread<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let first = StopBefore::builder().checkpointer(store.clone()).build();
    let other = StopBefore::builder().checkpointer(store).build();
    let t = thread("restarted");
    let (_, old) = paused(first.run(Call::start(Doc::default()).on(t.clone())));
    let id = first.state(&t).unwrap().unwrap().checkpoint;
    assert!(other.delete(&t).unwrap());
    let (_, new) = paused(other.run(Call::start(Doc { note: "second".into(), ..Doc::default() }).on(t.clone())));
    let head = other.state(&t).unwrap().unwrap().checkpoint;
    assert_eq!(head, id, "the thread started again paused at the same checkpoint id");
    match first.resume(old) {
        Err(Error::StaleResume { thread }) => assert_eq!(thread, t),
        other => panic!("expected StaleResume, got {other:?}"),
    }
    let snapshot = other.state(&t).unwrap().unwrap();
    assert_eq!(snapshot.checkpoint, head, "a stale resume writes nothing");
    assert_eq!(snapshot.state.note, "second");
    assert_eq!(runs(&t, "b"), 0);
    let out = done(first.resume(new));
    assert_eq!((out.trail, out.note), (vec!["a".to_owned(), "b".to_owned(), "c".to_owned()], "second".to_owned()));
    assert_eq!(runs(&t, "b"), 1);
}

/// A pause this app wrote, resumed with the token of a later pause that another app (a
/// replica) wrote after resuming the first: the later one goes on.
pub fn remembered_pause_moved_on_elsewhere<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let first = TwoStops::builder().checkpointer(store.clone()).build();
    let other = TwoStops::builder().checkpointer(store).build();
    let t = thread("moved");
    let (_, at_b) = paused(first.run(Call::start(Doc::default()).on(t.clone())));
    let (_, at_d) = paused(other.resume(at_b.clone()));
    match first.resume(at_b) {
        Err(Error::StaleResume { thread }) => assert_eq!(thread, t),
        other => panic!("expected StaleResume, got {other:?}"),
    }
    let out = done(first.resume(at_d));
    assert_eq!(out.trail, ["a", "b", "c", "d"]);
    assert_eq!((runs(&t, "b"), runs(&t, "d")), (1, 1));
}

/// 8 threads resume clones of one token at the same moment: exactly one proceeds.
pub fn eight_resumes_one_winner<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    for round in 0..3 {
        let t = thread(&format!("race{round}"));
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        let barrier = Barrier::new(8);
        let results: Vec<Result<Outcome<Doc>, Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let token = resume.clone();
                    let (app, barrier) = (&app, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        app.resume(token)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<&Doc> = results.iter().filter_map(|r| r.as_ref().ok()).map(|o| o.state()).collect();
        let stale = results.iter().filter(|r| matches!(r, Err(Error::StaleResume { .. }))).count();
        assert_eq!((winners.len(), stale), (1, 7), "round {round}: {results:?}");
        assert_eq!(winners[0].trail, ["a", "b", "c"]);
        assert_eq!(runs(&t, "b"), 1, "round {round}: b ran once");
        assert_eq!(runs(&t, "c"), 1);
        assert_eq!(app.state(&t).unwrap().unwrap().state.trail, ["a", "b", "c"]);
    }
}

/// A second app on the same store (another replica of the service) resumes a token the first
/// issued.
pub fn second_replica<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let first = StopBefore::builder().checkpointer(store.clone()).build();
    let second = StopBefore::builder().checkpointer(store).build();
    let t = thread("replica");
    let (_, resume) = paused(first.run(Call::start(Doc::default()).on(t.clone())));
    let text = resume.to_string();
    let seen = second.state(&t).unwrap().expect("the replica sees the paused thread");
    assert_eq!(names(&seen.next), ["b"]);
    let out = done(second.resume(text.parse().unwrap()));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!(first.state(&t).unwrap().unwrap().state, out);
    assert!(matches!(first.resume(resume), Err(Error::StaleResume { .. })));
}

/// Starting a thread that has checkpoints is `ThreadExists`, and changes nothing.
pub fn invoke_on_a_taken_thread<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let t = thread("taken");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let head = app.state(&t).unwrap().unwrap().checkpoint;
    match app.run(Call::start(Doc { note: "second".into(), ..Doc::default() }).on(t.clone())) {
        Err(Error::ThreadExists { thread }) => assert_eq!(thread, t),
        other => panic!("expected ThreadExists, got {other:?}"),
    }
    assert_eq!(app.state(&t).unwrap().unwrap().checkpoint, head);
    assert_eq!(runs(&t, "a"), 1, "the refused run did not run a node");
    done(app.resume(resume));
    assert!(matches!(app.run(Call::start(Doc::default()).on(t.clone())), Err(Error::ThreadExists { .. })));
    // A stream on a taken thread yields the error and ends.
    let events: Vec<String> = app.run_stream(Call::start(Doc::default()).on(t)).map(|e| describe(&e)).collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].starts_with("error ThreadExists"), "{events:?}");
}

/// A token of another graph is `GraphMismatch`; it still works in its own graph.
pub fn token_of_another_graph<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let before = StopBefore::builder().checkpointer(store.clone()).build();
    let after = StopAfter::builder().checkpointer(store).build();
    let thread = thread("mismatch");
    let (_, resume) = paused(before.run(Call::start(Doc::default()).on(thread.clone())));
    match after.resume(resume.to_string().parse().unwrap()) {
        Err(Error::GraphMismatch { expected, .. }) => assert_eq!(expected, "StopAfter"),
        other => panic!("expected GraphMismatch, got {other:?}"),
    }
    assert_eq!(done(before.resume(resume)).trail, ["a", "b", "c"]);
    // Thread ids are per graph: the same id in another graph is another thread.
    let (state, _) = paused(after.run(Call::start(Doc::default()).on(thread.clone())));
    assert_eq!(state.trail, ["a", "b"]);
}

/// `recover` continues a run that failed mid-run from its last checkpoint: with EveryStep the
/// nodes that completed do not run again.
pub fn recover_after_a_failure<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = fragile::Fragile::builder().checkpointer(make()).build();
    for how in [Failure::Error, Failure::Panic] {
        let t = thread("recover");
        arm(&t, "b", how);
        match (how, app.run(Call::start(Doc::default()).on(t.clone()))) {
            (Failure::Error, Err(Error::NodeFailed { node, source })) => {
                assert_eq!(node, "b");
                assert_eq!(source.to_string(), "b failed");
            }
            (Failure::Panic, Err(Error::NodePanicked { node, message })) => {
                assert_eq!(node, "b");
                assert_eq!(message, "b blew up");
            }
            (_, other) => panic!("{how:?}: expected b to fail, got {other:?}"),
        }
        let snapshot = app.state(&t).unwrap().unwrap();
        assert_eq!(snapshot.state.trail, ["a"]);
        assert_eq!(names(&snapshot.next), ["b"]);
        assert!(snapshot.interrupts.is_empty());
        let out = done(app.run(Call::recover(&t)));
        assert_eq!(out.trail, ["a", "b", "c"]);
        assert_eq!((runs(&t, "a"), runs(&t, "b"), runs(&t, "c")), (1, 2, 1), "{how:?}");
        // Recovering a finished thread returns its final state and runs nothing.
        assert_eq!(done(app.run(Call::recover(&t))), out);
        assert_eq!(runs(&t, "c"), 1);
    }
}

/// `recover` of a paused thread returns its pause, of a finished one its final state, of an
/// unknown one `CheckpointNotFound`.
pub fn recover_paused_done_and_unknown<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let t = thread("recover-paused");
    let (state, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let (again, fresh) = paused(app.run(Call::recover(&t)));
    assert_eq!(again, state);
    assert_eq!(ids(&fresh), ids(&resume));
    assert_eq!(*fresh.thread(), t);
    assert_eq!(runs(&t, "b"), 0, "recovering a paused thread does not run past the pause");
    let out = done(app.resume(fresh));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert!(matches!(app.resume(resume), Err(Error::StaleResume { .. })));
    assert_eq!(done(app.run(Call::recover(&t))), out);
    let nobody = thread("nobody");
    match app.run(Call::recover(&nobody)) {
        Err(Error::CheckpointNotFound { thread }) => assert_eq!(thread, nobody),
        other => panic!("expected CheckpointNotFound, got {other:?}"),
    }
    assert!(app.state(&nobody).unwrap().is_none());
    assert!(app.history(&nobody).unwrap().is_empty());
}

/// `Durability::OnPause` writes fewer checkpoints but still pauses and resumes; a failed run then
/// recovers from its last checkpoint, running its nodes again.
pub fn on_pause_durability<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let every = TwoStops::builder().checkpointer(store.clone()).build();
    let lazy = TwoStops::builder().checkpointer(store.clone()).durability(Durability::OnPause).build();
    let mut counts = Vec::new();
    for app in [&every, &lazy] {
        let t = thread("durability");
        let (_, first) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        let at_first = app.history(&t).unwrap().len();
        let (_, second) = paused(app.resume(first));
        let out = done(app.resume(second));
        assert_eq!(out.trail, ["a", "b", "c", "d"]);
        counts.push((at_first, app.history(&t).unwrap().len()));
    }
    // OnPause: a claim and the pause; a claim and the second pause; a claim and the end.
    assert_eq!(counts[1], (2, 6), "OnPause checkpoints: {counts:?}");
    // EveryStep: the same, but for `b`'s step, written as it completes. The steps of `a` and
    // `c` are written with the pauses that follow them, at breakpoints with no code between.
    assert_eq!(counts[0], (2, 7), "EveryStep writes more: {counts:?}");

    let app = fragile::Fragile::builder().checkpointer(store).durability(Durability::OnPause).build();
    let t = thread("durability-recover");
    arm(&t, "b", Failure::Error);
    assert!(matches!(app.run(Call::start(Doc::default()).on(t.clone())), Err(Error::NodeFailed { .. })));
    assert_eq!(app.history(&t).unwrap().len(), 2, "the claim, and the claim again without the failed run's lease");
    let out = done(app.run(Call::recover(&t)));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!(runs(&t, "a"), 2, "OnPause: a crashed run restarts from its last checkpoint");
}

/// After `interrupt_after b`, routing from b uses the state at resume time.
pub fn interrupt_after_routes_on_the_resumed_state<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = Routed::builder().checkpointer(make()).build();

    let t = thread("route-approved");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(names(&app.state(&t).unwrap().unwrap().next), ["d"], "as things stand b goes to d");
    let out = done(app.resume(resume.update(Doc::update().approved(true))));
    assert_eq!(out.trail, ["a", "b", "c"]);
    assert_eq!((runs(&t, "c"), runs(&t, "d")), (1, 0));

    let t = thread("route-plain");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "d"]);

    // Approved before the pause: the guard already holds.
    let t = thread("route-early");
    let (_, resume) = paused(app.run(Call::start(Doc { approved: true, ..Doc::default() }).on(t.clone())));
    assert_eq!(names(&app.state(&t).unwrap().unwrap().next), ["c"]);
    let out = done(app.resume(resume.update(Doc::update().approved(false))));
    assert_eq!(out.trail, ["a", "b", "d"], "the resume update wins over the state at the pause");
}

/// `interrupt_after` a router keeps the router's choice (made when it ran, unlike guards, which
/// route on the state at resume time); `interrupt_after` a fan-out's source resumes into the
/// fan-out.
pub fn interrupt_after_a_router_or_a_fan_out_source<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let app = Chooser::builder().checkpointer(store.clone()).build();
    let t = thread("router");
    let (state, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(state.trail, ["pick"]);
    assert_eq!(ids(&resume), ["after:pick"]);
    assert_eq!(names(&app.state(&t).unwrap().unwrap().next), ["b"]);
    let out = done(app.resume(resume.update(Doc::update().approved(true))));
    assert_eq!(out.trail, ["pick", "b"], "the router chose b before the pause");
    assert_eq!(runs(&t, "pick"), 1);

    let app = ForkAfter::builder().checkpointer(store).build();
    let t = thread("fork-after");
    let (state, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(state.trail, ["a"]);
    assert_eq!(ids(&resume), ["after:a"]);
    assert_eq!(names(&app.state(&t).unwrap().unwrap().next), ["b", "c"]);
    assert_eq!(runs(&t, "b"), 0);
    let out = done(app.resume(resume));
    assert_eq!(out.trail, ["a", "b", "c", "h"]);
    assert_eq!((runs(&t, "a"), runs(&t, "b"), runs(&t, "c")), (1, 1, 1));
}

/// A breakpoint inside a parallel branch: the siblings run once, the resume continues only the
/// stopped branch, and the merge keeps the declared order.
pub fn breakpoint_in_a_parallel_branch<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = Fan::builder().checkpointer(make()).build();
    let t = thread("fan");
    let (state, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    assert_eq!(ids(&resume), ["before:d@c"]);
    assert_eq!(*resume.node(), "d");
    assert_eq!(state.trail, ["a"], "the branches merge only at the join");
    for (node, count) in [("a", 1), ("b", 1), ("c", 1), ("e", 1), ("d", 0), ("h", 0)] {
        assert_eq!(runs(&t, node), count, "{node} before the resume");
    }
    let snapshot = app.state(&t).unwrap().unwrap();
    assert_eq!(names(&snapshot.next), ["d"]);
    assert_eq!(snapshot.interrupts, resume.interrupts());
    // Before the fan-out ran, the branch heads were next.
    let history = app.history(&t).unwrap();
    assert!(history.iter().any(|s| names(&s.next) == ["b", "c", "e"]), "{history:?}");

    let out = done(app.resume(resume.update(Doc::update().trail(vec!["human".into()]))));
    assert_eq!(out.trail, ["a", "human", "b", "c", "d", "e", "h"], "declared branch order");
    assert_eq!(out.total, 6);
    for (node, count) in [("a", 1), ("b", 1), ("c", 1), ("d", 1), ("e", 1), ("h", 1)] {
        assert_eq!(runs(&t, node), count, "{node} after the resume");
    }
}

/// `state()` and `history()`: the latest checkpoint with what runs next and the pending pauses,
/// and every checkpoint newest first.
pub fn state_and_history<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let t = thread("history");
    assert!(app.state(&t).unwrap().is_none());
    assert!(app.history(&t).unwrap().is_empty());

    let (_, resume) = paused(app.run(Call::start(Doc { note: "input".into(), ..Doc::default() }).on(t.clone())));
    let snapshot = app.state(&t).unwrap().unwrap();
    assert_eq!(snapshot.state.trail, ["a"]);
    assert_eq!(snapshot.state.note, "input");
    assert_eq!(names(&snapshot.next), ["b"]);
    assert_eq!(snapshot.interrupts.len(), 1);
    assert_eq!(snapshot.interrupts[0].id(), "before:b");
    assert_eq!(snapshot.interrupts[0].node(), &"b");
    assert_eq!(snapshot.step, 1);

    let history = app.history(&t).unwrap();
    assert_eq!(history[0].checkpoint, snapshot.checkpoint, "newest first");
    assert!(history.windows(2).all(|w| w[0].checkpoint > w[1].checkpoint), "ids descend");
    let oldest = history.last().unwrap();
    assert!(oldest.state.trail.is_empty(), "the first checkpoint is the input");
    assert_eq!(names(&oldest.next), ["a"]);
    assert!(history[1..].iter().all(|s| s.interrupts.is_empty()));

    let out = done(app.resume(resume));
    let snapshot = app.state(&t).unwrap().unwrap();
    assert_eq!(snapshot.state, out);
    assert!(snapshot.next.is_empty());
    assert!(snapshot.interrupts.is_empty());
    assert_eq!(snapshot.step, 3);
    let later = app.history(&t).unwrap();
    assert!(later.len() > history.len());
    assert_eq!(later[0].checkpoint, snapshot.checkpoint);
    // The pause is still in the history, unchanged.
    let pause = later.iter().find(|s| !s.interrupts.is_empty()).expect("the pause is kept");
    assert_eq!(pause.checkpoint, history[0].checkpoint);
    assert_eq!(pause.state.trail, ["a"]);
}

/// `threads`, `prune` and `delete` through the app: pruning keeps the head (a paused thread
/// still resumes), a deleted thread is gone and can be started again. The store may hold other
/// threads of the graph (a shared database), so listings are checked for what they contain.
pub fn threads_delete_prune<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let (paused_thread, finished) = (thread("listed-paused"), thread("listed-done"));
    let listed = |t: &ThreadId| app.threads().unwrap().contains(t);
    assert!(!listed(&paused_thread));

    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(paused_thread.clone())));
    let (_, first) = paused(app.run(Call::start(Doc::default()).on(finished.clone())));
    let out = done(app.resume(first));
    let threads = app.threads().unwrap();
    assert!(threads.contains(&paused_thread) && threads.contains(&finished), "{threads:?}");
    assert!(threads.windows(2).all(|w| w[0] < w[1]), "sorted by id: {threads:?}");

    // Pruning a finished thread keeps its final state.
    let kept = app.history(&finished).unwrap();
    assert!(kept.len() >= 3, "{} checkpoints", kept.len());
    assert_eq!(app.prune(&finished, 2).unwrap(), kept.len() - 2);
    let left = app.history(&finished).unwrap();
    assert_eq!(left.iter().map(|s| s.checkpoint).collect::<Vec<_>>(), [kept[0].checkpoint, kept[1].checkpoint]);
    assert_eq!(app.state(&finished).unwrap().unwrap().state, out);
    assert_eq!(app.prune(&finished, 2).unwrap(), 0);

    // Pruning a paused thread down to nothing keeps the pause: its token still works.
    let before = app.history(&paused_thread).unwrap().len();
    assert_eq!(app.prune(&paused_thread, 0).unwrap(), before - 1);
    let left = app.history(&paused_thread).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(names(&left[0].next), ["b"]);
    assert!(matches!(app.run(Call::recover(&paused_thread)), Ok(Outcome::Interrupted { .. })));
    assert_eq!(done(app.resume(resume.clone())).trail, ["a", "b", "c"]);

    // Deleting: the thread is gone, its token finds nothing, its id is free again.
    assert!(app.delete(&paused_thread).unwrap());
    assert!(app.state(&paused_thread).unwrap().is_none());
    assert!(app.history(&paused_thread).unwrap().is_empty());
    assert!(!listed(&paused_thread));
    assert!(listed(&finished));
    assert!(!app.delete(&paused_thread).unwrap());
    assert!(matches!(app.resume(resume), Err(Error::CheckpointNotFound { .. })));
    assert!(matches!(app.run(Call::recover(&paused_thread)), Err(Error::CheckpointNotFound { .. })));
    let (state, resume) =
        paused(app.run(Call::start(Doc { note: "again".into(), ..Doc::default() }).on(paused_thread.clone())));
    assert_eq!(state.trail, ["a"]);
    assert_eq!(done(app.resume(resume)).note, "again");
    assert_eq!(app.history(&paused_thread).unwrap().len(), kept.len());

    assert!(app.delete(&finished).unwrap());
    assert!(app.delete(&paused_thread).unwrap());
    assert!(!listed(&finished) && !listed(&paused_thread));
}

/// `run_stream` of a start / of a resume: steps, then exactly one `Interrupted` whose token continues the
/// thread, on the main line and in a parallel branch.
pub fn stream_pause_and_resume<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("stream");
    let events: Vec<_> = app.run_stream(Call::start(Doc::default()).on(t.clone())).take(20).collect();
    assert_eq!(events.iter().map(describe).collect::<Vec<_>>(), ["a", "interrupted before:b"]);
    let Some(Ok(Event::Interrupted { state, resume })) = events.last() else { unreachable!() };
    assert_eq!(state.trail, ["a"]);
    let events: Vec<String> = app.run_stream(Call::resume(resume.clone())).take(20).map(|e| describe(&e)).collect();
    assert_eq!(events, ["b", "c", "done a,b,c"]);
    // The token is used up: the stream is its error alone.
    let events: Vec<String> = app.run_stream(Call::resume(resume.clone())).take(20).map(|e| describe(&e)).collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].starts_with("error StaleResume"), "{events:?}");

    let app = Fan::builder().checkpointer(store).build();
    let t = thread("stream-fan");
    let events: Vec<_> = app.run_stream(Call::start(Doc::default()).on(t.clone())).take(20).collect();
    assert_eq!(
        events.iter().map(describe).collect::<Vec<_>>(),
        ["a", "b@b", "c@c", "e@e", "interrupted before:d@c"],
        "one pause, after the branch steps"
    );
    let Some(Ok(Event::Interrupted { resume, .. })) = events.last() else { unreachable!() };
    let events: Vec<String> = app.run_stream(Call::resume(resume.clone())).take(20).map(|e| describe(&e)).collect();
    assert_eq!(events, ["d@c", "h", "done a,b,c,d,e,h"]);
    assert_eq!(runs(&t, "d"), 1);
}

/// A node that panics after a resume fails that resume; the pause is put back, so the same
/// token works again, and the failed resume's update is not kept.
pub fn panic_during_resume_then_retry<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = fragile::FragileStop::builder().checkpointer(make()).build();
    for how in [Failure::Panic, Failure::Error] {
        let t = thread("retry");
        let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
        arm(&t, "b", how);
        let attempt = resume.clone().update(Doc::update().note("lost".into()));
        match app.resume(attempt) {
            Err(Error::NodePanicked { node, .. } | Error::NodeFailed { node, .. }) => assert_eq!(node, "b"),
            other => panic!("{how:?}: expected b to fail, got {other:?}"),
        }
        let snapshot = app.state(&t).unwrap().unwrap();
        assert_eq!(snapshot.interrupts.len(), 1, "{how:?}: the thread is paused again");
        assert_eq!(snapshot.state.trail, ["a"]);
        assert_eq!(snapshot.state.note, "", "the failed resume's update is not kept");
        let out = done(app.resume(resume.clone()));
        assert_eq!(out.trail, ["a", "b", "c"]);
        assert_eq!((runs(&t, "a"), runs(&t, "b"), runs(&t, "c")), (1, 2, 1), "{how:?}");
        assert!(matches!(app.resume(resume), Err(Error::StaleResume { .. })));
    }
}

/// `Resume::answer` on a breakpoint is `BadResumeValue`, and the token still works after.
pub fn answer_to_a_breakpoint<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let app = StopBefore::builder().checkpointer(make()).build();
    let t = thread("answer");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let head = app.state(&t).unwrap().unwrap().checkpoint;
    for attempt in [resume.clone().answer("yes"), resume.clone().answer_to("before:b", 42)] {
        match app.resume(attempt) {
            Err(Error::BadResumeValue { node, reason, .. }) => {
                assert_eq!(node, "b");
                assert!(reason.contains("breakpoint"), "{reason}");
            }
            other => panic!("expected BadResumeValue, got {other:?}"),
        }
    }
    assert_eq!(app.state(&t).unwrap().unwrap().checkpoint, head, "nothing was written");
    assert_eq!(runs(&t, "b"), 0);
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c"]);
}

/// Signed tokens: refused under another key, unsigned or altered; accepted under their own key.
pub fn signed_tokens<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let signer = StopBefore::builder().checkpointer(store.clone()).sign_tokens(b"key one").build();
    let other = StopBefore::builder().checkpointer(store.clone()).sign_tokens("key two").build();
    let plain = StopBefore::builder().checkpointer(store).build();

    let t = thread("signed");
    let (_, resume) = paused(signer.run(Call::start(Doc::default()).on(t.clone())));
    let text = resume.to_string();
    assert!(matches!(other.resume(text.parse().unwrap()), Err(Error::InvalidToken { .. })));
    // Recovering the paused thread hands out the same signed token again.
    let (_, fresh) = paused(signer.run(Call::recover(&t)));
    assert_eq!(fresh.to_string(), text);

    let (_, unsigned) = paused(plain.run(Call::start(Doc::default()).on(thread("unsigned"))));
    match signer.resume(unsigned.clone()) {
        Err(Error::InvalidToken { reason }) => assert!(reason.contains("not signed"), "{reason}"),
        other => panic!("expected InvalidToken, got {other:?}"),
    }

    // Alter one character at a time (base64 of the record, then of the signature).
    for position in 0..text.len() {
        let new = if text.as_bytes()[position] == b'B' { "C" } else { "B" };
        let mut altered = text.clone();
        altered.replace_range(position..=position, new);
        let result = altered.parse::<Resume<Doc>>().and_then(|r| signer.resume(r));
        assert!(matches!(result, Err(Error::InvalidToken { .. })), "position {position}: {result:?}");
    }
    assert_eq!(runs(&t, "b"), 0);
    assert_eq!(done(signer.resume(text.parse().unwrap())).trail, ["a", "b", "c"]);
    assert_eq!(done(plain.resume(unsigned)).trail, ["a", "b", "c"]);
}

/// A changed state struct or graph under the same graph name is `SchemaMismatch`, from the token
/// and from the stored checkpoint.
pub fn schema_mismatch<C: Checkpointer + Clone>(make: impl Fn() -> C) {
    let store = make();
    let old = v1::Flow::builder().checkpointer(store.clone()).build();
    let new_state = v2::Flow::builder().checkpointer(store.clone()).build();
    let new_graph = v3::Flow::builder().checkpointer(store).build();
    let t = thread("schema");
    let (_, resume) = paused(old.run(Call::start(v1::Form::default()).on(t.clone())));
    let text = resume.to_string();

    let check = |result: Result<(), Error>, expected_what: &str| match result {
        Err(Error::SchemaMismatch { graph, thread, what }) => {
            assert_eq!(graph, "Flow");
            assert_eq!(thread, t);
            assert_eq!(what, expected_what);
        }
        other => panic!("expected SchemaMismatch ({expected_what}), got {other:?}"),
    };
    check(new_state.resume(text.parse().unwrap()).map(drop), "state struct");
    check(new_state.run(Call::recover(&t)).map(drop), "state struct");
    check(new_state.state(&t).map(drop), "state struct");
    check(new_state.history(&t).map(drop), "state struct");
    check(new_graph.resume(text.parse().unwrap()).map(drop), "graph");
    check(new_graph.run(Call::recover(&t)).map(drop), "graph");
    check(new_graph.state(&t).map(drop), "graph");
    // A new thread of the new shape works on the same store; the old thread is untouched.
    assert_eq!(done(new_state.resume(paused(new_state.invoke(v2::Form::default())).1)).trail, ["fill", "send"]);
    assert_eq!(done(old.resume(resume)).trail, ["fill", "send"]);
}

/// A store whose reads can be damaged: `head()` and the newest entry of `history()` come back
/// through `mutate`.
pub struct Corrupting<C> {
    pub inner: C,
    mutate: Mutex<Option<Vec<u8>>>,
}

impl<C> Corrupting<C> {
    pub fn new(inner: C) -> Self {
        Corrupting { inner, mutate: Mutex::new(None) }
    }

    /// Reads of the head return `bytes` instead (`None`: what is stored).
    pub fn replace_head(&self, bytes: Option<Vec<u8>>) {
        *self.mutate.lock().unwrap() = bytes;
    }
}

impl<C: Checkpointer> Checkpointer for Corrupting<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<u64>,
        id: u64,
        bytes: &[u8],
        durable: bool,
    ) -> Result<tea::AppendOutcome, Error> {
        self.inner.append(graph, thread, expected, id, bytes, durable)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(u64, Vec<u8>)>, Error> {
        let head = self.inner.head(graph, thread)?;
        Ok(match (head, &*self.mutate.lock().unwrap()) {
            (Some((id, _)), Some(bytes)) => Some((id, bytes.clone())),
            (head, _) => head,
        })
    }
    forward!(inner: get, threads, delete, prune);

    fn history(&self, graph: &str, thread: &ThreadId) -> Result<Vec<(u64, Vec<u8>)>, Error> {
        let mut history = self.inner.history(graph, thread)?;
        if let (Some(first), Some(bytes)) = (history.first_mut(), &*self.mutate.lock().unwrap()) {
            first.1 = bytes.clone();
        }
        Ok(history)
    }
}

/// Every single-bit flip of the first 64 bytes and of payload bytes, and every truncation, of a
/// stored paused checkpoint: `state`, `history`, `recover` and `resume` report
/// `CorruptCheckpoint`, never panic, and write nothing; the undamaged checkpoint still resumes.
pub fn damaged_checkpoints_are_corrupt<C: Checkpointer + Clone + 'static>(make: impl Fn() -> C) {
    let store = std::sync::Arc::new(Corrupting::new(make()));
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("corrupt");
    let (_, resume) = paused(app.run(Call::start(Doc { note: "x".repeat(100), ..Doc::default() }).on(t.clone())));
    let (head, bytes) = store.inner.head(StopBefore::NAME, &t).unwrap().unwrap();
    assert!(bytes.len() > 150, "{} bytes", bytes.len());

    let mut damaged: Vec<(String, Vec<u8>)> = Vec::new();
    let payload_bytes = (64..bytes.len()).step_by(13).chain([bytes.len() - 1]);
    for byte in (0..64).chain(payload_bytes) {
        for bit in 0..8 {
            let mut copy = bytes.clone();
            copy[byte] ^= 1 << bit;
            damaged.push((format!("bit {bit} of byte {byte}"), copy));
        }
    }
    for len in 0..bytes.len() {
        damaged.push((format!("truncated to {len} bytes"), bytes[..len].to_vec()));
    }
    let mut longer = bytes.clone();
    longer.push(b' ');
    damaged.push(("one byte more".into(), longer));

    let mut reasons = Vec::new();
    for (what, copy) in &damaged {
        store.replace_head(Some(copy.clone()));
        let results = [
            ("state", app.state(&t).map(drop)),
            ("history", app.history(&t).map(drop)),
            ("recover", app.run(Call::recover(&t)).map(drop)),
            ("resume", app.resume(resume.clone()).map(drop)),
        ];
        for (call, result) in results {
            match result {
                Err(Error::CorruptCheckpoint { thread, checkpoint, reason }) => {
                    assert_eq!(thread, t, "{what}: {call}");
                    assert_eq!(checkpoint, head, "{what}: {call}");
                    reasons.push(reason);
                }
                other => panic!("{what}: {call} gave {other:?}"),
            }
        }
    }
    // The errors say what is wrong.
    for expected in ["bad magic", "format version", "shorter than a checkpoint header", "header announces", "checksum"]
    {
        assert!(reasons.iter().any(|r| r.contains(expected)), "no error says {expected:?}");
    }
    store.replace_head(None);
    assert_eq!(store.inner.head(StopBefore::NAME, &t).unwrap().unwrap().0, head, "nothing was written");
    assert_eq!(runs(&t, "b"), 0);
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c"]);
}

/// A store whose appends start failing (as a full disk would) after a given number.
pub struct FailingAppends<C> {
    pub inner: C,
    /// Appends left before they fail; `usize::MAX`: never.
    left: std::sync::atomic::AtomicUsize,
}

impl<C> FailingAppends<C> {
    pub fn new(inner: C) -> Self {
        FailingAppends { inner, left: std::sync::atomic::AtomicUsize::new(usize::MAX) }
    }

    /// The next `n` appends succeed, then every append fails (`usize::MAX`: none fails).
    pub fn fail_after(&self, n: usize) {
        self.left.store(n, std::sync::atomic::Ordering::SeqCst);
    }
}

impl<C: Checkpointer> Checkpointer for FailingAppends<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<u64>,
        id: u64,
        bytes: &[u8],
        durable: bool,
    ) -> Result<tea::AppendOutcome, Error> {
        use std::sync::atomic::Ordering::SeqCst;
        let left = self.left.load(SeqCst);
        if left == 0 {
            return Err(Error::store("the disk is full"));
        }
        if left != usize::MAX {
            self.left.store(left - 1, SeqCst);
        }
        self.inner.append(graph, thread, expected, id, bytes, durable)
    }
    forward!(inner: head, get, history, threads, delete, prune);
}

/// A resume that dies after claiming the thread (the store fails, so the pause cannot be put
/// back, as if the process had died): the token is used up, the thread is busy until the dead
/// run's lease expires, and then `recover` continues past the breakpoint with the resume's
/// update, without pausing there again.
pub fn recover_after_a_crash_mid_resume<C: Checkpointer + Clone + 'static>(make: impl Fn() -> C) {
    let store = std::sync::Arc::new(FailingAppends::new(make()));
    let lease = std::time::Duration::from_millis(300);
    // The lease expires when the test advances the clock, not after a wait.
    let clock = tea::Clock::manual(std::time::SystemTime::now());
    let app = TwoStops::builder().checkpointer(store.clone()).lease(lease).clock(clock.clone()).build();
    let t = thread("crash");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    store.fail_after(1); // the claim
    match app.resume(resume.clone().update(Doc::update().note("kept".into()))) {
        Err(Error::Store { source }) => assert_eq!(source.to_string(), "the disk is full"),
        other => panic!("expected a store error, got {other:?}"),
    }
    store.fail_after(usize::MAX);
    assert_eq!(runs(&t, "b"), 1);
    let snapshot = app.state(&t).unwrap().unwrap();
    assert!(snapshot.interrupts.is_empty(), "the claim is the head: the thread is not paused");
    assert_eq!(names(&snapshot.next), ["b"]);
    assert!(matches!(app.resume(resume), Err(Error::StaleResume { .. })));
    match app.run(Call::recover(&t)) {
        Err(Error::ThreadBusy { expires_in, .. }) => assert!(expires_in <= lease),
        other => panic!("the dead run's lease still holds: expected ThreadBusy, got {other:?}"),
    }
    clock.advance(lease);

    let (state, second) = paused(app.run(Call::recover(&t)));
    assert_eq!(state.trail, ["a", "b", "c"], "b ran again (its checkpoint was lost), without pausing");
    assert_eq!(state.note, "kept", "the resume's update was in the claim");
    assert_eq!(ids(&second), ["before:d"], "the next breakpoint still stops the run");
    assert_eq!(runs(&t, "b"), 2);
    assert_eq!(done(app.resume(second)).trail, ["a", "b", "c", "d"]);
}

/// A store whose `head()` reads wait, while a gate is set, until that many readers have read.
pub struct GatedHeads<C> {
    pub inner: C,
    gate: Mutex<Option<std::sync::Arc<Barrier>>>,
}

impl<C: Checkpointer> Checkpointer for GatedHeads<C> {
    fn append(
        &self,
        graph: &str,
        thread: &ThreadId,
        expected: Option<u64>,
        id: u64,
        bytes: &[u8],
        durable: bool,
    ) -> Result<tea::AppendOutcome, Error> {
        self.inner.append(graph, thread, expected, id, bytes, durable)
    }

    fn head(&self, graph: &str, thread: &ThreadId) -> Result<Option<(u64, Vec<u8>)>, Error> {
        let head = self.inner.head(graph, thread)?;
        let gate = self.gate.lock().unwrap().clone();
        if let Some(gate) = gate {
            gate.wait();
        }
        Ok(head)
    }
    forward!(inner: get, history, threads, delete, prune);
}

/// Eight `recover`s of one failed thread that all read the same checkpoint: exactly one runs the
/// rest of the thread, the others are `ThreadBusy` before running a node.
pub fn concurrent_recovers_run_once<C: Checkpointer + Clone + 'static>(make: impl Fn() -> C) {
    let store = std::sync::Arc::new(GatedHeads { inner: make(), gate: Mutex::new(None) });
    let app = fragile::Fragile::builder().checkpointer(store.clone()).build();
    let t = thread("recover-race");
    arm(&t, "b", Failure::Error);
    assert!(matches!(app.run(Call::start(Doc::default()).on(t.clone())), Err(Error::NodeFailed { .. })));
    *store.gate.lock().unwrap() = Some(std::sync::Arc::new(Barrier::new(8)));
    let results: Vec<Result<Outcome<Doc>, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (app, t) = (&app, &t);
                scope.spawn(move || app.run(Call::recover(t)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    *store.gate.lock().unwrap() = None;
    let finished = results.iter().filter(|r| matches!(r, Ok(Outcome::Done(_)))).count();
    let busy = results.iter().filter(|r| matches!(r, Err(Error::ThreadBusy { .. }))).count();
    assert_eq!((finished, busy), (1, 7), "{results:?}");
    assert_eq!(runs(&t, "b"), 2, "one failed run and one recovered run of b");
    assert_eq!(runs(&t, "c"), 1);
    assert_eq!(app.state(&t).unwrap().unwrap().state.trail, ["a", "b", "c"]);
}

/// Declares one `#[test]` per scenario, each on stores from `$fixture` (a type with
/// `fn new(test: &str) -> Self` and `fn store(&self) -> impl Checkpointer + Clone`).
///
/// `store_tests!(optional $fixture)` is for a store that may be missing (a database server):
/// there `new` returns `Option<Self>`, and `None` skips the test (`new` prints why).
macro_rules! store_tests {
    (optional $fixture:ty) => {
        store_tests!(@all ::core::convert::identity, $fixture);
    };
    ($fixture:ty) => {
        store_tests!(@all Some, $fixture);
    };
    (@all $wrap:path, $fixture:ty) => {
        store_tests!(@each $wrap, $fixture;
            stop_before,
            stop_after,
            resume_with_and_without_update,
            two_breakpoints_need_two_resumes,
            edge_agent,
            stale_token,
            remembered_pause_of_a_restarted_thread,
            remembered_pause_moved_on_elsewhere,
            eight_resumes_one_winner,
            second_replica,
            invoke_on_a_taken_thread,
            token_of_another_graph,
            recover_after_a_failure,
            recover_paused_done_and_unknown,
            on_pause_durability,
            interrupt_after_routes_on_the_resumed_state,
            breakpoint_in_a_parallel_branch,
            state_and_history,
            stream_pause_and_resume,
            panic_during_resume_then_retry,
            answer_to_a_breakpoint,
            signed_tokens,
            schema_mismatch,
            damaged_checkpoints_are_corrupt,
            recover_after_a_crash_mid_resume,
            concurrent_recovers_run_once,
            interrupt_after_a_router_or_a_fan_out_source,
            threads_delete_prune,
        );
    };
    (@each $wrap:path, $fixture:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                let Some(fixture) = $wrap(<$fixture>::new(stringify!($name))) else { return };
                store_scenarios::$name(|| fixture.store());
            }
        )*
    };
}
