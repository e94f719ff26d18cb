//! Building and running a graph: the typestate [`Builder`] and the [`App`] it builds.

use crate::error::Error;
use crate::exec::{Progress, Run, Stream};
use crate::graph::{Graph, PauseFree};
use std::fmt;

/// The default recursion limit: the number of node runs after which a run fails with
/// [`Error::RecursionLimit`].
pub const DEFAULT_RECURSION_LIMIT: usize = 10_000;

/// The "no checkpointer" state of a [`Builder`] and [`App`]: runs return their final state
/// directly and cannot pause.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCheckpointer;

/// Configures and builds an [`App`]; made by the graph's `builder()` (`ReviewFlow::builder()`).
///
/// The second parameter records whether a checkpointer was given: a graph that can pause
/// implements no [`PauseFree`], so its `.build()` does not compile until it has one.
pub struct Builder<G: Graph, C = NoCheckpointer> {
    graph: G,
    checkpointer: C,
    recursion_limit: usize,
}

impl<G: Graph> Builder<G, NoCheckpointer> {
    /// A builder for `graph` with the default options.
    pub fn new(graph: G) -> Self {
        Builder { graph, checkpointer: NoCheckpointer, recursion_limit: DEFAULT_RECURSION_LIMIT }
    }

    /// Builds an app without a checkpointer: `invoke` returns the final state directly.
    ///
    /// Compiles only for graphs that cannot pause ([`PauseFree`]).
    pub fn build(self) -> App<G, NoCheckpointer>
    where
        G: PauseFree,
    {
        App { graph: self.graph, checkpointer: self.checkpointer, recursion_limit: self.recursion_limit }
    }
}

impl<G: Graph, C> Builder<G, C> {
    /// The most node runs one run may take before it fails with [`Error::RecursionLimit`]
    /// (default [`DEFAULT_RECURSION_LIMIT`]).
    pub fn recursion_limit(mut self, limit: usize) -> Self {
        self.recursion_limit = limit;
        self
    }
}

impl<G: Graph, C: fmt::Debug> fmt::Debug for Builder<G, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("graph", &self.graph.name())
            .field("checkpointer", &self.checkpointer)
            .field("recursion_limit", &self.recursion_limit)
            .finish()
    }
}

/// A built graph, ready to run. `Send + Sync`: share one in an `Arc` across request handlers.
///
/// ```
/// # use tea::prelude::*;
/// # #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
/// # struct Counter { #[reducer(sum)] n: u32 }
/// # fn bump(_: &Counter) -> CounterUpdate { Counter::update().n(1) }
/// # graph! { Twice for Counter { start -> bump; bump -> end if done; bump -> bump; } }
/// # fn done(s: &Counter) -> bool { s.n >= 2 }
/// let app = std::sync::Arc::new(Twice::builder().build());
/// let handle = { let app = app.clone(); std::thread::spawn(move || app.invoke(Counter::default())) };
/// assert_eq!(handle.join().unwrap().unwrap().n, 2);
/// ```
pub struct App<G: Graph, C = NoCheckpointer> {
    graph: G,
    #[allow(dead_code)] // read by the checkpointing half of the app
    checkpointer: C,
    recursion_limit: usize,
}

impl<G: Graph, C> App<G, C> {
    /// The graph this app runs.
    pub fn graph(&self) -> &G {
        &self.graph
    }

    /// The recursion limit in force.
    pub fn recursion_limit(&self) -> usize {
        self.recursion_limit
    }
}

impl<G: Graph> App<G, NoCheckpointer> {
    /// Runs the graph from `start` to `end` on `input` and returns the final state.
    ///
    /// # Errors
    /// [`Error::NodeFailed`] / [`Error::NodePanicked`] naming the node, [`Error::NoRoute`] when no
    /// edge applies, [`Error::RecursionLimit`] when the run takes too many steps.
    pub fn invoke(&self, input: G::State) -> Result<G::State, Error> {
        let mut run = Run::new(&self.graph, input, self.recursion_limit, None, false);
        while run.advance()? != Progress::Done {}
        Ok(run.state)
    }

    /// Runs the graph on `input`, yielding an [`Event::Step`](crate::Event::Step) after each
    /// node and [`Event::Done`](crate::Event::Done) at the end; a failing run yields its error
    /// and ends.
    pub fn stream(&self, input: G::State) -> Stream<'_, G> {
        Stream::new(Run::new(&self.graph, input, self.recursion_limit, None, true))
    }
}

impl<G: Graph, C: fmt::Debug> fmt::Debug for App<G, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App")
            .field("graph", &self.graph.name())
            .field("checkpointer", &self.checkpointer)
            .field("recursion_limit", &self.recursion_limit)
            .finish()
    }
}
