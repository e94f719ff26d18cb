//! The API hands out tokens: a paused run's [`PauseRecord`] (what its durable checkpoint
//! records) becomes a [`Resume`] here, for the run's thread, signed with its app's key. The
//! machine only records pauses; every token the API hands out is made here, after the pause's
//! checkpoint was written.

use crate::format::token::{issue, PauseRecord, Resume};
use crate::machine::run::{Over, Run};
use crate::machine::validate::identity;
use crate::model::graph::Graph;
use crate::model::outcome::Outcome;
use crate::tenure::Tenure;
use crate::vocab::error::Error;
use crate::vocab::name::START;

/// The token of `run`'s pause `record`: [`Error::PausedWithoutCheckpointer`] for a run without
/// a store (which has nowhere to resume from).
pub(crate) fn token<G: Graph>(run: &Run<'_, G>, record: &PauseRecord) -> Result<Resume<G::State>, Error> {
    token_of(run.graph, run.tenure.as_deref(), record)
}

/// [`token`], given the run's graph and tenure.
fn token_of<G: Graph>(graph: &G, tenure: Option<&Tenure>, record: &PauseRecord) -> Result<Resume<G::State>, Error> {
    let Some(tenure) = tenure else { return Err(without_store(graph, record)) };
    issue(&identity(graph), &tenure.thread, record, tenure.key.as_ref())
}

/// The error of a run of `graph` without a store pausing as `record` says.
pub(crate) fn without_store<G: Graph>(graph: &G, record: &PauseRecord) -> Error {
    let node = record.pending.first().map_or(START, |p| p.node().clone());
    Error::PausedWithoutCheckpointer { graph: graph.name().to_owned(), node }
}

/// What a run advanced to its end (`over`) reports: its final state, or its state at the pause
/// with the pause's token. Both drivers make their outcomes here: the blocking one moves its
/// run's state in, the async one (which keeps its run until dropped) a copy.
pub(crate) fn outcome<G: Graph>(
    graph: &G,
    tenure: Option<&Tenure>,
    over: Over,
    state: G::State,
) -> Result<Outcome<G::State>, Error> {
    match over {
        Over::Done => Ok(Outcome::Done(state)),
        Over::Paused(record) => {
            let resume = token_of(graph, tenure, &record)?;
            Ok(Outcome::Interrupted { state, resume })
        }
    }
}
