//! Fan-out and fan-in: `parallel a => [x, y, z] -> join;`.
//!
//! Each branch runs on the rayon pool on its own copy of the state, following its own edges
//! until it reaches the join (a nested fan-out inside a branch runs the same way). The updates
//! each branch made are kept and, at the join, applied to the main state through the reducers in
//! declared branch order, so the result does not depend on which branch finished first. Two
//! branches replacing the same field is [`Error::ConflictingWrites`].

use crate::error::Error;
use crate::event::Event;
use crate::exec::{run_node, After};
use crate::graph::{Fork, Graph};
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, Goto};
use crate::state::{GraphState, StateUpdate, Write};
use rayon::prelude::*;
use std::fmt;

/// What the branches of a fan-out share.
pub(crate) struct Env {
    pub(crate) thread: Option<ThreadId>,
    /// The step of the node the fan-out follows.
    pub(crate) base_step: u64,
    /// How many node runs each branch may still take.
    pub(crate) budget: u64,
    pub(crate) limit: usize,
    pub(crate) record: bool,
}

/// One branch after it reached its join.
pub(crate) struct Branch<S: GraphState> {
    head: NodeName,
    state: S,
    updates: Vec<S::Update>,
    pub(crate) steps: u64,
    pub(crate) events: Vec<Event<S>>,
}

impl<S: GraphState> Branch<S> {
    pub(crate) fn into_state(self) -> BranchState<S> {
        BranchState { head: self.head, state: self.state }
    }
}

/// The final state of one parallel branch, as the join sees it through
/// [`Ctx::branches`](crate::Ctx::branches).
pub struct BranchState<S> {
    head: NodeName,
    state: S,
}

impl<S> BranchState<S> {
    /// The branch's first node, which names the branch.
    pub fn head(&self) -> &NodeName {
        &self.head
    }

    /// The branch's own copy of the state when it reached the join: the state at the fan-out
    /// plus this branch's updates only.
    pub fn state(&self) -> &S {
        &self.state
    }
}

impl<S: fmt::Debug> fmt::Debug for BranchState<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BranchState").field("head", &self.head).field("state", &self.state).finish()
    }
}

/// Runs every branch of `fork` from `base`, concurrently; the results come back in declared
/// order. Every branch runs to its end; the first error in declared order wins.
pub(crate) fn run_fork<G: Graph>(
    graph: &G,
    fork: Fork<'_, G::Node>,
    base: &G::State,
    env: &Env,
) -> Result<Vec<Branch<G::State>>, Error> {
    let results: Vec<Result<Branch<G::State>, Error>> =
        fork.heads.par_iter().map(|&head| run_branch(graph, head, fork.join, base.clone(), env)).collect();
    results.into_iter().collect()
}

fn run_branch<G: Graph>(
    graph: &G,
    head: G::Node,
    join: G::Node,
    mut state: G::State,
    env: &Env,
) -> Result<Branch<G::State>, Error> {
    let head_name = graph.node_name(head);
    let mut ctx = Ctx::new(head_name.clone(), env.thread.clone());
    ctx.branch = Some(head_name.clone());
    let mut updates = Vec::new();
    let mut events = Vec::new();
    let mut steps: u64 = 0;
    let mut node = head;
    while node != join {
        if steps >= env.budget {
            return Err(Error::RecursionLimit { limit: env.limit });
        }
        steps += 1;
        ctx.step = env.base_step + steps;
        ctx.node = graph.node_name(node);
        let after = run_node(graph, node, &mut state, &ctx, Some(&mut updates))?;
        if env.record {
            events.push(Event::Step { node: ctx.node.clone(), branch: Some(head_name.clone()), state: state.clone() });
        }
        node = match after {
            After::Goto(Goto::Node(next)) => next,
            // A branch that finishes the run early simply ends; its updates still merge.
            After::Goto(Goto::End) => break,
            After::Fork(inner) => {
                let inner_env = Env {
                    thread: env.thread.clone(),
                    base_step: ctx.step,
                    budget: env.budget - steps,
                    limit: env.limit,
                    record: env.record,
                };
                let mut inner_branches = run_fork(graph, inner, &state, &inner_env)?;
                steps += inner_branches.iter().map(|b| b.steps).sum::<u64>();
                if steps > env.budget {
                    return Err(Error::RecursionLimit { limit: env.limit });
                }
                check_conflicts::<G::State>(&inner_branches)?;
                for branch in &mut inner_branches {
                    events.append(&mut branch.events);
                    for update in &branch.updates {
                        updates.push(update.clone());
                    }
                }
                apply_all(&mut state, &mut inner_branches, &ctx.node)?;
                inner.join
            }
        };
    }
    Ok(Branch { head: head_name, state, updates, steps, events })
}

/// Applies every branch's updates to `state`, in declared branch order, after checking that no
/// two branches replace the same field.
/// A reducer that panics here is reported on `join`.
pub(crate) fn merge<S: GraphState>(state: &mut S, branches: &mut [Branch<S>], join: &NodeName) -> Result<(), Error> {
    check_conflicts(branches)?;
    apply_all(state, branches, join)
}

fn apply_all<S: GraphState>(state: &mut S, branches: &mut [Branch<S>], blame: &NodeName) -> Result<(), Error> {
    // Reducers are user code (`with = f`) or can overflow (`sum`): keep the engine's promise that
    // a panic becomes an error.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for branch in branches.iter_mut() {
            for update in branch.updates.drain(..) {
                state.apply(update);
            }
        }
    }))
    .map_err(|payload| Error::NodePanicked { node: blame.clone(), message: crate::exec::panic_message(payload) })
}

fn check_conflicts<S: GraphState>(branches: &[Branch<S>]) -> Result<(), Error> {
    for (index, field) in S::FIELDS.iter().enumerate() {
        let writers: Vec<NodeName> = branches
            .iter()
            .filter(|b| b.updates.iter().any(|u: &S::Update| u.writes(index) == Some(Write::Replace)))
            .map(|b| b.head.clone())
            .collect();
        if writers.len() > 1 {
            return Err(Error::ConflictingWrites { field: field.name, branches: writers });
        }
    }
    Ok(())
}
