//! Time travel: a thread's state written as if a node had produced an update
//! ([`App::update_state`]), and a new thread started from any past checkpoint of another
//! ([`App::fork`]), with the threads of the subgraph nodes paused inside their child at that
//! checkpoint forked along.
//!
//! A fork is a copy of bytes, not a re-run: the new thread's first checkpoint is the old one's,
//! its lease dropped, its pause (if any) given a fresh nonce so that no token of the original
//! resumes the fork. The child threads are copied as JSON (`checkpoint::edit_raw`), since the
//! parent's app does not know its children's state types: each up to its newest checkpoint
//! paused with the memo's state, renumbered from 1 (a child over its parent's state reads its
//! first checkpoint back to tell what it changed), recursively for their own paused children,
//! and the memo renamed to the copy, which the subgraph node reads when it runs again.
//!
//! `update_state` reads the head through `decode_for`, refuses a live lease
//! ([`Error::ThreadBusy`]) and a fan-out under way ([`Error::InsideFanOut`]), applies the update
//! through `machine::step::apply_update`, routes with `route_from` (the node's edges, guards or
//! fan-out) with the step count plus one, clears the pause, and appends by compare-and-swap on
//! the head it read. The async forms: `update_state_async` uses the store's async `head` and
//! `append`; `fork_async` runs `fork`'s store calls through `store::blocking`.

use crate::api::app::App;
use crate::format::checkpoint::{self, Checkpoint, Position};
use crate::format::memo::MEMO;
use crate::machine::step::{apply_update, route_from, After};
use crate::machine::validate::{decode_for, identity};
use crate::model::graph::Graph;
use crate::model::node::Goto;
use crate::model::outcome::Snapshot;
use crate::store::{fold, AppendOutcome, Checkpointer};
use crate::vocab::clock::Clock;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, ThreadId};
use crate::vocab::state::GraphState;
use crate::vocab::trace;
use serde_json::{Map, Value};
use std::time::Duration;

/// How deep forks follow subgraph nodes paused inside children of children.
const MAX_DEPTH: usize = 64;

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// Writes a new checkpoint at the head of `thread` as if node `as_node` had run and
    /// produced `update`: the update goes through the reducers, and the run goes on where
    /// `as_node`'s edges and guards lead on the new state (its fan-out, if it has one). A
    /// [`Call::recover`](crate::Call::recover) then continues from there (its breakpoints stop it, as they
    /// would after `as_node` ran). Returns the new checkpoint's [`Snapshot`] (its
    /// [`next`](Snapshot::next) is where the run goes on).
    ///
    /// A paused thread's pause is replaced: its token becomes stale ([`Error::StaleResume`]).
    /// The step count grows by one, as for a node run, so a subgraph node run after it starts a
    /// child thread of its own. Nothing runs: no node, no guard but `as_node`'s.
    ///
    /// # Errors
    /// [`Error::UnknownNode`] when the graph has no node `as_node`; [`Error::CheckpointNotFound`]
    /// for a thread without checkpoints; [`Error::ThreadBusy`] while a run owns the thread (its
    /// lease has not expired, or a write moved the head meanwhile); [`Error::InsideFanOut`] when
    /// the thread stands inside a fan-out (branches under way or paused); [`Error::NoRoute`] when
    /// no edge out of `as_node` holds on the new state (a router node, whose choice is made by
    /// its function, has no edges to follow; a node that fans out by sends sends nothing, so
    /// the run goes on at its join); the reducers' [`Error::NodeFailed`] /
    /// [`Error::NodePanicked`] naming `as_node`; [`Error::StateNotStorable`]; [`Error::Store`].
    pub fn update_state(
        &self,
        thread: &ThreadId,
        update: <G::State as GraphState>::Update,
        as_node: &str,
    ) -> Result<Snapshot<G::State>, Error> {
        let (head, bytes) = self.head(thread)?;
        let (id, bytes) = self.updated(thread, head, &bytes, update, as_node)?;
        let graph = self.graph.name();
        let written = trace::store_call("append", graph, Some(thread), || {
            self.checkpointer.append(graph, thread, Some(head), id, &bytes, true)
        })?;
        self.after_update(thread, written, id, &bytes)
    }

    #[cfg(feature = "tokio")]
    /// [`update_state`](Self::update_state) for async code: the store is read and written with
    /// its async calls.
    ///
    /// # Errors
    /// Those of [`update_state`](Self::update_state).
    pub async fn update_state_async(
        &self,
        thread: &ThreadId,
        update: <G::State as GraphState>::Update,
        as_node: &str,
    ) -> Result<Snapshot<G::State>, Error> {
        let graph = self.graph.name();
        let (head, bytes) =
            trace::store_call_async("head", graph, Some(thread), fold::head_async(&*self.checkpointer, graph, thread))
                .await?
                .ok_or_else(|| Error::CheckpointNotFound { thread: thread.clone() })?;
        let (id, bytes) = self.updated(thread, head, &bytes, update, as_node)?;
        let written = trace::store_call_async(
            "append",
            graph,
            Some(thread),
            self.checkpointer.append_async(graph, thread, Some(head), id, &bytes, true),
        )
        .await?;
        self.after_update(thread, written, id, &bytes)
    }

    fn after_update(
        &self,
        thread: &ThreadId,
        written: AppendOutcome,
        id: CheckpointId,
        bytes: &[u8],
    ) -> Result<Snapshot<G::State>, Error> {
        match written {
            AppendOutcome::Written => self.snapshot(thread, id, bytes),
            AppendOutcome::Conflict { .. } => {
                Err(Error::ThreadBusy { thread: thread.clone(), expires_in: Duration::ZERO })
            }
        }
    }

    /// The checkpoint `update_state` writes after `head` (`bytes`), and its id.
    fn updated(
        &self,
        thread: &ThreadId,
        head: CheckpointId,
        bytes: &[u8],
        update: <G::State as GraphState>::Update,
        as_node: &str,
    ) -> Result<(CheckpointId, Vec<u8>), Error> {
        let graph = &*self.graph;
        let Some(node) = graph.node_named(as_node) else {
            return Err(Error::UnknownNode { graph: graph.name().to_owned(), node: as_node.to_owned().into() });
        };
        let name = graph.node_name(node);
        let mut ckpt: Checkpoint<G::State> = decode_for(graph, bytes, thread, head)?;
        if let Some(lease) = ckpt.lease {
            let now = self.clock.now_ms();
            if lease.until > now {
                return Err(Error::ThreadBusy {
                    thread: thread.clone(),
                    expires_in: Duration::from_millis(lease.until - now),
                });
            }
        }
        if let Position::Fork { source, branches } = &ckpt.at {
            if !branches.is_empty() {
                return Err(Error::InsideFanOut { thread: thread.clone(), node: source.clone(), checkpoint: head });
            }
        }
        apply_update(graph, &mut ckpt.state, update, &name)?;
        ckpt.at = match route_from(graph, node, None, || Ok(&ckpt.state), &name)? {
            // A node that sends: an update sends nothing, so the run goes on at its join.
            After::Fork(source) if graph.sends(source) => match graph.fork(source) {
                Some(fork) => Position::Before(graph.node_name(fork.join)),
                None => return Err(Error::NoRoute { node: name, goto: None }),
            },
            After::Goto(Goto::Node(next)) => Position::Before(graph.node_name(next)),
            After::Goto(Goto::End) => Position::Done,
            After::Fork(source) => Position::Fork { source: graph.node_name(source), branches: Vec::new() },
        };
        ckpt.step = ckpt.step.saturating_add(1);
        ckpt.pending.clear();
        ckpt.pause = None;
        ckpt.paused_at = None;
        ckpt.nonce = None;
        ckpt.resumed = false;
        ckpt.answers.clear();
        ckpt.joined.clear();
        ckpt.parent = None;
        ckpt.lease = None;
        let bytes = checkpoint::encode(&identity(graph), &ckpt)?;
        if let Err((path, reason)) = checkpoint::check_reads_back::<G::State>(&bytes) {
            return Err(Error::StateNotStorable { node: name, thread: thread.clone(), path, reason });
        }
        Ok((head + 1, bytes))
    }

    /// Starts thread `new_thread` from checkpoint `checkpoint` of `thread`: its first checkpoint
    /// is a copy of that one, and `thread` stays untouched. [`Call::recover`](crate::Call::recover) of the
    /// new thread continues as `recover` of `thread` would have from there: only what comes
    /// after the checkpoint runs. A paused checkpoint's pause is the fork's too, under a token of
    /// its own, which a recover of the fork hands out: a token of `thread`
    /// never resumes the fork, nor a token of the fork `thread`. A checkpoint written while a run
    /// held `thread` is copied without its lease, so the fork can be recovered at once.
    ///
    /// Subgraph nodes: a subgraph node paused inside its child at that checkpoint keeps its
    /// child where it paused — the child's thread (`{thread}/{node}@{step}`) is copied too, up to
    /// that pause, as `{new_thread}/{node}@{step}` (and its own paused children with it, to any
    /// depth), so resuming the fork resumes the child without running its completed nodes again.
    /// A subgraph node that had neither finished nor paused at that checkpoint runs its child
    /// from the start in the fork. Child threads left under `new_thread`'s name by a deleted
    /// thread of that id are replaced.
    ///
    /// Returns the fork's first checkpoint.
    ///
    /// # Errors
    /// [`Error::NoSuchCheckpoint`] when `thread` has no checkpoint `checkpoint` (never written,
    /// or pruned); [`Error::ThreadExists`] when `new_thread` has checkpoints;
    /// [`Error::InvalidThreadId`]; [`Error::CheckpointNotFound`] naming a child's thread that no
    /// longer holds the pause (deleted or pruned); [`Error::CorruptCheckpoint`],
    /// [`Error::GraphMismatch`], [`Error::SchemaMismatch`] for a checkpoint this graph cannot
    /// read; [`Error::Store`].
    pub fn fork(
        &self,
        thread: &ThreadId,
        checkpoint: CheckpointId,
        new_thread: impl Into<ThreadId>,
    ) -> Result<Snapshot<G::State>, Error> {
        let new_thread = new_thread.into();
        self.check_thread_id(&new_thread)?;
        let graph = self.graph.name();
        let store: &dyn Checkpointer = &*self.checkpointer;
        let bytes = trace::store_call("get", graph, Some(thread), || fold::get(store, graph, thread, checkpoint))?
            .ok_or_else(|| Error::NoSuchCheckpoint { thread: thread.clone(), checkpoint })?;
        // Read as this graph's, so that what is copied is a checkpoint it can continue.
        decode_for(&*self.graph, &bytes, thread, checkpoint)?;
        // Before any child is copied: a fork never writes under a thread that exists.
        if trace::store_call("head", graph, Some(&new_thread), || store.head(graph, &new_thread))?.is_some() {
            return Err(Error::ThreadExists { thread: new_thread });
        }
        let copy = fork_bytes(store, &self.clock, graph, &bytes, thread, checkpoint, &new_thread, 1, 0)?;
        let written = trace::store_call("append", graph, Some(&new_thread), || {
            store.append(graph, &new_thread, None, 1, &copy, true)
        })?;
        if let AppendOutcome::Conflict { .. } = written {
            return Err(Error::ThreadExists { thread: new_thread });
        }
        self.snapshot(&new_thread, 1, &copy)
    }

    #[cfg(feature = "tokio")]
    /// [`fork`](Self::fork) for async code: the store's calls run through tokio's
    /// `block_in_place` on a multi-threaded runtime, so the runtime's other tasks go on.
    ///
    /// # Errors
    /// Those of [`fork`](Self::fork).
    pub async fn fork_async(
        &self,
        thread: &ThreadId,
        checkpoint: CheckpointId,
        new_thread: impl Into<ThreadId>,
    ) -> Result<Snapshot<G::State>, Error> {
        let new_thread = new_thread.into();
        crate::store::blocking(|| self.fork(thread, checkpoint, new_thread))
    }
}

/// Checkpoint `id` of `thread` (of graph `graph`), as checkpoint `new_id` of `new_thread`: its
/// lease dropped, its pause renamed to `new_id` with a fresh nonce, and the children it waits
/// on forked along (their memos renamed).
#[allow(clippy::too_many_arguments)]
fn fork_bytes(
    store: &dyn Checkpointer,
    clock: &Clock,
    graph: &str,
    bytes: &[u8],
    thread: &ThreadId,
    id: CheckpointId,
    new_thread: &ThreadId,
    new_id: CheckpointId,
    depth: usize,
) -> Result<Vec<u8>, Error> {
    checkpoint::edit_raw(bytes, graph, thread, id, &mut |payload| {
        payload.remove("lease");
        if payload.get("pending").and_then(Value::as_array).is_some_and(|p| !p.is_empty()) {
            payload.insert("pause".to_owned(), Value::from(new_id));
            payload.insert("nonce".to_owned(), Value::from(clock.random_u64()));
        }
        let mut memos = Vec::new();
        memos_of(payload, &mut memos);
        for memo in memos {
            fork_child(store, clock, memo, thread, new_thread, depth)?;
        }
        Ok(())
    })
}

/// The memos of the subgraph nodes a checkpoint's payload holds: on the main line and in every
/// branch of a fan-out under way, nested fan-outs included. A node paused inside its child
/// keeps one, and so does a node whose resume claimed the thread but had not finished yet (its
/// child is continued from the memo's thread when it runs again): either way the fork must
/// continue a copy of the child, never the original's.
fn memos_of<'p>(payload: &'p mut Map<String, Value>, into: &mut Vec<&'p mut Map<String, Value>>) {
    let main_fork = payload.get("at").and_then(|at| at.get("fork")).is_some();
    let (answers, branches) = {
        let mut answers = None;
        let mut branches = None;
        for (key, value) in payload.iter_mut() {
            match key.as_str() {
                "answers" => answers = Some(value),
                "branches" => branches = Some(value),
                // The main line's fan-out keeps its branches in its position; a branch's
                // position never does (its nested branches are its own `branches`).
                "at" => {
                    if let Some(nested) = value.get_mut("fork").and_then(|fork| fork.get_mut("branches")) {
                        branches = Some(nested);
                    }
                }
                _ => {}
            }
        }
        (answers, branches)
    };
    // At the main line's fan-out, the memos are the branches' (as `paused_children` reads them).
    if !main_fork {
        if let Some(memo) = answers
            .and_then(Value::as_array_mut)
            .and_then(|a| a.first_mut())
            .and_then(|first| first.get_mut(MEMO))
            .and_then(Value::as_object_mut)
        {
            into.push(memo);
        }
    }
    for branch in branches.and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(branch) = branch.as_object_mut() {
            memos_of(branch, into);
        }
    }
}

/// Forks the child thread a memo names (its `graph` and `thread`) under `new_thread`, up to
/// the pause the memo records, and renames the memo's thread to the copy.
fn fork_child(
    store: &dyn Checkpointer,
    clock: &Clock,
    memo: &mut Map<String, Value>,
    parent: &ThreadId,
    new_parent: &ThreadId,
    depth: usize,
) -> Result<(), Error> {
    let (Some(graph), Some(child)) =
        (memo.get("graph").and_then(Value::as_str), memo.get("thread").and_then(Value::as_str))
    else {
        return Ok(());
    };
    let (graph, child) = (graph.to_owned(), ThreadId::from(child.to_owned()));
    let corrupt = |reason: String| Error::CorruptCheckpoint { thread: parent.clone(), checkpoint: 0, reason };
    if depth >= MAX_DEPTH {
        return Err(corrupt(format!("its subgraph nodes nest deeper than {MAX_DEPTH} levels")));
    }
    let rest = child.as_str().strip_prefix(parent.as_str()).and_then(|r| r.strip_prefix('/')).unwrap_or(child.as_str());
    let new_child = ThreadId::from(format!("{new_parent}/{rest}"));
    let state = memo.get("state").cloned().unwrap_or(Value::Null);
    let history = trace::store_call("history", &graph, Some(&child), || fold::history(store, &graph, &child))?;
    // The child's pause the memo records: the newest paused checkpoint with the memo's state.
    let mut found = None;
    for (i, (id, bytes)) in history.iter().enumerate() {
        let mut matches = false;
        checkpoint::edit_raw(bytes, &graph, &child, *id, &mut |payload| {
            let paused = payload.get("pending").and_then(Value::as_array).is_some_and(|p| !p.is_empty());
            matches = paused && payload.get("state") == Some(&state);
            Ok(())
        })?;
        if matches {
            found = Some(i);
            break;
        }
    }
    let Some(found) = found else { return Err(Error::CheckpointNotFound { thread: child }) };
    // The new parent thread does not exist: a child thread under its name is a leftover of a
    // deleted thread of that id (`delete` removes a thread, not its children's threads).
    trace::store_call("delete", &graph, Some(&new_child), || store.delete(&graph, &new_child))?;
    // Oldest first, numbered from 1: the child's first checkpoint is its input, which a child
    // over its parent's state reads back to tell what it changed.
    let kept = &history[found..];
    let last = kept.len();
    for (n, (id, bytes)) in kept.iter().rev().enumerate() {
        let new_id = n as CheckpointId + 1;
        let copy = if n + 1 == last {
            fork_bytes(store, clock, &graph, bytes, &child, *id, &new_child, new_id, depth + 1)?
        } else {
            checkpoint::edit_raw(bytes, &graph, &child, *id, &mut |payload| {
                payload.remove("lease");
                if payload.contains_key("pause") {
                    payload.insert("pause".to_owned(), Value::from(new_id));
                }
                Ok(())
            })?
        };
        let expected = (new_id > 1).then(|| new_id - 1);
        let written = trace::store_call("append", &graph, Some(&new_child), || {
            store.append(&graph, &new_child, expected, new_id, &copy, n + 1 == last)
        })?;
        if let AppendOutcome::Conflict { .. } = written {
            return Err(Error::ThreadExists { thread: new_child });
        }
    }
    memo.insert("thread".to_owned(), Value::from(new_child.as_str()));
    Ok(())
}
