//! The step machine of one line of execution, written once for the main line ([`Run`]) and
//! for every branch of a fan-out (`fork`): where the line goes next ([`Line::next`]: routing
//! out of the last node, the start edges, breakpoints, the step count against the recursion
//! limit) and what a node's result does to it ([`Line::finish`]: its update applied through the
//! reducers, a pause, a parent jump, a send, an `interrupt_after`, routing to the next node).
//!
//! A line is a [`Cursor`] and the bookkeeping around it; the state it reads and writes is
//! behind [`LineState`]: the main line updates its state in place ([`InPlace`]), a branch keeps
//! its updates and builds a state of its own only when something reads it. Nothing here waits
//! or writes: what is left — running the node, checkpoints, the journal of a branch, a fan-out —
//! is its driver's (`run`, `fork`).
//!
//! [`Run`]: crate::machine::run::Run

use crate::format::checkpoint::ParentJump;
use crate::format::interrupt::{Interrupt, PauseKind};
use crate::machine::step::{apply_update, asked, clock_of, route_from, After};
use crate::model::graph::Graph;
use crate::model::node::{Ctx, Goto, More};
use crate::model::produce::{Paused, Produced};
use crate::tenure::Tenure;
use crate::vocab::error::{panic_message, Error};
use crate::vocab::name::{NodeName, START};
use crate::vocab::state::GraphState;
use std::any::TypeId;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Where a line stands.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cursor<N> {
    /// Nothing has run; the start edges are still to be evaluated (the main line only).
    Start,
    /// `N` runs next (a branch whose `N` is its join is at its end).
    At(N),
    /// `N` ran; routing from it (with a router's choice) comes next.
    After(N, Option<Goto<N>>),
    /// The fan-out after `N` runs next.
    Fork(N),
    /// The line reached `end` (a branch: its join, or `end`).
    Done,
}

/// What the line does next, as [`Line::next`] decides it.
pub(crate) enum Next<N> {
    /// Runs this node (its step is counted and its name is in the context).
    Run(N),
    /// A step that runs no node.
    Settle(Settle<N>),
}

/// A step that runs no node.
pub(crate) enum Settle<N> {
    /// The line reached its end.
    Done,
    /// The fan-out after this node runs.
    Fork(N),
    /// The line pauses at a breakpoint.
    Pause(Vec<Interrupt>),
}

/// What is left of a step once the node's result is applied ([`Line::finish`]).
pub(crate) enum Applied<U, N> {
    /// Nothing: the line goes on (an `interrupt_after` pauses at its next step).
    Stepped,
    /// The line moved on: the main line checkpoints the step (when it has a store).
    Save,
    /// The node paused on these.
    Pause(Vec<Interrupt>),
    /// The node fans out by sends: these nodes with these inputs (none: straight to its join).
    Sends(Vec<(N, U)>),
}

/// The state a line reads and writes.
pub(crate) trait LineState<G: Graph> {
    /// Applies `update`, written by node `node`, through the graph's reducers (or keeps it, to
    /// apply when read).
    fn apply(&mut self, graph: &G, update: <G::State as GraphState>::Update, node: &NodeName) -> Result<(), Error>;

    /// The state as the line sees it now.
    fn read(&mut self, graph: &G) -> Result<&G::State, Error>;
}

/// The main line's state: updated in place.
pub(crate) struct InPlace<'s, S>(pub(crate) &'s mut S);

impl<G: Graph> LineState<G> for InPlace<'_, G::State> {
    #[inline]
    fn apply(&mut self, graph: &G, update: <G::State as GraphState>::Update, node: &NodeName) -> Result<(), Error> {
        apply_update(graph, self.0, update, node)
    }

    #[inline]
    fn read(&mut self, _graph: &G) -> Result<&G::State, Error> {
        Ok(self.0)
    }
}

/// One line of execution: the main line of a run, or a branch of a fan-out.
pub(crate) struct Line<N> {
    pub(crate) cursor: Cursor<N>,
    /// The line resumes past a pause: the breakpoint before the node at the cursor does not
    /// stop it again.
    pub(crate) resuming: bool,
    /// An `interrupt_after` node just ran: the next step pauses.
    pub(crate) pause_after: bool,
    /// The answers to the earlier pauses of the node at the cursor.
    pub(crate) answers: Vec<serde_json::Value>,
    /// Whether breakpoints stop the line (a run with a store; not a nested fan-out's branch).
    pub(crate) pausable: bool,
    /// A branch's join: reaching it ends the branch (`None` on the main line).
    pub(crate) join: Option<N>,
    /// The context's step when this invocation began: the recursion limit counts the node runs
    /// since.
    pub(crate) first_step: u64,
    /// How many node runs the line may take in this invocation.
    pub(crate) budget: u64,
    /// The recursion limit the budget comes from, as its error names it.
    pub(crate) limit: usize,
    /// The line is a child graph's, run by a subgraph node of a parent graph with this node
    /// type: `Command::parent` to a node of that type ends it.
    pub(crate) parent_node: Option<TypeId>,
    /// The parent's run (with a store), whose graph's declared name a parent jump records.
    pub(crate) parent: Option<Arc<Tenure>>,
    /// Where the line routes its parent (`Command::parent`), once it did.
    pub(crate) jump: Option<ParentJump>,
    /// The node the line last routed out of (with a router's choice), until taken: a branch
    /// records that it completed before its next node runs.
    pub(crate) left: Option<(N, Option<Goto<N>>)>,
}

impl<N: Copy + PartialEq> Line<N> {
    /// A line at `cursor` that may take `limit` node runs from step `first_step`.
    pub(crate) fn new(cursor: Cursor<N>, first_step: u64, limit: usize, pausable: bool) -> Self {
        Line {
            cursor,
            resuming: false,
            pause_after: false,
            answers: Vec::new(),
            pausable,
            join: None,
            first_step,
            budget: limit as u64,
            limit,
            parent_node: None,
            parent: None,
            jump: None,
            left: None,
        }
    }

    /// Node runs in this invocation, retries included.
    #[inline]
    pub(crate) fn taken<S>(&self, ctx: &Ctx<S>) -> u64 {
        ctx.step.saturating_sub(self.first_step).saturating_add(ctx.retried())
    }

    /// Moves the cursor to the next node to run and counts its step (in `ctx`, which then
    /// names it); or says that the line is over, forks, or pauses at a breakpoint.
    #[inline]
    pub(crate) fn next<G: Graph<Node = N>>(
        &mut self,
        graph: &G,
        ctx: &mut Ctx<G::State>,
        state: &mut impl LineState<G>,
    ) -> Result<Next<N>, Error> {
        loop {
            let node = match self.cursor {
                Cursor::Done => return Ok(Next::Settle(Settle::Done)),
                Cursor::At(node) if Some(node) == self.join => {
                    self.cursor = Cursor::Done;
                    return Ok(Next::Settle(Settle::Done));
                }
                Cursor::At(node) => node,
                Cursor::Fork(source) => return Ok(Next::Settle(Settle::Fork(source))),
                Cursor::After(node, goto) => {
                    if std::mem::take(&mut self.pause_after) {
                        let interrupt = Interrupt::breakpoint(PauseKind::After, ctx.node.clone(), ctx.branch.as_ref());
                        return Ok(Next::Settle(Settle::Pause(vec![interrupt])));
                    }
                    self.resuming = false;
                    self.route(graph, node, goto, state, &graph.node_name(node))?;
                    continue;
                }
                Cursor::Start => {
                    let state = state.read(graph)?;
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
            if self.pausable && !std::mem::take(&mut self.resuming) && graph.interrupt_before(node) {
                let interrupt = Interrupt::breakpoint(PauseKind::Before, graph.node_name(node), ctx.branch.as_ref());
                return Ok(Next::Settle(Settle::Pause(vec![interrupt])));
            }
            if self.taken(ctx) >= self.budget {
                return Err(Error::RecursionLimit { limit: self.limit });
            }
            ctx.step = ctx.step.saturating_add(1);
            ctx.steps_left = self.budget.saturating_sub(self.taken(ctx));
            ctx.node = graph.node_name(node);
            return Ok(Next::Run(node));
        }
    }

    /// Applies what `node` (the one [`next`](Self::next) ran) produced and moves the cursor
    /// past it: to where it routes, its fan-out, or the end of a child graph; or keeps it there,
    /// paused (the node then runs again from its start on resume, and its run does not count).
    #[inline]
    pub(crate) fn finish<G: Graph<Node = N>>(
        &mut self,
        graph: &G,
        ctx: &mut Ctx<G::State>,
        state: &mut impl LineState<G>,
        node: N,
        produced: Result<Produced<G::State, N>, Error>,
    ) -> Result<Applied<<G::State as GraphState>::Update, N>, Error> {
        let (goto, more) = match produced? {
            Produced::Ran { update, goto, more } => {
                if let Some(update) = update {
                    state.apply(graph, update, &ctx.node)?;
                }
                (goto, more)
            }
            Produced::Paused(paused) => {
                let Paused { payload, answers, kept, nested } = *paused;
                if let Some(update) = kept {
                    state.apply(graph, update, &ctx.node)?;
                }
                ctx.step = ctx.step.saturating_sub(1);
                let pending = if nested.is_empty() {
                    vec![asked(graph, node, payload, answers.len(), ctx.branch.as_ref(), clock_of(ctx).now())]
                } else {
                    nested
                };
                self.answers = answers;
                return Ok(Applied::Pause(pending));
            }
        };
        if !ctx.branches.is_empty() {
            // The join has seen its branches (a join that paused or failed sees them again).
            ctx.branches.clear();
        }
        let goto = match more.map(|more| *more) {
            None if !graph.sends(node) => goto,
            // A node that fans out by sends and sent nothing: straight to its join.
            None => return Ok(Applied::Sends(Vec::new())),
            Some(More::Sends(sends)) => return Ok(Applied::Sends(sends)),
            Some(More::Parent(mut jump)) => {
                // Only a child graph's line ends by routing its parent, and only the parent
                // whose node type the jump was made for.
                if self.parent_node.is_none() || jump.node_type.is_some_and(|t| Some(t) != self.parent_node) {
                    let target = NodeName::from(jump.target);
                    return Err(Error::NoRoute { node: ctx.node.clone(), goto: Some(target) });
                }
                // Stored by the parent's declared name, which the parent checks on reading it
                // back (`subgraph`), never by a Rust type name.
                jump.parent = self.parent.as_ref().map(|tenure| tenure.graph.clone());
                self.jump = Some(jump);
                self.cursor = Cursor::Done;
                return Ok(Applied::Save);
            }
        };
        if self.pausable && graph.interrupt_after(node) {
            self.cursor = Cursor::After(node, goto);
            self.pause_after = true;
            return Ok(Applied::Stepped);
        }
        self.route(graph, node, goto, state, &ctx.node)?;
        Ok(Applied::Save)
    }

    /// Moves the cursor out of `node` (named `name`), where [`route_from`] says; the state is
    /// read only when a guard reads it.
    #[inline]
    fn route<G: Graph<Node = N>>(
        &mut self,
        graph: &G,
        node: N,
        goto: Option<Goto<N>>,
        state: &mut impl LineState<G>,
        name: &NodeName,
    ) -> Result<(), Error> {
        self.cursor = match route_from(graph, node, goto, || state.read(graph), name)? {
            After::Goto(Goto::Node(next)) => Cursor::At(next),
            After::Goto(Goto::End) => Cursor::Done,
            After::Fork(source) => Cursor::Fork(source),
        };
        self.left = Some((node, goto));
        Ok(())
    }
}
