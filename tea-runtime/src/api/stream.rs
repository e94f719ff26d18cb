//! The blocking event pump: [`Stream`] turns each advance of a run into [`Event`]s.

use crate::format::checkpoint::ParentJump;
use crate::machine::run::{Progress, Run};
use crate::model::event::Event;
use crate::model::graph::Graph;
use crate::vocab::error::Error;

/// The events of a run: [`Event::Step`] per node (branch nodes after their fan-out, in branch
/// order), then [`Event::Done`] or, with a checkpointer, [`Event::Interrupted`]; see
/// [`App::stream`](crate::App::stream). A run that fails yields its error and ends.
pub struct Stream<'g, G: Graph> {
    run: Option<Run<'g, G>>,
    error: Option<Error>,
    /// Where a child graph's run, once over, routes its parent (`Command::parent`).
    pub(crate) jump: Option<ParentJump>,
}

impl<'g, G: Graph> Stream<'g, G> {
    pub(crate) fn new(run: Result<Run<'g, G>, Error>) -> Self {
        match run {
            Ok(run) => Stream { run: Some(run), error: None, jump: None },
            Err(error) => Stream { run: None, error: Some(error), jump: None },
        }
    }
}

impl<G: Graph> Iterator for Stream<'_, G> {
    type Item = Result<Event<G::State>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(error) = self.error.take() {
            return Some(Err(error));
        }
        let run = self.run.as_mut()?;
        if let Some(event) = run.branch_events.pop_front() {
            if matches!(event, Event::Interrupted { .. }) {
                // A pause queued behind its fan-out's branch steps ends the stream.
                self.run = None;
            }
            return Some(Ok(event));
        }
        let event = loop {
            match run.advance() {
                Ok(Progress::Stepped) => {
                    let step = Event::Step {
                        node: run.last_node().clone(),
                        branch: None,
                        state: run.state.clone(),
                        duration: run.last_duration,
                    };
                    if run.queue_child_steps() {
                        // A subgraph node: its child's steps come first.
                        run.branch_events.push_back(step);
                        return run.branch_events.pop_front().map(Ok);
                    }
                    return Some(Ok(step));
                }
                Ok(Progress::Forked) => {
                    if let Some(event) = run.branch_events.pop_front() {
                        return Some(Ok(event));
                    }
                }
                Ok(Progress::Paused(resume)) => {
                    // A subgraph node paused inside its child: the child's steps so far first.
                    run.queue_child_steps();
                    if let Some(event) = run.branch_events.pop_front() {
                        // Branch steps before the pause come first; the pause follows them.
                        run.branch_events.push_back(Event::Interrupted { state: run.state.clone(), resume: *resume });
                        return Some(Ok(event));
                    }
                    break Ok(Event::Interrupted { state: run.state.clone(), resume: *resume });
                }
                Ok(Progress::Done) => break Ok(Event::Done(run.state.clone())),
                Err(error) => break Err(error),
            }
        };
        if run.branch_events.is_empty() {
            self.jump = run.jump.take();
            self.run = None;
        }
        Some(event)
    }
}

/// A stream dropped before its run paused again or finished abandons the run: a resumed run's
/// pause is put back, so the token that resumed it works again; another run releases its lease,
/// so `recover` may continue it. A stream that was never polled wrote nothing and writes nothing.
impl<G: Graph> Drop for Stream<'_, G> {
    fn drop(&mut self) {
        if let Some(run) = &mut self.run {
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
        s.field("over", &self.run.is_none()).finish()
    }
}
