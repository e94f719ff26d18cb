//! The event pump: what each advance of a run yields as [`Event`]s, for the blocking
//! [`Stream`] and the async stream (`api::async_app`) alike ([`event_after`]).

use crate::api::pauses::Pauses;
use crate::api::token::token;
use crate::format::checkpoint::ParentJump;
use crate::machine::run::{Progress, Run};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::model::outcome::Outcome;
use crate::model::scope::Emitted;
use crate::vocab::error::Error;
use crate::vocab::policy::StreamModes;
use std::sync::Arc;

/// The next event of `run` after an advance that made `progress`, queueing what follows it in
/// `run.branch_events`; `None` when the advance yielded none (a fan-out whose branches were not
/// recorded, a step whose stream leaves out its modes): advance again. What the node emitted
/// while it ran (custom values, its start, retries, a cache hit) comes first, then a subgraph
/// node's child steps, then the node's update and its own step; a fan-out's branch steps
/// (recorded while streaming) come before what follows the fan-out, and a pause's token is made
/// here, by the API.
pub(crate) fn event_after<G: Graph>(
    run: &mut Run<'_, G>,
    progress: Result<Progress, Error>,
) -> Option<Result<Event<G::State>, Error>> {
    let progress = match progress {
        Ok(progress) => progress,
        Err(error) => {
            // What the failed node emitted (its retries, say) comes before the error.
            let emitted = run.ctx.emitter.as_ref().map(|emitter| emitter.take(None)).unwrap_or_default();
            if emitted.is_empty() {
                return Some(Err(error));
            }
            run.branch_events.extend(emitted.into_iter().map(Emitted::into_event));
            run.failure = Some(error);
            return run.branch_events.pop_front().map(Ok);
        }
    };
    let values = run.ctx.emitter.as_ref().is_none_or(|emitter| emitter.modes.contains(StreamModes::VALUES));
    // Queued behind the branch steps of a fan-out (`Forked`), ahead of everything else.
    let mut front = std::collections::VecDeque::new();
    if let Some(emitter) = &run.ctx.emitter {
        front.extend(emitter.take(None).into_iter().map(Emitted::into_event));
    }
    let last = match progress {
        Progress::Stepped => {
            let node = run.last_node().clone();
            run.queue_child_steps();
            if let Some(update) = run.shown.take() {
                run.branch_events.push_back(Event::Update { node: node.clone(), branch: None, update });
            }
            values.then(|| Event::Step { node, branch: None, state: run.state.clone(), duration: run.last_duration })
        }
        Progress::Forked => None,
        Progress::Paused(record) => {
            // A subgraph node paused inside its child: the child's steps so far first.
            run.queue_child_steps();
            match token(run, &record) {
                Ok(resume) => Some(Event::Interrupted { state: run.state.clone(), resume }),
                Err(error) => return Some(Err(error)),
            }
        }
        Progress::Done => Some(Event::Done(run.state.clone())),
    };
    while let Some(event) = front.pop_back() {
        run.branch_events.push_front(event);
    }
    if let Some(last) = last {
        run.branch_events.push_back(last);
    }
    run.branch_events.pop_front().map(Ok)
}

/// The one event of a thread a recover found over: its pause or its final state.
pub(crate) fn ended_event<S: crate::vocab::state::GraphState>(outcome: Outcome<S>) -> Event<S> {
    match outcome {
        Outcome::Done(state) => Event::Done(state),
        Outcome::Interrupted { state, resume } => Event::Interrupted { state, resume },
    }
}

/// The events of a run: [`Event::Step`] per node (branch nodes after their fan-out, in branch
/// order), then [`Event::Done`] or, with a checkpointer, [`Event::Interrupted`]; see
/// [`App::stream`](crate::App::stream). A run that fails yields its error and ends.
pub struct Stream<'g, G: Graph> {
    run: Option<Run<'g, G>>,
    error: Option<Error>,
    /// The run paused, finished or failed: what it queued is all that is left.
    over: bool,
    /// A recovered thread that was over already: its pause or its final state, the one event.
    ended: Option<Event<G::State>>,
    /// Where the run's pause is remembered, on a store that resumes without a read.
    pauses: Option<Arc<Pauses>>,
    /// For a resume begun from a pause its app remembered, until the run's first advance (its
    /// claim): the stream as it is from the head the store holds, for when the claim finds
    /// another head (the run wrote nothing, and nothing was yielded).
    again: Option<Again<'g, G>>,
}

/// The stream of a call from the head the store holds (see [`Stream::or_from`]).
pub(crate) type Again<'g, G> = Box<dyn FnOnce() -> Stream<'g, G> + Send + Sync + 'g>;

impl<'g, G: Graph> Stream<'g, G> {
    pub(crate) fn new(run: Result<Run<'g, G>, Error>) -> Self {
        match run {
            Ok(run) => Stream { run: Some(run), error: None, over: false, ended: None, pauses: None, again: None },
            Err(error) => Stream { run: None, error: Some(error), over: true, ended: None, pauses: None, again: None },
        }
    }

    /// The stream, remembering its run's pause in `pauses`.
    pub(crate) fn remembering(mut self, pauses: Option<Arc<Pauses>>) -> Self {
        self.pauses = pauses;
        self
    }

    /// The stream of a resume begun from a remembered pause, `again` as it is from the head the
    /// store holds: what it yields if the run's claim finds another head.
    pub(crate) fn or_from(mut self, again: Again<'g, G>) -> Self {
        self.again = Some(again);
        self
    }

    /// The stream of a thread found over (paused or finished) by a recover: its one event.
    pub(crate) fn ended(outcome: Outcome<G::State>) -> Self {
        Stream { run: None, error: None, over: true, ended: Some(ended_event(outcome)), pauses: None, again: None }
    }

    /// Where a child graph's run, once over, routes its parent (`Command::parent`).
    pub(crate) fn take_jump(&mut self) -> Option<ParentJump> {
        self.run.as_mut()?.line.jump.take()
    }
}

impl<G: Graph> Iterator for Stream<'_, G> {
    type Item = Result<Event<G::State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.error.take() {
            return Some(Err(error));
        }
        if let Some(event) = self.ended.take() {
            return Some(Ok(event));
        }
        let run = self.run.as_mut()?;
        if let Some(event) = run.branch_events.pop_front() {
            return Some(Ok(event));
        }
        if let Some(error) = run.failure.take() {
            return Some(Err(error));
        }
        if self.over {
            return None;
        }
        loop {
            let progress = run.advance();
            if let Some(again) = self.again.take() {
                if progress.is_err() && run.tenure.as_deref().is_some_and(crate::tenure::Tenure::missed_unread) {
                    // The claim of a remembered pause found another head: the run wrote
                    // nothing (its failed step abandoned it), nothing was yielded yet.
                    self.over = true;
                    *self = again();
                    return self.next();
                }
            }
            if let (Ok(Progress::Paused(_)), Some(pauses), Some(tenure)) = (&progress, &self.pauses, &run.tenure) {
                pauses.keep(tenure);
            }
            self.over = !matches!(progress, Ok(Progress::Stepped | Progress::Forked));
            if let Some(event) = event_after(run, progress) {
                return Some(event);
            }
        }
    }
}

/// A stream dropped before its run paused again or finished abandons the run: a resumed run's
/// pause is put back, so the token that resumed it works again; another run releases its lease,
/// so `recover` may continue it. A stream that was never polled wrote nothing and writes nothing.
impl<G: Graph> Drop for Stream<'_, G> {
    fn drop(&mut self) {
        if let (Some(run), false) = (&mut self.run, self.over) {
            run.abandon();
        }
    }
}

impl<G: Graph> std::fmt::Debug for Stream<'_, G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Stream");
        if let Some(run) = &self.run {
            s.field("graph", &run.graph.name()).field("last_node", run.last_node());
        }
        let over = self.over && self.run.as_ref().is_none_or(|run| run.branch_events.is_empty());
        s.field("over", &over).finish()
    }
}
