//! Running a node under what its graph declares of it ([`NodePolicy`]): its cache, its time
//! limit and its retries. The one way both the main line (`run`) and branches (`fork`) run a
//! node; a node without a policy goes straight to its driver, at no cost.
//!
//! The order, for a node with all three: its cached result for the same input if there is one
//! (an [`Event::CacheHit`](crate::Event::CacheHit), the node does not run); else a run within
//! its time limit; a failure its retry policy retries waits its backoff (an
//! [`Event::Retry`](crate::Event::Retry)) and runs it again, each run with the same limit; a
//! result that is neither a failure nor a pause is kept in the cache.
//!
//! Every loop here ends: a node runs at most [`RetryPolicy::MAX_ATTEMPTS`] times whatever its
//! policy says, and each retry is a node run of the line's recursion limit (a line out of
//! steps fails with [`Error::RecursionLimit`] instead of retrying).

use crate::machine::driver::Driver;
use crate::machine::step::clock_of;
use crate::model::graph::Graph;
use crate::model::node::{Ctx, Goto};
use crate::model::produce::Produced;
use crate::model::scope::{cache_graph, cache_key, cache_store, entry_bytes, read_entry, CacheKey, Cached, Emit};
use crate::vocab::error::{error_chain, Error};
use crate::vocab::policy::{CachePolicy, NodePolicy, RetryPolicy};
use crate::vocab::state::GraphState;
use std::sync::atomic::Ordering;

/// Whether `node` runs by a plain call of the driver ([`Driver::produce_ready`]) rather than
/// through [`run_node`]'s future: a [`Driver::READY`] driver, a node without a policy, a line that
/// streams nothing. Most steps, on the main line and in branches alike; the result is the same,
/// without a future made and polled for it.
#[inline]
pub(crate) fn runs_plain<G: Graph, D: Driver<G>>(graph: &G, node: G::Node, ctx: &Ctx<G::State>) -> bool {
    D::READY && ctx.emitter.is_none() && graph.policy(node).is_none()
}

/// Runs `node` on `state` through `driver`, under its policy if it has one.
#[inline]
pub(crate) async fn run_node<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    node: G::Node,
    state: &G::State,
    ctx: &Ctx<G::State>,
    answers: Vec<serde_json::Value>,
) -> Result<Produced<G::State, G::Node>, Error> {
    if ctx.emitter.is_some() {
        ctx.note(Emit::Started(clock_of(ctx).time()));
    }
    match graph.policy(node) {
        None => driver.produce(graph, node, state, ctx, answers).await,
        // Boxed: the step's own future stays the size of an unguarded node's.
        Some(policy) => Box::pin(governed(driver, graph, node, state, ctx, answers, *policy)).await,
    }
}

async fn governed<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    node: G::Node,
    state: &G::State,
    ctx: &Ctx<G::State>,
    mut answers: Vec<serde_json::Value>,
    policy: NodePolicy,
) -> Result<Produced<G::State, G::Node>, Error> {
    // A node answering its pause is not cached: its result depends on the answers too.
    let cache = match policy.cache {
        Some(cache) if answers.is_empty() => {
            let key = cache_key(&ctx.node, graph.schema_fingerprint(), state, &cache)?;
            if let Some(hit) = lookup(driver, graph, ctx, &cache, &key).await? {
                ctx.note(Emit::CacheHit);
                crate::vocab::trace::traced! {
                    tracing::debug!(target: "tea", node = %ctx.node, "cache hit");
                }
                return Ok(hit);
            }
            Some((cache, key))
        }
        _ => None,
    };
    let attempts = policy.retry.map_or(1, |retry| retry.attempts.clamp(1, RetryPolicy::MAX_ATTEMPTS));
    let mut attempt = 1;
    loop {
        let given = if attempt < attempts { answers.clone() } else { std::mem::take(&mut answers) };
        let produced = match policy.timeout {
            Some(limit) => driver.produce_within(graph, node, state, ctx, given, limit).await,
            None => driver.produce(graph, node, state, ctx, given).await,
        };
        match produced {
            Err(error) if attempt < attempts && policy.retry.is_some_and(|retry| retry.retries(&error)) => {
                // A retry is a node run: it takes one of the line's steps, and a line out of
                // them stops on its recursion limit rather than retrying on.
                if u64::from(attempt) > ctx.steps_left {
                    return Err(Error::RecursionLimit { limit: ctx.limits.recursion });
                }
                ctx.retried.fetch_add(1, Ordering::Relaxed);
                let retry = policy.retry.unwrap_or(RetryPolicy::attempts(1));
                let wait = retry.wait_before(attempt + 1, random(ctx));
                let reason = error_chain(&error);
                crate::vocab::trace::traced! {
                    tracing::warn!(target: "tea", node = %ctx.node, attempt, wait_ms = wait.as_millis() as u64, error = %reason, "retry");
                }
                ctx.note(Emit::Retry { attempt, error: reason, wait });
                driver.sleep(wait).await;
                attempt += 1;
            }
            Ok(Produced::Ran { update, goto, more: None }) => {
                if let Some((cache, key)) = cache {
                    keep(driver, graph, ctx, &cache, key, update.as_ref(), goto).await?;
                }
                return Ok(Produced::Ran { update, goto, more: None });
            }
            other => return other,
        }
    }
}

/// A number in `0.0..1.0` for a retry's jitter, drawn from the run's clock (no need for a good
/// generator: it only keeps many failing runs from retrying in step).
fn random<S>(ctx: &Ctx<S>) -> f64 {
    (clock_of(ctx).random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The cached result of `key`, if there is one.
async fn lookup<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    ctx: &Ctx<G::State>,
    cache: &CachePolicy,
    key: &CacheKey,
) -> Result<Option<Produced<G::State, G::Node>>, Error> {
    let Some(shared) = &ctx.shared else { return Ok(None) };
    let bytes = match cache_store(cache, ctx.tenure.as_deref()) {
        Some(store) => {
            let (name, thread) = (cache_graph(graph.name()), key.thread());
            driver.head(store, &name, &thread).await?.map(|(_, bytes)| bytes)
        }
        None => shared.remembered(key),
    };
    let Some(Cached { update, goto }) = bytes.and_then(|bytes| read_entry(&bytes, cache, key, clock_of(ctx).now_ms()))
    else {
        return Ok(None);
    };
    // A result that no longer fits the graph (its update's type or its router's targets
    // changed) is a miss.
    let update = match update.map(serde_json::from_value::<<G::State as GraphState>::Update>) {
        None => None,
        Some(Ok(update)) => Some(update),
        Some(Err(_)) => return Ok(None),
    };
    let goto = match goto.as_deref() {
        None => None,
        // The end is kept as "" (no node has an empty name).
        Some("") => Some(Goto::End),
        Some(name) => match graph.node_named(name) {
            Some(target) => Some(Goto::Node(target)),
            None => return Ok(None),
        },
    };
    Ok(Some(Produced::Ran { update, goto, more: None }))
}

/// Keeps a node's result under `key`.
async fn keep<G: Graph, D: Driver<G>>(
    driver: &D,
    graph: &G,
    ctx: &Ctx<G::State>,
    cache: &CachePolicy,
    key: CacheKey,
    update: Option<&<G::State as GraphState>::Update>,
    goto: Option<Goto<G::Node>>,
) -> Result<(), Error> {
    let Some(shared) = &ctx.shared else { return Ok(()) };
    let update = match update.map(serde_json::to_value) {
        None => None,
        Some(Ok(update)) => Some(update),
        Some(Err(error)) => {
            return Err(Error::NodeFailed {
                node: ctx.node.clone(),
                source: format!("its result cannot be cached: its update does not serialize: {error}").into(),
            })
        }
    };
    let goto = goto.map(|goto| match goto {
        Goto::End => String::new(),
        Goto::Node(target) => graph.node_name(target).to_string(),
    });
    let bytes = entry_bytes(&key, Cached { update, goto }, clock_of(ctx).now_ms())?;
    match cache_store(cache, ctx.tenure.as_deref()) {
        Some(store) => {
            let (name, thread) = (cache_graph(graph.name()), key.thread());
            let head = driver.head(store, &name, &thread).await?.map(|(id, _)| id);
            // Two runs caching the same key at once store the same result: losing the race
            // (`AppendOutcome::Conflict`) is as good as winning it.
            driver.append(store, &name, &thread, head, head.map_or(1, |id| id + 1), &bytes, false).await?;
            Ok(())
        }
        None => {
            shared.remember(&key, bytes, cache.ttl, clock_of(ctx).now_ms());
            Ok(())
        }
    }
}
