//! The executor: runs a [`Graph`] one node at a time.
//!
//! `Run::advance` is the whole engine for the main line: run the node (panics caught), apply its
//! update through the reducers, route. `invoke` loops over it; `stream` turns each advance into
//! an [`Event`]. Nothing here allocates per step: node names are `Clone` without allocating and
//! the state is updated in place.

use crate::error::Error;
use crate::graph::Graph;
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, Goto};
use crate::state::GraphState as _;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Where a run stands.
#[derive(Clone, Copy, Debug)]
enum Cursor<N> {
    /// Nothing has run; the start edges are still to be evaluated.
    Start,
    /// `N` runs next.
    At(N),
    /// The run reached `end`.
    Done,
}

/// What one call to [`Run::advance`] did.
#[derive(Debug)]
pub(crate) enum Progress {
    /// A node ran.
    Stepped,
    /// The run reached `end`.
    Done,
}

/// One run of a graph, from an input state to `end`.
pub(crate) struct Run<'g, G: Graph> {
    graph: &'g G,
    pub(crate) state: G::State,
    ctx: Ctx<G::State>,
    cursor: Cursor<G::Node>,
    limit: usize,
}

const START: NodeName = NodeName::from_static("start");

impl<'g, G: Graph> Run<'g, G> {
    pub(crate) fn new(graph: &'g G, input: G::State, limit: usize, thread: Option<ThreadId>) -> Self {
        Run { graph, state: input, ctx: Ctx::new(START, thread), cursor: Cursor::Start, limit }
    }

    /// The node that ran last (`start` before any).
    pub(crate) fn last_node(&self) -> &NodeName {
        &self.ctx.node
    }

    /// Runs the next node. After an error the run is over; advancing again is not meaningful.
    pub(crate) fn advance(&mut self) -> Result<Progress, Error> {
        let graph = self.graph;
        let node = match self.cursor {
            Cursor::Done => return Ok(Progress::Done),
            Cursor::At(node) => node,
            Cursor::Start => {
                let state = &self.state;
                match catch_unwind(AssertUnwindSafe(|| graph.start(state))) {
                    Ok(Some(Goto::Node(node))) => node,
                    Ok(Some(Goto::End)) => {
                        self.cursor = Cursor::Done;
                        return Ok(Progress::Done);
                    }
                    Ok(None) => return Err(Error::NoRoute { node: START, goto: None }),
                    Err(payload) => {
                        return Err(Error::NodePanicked { node: START, message: panic_message(payload) })
                    }
                }
            }
        };
        if self.ctx.step >= self.limit as u64 {
            return Err(Error::RecursionLimit { limit: self.limit });
        }
        self.ctx.step += 1;
        self.ctx.node = graph.node_name(node);

        let (state, ctx) = (&mut self.state, &self.ctx);
        let routed = catch_unwind(AssertUnwindSafe(|| -> Result<Goto<G::Node>, Error> {
            let step = graph
                .run(node, state, ctx)
                .map_err(|source| Error::NodeFailed { node: ctx.node.clone(), source })?;
            if let Some(update) = step.update {
                state.apply(update);
            }
            match step.goto {
                Some(target) if graph.can_goto(node, target) => Ok(target),
                Some(target) => Err(Error::NoRoute {
                    node: ctx.node.clone(),
                    goto: Some(match target {
                        Goto::Node(n) => graph.node_name(n),
                        Goto::End => NodeName::from_static("end"),
                    }),
                }),
                None => graph.route(node, state).ok_or_else(|| Error::NoRoute { node: ctx.node.clone(), goto: None }),
            }
        }));
        let next = match routed {
            Ok(result) => result?,
            Err(payload) => {
                return Err(Error::NodePanicked { node: self.ctx.node.clone(), message: panic_message(payload) })
            }
        };
        self.cursor = match next {
            Goto::Node(next) => Cursor::At(next),
            Goto::End => Cursor::Done,
        };
        Ok(Progress::Stepped)
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

/// The events of a run, one per node, then [`Event::Done`]; see [`App::stream`](crate::App::stream).
///
/// A run that fails yields its error and ends.
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
    type Item = Result<crate::Event<G::State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.over {
            return None;
        }
        match self.run.advance() {
            Ok(Progress::Stepped) => Some(Ok(crate::Event::Step {
                node: self.run.last_node().clone(),
                branch: None,
                state: self.run.state.clone(),
            })),
            Ok(Progress::Done) => {
                self.over = true;
                Some(Ok(crate::Event::Done(self.run.state.clone())))
            }
            Err(error) => {
                self.over = true;
                Some(Err(error))
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
