//! The engine's reads of a thread's checkpoints from any [`Checkpointer`]: each record folded
//! from the full record at or before it (`format::delta`), so that every reader — a run
//! starting, resuming or recovering, `App::state` and `App::history`, time travel, a subgraph
//! node reading its child's thread — sees whole checkpoints, whichever records were written as
//! deltas. The stores themselves still see opaque bytes: this is a reader over their calls.

use super::{CheckpointId, Checkpointer};
use crate::format::checkpoint::{self, Folder};
use crate::vocab::error::Error;
use crate::vocab::name::ThreadId;

/// Record `id` of `thread` (`bytes`, as stored) as a full record: a full record as it is, a
/// delta folded from the records back to its full record (one [`Checkpointer::range`] call).
///
/// # Errors
/// The store's; [`Error::CorruptCheckpoint`] for a delta whose records do not fold (pruned,
/// damaged).
pub(crate) fn resolve<C: Checkpointer + ?Sized>(
    store: &C,
    graph: &str,
    thread: &ThreadId,
    id: CheckpointId,
    bytes: Vec<u8>,
) -> Result<Vec<u8>, Error> {
    let Some(from) = checkpoint::delta_base(&bytes, thread, id) else { return Ok(bytes) };
    let mut records = store.range(graph, thread, from, id - 1)?;
    records.push((id, bytes));
    checkpoint::fold(&records, thread)
}

/// The head of `thread`, as a full record.
///
/// # Errors
/// Those of [`resolve`].
pub(crate) fn head<C: Checkpointer + ?Sized>(
    store: &C,
    graph: &str,
    thread: &ThreadId,
) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
    match store.head(graph, thread)? {
        None => Ok(None),
        Some((id, bytes)) => resolve(store, graph, thread, id, bytes).map(|bytes| Some((id, bytes))),
    }
}

/// [`head`] through the store's async call; a delta's earlier records are read with the
/// blocking calls, through `store::blocking`.
///
/// # Errors
/// Those of [`resolve`].
#[cfg(feature = "tokio")]
pub(crate) async fn head_async<C: Checkpointer + ?Sized>(
    store: &C,
    graph: &str,
    thread: &ThreadId,
) -> Result<Option<(CheckpointId, Vec<u8>)>, Error> {
    match store.head_async(graph, thread).await? {
        None => Ok(None),
        Some((id, bytes)) => {
            if checkpoint::delta_base(&bytes, thread, id).is_none() {
                return Ok(Some((id, bytes)));
            }
            super::blocking(|| resolve(store, graph, thread, id, bytes)).map(|bytes| Some((id, bytes)))
        }
    }
}

/// Checkpoint `id` of `thread`, as a full record, if stored.
///
/// # Errors
/// Those of [`resolve`].
pub(crate) fn get<C: Checkpointer + ?Sized>(
    store: &C,
    graph: &str,
    thread: &ThreadId,
    id: CheckpointId,
) -> Result<Option<Vec<u8>>, Error> {
    match store.get(graph, thread, id)? {
        None => Ok(None),
        Some(bytes) => resolve(store, graph, thread, id, bytes).map(Some),
    }
}

/// Every checkpoint of `thread`, newest first, each as a full record. A delta whose full
/// record is no longer stored (the store was pruned without `App::prune`, which keeps the full
/// records its deltas need) cannot be read, and is left out.
///
/// # Errors
/// The store's; [`Error::CorruptCheckpoint`] for a record that does not fold.
pub(crate) fn history<C: Checkpointer + ?Sized>(
    store: &C,
    graph: &str,
    thread: &ThreadId,
) -> Result<Vec<(CheckpointId, Vec<u8>)>, Error> {
    let mut records = store.history(graph, thread)?;
    if records.iter().all(|(id, bytes)| checkpoint::delta_base(bytes, thread, *id).is_none()) {
        return Ok(records);
    }
    records.reverse();
    let mut folder = Folder::default();
    let mut full = Vec::with_capacity(records.len());
    for (id, bytes) in records {
        if !folder.started() && checkpoint::delta_base(&bytes, thread, id).is_some() {
            continue;
        }
        let bytes = folder.next(id, &bytes, thread)?;
        full.push((id, bytes));
    }
    full.reverse();
    Ok(full)
}

/// How many of the newest checkpoints of `thread` a prune keeping `keep_last` readable ones
/// must keep in the store: more than `keep_last` when the oldest of them is a delta, so that
/// the full record it folds from stays.
///
/// # Errors
/// The store's.
pub(crate) fn keep_for_prune<C: Checkpointer + ?Sized>(
    store: &C,
    graph: &str,
    thread: &ThreadId,
    keep_last: usize,
) -> Result<usize, Error> {
    let keep = keep_last.max(1);
    let Some((head, _)) = store.head(graph, thread)? else { return Ok(keep) };
    let Some(oldest) = head.checked_sub(keep as u64 - 1).filter(|&oldest| oldest > 1) else { return Ok(keep) };
    let Some(bytes) = store.get(graph, thread, oldest)? else { return Ok(keep) };
    match checkpoint::delta_base(&bytes, thread, oldest) {
        Some(from) => Ok(usize::try_from(head - from + 1).unwrap_or(usize::MAX)),
        None => Ok(keep),
    }
}
