//! The executor: runs a [`Graph`] one node at a time.
//!
//! [`Run::advance`] is the whole engine for the main line: run the node (panics caught), apply
//! its update through the reducers, route. A fan-out is one more advance that runs the branches
//! (see `parallel`) and merges them. `invoke` loops over `advance`; `stream` turns each advance
//! into [`Event`]s. Nothing here allocates per step on the main line: node names are `Clone`
//! without allocating and the state is updated in place.

use crate::error::Error;
use crate::event::Event;
use crate::graph::{Fork, Graph};
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, Goto};
use crate::parallel::{self, Branch};
use crate::state::GraphState;
use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub(crate) const START: NodeName = NodeName::from_static("start");
const END: NodeName = NodeName::from_static("end");

/// Where a run stands.
#[derive(Clone, Copy, Debug)]
enum Cursor<'g, N> {
    /// Nothing has run; the start edges are still to be evaluated.
    Start,
    /// `N` runs next.
    At(N),
    /// The branches of this fan-out run next.
    Fork(Fork<'g, N>),
    /// The run reached `end`.
    Done,
}

/// What one call to [`Run::advance`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// A node ran on the main line.
    Stepped,
    /// The branches of a fan-out ran and were merged.
    Forked,
    /// The run reached `end`.
    Done,
}

/// What follows a node.
pub(crate) enum After<'g, N> {
    Goto(Goto<N>),
    Fork(Fork<'g, N>),
}

/// Runs one node on `state`: the node's function, its update through the reducers (kept in
/// `kept` too, for a branch's merge), then its routing. Panics in any of it are caught.
pub(crate) fn run_node<'g, G: Graph>(
    graph: &'g G,
    node: G::Node,
    state: &mut G::State,
    ctx: &Ctx<G::State>,
    kept: Option<&mut Vec<<G::State as GraphState>::Update>>,
) -> Result<After<'g, G::Node>, Error> {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<After<'g, G::Node>, Error> {
        let step =
            graph.run(node, state, ctx).map_err(|source| Error::NodeFailed { node: ctx.node.clone(), source })?;
        if let Some(update) = step.update {
            if let Some(kept) = kept {
                kept.push(update.clone());
            }
            state.apply(update);
        }
        if let Some(target) = step.goto {
            return if graph.can_goto(node, target) {
                Ok(After::Goto(target))
            } else {
                let target = match target {
                    Goto::Node(n) => graph.node_name(n),
                    Goto::End => END,
                };
                Err(Error::NoRoute { node: ctx.node.clone(), goto: Some(target) })
            };
        }
        if let Some(fork) = graph.fork(node) {
            return Ok(After::Fork(fork));
        }
        graph.route(node, state).map(After::Goto).ok_or_else(|| Error::NoRoute { node: ctx.node.clone(), goto: None })
    }));
    outcome
        .unwrap_or_else(|payload| Err(Error::NodePanicked { node: ctx.node.clone(), message: panic_message(payload) }))
}

/// One run of a graph, from an input state to `end`.
pub(crate) struct Run<'g, G: Graph> {
    graph: &'g G,
    pub(crate) state: G::State,
    ctx: Ctx<G::State>,
    cursor: Cursor<'g, G::Node>,
    limit: usize,
    /// Whether branch steps are recorded as events (streaming).
    record: bool,
    /// Events of the last fan-out's branches, in branch order, while streaming.
    pub(crate) branch_events: VecDeque<Event<G::State>>,
}

impl<'g, G: Graph> Run<'g, G> {
    pub(crate) fn new(graph: &'g G, input: G::State, limit: usize, thread: Option<ThreadId>, record: bool) -> Self {
        Run {
            graph,
            state: input,
            ctx: Ctx::new(START, thread),
            cursor: Cursor::Start,
            limit,
            record,
            branch_events: VecDeque::new(),
        }
    }

    /// The node that ran last (`start` before any).
    pub(crate) fn last_node(&self) -> &NodeName {
        &self.ctx.node
    }

    /// Runs the next node (or the next fan-out). After an error the run is over.
    pub(crate) fn advance(&mut self) -> Result<Progress, Error> {
        let graph = self.graph;
        let node = match self.cursor {
            Cursor::Done => return Ok(Progress::Done),
            Cursor::At(node) => node,
            Cursor::Fork(fork) => return self.fork(fork),
            Cursor::Start => {
                let state = &self.state;
                match catch_unwind(AssertUnwindSafe(|| graph.start(state))) {
                    Ok(Some(Goto::Node(node))) => node,
                    Ok(Some(Goto::End)) => {
                        self.cursor = Cursor::Done;
                        return Ok(Progress::Done);
                    }
                    Ok(None) => return Err(Error::NoRoute { node: START, goto: None }),
                    Err(payload) => return Err(Error::NodePanicked { node: START, message: panic_message(payload) }),
                }
            }
        };
        if self.ctx.step >= self.limit as u64 {
            return Err(Error::RecursionLimit { limit: self.limit });
        }
        self.ctx.step += 1;
        self.ctx.node = graph.node_name(node);
        let after = run_node(graph, node, &mut self.state, &self.ctx, None);
        if !self.ctx.branches.is_empty() {
            // The join has seen its branches.
            self.ctx.branches.clear();
        }
        self.cursor = match after? {
            After::Goto(Goto::Node(next)) => Cursor::At(next),
            After::Goto(Goto::End) => Cursor::Done,
            After::Fork(fork) => Cursor::Fork(fork),
        };
        Ok(Progress::Stepped)
    }

    /// Runs the branches of `fork` on copies of the state and merges them in declared order.
    fn fork(&mut self, fork: Fork<'g, G::Node>) -> Result<Progress, Error> {
        let env = parallel::Env {
            thread: self.ctx.thread.clone(),
            base_step: self.ctx.step,
            budget: (self.limit as u64).saturating_sub(self.ctx.step),
            limit: self.limit,
            record: self.record,
        };
        let mut branches: Vec<Branch<G::State>> = parallel::run_fork(self.graph, fork, &self.state, &env)?;
        let steps: u64 = branches.iter().map(|b| b.steps).sum();
        if self.ctx.step + steps > self.limit as u64 {
            return Err(Error::RecursionLimit { limit: self.limit });
        }
        self.ctx.step += steps;
        parallel::merge(&mut self.state, &mut branches, &self.graph.node_name(fork.join))?;
        if self.record {
            for branch in &mut branches {
                self.branch_events.extend(branch.events.drain(..));
            }
        }
        self.ctx.branches = branches.into_iter().map(Branch::into_state).collect();
        self.cursor = Cursor::At(fork.join);
        Ok(Progress::Forked)
    }
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

/// The events of a run: [`Event::Step`] per node (branch nodes after their fan-out, in branch
/// order), then [`Event::Done`]; see [`App::stream`](crate::App::stream). A run that fails
/// yields its error and ends.
pub struct Stream<'g, G: Graph> {
    run: Run<'g, G>,
    over: bool,
}

impl<'g, G: Graph> Stream<'g, G> {
    pub(crate) fn new(run: Run<'g, G>) -> Self {
        Stream { run, over: false }
    }
}

impl<G: Graph> Iterator for Stream<'_, G> {
    type Item = Result<Event<G::State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(event) = self.run.branch_events.pop_front() {
            return Some(Ok(event));
        }
        if self.over {
            return None;
        }
        loop {
            match self.run.advance() {
                Ok(Progress::Stepped) => {
                    return Some(Ok(Event::Step {
                        node: self.run.last_node().clone(),
                        branch: None,
                        state: self.run.state.clone(),
                    }))
                }
                Ok(Progress::Forked) => {
                    if let Some(event) = self.run.branch_events.pop_front() {
                        return Some(Ok(event));
                    }
                }
                Ok(Progress::Done) => {
                    self.over = true;
                    return Some(Ok(Event::Done(self.run.state.clone())));
                }
                Err(error) => {
                    self.over = true;
                    return Some(Err(error));
                }
            }
        }
    }
}

impl<G: Graph> std::fmt::Debug for Stream<'_, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("graph", &self.run.graph.name())
            .field("last_node", self.run.last_node())
            .field("over", &self.over)
            .finish()
    }
}
