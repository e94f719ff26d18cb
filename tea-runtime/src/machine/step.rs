//! The decisions of a step that do not depend on where a line stands: applying an update
//! through the reducers, naming a node's pause, routing out of a node, and reading node names
//! back from a checkpoint. The step machine of every line (`line`) is made of them; time travel
//! (`api::timetravel`) routes with them too.

use crate::format::checkpoint::Target;
use crate::format::interrupt::{Interrupt, PauseKind};
use crate::model::graph::Graph;
use crate::model::node::{Ctx, Goto};
use crate::vocab::clock::Clock;
use crate::vocab::error::{panic_message, Error};
use crate::vocab::name::{NodeName, ThreadId, END};
use crate::vocab::state::GraphState;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What follows a node.
pub(crate) enum After<N> {
    Goto(Goto<N>),
    Fork(N),
}

/// The clock of the run `ctx` belongs to ([`Tenure::clock`](crate::tenure::Tenure)): a run
/// without a store reads the system's.
pub(crate) fn clock_of<S>(ctx: &Ctx<S>) -> &Clock {
    static SYSTEM: Clock = Clock::system();
    ctx.tenure.as_ref().map_or(&SYSTEM, |tenure| &tenure.clock)
}

/// The pause a node asked for: its id counts the node's pauses (`ask#0`, `ask#1`, …; `@head`
/// inside a branch), and an interrupt node's timeout sets when it expires (`now`: seconds since
/// the Unix epoch, on its run's clock).
pub(crate) fn asked<G: Graph>(
    graph: &G,
    node: G::Node,
    payload: serde_json::Value,
    index: usize,
    branch: Option<&NodeName>,
    now: u64,
) -> Interrupt {
    let name = graph.node_name(node);
    let id = match branch {
        Some(head) => format!("{name}#{index}@{head}"),
        None => format!("{name}#{index}"),
    };
    let mut interrupt = Interrupt::new(id, name, payload);
    interrupt.kind = PauseKind::Ask;
    interrupt.expires_at = graph.pause_timeout(node).map(|secs| now.saturating_add(secs));
    interrupt
}

/// Where a line goes after `node` (named `name`): a router's choice if it made one (checked
/// against its declaration), else its fan-out, else its edges — a single unguarded one without
/// reading the state, which `state` gives only when a guard reads it. Guards' panics are caught.
#[inline]
pub(crate) fn route_from<'s, G: Graph>(
    graph: &G,
    node: G::Node,
    goto: Option<Goto<G::Node>>,
    state: impl FnOnce() -> Result<&'s G::State, Error>,
    name: &NodeName,
) -> Result<After<G::Node>, Error>
where
    G::State: 's,
{
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
    if let Some(target) = graph.fixed_route(node) {
        return Ok(After::Goto(target));
    }
    let state = state()?;
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
