//! What a paused subgraph node keeps among its answers (its *memo*: the child's graph, thread
//! and state) and what a resume hands it (its *reply*: the answers meant for the child), as JSON
//! in the parent's checkpoint. `subgraph` writes and reads them; the API reads them for
//! snapshots and resumes.

use crate::format::interrupt::Interrupt;
use crate::vocab::name::NodeName;
use serde_json::{json, Value};

/// The key of the memo a paused subgraph node keeps among its answers.
pub(crate) const MEMO: &str = "subgraph";

/// The key of the reply a resume hands a paused subgraph node.
pub(crate) const REPLY: &str = "subgraph_answers";

/// The reply to a subgraph node whose child paused on `pauses` (as the parent lists them): the
/// answers meant for the child, by the child's own ids, each taken from `answer_of`. `None` when
/// nothing of the child continues (every pause waits for an answer and none was given). The
/// pauses that continue are added to `continuing`: their nodes and when they expire.
pub(crate) fn reply<'a>(
    pauses: impl IntoIterator<Item = &'a Interrupt>,
    answer_of: &mut dyn FnMut(&Interrupt) -> Option<Value>,
    continuing: &mut Vec<(NodeName, Option<u64>)>,
) -> Option<Value> {
    let mut answers = Vec::new();
    let mut any = false;
    for pause in pauses {
        let Some(child_id) = &pause.child else { continue };
        if !pause.needs_answer() {
            any = true;
            continuing.push((pause.node.clone(), pause.expires_at));
        } else if let Some(value) = answer_of(pause) {
            answers.push(json!([child_id, value]));
            any = true;
            continuing.push((pause.node.clone(), pause.expires_at));
        }
    }
    any.then(|| json!({ REPLY: answers }))
}
