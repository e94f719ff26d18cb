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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checkpoint::Identity;
    use crate::format::delta;
    use crate::store::{AppendOutcome, MemoryStore};
    use serde_json::{json, Value};

    /// A linear congruential generator: the same draws on every run.
    struct Draw(u64);

    impl Draw {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    /// The next payload after `value`: a step's changes, drawn (a list grows or shrinks, a
    /// field is set, added or removed, a nested value changes, a lease comes and goes).
    fn change(value: &Value, draw: &mut Draw) -> Value {
        let mut next = value.clone();
        let map = next.as_object_mut().expect("payloads are objects");
        map.insert("step".into(), json!(map["step"].as_u64().unwrap_or(0) + 1));
        for _ in 0..=draw.next(3) {
            let state = map.get_mut("state").and_then(Value::as_object_mut).expect("a state");
            match draw.next(7) {
                0 => {
                    let log = state.entry("log").or_insert_with(|| json!([]));
                    if let Some(log) = log.as_array_mut() {
                        log.push(json!(format!("entry {}", draw.next(1000))));
                    }
                }
                1 => {
                    if let Some(log) = state.get_mut("log").and_then(Value::as_array_mut) {
                        log.truncate(draw.next(4) as usize);
                    }
                }
                2 => {
                    state.insert(format!("k{}", draw.next(5)), json!({"n": draw.next(3), "s": "\"quoted\" \\ {x}"}));
                }
                3 => {
                    state.remove(&format!("k{}", draw.next(5)));
                }
                4 => {
                    state.insert("big".into(), json!("x".repeat(200 + draw.next(3) as usize)));
                }
                5 => {
                    map.insert("lease".into(), json!({"owner": draw.next(1 << 30), "until": draw.next(1 << 40)}));
                }
                _ => {
                    map.remove("lease");
                }
            }
        }
        next
    }

    /// Random runs of full and delta records (a delta of the record just before, folding from
    /// the newest full record) read back — by `head`, `get`, `history` and after a prune that
    /// keeps what the kept deltas fold from — as the payloads that were written.
    #[test]
    fn folded_records_read_back_as_written() {
        let identity = Identity { graph: "g", graph_fingerprint: 1, schema_fingerprint: 2 };
        let mut draw = Draw(11);
        for run in 0..40 {
            let store = MemoryStore::new();
            let thread = ThreadId::from(format!("t{run}").as_str());
            let mut written: Vec<Value> = Vec::new();
            let mut full = 0;
            let mut value = json!({"step": 0, "state": {"log": [], "big": "x".repeat(200)}});
            for id in 1..=(1 + draw.next(30)) {
                value = change(&value, &mut draw);
                let bytes = if id == 1 || draw.next(4) == 0 {
                    full = id;
                    checkpoint::encode_value(&identity, &value).unwrap()
                } else {
                    let before = written.last().expect("a record before").to_string();
                    checkpoint::encode_delta_with(&identity, full, |out| {
                        if !delta::diff_text(&before, &value.to_string(), out).map_err(Error::store)? {
                            out.extend_from_slice(b"{}");
                        }
                        Ok(())
                    })
                    .unwrap()
                };
                let expected = (id > 1).then(|| id - 1);
                assert_eq!(store.append("g", &thread, expected, id, &bytes, false).unwrap(), AppendOutcome::Written);
                written.push(value.clone());
            }
            let read = |bytes: &[u8], id| checkpoint::decode_raw(bytes, &thread, id).unwrap().1;
            let (head_id, head_bytes) = head(&store, "g", &thread).unwrap().expect("a head");
            assert_eq!(head_id, written.len() as u64);
            assert_eq!(read(&head_bytes, head_id), *written.last().unwrap(), "run {run}: the head");
            for (i, expected) in written.iter().enumerate() {
                let id = i as u64 + 1;
                let bytes = get(&store, "g", &thread, id).unwrap().expect("stored");
                assert_eq!(read(&bytes, id), *expected, "run {run}: checkpoint {id}");
            }
            let all = history(&store, "g", &thread).unwrap();
            assert_eq!(all.len(), written.len(), "run {run}: the history");
            for (id, bytes) in &all {
                assert_eq!(read(bytes, *id), written[*id as usize - 1], "run {run}: history's {id}");
            }
            let keep_last = 1 + draw.next(4) as usize;
            let keep = keep_for_prune(&store, "g", &thread, keep_last).unwrap();
            store.prune("g", &thread, keep).unwrap();
            let kept = history(&store, "g", &thread).unwrap();
            assert!(kept.len() >= keep_last.min(written.len()), "run {run}: a prune keeps {keep_last} readable");
            for (id, bytes) in &kept {
                assert_eq!(read(bytes, *id), written[*id as usize - 1], "run {run}: after the prune, {id}");
            }
        }
    }
}
