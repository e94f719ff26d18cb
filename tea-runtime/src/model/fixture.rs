//! A hand-written state and graph for the engine's own unit tests: no macro, no store.
//!
//! `Shop`: `start -> count; count -> count while n < goal; count -> split;
//! parallel split => [left, right] -> join; join -> ask if asking; join -> end; ask -> end;`
//! with `interrupt_before` on a chosen node. `left` and `right` both replace `owner` when
//! `conflict` is set; `ask` pauses through its `Hitl` and writes the answer into `owner`.

use crate::model::graph::{Fork, Graph, PauseFree, SyncGraph};
use crate::model::hitl::Hitl;
use crate::model::node::{Ctx, Goto, NodeId, NodeStep};
use crate::vocab::error::BoxError;
use crate::vocab::name::NodeName;
use crate::vocab::state::{Field, GraphState, Reducer, StateUpdate, Write};
use serde::{Deserialize, Serialize};

/// The state: a counter (`sum`), a log (`append`) and an owner (`replace`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Tally {
    pub(crate) n: u64,
    pub(crate) log: Vec<String>,
    pub(crate) owner: String,
}

/// An update of [`Tally`], one optional slot per field.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct TallyUpdate {
    n: Option<u64>,
    log: Option<Vec<String>>,
    owner: Option<String>,
}

impl TallyUpdate {
    pub(crate) fn n(mut self, n: u64) -> Self {
        self.n = Some(n);
        self
    }
    pub(crate) fn log(mut self, line: &str) -> Self {
        self.log = Some(vec![line.to_owned()]);
        self
    }
    pub(crate) fn owner(mut self, owner: &str) -> Self {
        self.owner = Some(owner.to_owned());
        self
    }
}

impl StateUpdate for TallyUpdate {
    type State = Tally;

    fn writes(&self, index: usize) -> Option<Write> {
        match index {
            0 => self.n.map(|_| Write::Reduce),
            1 => self.log.as_ref().map(|_| Write::Reduce),
            2 => self.owner.as_ref().map(|_| Write::Replace),
            _ => None,
        }
    }
}

impl GraphState for Tally {
    type Update = TallyUpdate;
    const FIELDS: &'static [Field] = &[
        Field { name: "n", ty: "u64", reducer: Reducer::Sum },
        Field { name: "log", ty: "Vec<String>", reducer: Reducer::Append },
        Field { name: "owner", ty: "String", reducer: Reducer::Replace },
    ];
    const SCHEMA_FINGERPRINT: u64 = 0x7a11;

    fn apply(&mut self, update: TallyUpdate) {
        self.n += update.n.unwrap_or(0);
        self.log.extend(update.log.unwrap_or_default());
        if let Some(owner) = update.owner {
            self.owner = owner;
        }
    }
}

/// The nodes of [`Shop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Count,
    Split,
    Left,
    Right,
    Join,
    Ask,
}

const NODES: [(Stop, &str); 6] = [
    (Stop::Count, "count"),
    (Stop::Split, "split"),
    (Stop::Left, "left"),
    (Stop::Right, "right"),
    (Stop::Join, "join"),
    (Stop::Ask, "ask"),
];

impl NodeId for Stop {
    type State = Tally;

    fn node_str(self) -> Option<&'static str> {
        NODES.iter().find(|(n, _)| *n == self).map(|(_, name)| *name)
    }

    fn from_node_str(name: &str) -> Option<Self> {
        NODES.iter().find(|(_, n)| *n == name).map(|(node, _)| *node)
    }
}

/// The graph (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Shop {
    /// How far `count` counts.
    pub(crate) goal: u64,
    /// `left` and `right` both replace `owner`.
    pub(crate) conflict: bool,
    /// `join` goes on to `ask`, which pauses.
    pub(crate) asking: bool,
    /// A breakpoint before this node.
    pub(crate) before: Option<Stop>,
}

impl SyncGraph for Shop {}
impl PauseFree for Shop {}

impl Graph for Shop {
    type State = Tally;
    type Node = Stop;

    fn name(&self) -> &str {
        "Shop"
    }

    fn fingerprint(&self) -> u64 {
        0x5409
    }

    fn node_name(&self, node: Stop) -> NodeName {
        NodeName::from_static(node.node_str().unwrap_or("?"))
    }

    fn start(&self, _: &Tally) -> Option<Goto<Stop>> {
        Some(Goto::Node(Stop::Count))
    }

    fn run(
        &self,
        node: Stop,
        state: &Tally,
        ctx: &Ctx<Tally>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<Tally, Stop>, BoxError> {
        let update = match node {
            Stop::Count => TallyUpdate::default().n(1).log("count"),
            Stop::Split => TallyUpdate::default().log("split"),
            Stop::Left if self.conflict => TallyUpdate::default().log("left").owner("left"),
            Stop::Left => TallyUpdate::default().log("left"),
            Stop::Right if self.conflict => TallyUpdate::default().log("right").owner("right"),
            Stop::Right => TallyUpdate::default().log("right"),
            Stop::Join => TallyUpdate::default().log(&format!("join of {}", ctx.branches().len())),
            Stop::Ask => {
                let answer: String = hitl.interrupt(format!("who, after {}?", state.n))?;
                TallyUpdate::default().owner(&answer)
            }
        };
        Ok(NodeStep::new(Some(update), None))
    }

    fn route(&self, node: Stop, state: &Tally) -> Option<Goto<Stop>> {
        match node {
            Stop::Count if state.n < self.goal => Some(Goto::Node(Stop::Count)),
            Stop::Count => Some(Goto::Node(Stop::Split)),
            Stop::Left | Stop::Right => Some(Goto::Node(Stop::Join)),
            Stop::Join if self.asking => Some(Goto::Node(Stop::Ask)),
            Stop::Join | Stop::Ask => Some(Goto::End),
            Stop::Split => None,
        }
    }

    fn can_goto(&self, _: Stop, _: Goto<Stop>) -> bool {
        false
    }

    fn node_named(&self, name: &str) -> Option<Stop> {
        Stop::from_node_str(name)
    }

    fn interrupt_before(&self, node: Stop) -> bool {
        self.before == Some(node)
    }

    fn fork(&self, node: Stop) -> Option<Fork<'_, Stop>> {
        (node == Stop::Split).then_some(Fork { heads: &[Stop::Left, Stop::Right], join: Stop::Join })
    }
}
