//! The names of a graph's nodes to the engine: [`NodeId`], the node type `graph!` generates,
//! and [`Goto`], where a node goes next. Below the node forms (`node`) and `SendTo` (`send`),
//! which both name them.

use crate::vocab::state::GraphState;
use std::fmt;

/// The node type of a graph: `graph!` generates an enum (`ReviewFlowNode`) with one variant per
/// node, so a [`Command::goto`](crate::model::node::Command::goto) to a node that does not exist does not compile.
pub trait NodeId: Copy + Eq + fmt::Debug + Send + Sync + 'static {
    /// The state of the graph these nodes belong to.
    type State: GraphState;

    /// The node's name as written in its graph (`graph!` implements it; `None` by default).
    fn node_str(self) -> Option<&'static str> {
        None
    }

    /// The node named `name` (`graph!` implements it; `None` by default).
    fn from_node_str(name: &str) -> Option<Self> {
        let _ = name;
        None
    }
}

/// Where a node goes next: another node, or the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Goto<N> {
    /// Run this node next.
    Node(N),
    /// Finish the run.
    End,
}
