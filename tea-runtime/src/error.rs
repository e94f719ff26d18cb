//! `tea::Error`: every way a run can fail, each variant naming the node, field or limit it
//! concerns.

use crate::name::NodeName;

/// The error type a node may return, boxed: anything that converts into it works
/// (`String`, `&'static str`, any `std::error::Error + Send + Sync`, `anyhow::Error`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A node returned an error; `source` is that error, unchanged.
    #[error("node `{node}` failed")]
    NodeFailed {
        /// The node that failed.
        node: NodeName,
        /// The node's own error.
        #[source]
        source: BoxError,
    },

    /// A node (or a guard or reducer while routing from it) panicked. The panic was caught and
    /// the app stays usable.
    #[error("node `{node}` panicked: {message}")]
    NodePanicked {
        /// The node that panicked.
        node: NodeName,
        /// The panic message.
        message: String,
    },

    /// No edge out of `node` applied: none of its guards held, or its `Command` went to a node
    /// (`goto`) that its `node -> a | b;` declaration does not list.
    #[error("no route out of node `{node}`{}", match goto { Some(target) => format!(": it chose `{target}`, which its `->` declaration does not list"), None => String::from(": no guard held and it has no unguarded edge") })]
    NoRoute {
        /// The node the run could not leave.
        node: NodeName,
        /// The undeclared node a router chose, if that was the cause.
        goto: Option<NodeName>,
    },

    /// The run took more steps than the app's recursion limit (`.recursion_limit(n)`, 10 000 by
    /// default): most often a loop whose exit condition never holds.
    #[error("the run took more than {limit} steps without reaching `end` (raise it with `.recursion_limit(n)` if the graph needs more)")]
    RecursionLimit {
        /// The limit in force.
        limit: usize,
    },

    /// Two parallel branches replaced the same field; the merge at the join cannot choose.
    #[error("parallel branches {} all write field `{field}`, whose reducer is `replace`; give it a reducer or let one branch write it", join_names(branches))]
    ConflictingWrites {
        /// The field written by several branches.
        field: &'static str,
        /// The heads of the branches that wrote it, in declared order.
        branches: Vec<NodeName>,
    },

    /// The checkpoint store failed (I/O, a lock, a full disk …); `source` is its error.
    #[error("the checkpoint store failed")]
    Store {
        /// The store's own error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// An [`Error::Store`] from any error of a backing store.
    pub fn store(source: impl Into<BoxError>) -> Self {
        Error::Store { source: source.into() }
    }
}

fn join_names(names: &[NodeName]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    quoted.join(", ")
}
