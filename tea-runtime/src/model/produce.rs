//! Running one node: the node's function on the state with the answers to its earlier pauses,
//! its panics caught, and what it asked of its [`Hitl`] read back — a pause, a bad answer, or
//! its update and routing. Both drivers run nodes through here; nothing here applies or routes.

use crate::format::interrupt::Interrupt;
use crate::model::graph::Graph;
use crate::model::hitl::{Asked, Hitl};
use crate::model::node::{Ctx, Goto, More};
use crate::vocab::error::{panic_message, Error, Passthrough};
use crate::vocab::state::GraphState;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What running a node produced, before anything is applied. Small, because every step moves
/// one: what few steps do (send, route a parent, pause) is boxed.
pub(crate) enum Produced<S: GraphState, N> {
    /// The node ran: its update, a router's choice, and what it sent or where it routes its
    /// parent graph.
    Ran { update: Option<S::Update>, goto: Option<Goto<N>>, more: Option<Box<More<S, N>>> },
    /// The node paused through its `Hitl`.
    Paused(Box<Paused<S>>),
}

/// A node's pause through its `Hitl`.
pub(crate) struct Paused<S: GraphState> {
    /// What the node asked with.
    pub(crate) payload: serde_json::Value,
    /// The answers it was given, to give it again on resume.
    pub(crate) answers: Vec<serde_json::Value>,
    /// The update it keeps anyway ([`Graph::keeps_update_on_pause`]).
    pub(crate) kept: Option<S::Update>,
    /// The pauses of a subgraph node's child, as the parent lists them (empty for a node's own
    /// pause).
    pub(crate) nested: Vec<Interrupt>,
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
        produced(graph, node, ctx, result, hitl)
    }));
    outcome
        .unwrap_or_else(|payload| Err(Error::NodePanicked { node: ctx.node.clone(), message: panic_message(payload) }))
}

/// What a node run that returned `result` produced, given what it asked of its `hitl`: a pause,
/// a bad answer, or its update and routing.
pub(crate) fn produced<G: Graph>(
    graph: &G,
    node: G::Node,
    ctx: &Ctx<G::State>,
    result: Result<crate::model::node::NodeStep<G::State, G::Node>, crate::vocab::error::BoxError>,
    mut hitl: Hitl,
) -> Result<Produced<G::State, G::Node>, Error> {
    {
        match hitl.asked.take() {
            None => {}
            Some(Asked::Pause(payload)) => {
                let kept = match result {
                    Ok(step) if graph.keeps_update_on_pause(node) => step.update,
                    _ => None,
                };
                let answers = hitl.into_answers();
                return Ok(Produced::Paused(Box::new(Paused { payload, answers, kept, nested: Vec::new() })));
            }
            Some(Asked::Child(nested)) => {
                let payload = serde_json::Value::Null;
                let answers = hitl.into_answers();
                return Ok(Produced::Paused(Box::new(Paused { payload, answers, kept: None, nested })));
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
        let step = result.map_err(|source| match source.downcast::<Passthrough>() {
            // A subgraph node's child found its thread owned by a live run, or an ancestor's
            // thread taken over: the run reports that, not the node's failure.
            Ok(through) => through.0,
            Err(source) => Error::NodeFailed { node: ctx.node.clone(), source },
        })?;
        Ok(Produced::Ran { update: step.update, goto: step.goto, more: step.more })
    }
}
