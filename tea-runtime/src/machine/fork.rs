//! Fan-out and fan-in: `parallel a => [x, y, z] -> join;`.
//!
//! The branches run at the same time (the calling thread and rayon's workers share them out, see
//! `share`), each following its own edges until it reaches the join (a
//! nested fan-out inside a branch runs the same way). A branch reads the state at the fan-out
//! plus its own updates, never a sibling's: it keeps its updates, and makes its own copy of the
//! state only when something must read them (a second node, a guard, a nested fan-out, a pause,
//! a streamed event, a join that reads `ctx.branches()`), so a branch of one node copies
//! nothing. At the join, the kept updates are applied to the main state through the reducers in
//! declared branch order, so the result does not depend on which branch finished first. Two
//! branches replacing the same field is [`Error::ConflictingWrites`].
//!
//! A branch may stop at a breakpoint or ask a question. Its siblings still run to the join;
//! then the fan-out as a whole pauses, and its checkpoint keeps every branch's progress
//! (updates, position): on resume only the stopped branches continue. With a store, every
//! branch's progress is also written as it runs (`journal`: pending writes), so a crash, a
//! dropped future or a failed branch loses none of the nodes that completed.
//!
//! A branch (`run_branch`) is a [`Line`] of its own, stepped by `Line::next`/`Line::finish` as
//! the main line is; around them it does only what a branch does: record its progress in the
//! journal, record its events, run a fan-out nested in it, and stop at a pause with its state.
//! A fan-out one of whose branches fails (`ForkOutcome::Failed`) hands back what every branch
//! completed, which the run checkpoints (unless `Durability::OnPause`), so `recover` runs only
//! what is left.

use crate::format::checkpoint::{BranchAt, BranchProgress, BranchState, ParentJump};
use crate::format::interrupt::Interrupt;
use crate::machine::driver::Driver;
use crate::machine::journal::{Journal, Record};
use crate::machine::line::{Applied, Cursor, Line, LineState, Next, Settle};
use crate::machine::step::{apply_update, goto_of, node_named, target_of};
use crate::model::event::Event;
use crate::model::graph::{Fork, Graph};
use crate::model::node::{child_steps, ChildSteps, Ctx};
use crate::model::produce::Produced;
use crate::model::scope::Emitted;
use crate::tenure::Tenure;
use crate::vocab::error::Error;
use crate::vocab::name::{NodeName, ThreadId, START};
use crate::vocab::options::Limits;
use crate::vocab::policy::StreamModes;
use crate::vocab::state::{GraphState, StateUpdate};
use crate::vocab::trace::traced;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What the branches of a fan-out share.
pub(crate) struct Env {
    pub(crate) thread: Option<ThreadId>,
    /// The step of the node the fan-out follows.
    pub(crate) base_step: u64,
    /// How many node runs the branches may take, each.
    pub(crate) budget: u64,
    pub(crate) limit: usize,
    /// The most branches of one fan-out that run at once.
    pub(crate) max_branches: usize,
    pub(crate) record: bool,
    /// Whether breakpoints stop branches (only with a checkpointer).
    pub(crate) pausable: bool,
    /// What subgraph nodes in the branches run their child graphs on.
    pub(crate) tenure: Option<std::sync::Arc<Tenure>>,
    /// The run is a child graph's, run by a subgraph node of a parent graph with this node
    /// type: a branch's `Command::parent` to a node of that type ends the child's run.
    pub(crate) parent_node: Option<std::any::TypeId>,
    /// The parent's run (with a store), whose graph's declared name a parent jump records.
    pub(crate) parent: Option<std::sync::Arc<Tenure>>,
    /// What the run's nodes share besides the state (see `model::scope`): every branch's
    /// nodes get it too.
    pub(crate) shared: Option<std::sync::Arc<crate::model::scope::GraphAndCache>>,
    pub(crate) context: Option<crate::vocab::options::RunContext>,
    /// The run's long-term memory ([`Ctx::store`](crate::Ctx::store)): every branch's too.
    pub(crate) memory: Option<crate::store::Memory>,
    pub(crate) emitter: Option<std::sync::Arc<crate::model::scope::Emitter>>,
}

/// A branch's view of the state: the state at the fan-out, plus the branch's updates, applied
/// to a copy of its own only when something reads them.
struct Local<'b, S: GraphState> {
    base: &'b S,
    /// A send's input, applied before `updates` (with the branch's head as its origin). Boxed,
    /// as the rare fields of `Branch`: an update is hundreds of bytes, and a branch's view moves
    /// into its future.
    input: Option<Box<(NodeName, S::Update)>>,
    own: Option<Box<S>>,
    updates: Vec<S::Update>,
    /// The node that wrote each of `updates`: a reducer that panics on an update is reported on
    /// the node whose update it was.
    origins: Vec<NodeName>,
    /// How many of `updates` `own` has had applied.
    applied: usize,
}

impl<'b, S: GraphState> Local<'b, S> {
    fn new(base: &'b S) -> Self {
        Local { base, input: None, own: None, updates: Vec::new(), origins: Vec::new(), applied: 0 }
    }

    /// Keeps `node`'s update.
    fn push(&mut self, node: &NodeName, update: S::Update) {
        self.updates.push(update);
        self.origins.push(node.clone());
    }

    /// The state the branch sees: the fan-out's, or its own copy with every update applied
    /// (made, and brought up to date, here). A panicking reducer is reported on the node whose
    /// update it was.
    fn current<G: Graph<State = S>>(&mut self, graph: &G) -> Result<&S, Error> {
        if self.own.is_none() && self.updates.is_empty() && self.input.is_none() {
            return Ok(self.base);
        }
        if self.own.is_none() {
            let mut own = Box::new(self.base.clone());
            if let Some(input) = &self.input {
                let (head, input) = &**input;
                apply_update(graph, &mut own, input.clone(), head)?;
            }
            self.own = Some(own);
            self.applied = 0;
        }
        let Some(own) = self.own.as_mut() else { return Ok(self.base) };
        for (i, update) in self.updates.iter().enumerate().skip(self.applied) {
            apply_update(graph, own, update.clone(), origin(&self.origins, i))?;
        }
        self.applied = self.updates.len();
        Ok(&**own)
    }

    /// The branch's own state (built now if `with_state` and it was not), its updates and
    /// their origins.
    #[allow(clippy::type_complexity)]
    fn finish<G: Graph<State = S>>(
        mut self,
        graph: &G,
        with_state: bool,
    ) -> Result<(Option<Box<S>>, Vec<S::Update>, Vec<NodeName>), Error> {
        let state = if with_state {
            self.current(graph)?;
            Some(match self.own.take() {
                Some(own) => own,
                None => Box::new(self.base.clone()),
            })
        } else {
            None
        };
        Ok((state, self.updates, self.origins))
    }
}

/// A branch keeps its updates, and reads them applied to a copy of its own.
impl<G: Graph> LineState<G> for Local<'_, G::State> {
    fn apply(&mut self, _graph: &G, update: <G::State as GraphState>::Update, node: &NodeName) -> Result<(), Error> {
        self.push(node, update);
        Ok(())
    }

    fn read(&mut self, graph: &G) -> Result<&G::State, Error> {
        self.current(graph)
    }
}

/// The node that wrote update `i` (checkpoints of older versions do not record it: the branch
/// head then stands for its nodes).
fn origin(origins: &[NodeName], i: usize) -> &NodeName {
    static UNKNOWN: NodeName = START;
    origins.get(i).or(origins.last()).unwrap_or(&UNKNOWN)
}

/// One branch, at its join or stopped.
///
/// Its rare parts are boxed (its own state, a send's input, a pause, a parent jump): a branch's
/// result moves several times on its way to the join (out of its future, through the fan-out's
/// result slots, into the join's list), and a state or an update is hundreds of bytes.
pub(crate) struct Branch<S: GraphState> {
    head: NodeName,
    /// The branch's own state, when it was built (it was needed, or the join reads it).
    state: Option<Box<S>>,
    updates: Vec<S::Update>,
    /// The node that wrote each update.
    origins: Vec<NodeName>,
    /// Node runs of the branch over the thread's life.
    pub(crate) steps: u64,
    /// Node runs of the branch in this invocation (the recursion limit counts these).
    pub(crate) taken: u64,
    pub(crate) events: Vec<Event<S>>,
    /// A send's input.
    input: Option<Box<S::Update>>,
    at: BranchAt,
    /// The answers to the earlier pauses of the node the branch stopped at.
    answers: Vec<serde_json::Value>,
    /// Boxed: a branch result moves a few times on its way to the join, and few stop.
    interrupt: Option<Box<Interrupt>>,
    /// The further pauses of a subgraph node's child, after `interrupt`.
    more: Vec<Interrupt>,
    /// The branch ended with `Command::parent` (in a child graph).
    jump: Option<Box<ParentJump>>,
}

impl<S: GraphState> Branch<S> {
    /// The branch as the join sees it (its state was built if the join reads it).
    pub(crate) fn into_state(self) -> Option<BranchState<S>> {
        Some(BranchState { head: self.head, state: *self.state? })
    }
}

/// How a fan-out ended.
pub(crate) enum ForkOutcome<S: GraphState> {
    /// Every branch reached the join; merge them. `steps`: the branches' node runs over the
    /// thread's life; `taken`: in this invocation.
    Joined { branches: Vec<Branch<S>>, steps: u64, taken: u64 },
    /// Some branches stopped at breakpoints or questions: pause with every branch's progress.
    Paused { branches: Vec<BranchProgress<S>>, interrupts: Vec<Interrupt>, events: Vec<Event<S>> },
    /// A branch failed (`error`, the first in declared order). With a store, `branches` is
    /// every branch's progress — the finished ones at the join, the others where they started —
    /// for a checkpoint from which `recover` runs only the branches that did not finish.
    Failed { error: Error, branches: Vec<BranchProgress<S>> },
}

/// A branch to run: from its head, or from the checkpointed progress at this index of the
/// fan-out's saved branches. Small, so that handing jobs out moves little (a fan-out by sends has
/// a saved branch per send).
#[derive(Clone, Copy)]
enum Job<N> {
    Fresh(N),
    Saved(usize),
}

/// Where a fan-out's branches record their progress: the journal and the path of the branch
/// the fan-out is inside (empty for a fan-out on the main line).
pub(crate) type Jot<'j, S> = Option<(&'j Journal<'j, S>, &'j [usize])>;

/// Runs every branch of `fork` from `base` (or, resuming, continues the stopped ones in
/// `saved`), concurrently; the results come back in declared order. Every branch runs to its
/// end; the first error in declared order wins. `keep_states`: build each branch's own state
/// for the join to read. With a `journal`, each branch records its progress there as it runs.
///
/// Boxed: a branch may hold a fan-out of its own, which runs through here again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_fork<'a, G: Graph, D: Driver<G>>(
    driver: &'a D,
    graph: &'a G,
    fork: Fork<'a, G::Node>,
    base: &'a G::State,
    env: &'a Env,
    saved: Vec<BranchProgress<G::State>>,
    keep_states: bool,
    journal: Jot<'a, G::State>,
) -> ForkFuture<'a, G::State> {
    Box::pin(fork_branches(driver, graph, fork, base, env, saved, keep_states, journal))
}

#[allow(clippy::too_many_arguments)]
async fn fork_branches<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    fork: Fork<'_, G::Node>,
    base: &G::State,
    env: &Env,
    saved: Vec<BranchProgress<G::State>>,
    keep_states: bool,
    journal: Jot<'_, G::State>,
) -> Result<ForkOutcome<G::State>, Error> {
    traced! {
        let fork_span = tracing::debug_span!(
            target: "tea",
            "fork",
            join = %graph.node_name(fork.join),
            branches = fork.heads.len(),
        );
    }
    // Each job with its index among the fan-out's branches.
    let jobs: Vec<(usize, Job<G::Node>)> = if saved.is_empty() {
        fork.heads.iter().map(|&head| Job::Fresh(head)).enumerate().collect()
    } else {
        (0..saved.len()).map(|i| (i, Job::Saved(i))).collect()
    };
    // Each saved branch is taken by the one job of its index (in place: a fan-out of many
    // sends copied every branch's progress into a lock of its own per run).
    let saved: Mutex<Vec<Option<BranchProgress<G::State>>>> = Mutex::new(saved.into_iter().map(Some).collect());
    let saved = &saved;
    // The branches' paths in the journal: the fan-out's own, then each branch's index.
    // One vector for them all (a fan-out of many branches made a vector per branch per run).
    let paths = match journal {
        Some((_, prefix)) => Paths::new(prefix, jobs.len()),
        None => Paths::new(&[], 0),
    };
    let paths = &paths;
    let run_job = |(index, job): (usize, Job<G::Node>)| {
        let jot = journal.and_then(|(journal, _)| paths.get(index).map(|path| (journal, path)));
        let branch = async move {
            match job {
                Job::Fresh(head) => {
                    let name = graph.node_name(head);
                    let start = (Cursor::At(head), false);
                    let local = Local::new(base);
                    let run = Resumed { steps: 0, answers: Vec::new(), nested: Vec::new(), input: None };
                    run_branch(driver, graph, name, fork.join, local, run, start, env, keep_states, jot).await
                }
                Job::Saved(index) => {
                    let progress =
                        saved.lock().unwrap_or_else(PoisonError::into_inner).get_mut(index).and_then(Option::take);
                    let Some(progress) = progress else {
                        // Unreachable: each index is one job, run once.
                        return Err(Error::NoRoute { node: graph.node_name(fork.join), goto: None });
                    };
                    continue_branch(driver, graph, fork.join, base, progress, env, keep_states, jot).await
                }
            }
        };
        // Whichever thread or task runs a branch, the fan-out's span is its parent.
        #[cfg(feature = "tracing")]
        let branch = tracing::Instrument::instrument(branch, fork_span.clone());
        branch
    };
    let results = driver.branches(jobs, run_job, env.max_branches).await;
    // The fan-out's own journal (not a nested fan-out's share of it) is written up to date
    // before anything follows: its writer behind the branches stops (`Journal::settle`).
    let settled = match journal {
        Some((journal, [])) => journal.settle(driver).await,
        _ => Ok(()),
    };
    if results.iter().any(Result::is_err) || settled.is_err() {
        let mut error = None;
        let mut progress = Vec::with_capacity(results.len());
        // Branches that finished and were left to the fan-out's end (`Journal::hold`) are
        // recorded now: a fan-out nested in a branch is written from the journal.
        let held = journal.filter(|(journal, _)| journal.held_any()).map(|(journal, _)| journal);
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(branch) => {
                    let branch = progress_of(branch);
                    if let (Some(journal), Some(path)) = (held, paths.get(i)) {
                        journal.restore(path, &branch);
                    }
                    progress.push(branch);
                }
                Err(failed) => {
                    error.get_or_insert(failed);
                    // What the failed branch completed, as it recorded it: `recover` runs only
                    // what is left of it.
                    if let Some(recorded) = journal.and_then(|(journal, _)| journal.progress(paths.get(i)?)) {
                        progress.push(recorded);
                    }
                }
            }
        }
        // A branch's failure first; else the journal's write that failed.
        let error = match (error, settled) {
            (Some(error), _) | (None, Err(error)) => error,
            (None, Ok(())) => Error::NoRoute { node: graph.node_name(fork.join), goto: None },
        };
        let complete = journal.is_some() && progress.len() == paths.len();
        let branches = if complete { progress } else { Vec::new() };
        return Ok(ForkOutcome::Failed { error, branches });
    }
    let branches: Vec<Branch<G::State>> = results.into_iter().collect::<Result<_, _>>()?;
    if let Some((journal, [])) = journal {
        if journal.held_young() && check_conflicts(&branches).is_err() {
            // Branches left to the fan-out's end because it was young (`Journal::hold`) that
            // may not merge: written now, as they would have been behind them, so that the
            // thread shows them finished and its join next when the merge fails.
            for (branch, path) in branches.iter().zip(paths.iter()) {
                journal.record(path, record_of(branch));
            }
            journal.flush(driver, journal.generation(), true).await?;
        }
    }
    if branches.iter().any(|b| b.interrupt.is_some()) {
        let interrupts =
            branches.iter().flat_map(|b| b.interrupt.as_deref().into_iter().chain(&b.more).cloned()).collect();
        let mut events = Vec::new();
        let mut progress = Vec::with_capacity(branches.len());
        for mut branch in branches {
            events.append(&mut branch.events);
            progress.push(progress_of(branch));
        }
        return Ok(ForkOutcome::Paused { branches: progress, interrupts, events });
    }
    let steps = branches.iter().fold(0u64, |sum, b| sum.saturating_add(b.steps));
    let taken = branches.iter().fold(0u64, |sum, b| sum.saturating_add(b.taken));
    Ok(ForkOutcome::Joined { branches, steps, taken })
}

/// The paths of a fan-out's branches in its journal, each the fan-out's own path followed by
/// the branch's index, one after another in one vector. Without a journal there are none
/// (`Paths::new(&[], 0)`).
struct Paths {
    flat: Vec<usize>,
    /// The length of each path: the fan-out's own, plus one (so never 0).
    each: usize,
}

impl Paths {
    fn new(prefix: &[usize], branches: usize) -> Self {
        let each = prefix.len() + 1;
        let mut flat = Vec::with_capacity(each * branches);
        for i in 0..branches {
            flat.extend_from_slice(prefix);
            flat.push(i);
        }
        Paths { flat, each }
    }

    /// How many paths there are.
    fn len(&self) -> usize {
        self.flat.len() / self.each
    }

    /// The path of branch `i`, if there is one (none without a journal).
    fn get(&self, i: usize) -> Option<&[usize]> {
        self.flat.chunks_exact(self.each).nth(i)
    }

    /// Every path in branch order.
    fn iter(&self) -> impl Iterator<Item = &[usize]> {
        self.flat.chunks_exact(self.each)
    }
}

/// What a finished branch records of itself.
fn record_of<S: GraphState>(branch: &Branch<S>) -> Record<'_, S> {
    Record {
        head: &branch.head,
        input: branch.input.as_deref(),
        updates: &branch.updates,
        origins: &branch.origins,
        steps: branch.steps,
        at: branch.at.clone(),
        answers: &branch.answers,
        pending: branch.interrupt.as_deref(),
        more_pending: &branch.more,
        jump: branch.jump.as_deref(),
    }
}

/// A branch's progress as a checkpoint keeps it (its own state, when it was built, kept in
/// memory only).
fn progress_of<S: GraphState>(branch: Branch<S>) -> BranchProgress<S> {
    BranchProgress {
        head: branch.head,
        state: branch.state,
        input: branch.input.map(|input| *input),
        updates: branch.updates,
        origins: branch.origins,
        steps: branch.steps,
        at: branch.at,
        answers: branch.answers,
        pending: branch.interrupt,
        more_pending: branch.more,
        resume: false,
        branches: Vec::new(),
        jump: branch.jump,
    }
}

/// The parent jump a fan-out's branches made (`Command::parent` in a child graph), taken out of
/// them: none, or one.
///
/// # Errors
/// [`Error::NodeFailed`] on the second branch when two branches of one fan-out route the
/// parent.
pub(crate) fn take_jump<S: GraphState>(branches: &mut [Branch<S>]) -> Result<Option<ParentJump>, Error> {
    let mut found: Option<(NodeName, ParentJump)> = None;
    for branch in branches.iter_mut() {
        let Some(jump) = branch.jump.take() else { continue };
        if let Some((first, _)) = &found {
            return Err(Error::NodeFailed {
                node: branch.head.clone(),
                source: format!(
                    "branches `{first}` and `{}` of one fan-out both route the parent graph with `Command::parent`; only one may",
                    branch.head
                )
                .into(),
            });
        }
        found = Some((branch.head.clone(), *jump));
    }
    Ok(found.map(|(_, jump)| jump))
}

/// The own state of a branch whose progress is `progress`, in a fan-out whose state is `base`:
/// `base` with the branch's input and updates applied.
///
/// # Errors
/// A reducer's panic on one of the updates, reported on the node that wrote it.
pub(crate) fn branch_state<G: Graph>(
    graph: &G,
    base: &G::State,
    progress: &BranchProgress<G::State>,
) -> Result<G::State, Error> {
    if let Some(state) = &progress.state {
        return Ok(G::State::clone(state));
    }
    let mut state = base.clone();
    if let Some(input) = &progress.input {
        apply_update(graph, &mut state, input.clone(), &progress.head)?;
    }
    for (i, update) in progress.updates.iter().enumerate() {
        apply_update(graph, &mut state, update.clone(), origin(&progress.origins, i))?;
    }
    Ok(state)
}

/// The future of a fan-out's run.
pub(crate) type ForkFuture<'a, S> = Pin<Box<dyn Future<Output = Result<ForkOutcome<S>, Error>> + Send + 'a>>;

/// What a branch brings from earlier runs of it.
struct Resumed<S: GraphState> {
    /// Its node runs so far.
    steps: u64,
    /// The answers to the earlier pauses of the node it continues at.
    answers: Vec<serde_json::Value>,
    /// At a fan-out inside it: that fan-out's branches' progress.
    nested: Vec<BranchProgress<S>>,
    /// A send's input, kept for the branch's progress.
    input: Option<Box<S::Update>>,
}

/// A branch's view of the state from its progress: its own state when at hand, else built from
/// the fan-out's with the send's input (a copy of it) and the updates, when first read.
fn local_of<'b, S: GraphState>(
    base: &'b S,
    head: &NodeName,
    state: Option<Box<S>>,
    input: Option<&S::Update>,
    updates: Vec<S::Update>,
    origins: Vec<NodeName>,
) -> Local<'b, S> {
    match state {
        Some(own) => Local { base, input: None, applied: updates.len(), own: Some(own), updates, origins },
        None => {
            let input = input.map(|i| Box::new((head.clone(), i.clone())));
            Local { base, input, own: None, updates, origins, applied: 0 }
        }
    }
}

/// The branch's work unwritten starts again now (its progress was just written), when its
/// fan-out groups finished branches.
fn restart(since: &mut Option<Instant>) {
    if since.is_some() {
        *since = Some(Instant::now());
    }
}

/// Continues a branch from its checkpointed progress: a branch at its join, or one whose pause
/// was not answered, stays as it is.
#[allow(clippy::too_many_arguments)]
async fn continue_branch<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    join: G::Node,
    base: &G::State,
    progress: BranchProgress<G::State>,
    env: &Env,
    keep_states: bool,
    journal: Jot<'_, G::State>,
) -> Result<Branch<G::State>, Error> {
    let BranchProgress {
        head,
        state,
        input,
        updates,
        origins,
        steps,
        at,
        answers,
        pending,
        more_pending,
        resume,
        branches: nested,
        jump,
    } = progress;
    if matches!(at, BranchAt::Joined) || !resume {
        let local = local_of(base, &head, state, input.as_ref(), updates, origins);
        // The join reads the branch's state, or the branch stays stopped: build it now.
        let with_state = keep_states || !resume;
        let (state, updates, origins) = local.finish(graph, with_state)?;
        let events = Vec::new();
        let (interrupt, more) = (pending, more_pending);
        return Ok(Branch {
            head,
            state,
            input: input.map(Box::new),
            updates,
            origins,
            steps,
            taken: 0,
            events,
            at,
            answers,
            interrupt,
            more,
            jump,
        });
    }
    let thread = env.thread.clone().unwrap_or_else(|| ThreadId::from(""));
    let start = match &at {
        BranchAt::Joined => unreachable!("handled above"),
        BranchAt::Start(name) => (Cursor::At(node_named(graph, name, &thread)?), false),
        BranchAt::Before(name) => (Cursor::At(node_named(graph, name, &thread)?), true),
        BranchAt::After { node, goto } => {
            (Cursor::After(node_named(graph, node, &thread)?, goto_of(graph, goto, &thread)?), false)
        }
        BranchAt::Fork { source } => (Cursor::Fork(node_named(graph, source, &thread)?), false),
    };
    let local = local_of(base, &head, state, input.as_ref(), updates, origins);
    let run = Resumed { steps, answers, nested, input: input.map(Box::new) };
    run_branch(driver, graph, head, join, local, run, start, env, keep_states, journal).await
}

/// Runs a branch from `start` (`resuming`: past the breakpoint before the node there) to its
/// join, or to where it stops. Its steps are the step machine every line shares ([`Line`]: where
/// the branch goes, breakpoints, the step count; a node's update, pause, parent jump, routing),
/// over the branch's own view of the state ([`Local`]); around them, what only a branch does:
/// its journal records, its events, a fan-out nested in it.
#[allow(clippy::too_many_arguments)]
async fn run_branch<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    head: NodeName,
    join: G::Node,
    mut local: Local<'_, G::State>,
    resumed: Resumed<G::State>,
    (start, resuming): (Cursor<G::Node>, bool),
    env: &Env,
    keep_states: bool,
    journal: Jot<'_, G::State>,
) -> Result<Branch<G::State>, Error> {
    let Resumed { mut steps, answers, nested: mut saved_nested, input: local_input } = resumed;
    let mut ctx = Ctx::new(head.clone(), env.thread.clone());
    ctx.limits = Limits { recursion: env.limit, max_branches: env.max_branches };
    ctx.branch = Some(head.clone());
    ctx.tenure = env.tenure.clone();
    ctx.shared = env.shared.clone();
    ctx.context = env.context.clone();
    ctx.memory = env.memory.clone();
    ctx.emitter = env.emitter.clone();
    if env.record {
        // A subgraph node in the branch streams its child's steps through here.
        ctx.child_steps = Some(std::sync::Arc::new(ChildSteps::<G::State>::default()));
    }
    // The branch's steps follow the fan-out's; the recursion limit counts this invocation's
    // node runs (its budget), not the branch's earlier ones.
    ctx.step = env.base_step;
    let mut line = Line::new(start, env.base_step, env.limit, env.pausable);
    line.budget = env.budget;
    line.resuming = resuming;
    line.answers = answers;
    line.join = Some(join);
    line.parent_node = env.parent_node;
    line.parent = env.parent.clone();
    let mut events = Vec::new();
    // Since when the branch works unwritten (with a journal): a finished branch tells the
    // journal how long, for its group commit (`Journal::hold`).
    let mut since = journal.filter(|(journal, _)| journal.groups()).map(|_| Instant::now());
    // Records where the branch stands in the journal, and writes it (with a store).
    macro_rules! jot {
        ($at:expr, $pending:expr, $more:expr) => {{
            if let Some((journal, path)) = journal {
                let record = Record {
                    head: &head,
                    input: local_input.as_deref(),
                    updates: &local.updates,
                    origins: &local.origins,
                    steps,
                    at: $at,
                    answers: &line.answers,
                    pending: $pending,
                    more_pending: $more,
                    jump: line.jump.as_ref(),
                };
                // A branch waits for its write before it goes on; one at its join, or stopped
                // at a pause, does not (nothing of it runs next), and one whose work fits in
                // the fan-out's group commit is left to the checkpoint that ends the fan-out.
                let finished = matches!(record.at, BranchAt::Joined) || record.pending.is_some();
                if !finished {
                    let generation = journal.record(path, record);
                    journal.flush(driver, generation, true).await?;
                    restart(&mut since);
                } else if !journal.hold(since.map(|since| since.elapsed()), D::READY && D::WRITES_BEHIND) {
                    let generation = journal.record(path, record);
                    journal.flush(driver, generation, false).await?;
                }
            }
        }};
    }
    // Stops the branch where its cursor stands, on `pending` (its first pause, then a subgraph
    // child's further ones), with its state built for the checkpoint.
    macro_rules! stop {
        ($pending:expr) => {{
            let mut pending = Vec::into_iter($pending);
            let Some(interrupt) = pending.next() else {
                // Unreachable: a pause has at least one.
                return Err(Error::NoRoute { node: ctx.node.clone(), goto: None });
            };
            let more: Vec<Interrupt> = pending.collect();
            let at = branch_at(graph, line.cursor);
            jot!(at.clone(), Some(&interrupt), &more);
            let interrupt = Some(Box::new(interrupt));
            let (state, updates, origins) = local.finish(graph, true)?;
            let taken = line.taken(&ctx);
            let (input, answers) = (local_input, line.answers);
            return Ok(Branch {
                head,
                state,
                input,
                updates,
                origins,
                steps,
                taken,
                events,
                at,
                answers,
                interrupt,
                more,
                jump: None,
            });
        }};
    }

    loop {
        let next = line.next(graph, &mut ctx, &mut local);
        if let (Some((left, goto)), Cursor::At(_)) = (line.left.take(), line.cursor) {
            // The node before the next one completed: that is written before the next runs (a
            // branch that goes on to its join, or to `end`, writes that instead, once).
            jot!(BranchAt::After { node: graph.node_name(left), goto: target_of(graph, goto) }, None, &[]);
        }
        let node = match next? {
            Next::Run(node) => node,
            // At its join, or at `end` (a branch that finishes the run early simply ends; its
            // updates still merge).
            Next::Settle(Settle::Done) => break,
            Next::Settle(Settle::Pause(pending)) => stop!(pending),
            Next::Settle(Settle::Fork(source)) => {
                let Some(inner) = graph.fork(source) else {
                    return Err(Error::NoRoute { node: graph.node_name(source), goto: None });
                };
                let saved = std::mem::take(&mut saved_nested);
                if saved.is_empty() {
                    if let Some((journal, path)) = journal {
                        // Where the nested fan-out's branches will record theirs.
                        let heads = inner.heads.iter().map(|&h| BranchProgress::fresh(graph.node_name(h))).collect();
                        let name = graph.node_name(source);
                        let branch = (&head, local_input.as_deref());
                        let generation =
                            journal.nested(path, branch, name, steps, &local.updates, &local.origins, heads);
                        // What the branch completed before it is written before the nested
                        // fan-out's branches run.
                        journal.flush(driver, generation, true).await?;
                        restart(&mut since);
                    }
                }
                // Boxed, so a branch's own future stays small (nested fan-outs allocate anyway).
                let taken = line.taken(&ctx);
                let nested =
                    nested_fork(driver, graph, inner, &mut local, &mut events, taken, &ctx, env, saved, journal);
                let nested: Pin<Box<dyn Future<Output = _> + Send + '_>> = Box::pin(nested);
                let (life, taken, states, jump) = nested.await?;
                if let Some((journal, _)) = journal {
                    // The nested branches' ends are written before the branch goes on (a
                    // branch at its join does not wait for its own write, and may leave it to
                    // a later one).
                    journal.flush(driver, journal.generation(), true).await?;
                    restart(&mut since);
                }
                steps += life;
                // Nested runs of earlier invocations count in the branch's steps, not in this
                // invocation's recursion limit.
                ctx.step = ctx.step.saturating_add(taken);
                if jump.is_some() {
                    // A branch of the nested fan-out routed the parent graph: so does this one.
                    line.jump = jump;
                    break;
                }
                // The nested join reads its branches like any join.
                ctx.branches = states;
                line.cursor = Cursor::At(inner.join);
                continue;
            }
        };
        let given = std::mem::take(&mut line.answers);
        traced! {
            let span = tracing::debug_span!(
                target: "tea",
                "node",
                node = %ctx.node,
                branch = %head,
                step = ctx.step,
                duration_us = tracing::field::Empty,
            );
            crate::vocab::trace::started(&span);
        }
        let started = if env.record || cfg!(feature = "tracing") { Some(Instant::now()) } else { None };
        let produced = if crate::machine::policy::runs_plain::<G, D>(graph, node, &ctx) {
            // A plain call, as on the main line: no future made and polled for the node.
            #[cfg(feature = "tracing")]
            let _node = span.enter();
            driver.produce_ready(graph, node, local.current(graph)?, &ctx, given)
        } else {
            let future = crate::machine::policy::run_node(driver, graph, node, local.current(graph)?, &ctx, given);
            #[cfg(feature = "tracing")]
            let future = tracing::Instrument::instrument(future, span.clone());
            future.await
        };
        let duration = started.map_or(Duration::ZERO, |started| started.elapsed());
        traced! {
            span.record("duration_us", crate::vocab::trace::micros(duration));
        }
        if env.record {
            // The child steps of a subgraph node come before the node's own, in the branch.
            if let Some(sink) = child_steps(&ctx) {
                let mut steps = sink.lock().unwrap_or_else(PoisonError::into_inner);
                events.extend(steps.drain(..).map(|event| match event {
                    Event::Step { node, branch, state, duration } => {
                        let branch = Some(branch.unwrap_or_else(|| head.clone()));
                        Event::Step { node, branch, state, duration }
                    }
                    other => other,
                }));
            }
        }
        // A copy of the node's update, for a stream that yields updates.
        let shown = match (&produced, env.record) {
            (Ok(Produced::Ran { update, .. }), true) => shown_update(&ctx, update.as_ref()),
            _ => None,
        };
        match line.finish(graph, &mut ctx, &mut local, node, produced)? {
            Applied::Stepped | Applied::Save => {}
            Applied::Pause(pending) => {
                if !env.pausable {
                    return Err(Error::NodeFailed {
                        node: ctx.node.clone(),
                        source: "a node paused inside a nested fan-out, where tea cannot pause".into(),
                    });
                }
                stop!(pending);
            }
            Applied::Sends(_) => {
                return Err(Error::NodeFailed {
                    node: ctx.node.clone(),
                    source: "a node that fans out by sends runs on the main line, not inside a parallel branch".into(),
                });
            }
        }
        steps += 1;
        if env.record {
            record_step(&mut events, &ctx, &head, shown, &mut local, graph, duration)?;
        }
    }
    jot!(BranchAt::Joined, None, &[]);
    let (state, updates, origins) = local.finish(graph, keep_states)?;
    let taken = line.taken(&ctx);
    let (at, interrupt, more) = (BranchAt::Joined, None, Vec::new());
    let (input, answers, jump) = (local_input, line.answers, line.jump.map(Box::new));
    Ok(Branch { head, state, input, updates, origins, steps, taken, events, at, answers, interrupt, more, jump })
}

/// Where a branch stopped at `cursor` stands, as its progress records it.
fn branch_at<G: Graph>(graph: &G, cursor: Cursor<G::Node>) -> BranchAt {
    match cursor {
        Cursor::At(node) => BranchAt::Before(graph.node_name(node)),
        Cursor::After(node, goto) => BranchAt::After { node: graph.node_name(node), goto: target_of(graph, goto) },
        Cursor::Fork(source) => BranchAt::Fork { source: graph.node_name(source) },
        Cursor::Start | Cursor::Done => BranchAt::Joined,
    }
}

/// A fan-out inside a branch: runs and merges it into the branch's state (its updates become
/// the branch's), returning the node runs it took and, when its join reads them, the branches'
/// own states. Nothing in it can pause (`graph!` refuses pauses there). `steps`: the node runs
/// the outer branch took so far in this invocation; `saved`: the nested fan-out's branches'
/// progress, when the outer branch continues there. Returns the node runs of its branches over
/// the thread's life, those of this invocation, and the branches' states the join reads.
#[allow(clippy::type_complexity)]
#[allow(clippy::too_many_arguments)]
async fn nested_fork<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    fork: Fork<'_, G::Node>,
    local: &mut Local<'_, G::State>,
    events: &mut Vec<Event<G::State>>,
    steps: u64,
    ctx: &Ctx<G::State>,
    env: &Env,
    saved: Vec<BranchProgress<G::State>>,
    journal: Jot<'_, G::State>,
) -> Result<(u64, u64, Vec<BranchState<G::State>>, Option<ParentJump>), Error> {
    let inner_env = Env {
        thread: env.thread.clone(),
        base_step: ctx.step,
        budget: env.budget.saturating_sub(steps),
        limit: env.limit,
        max_branches: env.max_branches,
        record: env.record,
        pausable: false,
        tenure: env.tenure.clone(),
        parent_node: env.parent_node,
        parent: env.parent.clone(),
        shared: env.shared.clone(),
        context: env.context.clone(),
        memory: env.memory.clone(),
        emitter: env.emitter.clone(),
    };
    let keep_states = graph.reads_branches(fork.join);
    let base = local.current(graph)?.clone();
    let outcome = run_fork(driver, graph, fork, &base, &inner_env, saved, keep_states, journal).await?;
    let (mut branches, life, taken) = match outcome {
        ForkOutcome::Joined { branches, steps, taken } => (branches, steps, taken),
        ForkOutcome::Failed { error, .. } => return Err(error),
        ForkOutcome::Paused { .. } => return Err(Error::NoRoute { node: ctx.node.clone(), goto: None }),
    };
    if steps.saturating_add(taken) > env.budget {
        return Err(Error::RecursionLimit { limit: env.limit });
    }
    let jump = take_jump(&mut branches)?;
    keep_join_updates(graph, &mut branches, fork.join);
    check_conflicts(&branches)?;
    for branch in &mut branches {
        events.append(&mut branch.events);
        local.updates.append(&mut branch.updates);
        local.origins.append(&mut branch.origins);
    }
    Ok((life, taken, branches.into_iter().filter_map(Branch::into_state).collect(), jump))
}

/// Applies every branch's updates to `state`, in declared branch order, after checking that no
/// two branches replace the same field. A reducer that panics here is reported on the node
/// whose update it was.
pub(crate) fn merge<G: Graph>(
    graph: &G,
    state: &mut G::State,
    branches: &mut [Branch<G::State>],
    join: G::Node,
) -> Result<(), Error> {
    keep_join_updates(graph, branches, join);
    check_conflicts(branches)?;
    for branch in branches.iter_mut() {
        let origins = std::mem::take(&mut branch.origins);
        for (i, update) in branch.updates.drain(..).enumerate() {
            apply_update(graph, state, update, origin(&origins, i))?;
        }
    }
    Ok(())
}

/// Keeps of each branch's updates what the graph lets reach the main state at `join`
/// ([`Graph::join_update`]).
///
/// In place: the kept updates and their origins stay in the branch's own vectors (a fan-out of
/// many small branches would otherwise allocate twice per branch here).
fn keep_join_updates<G: Graph>(graph: &G, branches: &mut [Branch<G::State>], join: G::Node) {
    for branch in branches.iter_mut() {
        let origins = &mut branch.origins;
        let mut index = 0;
        let mut kept = 0;
        // `collect` of `into_iter` reuses the vector's allocation (same element type).
        branch.updates = std::mem::take(&mut branch.updates)
            .into_iter()
            .filter_map(|update| {
                let update = graph.join_update(join, update);
                if update.is_some() && index < origins.len() {
                    // Order is kept: `kept <= index`.
                    origins.swap(kept, index);
                    kept += 1;
                }
                index += 1;
                update
            })
            .collect();
        origins.truncate(kept);
    }
}

/// Fails when two branches replace the same field. The first such field, in branch order and
/// then in the order the updates report their writes, is named.
fn check_conflicts<S: GraphState>(branches: &[Branch<S>]) -> Result<(), Error> {
    // (field, index of the first branch that replaced it, of a second one if any)
    let mut seen: Vec<(&str, usize, Option<usize>)> = Vec::new();
    for (index, branch) in branches.iter().enumerate() {
        for update in &branch.updates {
            update.replaced(&mut |field| match seen.iter_mut().find(|(name, _, _)| *name == field) {
                None => seen.push((field, index, None)),
                Some((_, first, second)) => {
                    if *first != index && second.is_none() {
                        *second = Some(index);
                    }
                }
            });
        }
    }
    let Some(&(field, _, _)) = seen.iter().find(|(_, _, second)| second.is_some()) else { return Ok(()) };
    let writers: Vec<NodeName> =
        branches.iter().filter(|b| b.updates.iter().any(|u| replaces(u, field))).map(|b| b.head.clone()).collect();
    Err(Error::ConflictingWrites { field: field.to_owned(), branches: writers })
}

fn replaces<U: StateUpdate>(update: &U, field: &str) -> bool {
    let mut found = false;
    update.replaced(&mut |name| found |= name == field);
    found
}

/// A copy of a branch node's update for the stream, when it yields updates
/// ([`StreamModes::UPDATES`](crate::vocab::policy::StreamModes::UPDATES)).
fn shown_update<S: GraphState>(ctx: &Ctx<S>, update: Option<&S::Update>) -> Option<Option<S::Update>> {
    let emitter = ctx.emitter.as_ref()?;
    emitter.modes.contains(StreamModes::UPDATES).then(|| update.cloned())
}

/// What a streamed branch records of a node's step, in order: what the node emitted while it
/// ran, its update (`shown`, if the stream yields updates), and its step with the branch's
/// state (if the stream yields values).
fn record_step<G: Graph>(
    events: &mut Vec<Event<G::State>>,
    ctx: &Ctx<G::State>,
    head: &NodeName,
    shown: Option<Option<<G::State as GraphState>::Update>>,
    local: &mut Local<'_, G::State>,
    graph: &G,
    duration: Duration,
) -> Result<(), Error> {
    let values = ctx.emitter.as_ref().is_none_or(|emitter| emitter.modes.contains(StreamModes::VALUES));
    if let Some(emitter) = &ctx.emitter {
        events.extend(emitter.take(Some((head, ctx.step))).into_iter().map(Emitted::into_event));
    }
    if let Some(update) = shown {
        events.push(Event::Update { node: ctx.node.clone(), branch: Some(head.clone()), update });
    }
    if values {
        let state = local.current(graph)?.clone();
        events.push(Event::Step { node: ctx.node.clone(), branch: Some(head.clone()), state, duration });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Paths;

    #[test]
    fn each_branch_path_is_the_fan_outs_own_then_its_index() {
        let paths = Paths::new(&[2, 0], 3);
        assert_eq!(paths.len(), 3);
        assert_eq!(paths.get(0), Some(&[2, 0, 0][..]));
        assert_eq!(paths.get(2), Some(&[2, 0, 2][..]));
        assert_eq!(paths.get(3), None);
        assert_eq!(paths.iter().collect::<Vec<_>>(), [&[2, 0, 0][..], &[2, 0, 1], &[2, 0, 2]]);
        let top = Paths::new(&[], 2);
        assert_eq!(top.iter().collect::<Vec<_>>(), [&[0][..], &[1]]);
    }

    #[test]
    fn a_fan_out_without_a_journal_has_no_paths() {
        let none = Paths::new(&[], 0);
        assert_eq!(none.len(), 0);
        assert_eq!(none.get(0), None);
        assert_eq!(none.iter().count(), 0);
    }
}
