//! The machine on its own: a hand-written graph (`model::fixture`), no macro, no store, and a
//! driver of this file's own whose futures are all ready, which runs a fan-out's branches last
//! first (so that a merge in declared order is seen to be the machine's doing) and records the
//! store writes it is asked for.

use crate::format::checkpoint::{self, BranchAt, BranchProgress, Checkpoint, Position};
use crate::format::interrupt::Interrupt;
use crate::machine::driver::Driver;
use crate::machine::line::{Cursor, Next};
use crate::machine::run::{Progress, Run, Then};
use crate::machine::validate::{decode_for, identity, MAX_STEP};
use crate::model::fixture::{Shop, Stop, Tally, TallyUpdate};
use crate::model::node::{Ctx, Goto};
use crate::model::produce::{produce, Produced};
use crate::store::{AppendOutcome, Checkpointer};
use crate::tenure::Appends;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::options::Limits;
use std::future::Future;
use std::pin::pin;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// A driver that answers at once and records what it was asked.
#[derive(Default)]
struct Requests {
    /// The nodes it ran, in order.
    ran: Mutex<Vec<NodeName>>,
    /// The checkpoint writes it was asked for (none without a store).
    appends: Mutex<Vec<CheckpointId>>,
}

#[allow(clippy::manual_async_fn)] // as for the driver below
impl Appends for Requests {
    fn append<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        expected: Option<CheckpointId>,
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'a {
        async move {
            self.appends.lock().unwrap().push(id);
            store.append(graph, thread, expected, id, bytes, durable)
        }
    }

    fn append_over<'a>(
        &'a self,
        store: &'a dyn Checkpointer,
        graph: &'a str,
        thread: &'a ThreadId,
        (head, head_bytes): (CheckpointId, &'a [u8]),
        id: CheckpointId,
        bytes: &'a [u8],
        durable: bool,
    ) -> impl Future<Output = Result<AppendOutcome, Error>> + Send + 'a {
        async move {
            self.appends.lock().unwrap().push(id);
            store.append_over(graph, thread, head, head_bytes, id, bytes, durable)
        }
    }
}

#[allow(clippy::manual_async_fn)] // the trait's futures borrow for `'a` only, as the drivers'
impl Driver<Shop> for Requests {
    fn produce<'a>(
        &'a self,
        graph: &'a Shop,
        node: Stop,
        state: &'a Tally,
        ctx: &'a Ctx<Tally>,
        answers: Vec<serde_json::Value>,
    ) -> impl Future<Output = Result<Produced<Tally, Stop>, Error>> + Send + 'a {
        async move {
            self.ran.lock().unwrap().push(ctx.node().clone());
            produce(graph, node, state, ctx, answers)
        }
    }

    fn branches<'a, J, T, F, Fut>(
        &'a self,
        jobs: Vec<J>,
        run: F,
        _max: usize,
    ) -> impl Future<Output = Vec<T>> + Send + 'a
    where
        J: Send + 'static,
        T: Send + 'static,
        F: Fn(J) -> Fut + Send + Sync + 'a,
        Fut: Future<Output = T> + Send + 'a,
    {
        async move {
            // Last branch first; the results go back in the jobs' order, as the trait asks.
            let mut done = Vec::new();
            for job in jobs.into_iter().rev() {
                done.push(run(job).await);
            }
            done.reverse();
            done
        }
    }
}

/// The output of a future that must not wait: every future of [`Requests`] is ready.
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the machine waited, but every future of its driver is ready"),
    }
}

fn limits(recursion: usize) -> Limits {
    Limits { recursion, max_branches: 8 }
}

/// Steps a store-less run of `graph` to its end (or its error), counting the steps.
fn run_to_end(graph: &Shop, limit: usize) -> (Result<Tally, Error>, Requests, usize) {
    let driver = Requests::default();
    let mut run = Run::new(graph, Tally::default(), limits(limit), None, false);
    let mut steps = 0;
    loop {
        steps += 1;
        match ready(run.step(&driver)) {
            Ok(Progress::Stepped | Progress::Forked) => {}
            Ok(Progress::Done) => return (Ok(run.state), driver, steps),
            Ok(Progress::Paused(_)) => panic!("a run without a store paused"),
            Err(error) => return (Err(error), driver, steps),
        }
    }
}

#[test]
fn routes_by_guards_and_merges_branches_in_declared_order() {
    let graph = Shop { goal: 3, ..Shop::default() };
    let (state, driver, steps) = run_to_end(&graph, 100);
    let state = state.unwrap();
    assert_eq!(state.n, 3);
    // `right` ran before `left`; the merge is in declared order all the same, and the join sees
    // both branches' states.
    assert_eq!(state.log, ["count", "count", "count", "split", "left", "right", "join of 2"]);
    let ran: Vec<String> = driver.ran.lock().unwrap().iter().map(ToString::to_string).collect();
    assert_eq!(ran, ["count", "count", "count", "split", "right", "left", "join"]);
    assert!(driver.appends.lock().unwrap().is_empty(), "a run without a store writes nothing");
    // Five node steps on the main line, one fan-out, and the step that finds the end.
    assert_eq!(steps, 7);
}

#[test]
fn two_branches_replacing_one_field_conflict() {
    let graph = Shop { goal: 1, conflict: true, ..Shop::default() };
    match run_to_end(&graph, 100).0 {
        Err(Error::ConflictingWrites { field, branches }) => {
            assert_eq!(field, "owner");
            assert_eq!(branches, ["left", "right"]);
        }
        other => panic!("expected ConflictingWrites, got {other:?}"),
    }
}

#[test]
fn the_recursion_limit_counts_node_runs() {
    let graph = Shop { goal: 50, ..Shop::default() };
    let (result, driver, _) = run_to_end(&graph, 10);
    assert!(matches!(result, Err(Error::RecursionLimit { limit: 10 })), "{result:?}");
    assert_eq!(driver.ran.lock().unwrap().len(), 10);
}

#[test]
fn a_breakpoint_does_not_stop_a_run_without_a_store() {
    let graph = Shop { goal: 1, before: Some(Stop::Join), ..Shop::default() };
    assert_eq!(run_to_end(&graph, 100).0.unwrap().log.last().map(String::as_str), Some("join of 2"));
}

#[test]
fn a_pause_is_booked_without_counting_and_its_answer_is_given_on_the_next_run() {
    let graph = Shop { goal: 1, asking: true, ..Shop::default() };
    let mut run = Run::new(&graph, Tally { n: 5, ..Tally::default() }, limits(100), None, false);
    run.line.cursor = Cursor::At(Stop::Ask);
    let Ok(Next::Run(node)) = run.next() else { panic!("`ask` runs next") };
    assert_eq!((node, run.ctx.step, run.ctx.node().as_str()), (Stop::Ask, 1, "ask"));
    let produced = produce(&graph, node, &run.state, &run.ctx, Vec::new());
    let pending = match run.finish(node, produced) {
        Ok(Then::Pause(pending)) => pending,
        _ => panic!("`ask` pauses"),
    };
    let ids: Vec<&str> = pending.iter().map(Interrupt::id).collect();
    assert_eq!(ids, ["ask#0"]);
    assert_eq!(pending[0].value(), "who, after 5?");
    assert_eq!(run.ctx.step, 0, "the node runs again on resume: its paused run does not count");
    assert!(matches!(run.line.cursor, Cursor::At(Stop::Ask)));
    // Without a store the pause is refused, naming the graph and the node.
    let refused = ready(run.pause(&Requests::default(), pending));
    assert!(
        matches!(&refused, Err(Error::PausedWithoutCheckpointer { graph, node }) if graph == "Shop" && node == "ask"),
        "{:?}",
        refused.err()
    );
    // The answer, as a resume hands it over: the node runs again from its start and gets it.
    run.line.answers = vec![serde_json::json!("ada")];
    let Ok(Next::Run(node)) = run.next() else { panic!("`ask` runs again") };
    let produced = produce(&graph, node, &run.state, &run.ctx, std::mem::take(&mut run.line.answers));
    assert!(matches!(run.finish(node, produced), Ok(Then::Save)));
    assert_eq!(run.state.owner, "ada");
    assert!(matches!(run.line.cursor, Cursor::Done));
}

#[test]
fn a_refused_update_fails_the_node_that_wrote_it() {
    let graph = Shop::default();
    let mut run = Run::new(&graph, Tally::default(), limits(100), None, false);
    run.line.cursor = Cursor::At(Stop::Count);
    let Ok(Next::Run(node)) = run.next() else { panic!("`count` runs next") };
    let failed: Result<Produced<Tally, Stop>, Error> =
        Err(Error::NodeFailed { node: run.ctx.node().clone(), source: "no".into() });
    assert!(matches!(run.finish(node, failed), Err(Error::NodeFailed { node, .. }) if node == "count"));
    // A router's choice the graph does not declare is no route.
    let mut run = Run::new(&graph, Tally::default(), limits(100), None, false);
    run.line.cursor = Cursor::At(Stop::Count);
    let Ok(Next::Run(node)) = run.next() else { panic!("`count` runs next") };
    let chose = Ok(Produced::Ran { update: Some(TallyUpdate::default().n(1)), goto: Some(Goto::End), more: None });
    assert!(matches!(run.finish(node, chose), Err(Error::NoRoute { goto: Some(to), .. }) if to == "end"));
}

/// A checkpoint of `Shop` standing at `at`.
fn checkpoint_at(at: Position<Tally>) -> Checkpoint<Tally> {
    Checkpoint {
        step: 3,
        state: Tally::default(),
        at,
        pending: Vec::new(),
        pause: None,
        resumed: false,
        answers: Vec::new(),
        paused_at: None,
        nonce: None,
        joined: Vec::new(),
        parent: None,
        lease: None,
        written_at: None,
    }
}

/// What reading `ckpt` back as a checkpoint of `Shop` says: `Ok` or the corruption's reason.
fn read_back(ckpt: &Checkpoint<Tally>) -> Result<(), String> {
    let graph = Shop::default();
    let bytes = checkpoint::encode(&identity(&graph), ckpt).unwrap();
    match decode_for(&graph, &bytes, &ThreadId::from("t"), 4) {
        Ok(_) => Ok(()),
        Err(Error::CorruptCheckpoint { checkpoint: 4, reason, .. }) => Err(reason),
        Err(other) => panic!("expected a corrupt checkpoint, got {other:?}"),
    }
}

fn branch(head: &str, at: BranchAt) -> BranchProgress<Tally> {
    let mut branch = BranchProgress::fresh(NodeName::from(head.to_owned()));
    branch.steps = 1;
    branch.at = at;
    branch.resume = false;
    branch
}

#[test]
fn decoded_checkpoints_are_checked_against_the_graph() {
    let name = |n: &str| NodeName::from(n.to_owned());
    assert_eq!(read_back(&checkpoint_at(Position::Before(name("join")))), Ok(()));
    let fork = |branches| Position::Fork { source: name("split"), branches };
    let joined = vec![branch("left", BranchAt::Joined), branch("right", BranchAt::Before(name("right")))];
    assert_eq!(read_back(&checkpoint_at(fork(joined))), Ok(()));

    let nowhere = read_back(&checkpoint_at(Position::Before(name("nowhere")))).unwrap_err();
    assert!(nowhere.contains("node `nowhere`, which graph `Shop` does not have"), "{nowhere}");
    let mut far = checkpoint_at(Position::Start);
    far.step = MAX_STEP + 1;
    assert!(read_back(&far).unwrap_err().contains("impossible"));
    let no_fork = Position::Fork { source: name("count"), branches: Vec::new() };
    assert!(read_back(&checkpoint_at(no_fork)).unwrap_err().contains("which has none"));
    let one = read_back(&checkpoint_at(fork(vec![branch("left", BranchAt::Joined)]))).unwrap_err();
    assert!(one.contains("records 1 branches after node `split`, whose fan-out has 2"), "{one}");
    let swapped = vec![branch("right", BranchAt::Joined), branch("left", BranchAt::Joined)];
    assert!(read_back(&checkpoint_at(fork(swapped)))
        .unwrap_err()
        .contains("records branch `right` where the fan-out has `left`"));
    // A fan-out inside a branch is checked like one on the main line.
    let mut inside = branch("left", BranchAt::Fork { source: name("count") });
    inside.branches = vec![branch("count", BranchAt::Joined)];
    let nested = read_back(&checkpoint_at(fork(vec![inside, branch("right", BranchAt::Joined)]))).unwrap_err();
    assert!(nested.contains("fan-out after node `count`, which has none"), "{nested}");
    let mut stray = branch("left", BranchAt::Joined);
    stray.branches = vec![branch("left", BranchAt::Joined)];
    let stray = read_back(&checkpoint_at(fork(vec![stray, branch("right", BranchAt::Joined)]))).unwrap_err();
    assert!(stray.contains("nested fan-out's branches outside one"), "{stray}");
    let mut unbooked = checkpoint_at(Position::Before(name("ask")));
    unbooked.pending = vec![Interrupt::new("ask#0".into(), name("ask"), serde_json::Value::Null)];
    assert!(read_back(&unbooked).unwrap_err().contains("disagree"));
    let mut over = checkpoint_at(Position::Done);
    over.pending = unbooked.pending.clone();
    over.pause = Some(2);
    assert!(read_back(&over).unwrap_err().contains("finished run that still waits"));
}

#[test]
fn a_borrowed_checkpoint_encodes_to_the_same_bytes_as_an_owned_one() {
    let graph = Shop::default();
    let name = |n: &str| NodeName::from(n.to_owned());
    let bare = || checkpoint_at(Position::Before(name("count")));
    let full = || {
        let mut full = checkpoint_at(Position::Fork {
            source: name("split"),
            branches: vec![branch("left", BranchAt::Joined), branch("right", BranchAt::Before(name("right")))],
        });
        full.pending = vec![Interrupt::new("ask#0".into(), name("ask"), serde_json::json!({"q": "ok?"}))];
        full.pause = Some(7);
        full.resumed = true;
        full.answers = vec![serde_json::json!("yes"), serde_json::Value::Null];
        full.paused_at = Some(1_700_000_000);
        full.nonce = Some(42);
        full.joined = vec![checkpoint::BranchState { head: name("left"), state: Tally::default() }];
        full.parent = Some(checkpoint::ParentJump {
            parent: Some("Parent".into()),
            legacy_type: None,
            node_type: None,
            target: "next".into(),
            update: Some(serde_json::json!({"n": 1})),
            error: None,
        });
        full.lease = Some(checkpoint::Lease { owner: u64::MAX, until: 10 });
        full.step = 0;
        full.written_at = Some(1_700_000_000_123);
        full
    };
    for make in [&bare as &dyn Fn() -> Checkpoint<Tally>, &full] {
        let (owned, twin) = (make(), make());
        let borrowed = checkpoint::CheckpointRef {
            step: owned.step,
            state: &owned.state,
            at: checkpoint::AtRef::Position(twin.at),
            pending: twin.pending,
            pause: owned.pause,
            resumed: owned.resumed,
            answers: &owned.answers,
            paused_at: owned.paused_at,
            nonce: owned.nonce,
            joined: &owned.joined,
            parent: owned.parent.as_ref(),
            lease: owned.lease,
            written_at: owned.written_at,
        };
        let identity = identity(&graph);
        assert_eq!(
            checkpoint::encode_ref(&identity, &borrowed).unwrap(),
            checkpoint::encode(&identity, &owned).unwrap()
        );
    }
}
