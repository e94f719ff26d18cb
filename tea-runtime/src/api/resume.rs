//! The resume path's check: a token verified against the app and graph, then the thread's head
//! checked against the token and answered (`resume_at`), before anything is claimed or run.
//! `App::begin` (`app.rs`) strings the steps together for every front end.

use crate::api::app::App;
use crate::format::checkpoint::{BranchAt, Checkpoint, Position};
use crate::format::interrupt::Interrupt;
use crate::format::memo::reply;
use crate::format::token::{graph_id, Resume};
use crate::machine::run::Run;
use crate::machine::step::apply_update;
use crate::machine::validate::decode_for;
use crate::model::graph::Graph;
use crate::store::Checkpointer;
use crate::vocab::error::Error;
use crate::vocab::name::{CheckpointId, NodeName, ThreadId};
use crate::vocab::options::RunOptions;
use crate::vocab::trace::traced;

impl<G: Graph, C: Checkpointer> App<G, C> {
    /// The thread `resume` continues, once the token is checked against this app and graph.
    pub(crate) fn verify(&self, resume: &Resume<G::State>) -> Result<ThreadId, Error> {
        self.check_key()?;
        resume.verify(self.key.as_ref())?;
        let graph = &*self.graph;
        let token = &resume.token;
        if token.graph != graph_id(graph.name()) {
            return Err(Error::GraphMismatch { expected: graph.name().to_owned(), found: None });
        }
        let schema_changed = token.schema_fingerprint != graph.schema_fingerprint();
        if schema_changed || token.graph_fingerprint != graph.fingerprint() {
            return Err(Error::SchemaMismatch {
                graph: graph.name().to_owned(),
                thread: token.thread.clone(),
                what: if schema_changed { "state struct" } else { "graph" },
            });
        }
        Ok(token.thread.clone())
    }
    /// A run that resumes `resume` from the thread's head, checkpoint `head` (`bytes`), writing
    /// its checkpoints as `durability` says, for the API call named `call` (the `run` span's
    /// field, recorded here once).
    pub(crate) fn resume_at(
        &self,
        resume: Resume<G::State>,
        head: CheckpointId,
        bytes: Vec<u8>,
        record: bool,
        options: &RunOptions,
        #[cfg_attr(not(feature = "tracing"), allow(unused_variables))] call: &'static str,
    ) -> Result<Run<'_, G>, Error> {
        let durability = options.durability.unwrap_or(self.durability);
        let graph = &*self.graph;
        let token = &resume.token;
        let thread = token.thread.clone();
        let mut ckpt: Checkpoint<G::State> = decode_for(graph, &bytes, &thread, head)?;
        if ckpt.pending.is_empty() || ckpt.pause != Some(token.pause) || ckpt.nonce.unwrap_or_default() != token.nonce {
            return Err(Error::StaleResume { thread });
        }
        traced! { let (resume_updated, answers) = (resume.update.is_some(), resume.answers.len()); }
        let continuing = match_answers(graph, &mut ckpt, &token.node, resume.answers, resume.answer_error)?;
        // The clock is read only for a pause that expires.
        if continuing.iter().any(|(_, expires)| expires.is_some()) {
            let now = self.clock.now();
            if let Some((node, _)) = continuing.into_iter().find(|(_, expires)| expires.is_some_and(|at| at < now)) {
                return Err(Error::Expired { thread, node });
            }
        }
        if let Some(update) = resume.update {
            // A refused update changes nothing: the token stays good.
            let refused = |error| match error {
                Error::NodeFailed { node, source } => Error::BadResumeValue {
                    node,
                    expected: "an update that fits the state".to_owned(),
                    reason: source.to_string(),
                },
                other => other,
            };
            if let Position::Fork { branches, .. } = &mut ckpt.at {
                // Branches without a state of their own build it from the fan-out's, which
                // gets the update below; those read from older checkpoints get it here.
                for branch in branches.iter_mut().filter(|b| !matches!(b.at, BranchAt::Joined)) {
                    if let Some(state) = &mut branch.state {
                        apply_update(graph, state, update.clone(), &token.node).map_err(refused)?;
                    }
                }
            }
            apply_update(graph, &mut ckpt.state, update, &token.node).map_err(refused)?;
        }
        ckpt.pending.clear();
        ckpt.pause = None;
        ckpt.paused_at = None;
        ckpt.nonce = None;
        traced! { let (pause, updated) = (token.pause, resume_updated); }
        let mut tenure = self.tenure_as(thread, Some(head), durability);
        // The node the pause stands before (a breakpoint, or a node that asked): if the resume
        // fails once it ran, the pause goes back; once a node after it ran, it does not.
        let before = match &ckpt.at {
            Position::Before(node) => Some(node.clone()),
            _ => None,
        };
        tenure.put_back_on_failure(bytes, before);
        let mut run = Run::from_checkpoint(graph, ckpt, true, self.limits_for(options), tenure, record)?;
        self.attach_cache_context_emitter(&mut run, options)?;
        traced! {
            run.call(call);
            run.span.in_scope(|| tracing::info!(target: "tea", pause, answers, update = updated, "resumed"));
        }
        Ok(run)
    }
}

/// Gives each pending pause of `ckpt` its answer from `answers` (a resume's, at `node`, moved
/// in) and marks what continues: every breakpoint, and every pause that waits for an answer and
/// got one. Returns the continuing pauses' nodes and when each expires. Nothing is changed in
/// the store; a bad answer leaves the token valid.
fn match_answers<G: Graph>(
    graph: &G,
    ckpt: &mut Checkpoint<G::State>,
    node: &NodeName,
    answers: Vec<(Option<String>, serde_json::Value)>,
    answer_error: Option<String>,
) -> Result<Vec<(NodeName, Option<u64>)>, Error> {
    let bad = |expected: &str, reason: String| Error::BadResumeValue {
        node: node.clone(),
        expected: expected.to_owned(),
        reason,
    };
    let ids = || ckpt.pending.iter().map(|p| format!("`{}`", p.id())).collect::<Vec<_>>().join(", ");
    if let Some(reason) = answer_error {
        return Err(bad("a value that serializes", reason));
    }
    let mut answered: Vec<(String, serde_json::Value)> = Vec::with_capacity(answers.len());
    for (id, value) in answers {
        let id = match id {
            Some(id) => id,
            None => {
                let asks: Vec<&Interrupt> = ckpt.pending.iter().filter(|p| p.needs_answer()).collect();
                match asks.as_slice() {
                    [one] => one.id().to_owned(),
                    [] => {
                        return Err(bad(
                            "no answer",
                            format!("the pending pauses ({}) are breakpoints, which take no answer; continue with `.update(…)` or nothing", ids()),
                        ))
                    }
                    _ => {
                        return Err(bad(
                            "answers by id",
                            format!("several pauses wait for answers ({}); answer each with `.answer_to(id, value)`", ids()),
                        ))
                    }
                }
            }
        };
        let Some(pause) = ckpt.pending.iter().find(|p| p.id() == id) else {
            return Err(bad(
                "an answer to a pending pause",
                format!("no pending pause has id `{id}`; pending: {}", ids()),
            ));
        };
        if !pause.needs_answer() {
            return Err(bad(
                "no answer",
                format!("pause `{id}` is a breakpoint, which takes no answer; continue with `.update(…)` or nothing"),
            ));
        }
        if answered.iter().any(|(a, _)| *a == id) {
            return Err(bad("one answer per pause", format!("pause `{id}` is answered twice")));
        }
        if let Some(node) = graph.node_named(pause.node().as_str()) {
            if let Err((expected, reason)) = graph.check_answer(node, &value) {
                return Err(Error::BadResumeValue {
                    node: pause.node().clone(),
                    expected: expected.to_owned(),
                    reason,
                });
            }
        }
        answered.push((id, value));
    }
    // Each pause is answered once (checked above), so its answer is taken, not copied.
    let mut answer_of = |pause: &Interrupt| {
        answered.iter_mut().find(|(id, _)| id == pause.id()).map(|(_, value)| std::mem::take(value))
    };
    let mut continuing = Vec::new();
    match &mut ckpt.at {
        Position::Fork { branches, .. } => {
            for branch in branches.iter_mut() {
                let Some(pause) = branch.pending.as_deref() else { continue };
                if pause.child.is_some() {
                    // A subgraph node's child paused in this branch: what continues is the
                    // child's, which the node hands over when it runs again.
                    let pauses = std::iter::once(pause).chain(&branch.more_pending);
                    if let Some(reply) = reply(pauses, &mut answer_of, &mut continuing) {
                        branch.answers.push(reply);
                        branch.resume = true;
                    }
                    continue;
                }
                if !pause.needs_answer() {
                    branch.resume = true;
                } else if let Some(value) = answer_of(pause) {
                    branch.answers.push(value);
                    branch.resume = true;
                }
                if branch.resume {
                    continuing.push((pause.node.clone(), pause.expires_at));
                }
            }
            if continuing.is_empty() {
                return Err(bad(
                    "an answer",
                    format!("every pending pause waits for an answer ({}); answer at least one", ids()),
                ));
            }
        }
        _ => {
            let Some(pause) = ckpt.pending.first() else { return Ok(continuing) };
            if pause.child.is_some() {
                let Some(reply) = reply(&ckpt.pending, &mut answer_of, &mut continuing) else {
                    return Err(bad(
                        "an answer",
                        format!("every pending pause waits for an answer ({}); answer at least one", ids()),
                    ));
                };
                ckpt.answers.push(reply);
                return Ok(continuing);
            }
            if pause.needs_answer() {
                let Some(value) = answer_of(pause) else {
                    return Err(bad(
                        "an answer",
                        format!("pause `{}` waits for an answer: resume with `.answer(value)`", pause.id()),
                    ));
                };
                ckpt.answers.push(value);
            }
            continuing.push((pause.node.clone(), pause.expires_at));
        }
    }
    Ok(continuing)
}
