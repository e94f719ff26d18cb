//! The pauses an app wrote itself, remembered so that resuming one does not read the thread's
//! head first, on a store where that read is a round trip
//! ([`Checkpointer::resumes_without_read`](crate::Checkpointer::resumes_without_read)).
//!
//! What is remembered is only a guess at the head: the resume's claim compares the pause's
//! bytes in the store's compare-and-swap ([`Checkpointer::append_over`](crate::Checkpointer::append_over)),
//! and when the head is another (a resume in another process, a thread deleted and started
//! again) it writes nothing and the app reads the head and resumes again, as it would have. So
//! a resume decodes the same bytes, and answers the same, whether or not its app remembered.

use crate::name::{CheckpointId, ThreadId};
use crate::tenure::Tenure;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// At most this many pauses are remembered: past it, the memory starts again (a resume it no
/// longer holds reads the head).
const MOST: usize = 1024;

/// An app's remembered pauses: by thread, the id and bytes of the pause its run wrote last.
#[derive(Default)]
pub(crate) struct Pauses {
    by_thread: Mutex<HashMap<ThreadId, (CheckpointId, Vec<u8>)>>,
}

impl Pauses {
    /// Remembers that `thread`'s head is pause `id`, written as `bytes`.
    pub(crate) fn remember(&self, thread: ThreadId, id: CheckpointId, bytes: Vec<u8>) {
        let mut by_thread = self.by_thread.lock().unwrap_or_else(PoisonError::into_inner);
        if by_thread.len() >= MOST && !by_thread.contains_key(&thread) {
            by_thread.clear();
        }
        by_thread.insert(thread, (id, bytes));
    }

    /// Remembers the pause `tenure`'s run wrote last: the thread's head, as the run wrote it
    /// (nothing when the run's last record was not written whole).
    pub(crate) fn keep(&self, tenure: &Tenure) {
        if let Some((id, bytes)) = tenure.head_record() {
            self.remember(tenure.thread.clone(), id, bytes);
        }
    }

    /// The pause remembered for `thread`, forgotten here (a resume uses it once).
    pub(crate) fn take(&self, thread: &ThreadId) -> Option<(CheckpointId, Vec<u8>)> {
        self.by_thread.lock().unwrap_or_else(PoisonError::into_inner).remove(thread)
    }

    /// Forgets what is remembered of `thread`.
    pub(crate) fn forget(&self, thread: &ThreadId) {
        self.by_thread.lock().unwrap_or_else(PoisonError::into_inner).remove(thread);
    }
}
