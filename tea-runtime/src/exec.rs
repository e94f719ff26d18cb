//! The executor: runs a [`Graph`] one node at a time.
//!
//! [`Run::advance`] is the whole engine for the main line: run the node (panics caught), apply
//! its update through the reducers, route. A fan-out is one more advance that runs the branches
//! (see `parallel`) and merges them. `invoke` loops over `advance`; `stream` turns each advance
//! into [`Event`]s. Nothing here allocates per step on the main line without a store: node names
//! are `Clone` without allocating and the state is updated in place.
//!
//! With a store (`Persist`), a run writes checkpoints by compare-and-swap on the thread's head:
//! one when it starts (which claims a new thread, or claims an existing one on resume or
//! recover), one per step with `Durability::EveryStep`, one durable checkpoint when it pauses
//! (before the token exists) and one when it finishes. A resumed run that fails writes its pause
//! back, so the same token works again.

use crate::checkpoint::{self, BranchAt, BranchProgress, Checkpoint, Identity, Position, Target};
use crate::error::Error;
use crate::event::Event;
use crate::graph::Graph;
use crate::hitl::{Asked, Hitl};
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, Goto};
use crate::parallel::{self, Env, ForkOutcome};
use crate::resume::{graph_id, Interrupt, PauseKind, Resume, SigningKey, Token};
use crate::state::GraphState;
use crate::store::{Append, CheckpointId, Checkpointer};
use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) const START: NodeName = NodeName::from_static("start");
pub(crate) const END: NodeName = NodeName::from_static("end");

/// Where a run stands.
#[derive(Clone, Copy, Debug)]
enum Cursor<N> {
    /// Nothing has run; the start edges are still to be evaluated.
    Start,
    /// `N` runs next.
    At(N),
    /// `N` ran; routing from it (with a router's choice) comes next.
    After(N, Option<Goto<N>>),
    /// The fan-out after `N` runs next.
    Fork(N),
    /// The run reached `end`.
    Done,
}

/// What one call to [`Run::advance`] did.
pub(crate) enum Progress<S: GraphState> {
    /// A node ran on the main line.
    Stepped,
    /// The branches of a fan-out ran and were merged.
    Forked,
    /// The run paused; its checkpoint is durable.
    Paused(Resume<S>),
    /// The run reached `end`.
    Done,
}

/// What follows a node.
pub(crate) enum After<N> {
    Goto(Goto<N>),
    Fork(N),
}

/// What running a node did.
pub(crate) enum Executed<N> {
    /// The node ran and its update was applied; a router's choice, if any.
    Ran(Option<Goto<N>>),
    /// The node paused through its `Hitl` (its update was discarded); `answers` are the ones it
    /// was given, to give it again on resume.
    Paused { payload: serde_json::Value, answers: Vec<serde_json::Value> },
}

/// What running a node produced, before anything is applied.
pub(crate) enum Produced<S: GraphState, N> {
    /// The node ran: its update and a router's choice.
    Ran { update: Option<S::Update>, goto: Option<Goto<N>> },
    /// The node paused through its `Hitl`; `kept`: the update it keeps anyway
    /// ([`Graph::keeps_update_on_pause`]).
    Paused { payload: serde_json::Value, answers: Vec<serde_json::Value>, kept: Option<S::Update> },
}

/// Runs `node` on `state` with the answers to its earlier pauses. Panics are caught.
pub(crate) fn produce<G: Graph>(
    graph: &G,
    node: G::Node,
    state: &G::State,
    ctx: &Ctx<G::State>,
    answers: Vec<serde_json::Value>,
) -> Result<Produced<G::State, G::Node>, Error> {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<Produced<G::State, G::Node>, Error> {
        let mut hitl = Hitl::with_answers(answers);
        let result = graph.run(node, state, ctx, &mut hitl);
        match hitl.asked.take() {
            None => {}
            Some(Asked::Pause(payload)) => {
                let kept = match result {
                    Ok(step) if graph.keeps_update_on_pause(node) => step.update,
                    _ => None,
                };
                return Ok(Produced::Paused { payload, answers: hitl.into_answers(), kept });
            }
            Some(Asked::BadAnswer { expected, reason }) => {
                return Err(Error::BadResumeValue { node: ctx.node.clone(), expected: expected.to_owned(), reason })
            }
            Some(Asked::BadPayload(reason)) => {
                return Err(Error::NodeFailed {
                    node: ctx.node.clone(),
                    source: format!("the pause's payload does not serialize: {reason}").into(),
                })
            }
        }
        let step = result.map_err(|source| Error::NodeFailed { node: ctx.node.clone(), source })?;
        Ok(Produced::Ran { update: step.update, goto: step.goto })
    }));
    outcome
        .unwrap_or_else(|payload| Err(Error::NodePanicked { node: ctx.node.clone(), message: panic_message(payload) }))
}

/// Runs `node` on `state` and applies its update through the reducers.
pub(crate) fn execute<G: Graph>(
    graph: &G,
    node: G::Node,
    state: &mut G::State,
    ctx: &Ctx<G::State>,
    answers: Vec<serde_json::Value>,
) -> Result<Executed<G::Node>, Error> {
    match produce(graph, node, state, ctx, answers)? {
        Produced::Paused { payload, answers, kept } => {
            if let Some(update) = kept {
                apply_update(graph, state, update, &ctx.node)?;
            }
            Ok(Executed::Paused { payload, answers })
        }
        Produced::Ran { update, goto } => {
            if let Some(update) = update {
                apply_update(graph, state, update, &ctx.node)?;
            }
            Ok(Executed::Ran(goto))
        }
    }
}

/// The pause a node asked for: its id counts the node's pauses (`ask#0`, `ask#1`, …; `@head`
/// inside a branch), and an interrupt node's timeout sets when it expires.
pub(crate) fn asked<G: Graph>(
    graph: &G,
    node: G::Node,
    payload: serde_json::Value,
    index: usize,
    branch: Option<&NodeName>,
) -> Interrupt {
    let name = graph.node_name(node);
    let id = match branch {
        Some(head) => format!("{name}#{index}@{head}"),
        None => format!("{name}#{index}"),
    };
    let mut interrupt = Interrupt::new(id, name, payload);
    interrupt.kind = PauseKind::Ask;
    interrupt.expires_at = graph.pause_timeout(node).map(|secs| now().saturating_add(secs));
    interrupt
}

/// Where the run goes after `node` (named `name`): a router's choice if it made one (checked
/// against its declaration), else its fan-out, else its edges. Guards' panics are caught.
pub(crate) fn route_from<G: Graph>(
    graph: &G,
    node: G::Node,
    goto: Option<Goto<G::Node>>,
    state: &G::State,
    name: &NodeName,
) -> Result<After<G::Node>, Error> {
    if let Some(target) = goto {
        return if graph.can_goto(node, target) {
            Ok(After::Goto(target))
        } else {
            Err(Error::NoRoute { node: name.clone(), goto: Some(goto_name(graph, target)) })
        };
    }
    if graph.fork(node).is_some() {
        return Ok(After::Fork(node));
    }
    match catch_unwind(AssertUnwindSafe(|| graph.try_route(node, state))) {
        Ok(Ok(Some(target))) => Ok(After::Goto(target)),
        Ok(Ok(None)) => Err(Error::NoRoute { node: name.clone(), goto: None }),
        Ok(Err(source)) => Err(Error::NodeFailed { node: name.clone(), source }),
        Err(payload) => Err(Error::NodePanicked { node: name.clone(), message: panic_message(payload) }),
    }
}

pub(crate) fn goto_name<G: Graph>(graph: &G, target: Goto<G::Node>) -> NodeName {
    match target {
        Goto::Node(n) => graph.node_name(n),
        Goto::End => END,
    }
}

pub(crate) fn target_of<G: Graph>(graph: &G, goto: Option<Goto<G::Node>>) -> Option<Target> {
    goto.map(|g| match g {
        Goto::Node(n) => Target::Node(graph.node_name(n)),
        Goto::End => Target::End,
    })
}

pub(crate) fn goto_of<G: Graph>(
    graph: &G,
    target: &Option<Target>,
    thread: &ThreadId,
) -> Result<Option<Goto<G::Node>>, Error> {
    match target {
        None => Ok(None),
        Some(Target::End) => Ok(Some(Goto::End)),
        Some(Target::Node(name)) => node_named(graph, name, thread).map(|n| Some(Goto::Node(n))),
    }
}

/// A node named in a checkpoint; the fingerprint check makes a miss a corrupt checkpoint.
pub(crate) fn node_named<G: Graph>(graph: &G, name: &NodeName, thread: &ThreadId) -> Result<G::Node, Error> {
    graph.node_named(name.as_str()).ok_or_else(|| Error::CorruptCheckpoint {
        thread: thread.clone(),
        checkpoint: 0,
        reason: format!("it names node `{name}`, which graph `{}` does not have", graph.name()),
    })
}

/// The identity of `graph`'s checkpoints.
pub(crate) fn identity<G: Graph>(graph: &G) -> Identity<'_> {
    Identity {
        graph: graph.name(),
        graph_fingerprint: graph.fingerprint(),
        schema_fingerprint: graph.schema_fingerprint(),
    }
}

/// A run's link to its checkpoint store.
pub(crate) struct Persist<'g> {
    pub(crate) store: &'g dyn Checkpointer,
    pub(crate) thread: ThreadId,
    /// The thread's head as this run last saw it.
    pub(crate) head: Option<CheckpointId>,
    pub(crate) every_step: bool,
    pub(crate) key: Option<&'g SigningKey>,
    /// The paused checkpoint this run resumed from, written back if the run fails.
    pub(crate) rollback: Option<Vec<u8>>,
    /// Whether the run's first checkpoint (claiming the thread) is still to be written.
    pub(crate) claim: bool,
}

/// One run of a graph: from an input state, a paused checkpoint or a crashed run, to `end` or
/// the next pause.
pub(crate) struct Run<'g, G: Graph> {
    graph: &'g G,
    pub(crate) state: G::State,
    ctx: Ctx<G::State>,
    cursor: Cursor<G::Node>,
    limit: usize,
    /// Whether branch steps are recorded as events (streaming).
    record: bool,
    /// Events of the last fan-out's branches, in branch order, while streaming.
    pub(crate) branch_events: VecDeque<Event<G::State>>,
    persist: Option<Persist<'g>>,
    /// The run resumes past a pause: the breakpoints where it paused do not stop it again.
    resuming: bool,
    /// An `interrupt_after` node just ran: the next advance pauses.
    pause_after: bool,
    /// The branches of a fan-out resumed from a checkpoint.
    saved_branches: Vec<BranchProgress<G::State>>,
    /// The answers to the earlier pauses of the node at the cursor.
    answers: Vec<serde_json::Value>,
    /// The thread's step count when this invocation began: the recursion limit counts the node
    /// runs of one invocation (`invoke`, `resume` or `recover`), not of the thread's life.
    first_step: u64,
    finished: bool,
}

impl<'g, G: Graph> Run<'g, G> {
    pub(crate) fn new(graph: &'g G, input: G::State, limit: usize, persist: Option<Persist<'g>>, record: bool) -> Self {
        let thread = persist.as_ref().map(|p| p.thread.clone());
        Run {
            graph,
            state: input,
            ctx: Ctx::new(START, thread),
            cursor: Cursor::Start,
            limit,
            record,
            branch_events: VecDeque::new(),
            persist,
            resuming: false,
            pause_after: false,
            saved_branches: Vec::new(),
            answers: Vec::new(),
            first_step: 0,
            finished: false,
        }
    }

    /// A run that continues from checkpoint `ckpt` (the thread's head, in `persist.head`).
    /// `resuming`: it resumes past the pause the checkpoint records.
    pub(crate) fn from_checkpoint(
        graph: &'g G,
        ckpt: Checkpoint<G::State>,
        resuming: bool,
        limit: usize,
        persist: Persist<'g>,
        record: bool,
    ) -> Result<Self, Error> {
        let thread = persist.thread.clone();
        let mut saved_branches = Vec::new();
        let cursor = (|| -> Result<Cursor<G::Node>, Error> {
            Ok(match ckpt.at {
                Position::Start => Cursor::Start,
                Position::Before(name) => Cursor::At(node_named(graph, &name, &thread)?),
                Position::After { node, goto } => {
                    Cursor::After(node_named(graph, &node, &thread)?, goto_of(graph, &goto, &thread)?)
                }
                Position::Fork { source, branches } => {
                    // The branches' nodes too, before the run claims the thread.
                    for branch in &branches {
                        if let BranchAt::Before(node) | BranchAt::After { node, .. } = &branch.at {
                            node_named(graph, node, &thread)?;
                        }
                        if let BranchAt::After { goto, .. } = &branch.at {
                            goto_of(graph, goto, &thread)?;
                        }
                    }
                    saved_branches = branches;
                    Cursor::Fork(node_named(graph, &source, &thread)?)
                }
                Position::Done => Cursor::Done,
            })
        })()
        .map_err(|error| match error {
            // `node_named` does not know which checkpoint it reads: this one.
            Error::CorruptCheckpoint { thread, reason, .. } => {
                Error::CorruptCheckpoint { thread, checkpoint: persist.head.unwrap_or_default(), reason }
            }
            other => other,
        })?;
        let mut run = Run::new(graph, ckpt.state, limit, Some(persist), record);
        run.ctx.step = ckpt.step;
        run.first_step = ckpt.step;
        run.cursor = cursor;
        run.resuming = resuming;
        run.saved_branches = saved_branches;
        run.answers = ckpt.answers;
        run.finished = matches!(cursor, Cursor::Done);
        Ok(run)
    }

    /// Makes a fresh run start at `node` rather than at `start`; `node`'s own breakpoint
    /// before it does not stop it.
    pub(crate) fn start_at(&mut self, node: G::Node) {
        self.cursor = Cursor::At(node);
        self.resuming = true;
    }

    /// The node that ran last (`start` before any).
    pub(crate) fn last_node(&self) -> &NodeName {
        &self.ctx.node
    }

    /// Runs the next node (or fan-out), or pauses. After an error the run is over; a resumed
    /// run then puts its pause back.
    pub(crate) fn advance(&mut self) -> Result<Progress<G::State>, Error> {
        let result = self.advance_inner();
        if result.is_err() {
            self.roll_back();
        }
        result
    }

    fn advance_inner(&mut self) -> Result<Progress<G::State>, Error> {
        if self.persist.as_ref().is_some_and(|p| p.claim) {
            self.save(false)?;
            if let Some(persist) = &mut self.persist {
                persist.claim = false;
            }
        }
        let graph = self.graph;
        loop {
            let node = match self.cursor {
                Cursor::Done => {
                    if !self.finished {
                        // Only a pause must be durable before anything is handed out; the
                        // store flushes a finished run in its own time.
                        self.finished = true;
                        self.save(false)?;
                    }
                    if let Some(persist) = &mut self.persist {
                        // The resume is complete: nothing is left to roll back to.
                        persist.rollback = None;
                    }
                    return Ok(Progress::Done);
                }
                Cursor::At(node) => node,
                Cursor::Fork(source) => return self.fork(source),
                Cursor::After(node, goto) => {
                    if std::mem::take(&mut self.pause_after) {
                        let interrupt = Interrupt::breakpoint(PauseKind::After, self.ctx.node.clone(), None);
                        return self.pause(vec![interrupt]);
                    }
                    let name = graph.node_name(node);
                    self.resuming = false;
                    self.cursor = self.cursor_after(route_from(graph, node, goto, &self.state, &name)?);
                    continue;
                }
                Cursor::Start => {
                    let state = &self.state;
                    self.cursor = match catch_unwind(AssertUnwindSafe(|| graph.try_start(state))) {
                        Ok(Ok(Some(Goto::Node(node)))) => Cursor::At(node),
                        Ok(Ok(Some(Goto::End))) => Cursor::Done,
                        Ok(Ok(None)) => return Err(Error::NoRoute { node: START, goto: None }),
                        Ok(Err(source)) => return Err(Error::NodeFailed { node: START, source }),
                        Err(payload) => {
                            return Err(Error::NodePanicked { node: START, message: panic_message(payload) })
                        }
                    };
                    continue;
                }
            };
            let pausable = self.persist.is_some();
            if pausable && !std::mem::take(&mut self.resuming) && graph.interrupt_before(node) {
                let interrupt = Interrupt::breakpoint(PauseKind::Before, graph.node_name(node), None);
                return self.pause(vec![interrupt]);
            }
            if self.steps_taken() >= self.limit as u64 {
                return Err(Error::RecursionLimit { limit: self.limit });
            }
            self.ctx.step += 1;
            self.ctx.node = graph.node_name(node);
            let answers = std::mem::take(&mut self.answers);
            let executed = execute(graph, node, &mut self.state, &self.ctx, answers);
            if !self.ctx.branches.is_empty() {
                // The join has seen its branches.
                self.ctx.branches.clear();
            }
            let goto = match executed? {
                Executed::Ran(goto) => goto,
                Executed::Paused { payload, answers } => {
                    // The node runs again from its start on resume: this run does not count.
                    self.ctx.step -= 1;
                    let interrupt = asked(graph, node, payload, answers.len(), None);
                    self.answers = answers;
                    return self.pause(vec![interrupt]);
                }
            };
            if pausable && graph.interrupt_after(node) {
                self.cursor = Cursor::After(node, goto);
                self.pause_after = true;
                return Ok(Progress::Stepped);
            }
            self.cursor = self.cursor_after(route_from(graph, node, goto, &self.state, &self.ctx.node)?);
            self.save_step()?;
            return Ok(Progress::Stepped);
        }
    }

    /// Node runs in this invocation.
    fn steps_taken(&self) -> u64 {
        self.ctx.step - self.first_step
    }

    fn cursor_after(&self, after: After<G::Node>) -> Cursor<G::Node> {
        match after {
            After::Goto(Goto::Node(next)) => Cursor::At(next),
            After::Goto(Goto::End) => Cursor::Done,
            After::Fork(source) => Cursor::Fork(source),
        }
    }

    /// Runs the branches of the fan-out after `source` and merges them in declared order, or
    /// pauses if a branch paused.
    fn fork(&mut self, source: G::Node) -> Result<Progress<G::State>, Error> {
        let graph = self.graph;
        let Some(fork) = graph.fork(source) else {
            return Err(Error::NoRoute { node: graph.node_name(source), goto: None });
        };
        let env = Env {
            thread: self.ctx.thread.clone(),
            base_step: self.ctx.step,
            budget: (self.limit as u64).saturating_sub(self.steps_taken()),
            limit: self.limit,
            record: self.record,
            pausable: self.persist.is_some(),
        };
        self.resuming = false;
        let saved = std::mem::take(&mut self.saved_branches);
        let keep_states = graph.reads_branches(fork.join);
        match parallel::run_fork(graph, fork, &self.state, &env, saved, keep_states)? {
            ForkOutcome::Paused { branches, interrupts, mut events } => {
                if self.record {
                    self.branch_events.extend(events.drain(..));
                }
                self.saved_branches = branches;
                self.pause(interrupts)
            }
            ForkOutcome::Joined { mut branches, steps } => {
                if self.steps_taken() + steps > self.limit as u64 {
                    return Err(Error::RecursionLimit { limit: self.limit });
                }
                self.ctx.step += steps;
                parallel::merge(graph, &mut self.state, &mut branches, fork.join)?;
                if self.record {
                    for branch in &mut branches {
                        self.branch_events.extend(branch.events.drain(..));
                    }
                }
                self.ctx.branches = branches.into_iter().filter_map(parallel::Branch::into_state).collect();
                self.cursor = Cursor::At(fork.join);
                self.save_step()?;
                Ok(Progress::Forked)
            }
        }
    }

    /// Where the run stands, as a checkpoint records it.
    fn position(&self) -> Position<G::State> {
        let graph = self.graph;
        match self.cursor {
            Cursor::Start => Position::Start,
            Cursor::At(node) => Position::Before(graph.node_name(node)),
            Cursor::After(node, goto) => Position::After { node: graph.node_name(node), goto: target_of(graph, goto) },
            Cursor::Fork(source) => Position::Fork {
                source: graph.node_name(source),
                branches: self
                    .saved_branches
                    .iter()
                    .map(|b| BranchProgress {
                        head: b.head.clone(),
                        state: b.state.clone(),
                        updates: b.updates.clone(),
                        steps: b.steps,
                        at: b.at.clone(),
                        answers: b.answers.clone(),
                        pending: b.pending.clone(),
                        resume: b.resume,
                    })
                    .collect(),
            },
            Cursor::Done => Position::Done,
        }
    }

    fn save_step(&mut self) -> Result<(), Error> {
        if self.persist.as_ref().is_some_and(|p| p.every_step) {
            self.save(false)?;
            // A step that routed to `end` has just written the final checkpoint.
            self.finished = matches!(self.cursor, Cursor::Done);
        }
        Ok(())
    }

    /// Writes a checkpoint of where the run stands (no pause).
    fn save(&mut self, durable: bool) -> Result<(), Error> {
        if self.persist.is_none() {
            return Ok(());
        }
        let ckpt = Checkpoint {
            step: self.ctx.step,
            state: self.state.clone(),
            at: self.position(),
            pending: Vec::new(),
            pause: None,
            paused_at: None,
            resumed: self.resuming,
            answers: self.answers.clone(),
        };
        self.write(&ckpt, durable).map(|_| ())
    }

    /// Writes `ckpt` as the thread's new head, by compare-and-swap on the head this run last saw.
    fn write(&mut self, ckpt: &Checkpoint<G::State>, durable: bool) -> Result<CheckpointId, Error> {
        let graph = self.graph;
        let Some(persist) = &mut self.persist else { return Ok(0) };
        let bytes = checkpoint::encode(&identity(graph), ckpt)?;
        let id = persist.head.map_or(1, |h| h + 1);
        match persist.store.append(graph.name(), &persist.thread, persist.head, id, &bytes, durable)? {
            Append::Written => {
                persist.head = Some(id);
                Ok(id)
            }
            Append::Conflict { .. } if persist.head.is_none() => {
                Err(Error::ThreadExists { thread: persist.thread.clone() })
            }
            Append::Conflict { .. } => Err(Error::StaleResume { thread: persist.thread.clone() }),
        }
    }

    /// Pauses on `pending`: writes the paused checkpoint durably, then issues its token.
    fn pause(&mut self, pending: Vec<Interrupt>) -> Result<Progress<G::State>, Error> {
        let graph = self.graph;
        let Some(persist) = &self.persist else {
            return Err(Error::store(format!("graph `{}` paused in an app without a checkpointer", graph.name())));
        };
        let id = persist.head.map_or(1, |h| h + 1);
        let ckpt = Checkpoint {
            step: self.ctx.step,
            state: self.state.clone(),
            at: self.position(),
            pending,
            pause: Some(id),
            paused_at: Some(now()),
            resumed: false,
            answers: self.answers.clone(),
        };
        self.write(&ckpt, true)?;
        let Some(persist) = &mut self.persist else { unreachable_store() };
        // The pause is durable: nothing is left to roll back to.
        persist.rollback = None;
        let resume = issue(graph, &persist.thread, &ckpt, persist.key)?;
        Ok(Progress::Paused(resume))
    }

    /// After a failure: a resumed run writes its pause back as the head, so that the token that
    /// resumed it works again.
    fn roll_back(&mut self) {
        let graph = self.graph;
        let Some(persist) = &mut self.persist else { return };
        let Some(bytes) = persist.rollback.take() else { return };
        let id = persist.head.map_or(1, |h| h + 1);
        if let Ok(Append::Written) = persist.store.append(graph.name(), &persist.thread, persist.head, id, &bytes, true)
        {
            persist.head = Some(id);
        }
    }
}

fn unreachable_store() -> ! {
    unreachable!("the run wrote through its store a moment ago")
}

/// The token of a paused checkpoint.
pub(crate) fn issue<G: Graph>(
    graph: &G,
    thread: &ThreadId,
    ckpt: &Checkpoint<G::State>,
    key: Option<&SigningKey>,
) -> Result<Resume<G::State>, Error> {
    let token = Token {
        graph: graph_id(graph.name()),
        graph_fingerprint: graph.fingerprint(),
        schema_fingerprint: graph.schema_fingerprint(),
        pause: ckpt.pause.unwrap_or_default(),
        thread: thread.clone(),
        node: ckpt.pending.first().map(|i| i.node().clone()).unwrap_or(START),
        interrupts: ckpt.pending.clone(),
    };
    Resume::issue(token, key)
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The message of a caught panic (`panic!("…")` payloads are `&str` or `String`).
pub(crate) fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => String::from("(a panic without a message)"),
        },
    }
}

/// Applies an update through the graph's reducers (user code: a panicking reducer is reported
/// on `node`, a refused write is `node`'s failure).
#[inline]
pub(crate) fn apply_update<G: Graph>(
    graph: &G,
    state: &mut G::State,
    update: <G::State as GraphState>::Update,
    node: &NodeName,
) -> Result<(), Error> {
    match catch_unwind(AssertUnwindSafe(|| graph.apply(state, update))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(Error::NodeFailed { node: node.clone(), source }),
        Err(payload) => Err(Error::NodePanicked { node: node.clone(), message: panic_message(payload) }),
    }
}

/// The events of a run: [`Event::Step`] per node (branch nodes after their fan-out, in branch
/// order), then [`Event::Done`] or, with a checkpointer, [`Event::Interrupted`]; see
/// [`App::stream`](crate::App::stream). A run that fails yields its error and ends.
pub struct Stream<'g, G: Graph> {
    run: Option<Run<'g, G>>,
    error: Option<Error>,
}

impl<'g, G: Graph> Stream<'g, G> {
    pub(crate) fn new(run: Result<Run<'g, G>, Error>) -> Self {
        match run {
            Ok(run) => Stream { run: Some(run), error: None },
            Err(error) => Stream { run: None, error: Some(error) },
        }
    }
}

impl<G: Graph> Iterator for Stream<'_, G> {
    type Item = Result<Event<G::State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.error.take() {
            return Some(Err(error));
        }
        let run = self.run.as_mut()?;
        if let Some(event) = run.branch_events.pop_front() {
            if matches!(event, Event::Interrupted { .. }) {
                // A pause queued behind its fan-out's branch steps ends the stream.
                self.run = None;
            }
            return Some(Ok(event));
        }
        let event = loop {
            match run.advance() {
                Ok(Progress::Stepped) => {
                    return Some(Ok(Event::Step {
                        node: run.last_node().clone(),
                        branch: None,
                        state: run.state.clone(),
                    }))
                }
                Ok(Progress::Forked) => {
                    if let Some(event) = run.branch_events.pop_front() {
                        return Some(Ok(event));
                    }
                }
                Ok(Progress::Paused(resume)) => {
                    if let Some(event) = run.branch_events.pop_front() {
                        // Branch steps before the pause come first; the pause follows them.
                        run.branch_events.push_back(Event::Interrupted { state: run.state.clone(), resume });
                        return Some(Ok(event));
                    }
                    break Ok(Event::Interrupted { state: run.state.clone(), resume });
                }
                Ok(Progress::Done) => break Ok(Event::Done(run.state.clone())),
                Err(error) => break Err(error),
            }
        };
        if run.branch_events.is_empty() {
            self.run = None;
        }
        Some(event)
    }
}

/// A resumed stream dropped before it paused again or finished abandons the resume: its pause
/// is put back, so the token that resumed it works again.
impl<G: Graph> Drop for Stream<'_, G> {
    fn drop(&mut self) {
        if let Some(run) = &mut self.run {
            run.roll_back();
        }
    }
}

impl<G: Graph> std::fmt::Debug for Stream<'_, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Stream");
        if let Some(run) = &self.run {
            s.field("graph", &run.graph.name()).field("last_node", run.last_node());
        }
        s.field("over", &self.run.is_none()).finish()
    }
}
