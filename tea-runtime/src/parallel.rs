//! Fan-out and fan-in: `parallel a => [x, y, z] -> join;`.
//!
//! Each branch runs on the rayon pool on its own copy of the state, following its own edges
//! until it reaches the join (a nested fan-out inside a branch runs the same way). The updates
//! each branch made are kept and, at the join, applied to the main state through the reducers in
//! declared branch order, so the result does not depend on which branch finished first. Two
//! branches replacing the same field is [`Error::ConflictingWrites`].
//!
//! A branch may stop at a breakpoint. Its siblings still run to the join; then the fan-out as a
//! whole pauses, and its checkpoint keeps every branch's progress (state, updates, position),
//! like LangGraph's pending writes: on resume only the stopped branches continue.

use crate::checkpoint::{BranchAt, BranchProgress};
use crate::error::Error;
use crate::event::Event;
use crate::exec::{asked, execute, goto_of, node_named, route_from, target_of, After, Executed};
use crate::graph::{Fork, Graph};
use crate::name::{NodeName, ThreadId};
use crate::node::{Ctx, Goto};
use crate::resume::{Interrupt, PauseKind};
use crate::state::{GraphState, StateUpdate, Write};
use rayon::prelude::*;
use std::fmt;

/// What the branches of a fan-out share.
pub(crate) struct Env {
    pub(crate) thread: Option<ThreadId>,
    /// The step of the node the fan-out follows.
    pub(crate) base_step: u64,
    /// How many node runs the branches may take, each.
    pub(crate) budget: u64,
    pub(crate) limit: usize,
    pub(crate) record: bool,
    /// Whether breakpoints stop branches (only with a checkpointer).
    pub(crate) pausable: bool,
}

/// One branch, at its join or stopped at a breakpoint.
pub(crate) struct Branch<S: GraphState> {
    head: NodeName,
    state: S,
    updates: Vec<S::Update>,
    pub(crate) steps: u64,
    pub(crate) events: Vec<Event<S>>,
    at: BranchAt,
    /// The answers to the earlier pauses of the node the branch stopped at.
    answers: Vec<serde_json::Value>,
    interrupt: Option<Interrupt>,
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

/// How a fan-out ended.
pub(crate) enum ForkOutcome<S: GraphState> {
    /// Every branch reached the join; merge them.
    Joined { branches: Vec<Branch<S>>, steps: u64 },
    /// Some branches stopped at breakpoints: pause with every branch's progress.
    Paused { branches: Vec<BranchProgress<S>>, interrupts: Vec<Interrupt>, events: Vec<Event<S>> },
}

/// Where a branch starts (or continues).
#[derive(Clone, Copy)]
enum Start<N> {
    /// Run `N` next; `true`: it was stopped before and is resumed past its breakpoint.
    Before(N, bool),
    /// `N` ran; route from it.
    After(N, Option<Goto<N>>),
}

/// Runs every branch of `fork` from `base` (or, resuming, continues the stopped ones in
/// `saved`), concurrently; the results come back in declared order. Every branch runs to its
/// end; the first error in declared order wins.
pub(crate) fn run_fork<G: Graph>(
    graph: &G,
    fork: Fork<'_, G::Node>,
    base: &G::State,
    env: &Env,
    saved: Vec<BranchProgress<G::State>>,
) -> Result<ForkOutcome<G::State>, Error> {
    let results: Vec<Result<Branch<G::State>, Error>> = if saved.is_empty() {
        fork.heads
            .par_iter()
            .map(|&head| {
                let name = graph.node_name(head);
                let fresh = Progress { state: base.clone(), updates: Vec::new(), steps: 0, answers: Vec::new() };
                run_branch(graph, name, fork.join, fresh, Start::Before(head, false), env)
            })
            .collect()
    } else {
        saved.into_par_iter().map(|progress| continue_branch(graph, fork.join, progress, env)).collect()
    };
    let mut branches: Vec<Branch<G::State>> = results.into_iter().collect::<Result<_, _>>()?;
    if branches.iter().any(|b| b.interrupt.is_some()) {
        let interrupts = branches.iter().filter_map(|b| b.interrupt.clone()).collect();
        let mut events = Vec::new();
        for branch in &mut branches {
            events.append(&mut branch.events);
        }
        let branches = branches
            .into_iter()
            .map(|b| BranchProgress {
                head: b.head,
                state: b.state,
                updates: b.updates,
                steps: b.steps,
                at: b.at,
                answers: b.answers,
                pending: b.interrupt,
                resume: false,
            })
            .collect();
        return Ok(ForkOutcome::Paused { branches, interrupts, events });
    }
    let steps = branches.iter().map(|b| b.steps).sum();
    Ok(ForkOutcome::Joined { branches, steps })
}

/// Continues a branch from its checkpointed progress: a branch at its join, or one whose pause
/// was not answered, stays as it is.
fn continue_branch<G: Graph>(
    graph: &G,
    join: G::Node,
    progress: BranchProgress<G::State>,
    env: &Env,
) -> Result<Branch<G::State>, Error> {
    let BranchProgress { head, state, updates, steps, at, answers, pending, resume } = progress;
    if matches!(at, BranchAt::Joined) || !resume {
        return Ok(Branch { head, state, updates, steps, events: Vec::new(), at, answers, interrupt: pending });
    }
    let thread = env.thread.clone().unwrap_or_else(|| ThreadId::from(""));
    let start = match &at {
        BranchAt::Joined => unreachable!("handled above"),
        BranchAt::Before(name) => Start::Before(node_named(graph, name, &thread)?, true),
        BranchAt::After { node, goto } => {
            Start::After(node_named(graph, node, &thread)?, goto_of(graph, goto, &thread)?)
        }
    };
    run_branch(graph, head, join, Progress { state, updates, steps, answers }, start, env)
}

/// What a branch carries from node to node.
struct Progress<S: GraphState> {
    state: S,
    updates: Vec<S::Update>,
    steps: u64,
    /// Answers for the branch's next node (a resumed pause).
    answers: Vec<serde_json::Value>,
}

fn run_branch<G: Graph>(
    graph: &G,
    head: NodeName,
    join: G::Node,
    progress: Progress<G::State>,
    start: Start<G::Node>,
    env: &Env,
) -> Result<Branch<G::State>, Error> {
    let Progress { mut state, mut updates, mut steps, mut answers } = progress;
    let mut ctx = Ctx::new(head.clone(), env.thread.clone());
    ctx.branch = Some(head.clone());
    let mut events = Vec::new();
    let mut at = start;
    loop {
        let node = match at {
            Start::Before(node, resumed) => {
                if node == join {
                    break;
                }
                if env.pausable && !resumed && graph.interrupt_before(node) {
                    let name = graph.node_name(node);
                    let interrupt = Interrupt::breakpoint(PauseKind::Before, name.clone(), Some(&head));
                    let at = BranchAt::Before(name);
                    return Ok(Branch { head, state, updates, steps, events, at, answers, interrupt: Some(interrupt) });
                }
                node
            }
            Start::After(node, goto) => {
                let name = graph.node_name(node);
                at = match route_from(graph, node, goto, &state, &name)? {
                    After::Goto(Goto::Node(next)) => Start::Before(next, false),
                    // A branch that finishes the run early simply ends; its updates still merge.
                    After::Goto(Goto::End) => break,
                    After::Fork(source) => {
                        let Some(inner) = graph.fork(source) else {
                            return Err(Error::NoRoute { node: name, goto: None });
                        };
                        steps += nested_fork(graph, inner, &mut state, &mut updates, &mut events, steps, &ctx, env)?;
                        Start::Before(inner.join, false)
                    }
                };
                continue;
            }
        };
        if steps >= env.budget {
            return Err(Error::RecursionLimit { limit: env.limit });
        }
        ctx.step = env.base_step + steps + 1;
        ctx.node = graph.node_name(node);
        let given = std::mem::take(&mut answers);
        let goto = match execute(graph, node, &mut state, &ctx, Some(&mut updates), given)? {
            Executed::Ran(goto) => goto,
            Executed::Paused { payload, answers } => {
                if !env.pausable {
                    return Err(Error::NodeFailed {
                        node: ctx.node.clone(),
                        source: "a node paused inside a nested fan-out, where tea cannot pause".into(),
                    });
                }
                let interrupt = asked(graph, node, payload, answers.len(), Some(&head));
                let at = BranchAt::Before(ctx.node.clone());
                return Ok(Branch { head, state, updates, steps, events, at, answers, interrupt: Some(interrupt) });
            }
        };
        steps += 1;
        if env.record {
            events.push(Event::Step { node: ctx.node.clone(), branch: Some(head.clone()), state: state.clone() });
        }
        if env.pausable && graph.interrupt_after(node) {
            let name = ctx.node.clone();
            let interrupt = Interrupt::breakpoint(PauseKind::After, name.clone(), Some(&head));
            let at = BranchAt::After { node: name, goto: target_of(graph, goto) };
            return Ok(Branch { head, state, updates, steps, events, at, answers, interrupt: Some(interrupt) });
        }
        at = Start::After(node, goto);
    }
    Ok(Branch { head, state, updates, steps, events, at: BranchAt::Joined, answers, interrupt: None })
}

/// A fan-out inside a branch: runs and merges it into the branch's state (its updates become
/// the branch's), returning the node runs it took. Breakpoints do not stop nested branches
/// (`graph!` refuses them).
#[allow(clippy::too_many_arguments)]
fn nested_fork<G: Graph>(
    graph: &G,
    fork: Fork<'_, G::Node>,
    state: &mut G::State,
    updates: &mut Vec<<G::State as GraphState>::Update>,
    events: &mut Vec<Event<G::State>>,
    steps: u64,
    ctx: &Ctx<G::State>,
    env: &Env,
) -> Result<u64, Error> {
    let inner_env = Env {
        thread: env.thread.clone(),
        base_step: ctx.step,
        budget: env.budget.saturating_sub(steps),
        limit: env.limit,
        record: env.record,
        pausable: false,
    };
    let ForkOutcome::Joined { mut branches, steps: taken } = run_fork(graph, fork, state, &inner_env, Vec::new())?
    else {
        return Err(Error::NoRoute { node: ctx.node.clone(), goto: None });
    };
    if steps + taken > env.budget {
        return Err(Error::RecursionLimit { limit: env.limit });
    }
    check_conflicts::<G::State>(&branches)?;
    for branch in &mut branches {
        events.append(&mut branch.events);
        updates.extend(branch.updates.iter().cloned());
    }
    apply_all(state, &mut branches, &graph.node_name(fork.join))?;
    Ok(taken)
}

/// Applies every branch's updates to `state`, in declared branch order, after checking that no
/// two branches replace the same field. A reducer that panics here is reported on `join`.
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
