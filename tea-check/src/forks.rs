//! The checks of one fan-out: it has branches, each listed once, none of them its source or its
//! join, and it does not join at its own source.

use crate::{At, Graph, Kind, Problem, Routing, Spelling, Target};

/// Checks every fan-out; returns whether one is malformed beyond a repeated branch (the graph's
/// paths are then not the ones its author meant).
pub(crate) fn check(graph: &Graph, spelling: Spelling, problems: &mut Vec<Problem>) -> bool {
    let mut broken = false;
    for (fork, node) in graph.nodes.iter().enumerate() {
        let Routing::Fork { heads, join } = &node.routing else { continue };
        let join = *join;
        let (source, join_name) = (node.name.as_str(), graph.nodes[join].name.as_str());
        let mut push = |at: At, kind: Kind, message: String| {
            broken |= kind == Kind::BadFork;
            problems.push(Problem { at, kind, message });
        };
        if heads.is_empty() {
            let message = match spelling {
                Spelling::GraphMacro => {
                    "a `parallel` statement needs at least one branch: `parallel a => [x, y] -> join;`".to_owned()
                }
                Spelling::Yaml => format!(
                    "the fan-out at `{source}` has no branches; list them: \
                     `- {{ from: {source}, parallel: [a, b], fan_in: {join_name} }}`"
                ),
            };
            push(At::Fork(fork), Kind::BadFork, message);
            continue;
        }
        for (index, &head) in heads.iter().enumerate() {
            let at = At::Branch { fork, index };
            let name = graph.nodes[head].name.as_str();
            if heads[..index].contains(&head) {
                let message = match spelling {
                    Spelling::GraphMacro => format!("branch `{name}` is listed twice"),
                    Spelling::Yaml => format!("branch `{name}` is listed twice in the fan-out at `{source}`"),
                };
                push(at, Kind::DuplicateBranch, message);
            } else if head == fork {
                let message = match spelling {
                    Spelling::GraphMacro => format!(
                        "`{name}` is the source of this `parallel` statement; it cannot also be one of its branches"
                    ),
                    Spelling::Yaml => {
                        format!("`{name}` is the source of this fan-out; it cannot also be one of its branches")
                    }
                };
                push(at, Kind::BadFork, message);
            } else if head == join {
                let message = match spelling {
                    Spelling::GraphMacro => format!(
                        "`{name}` is the join of this `parallel` statement; it cannot also be one of its branches"
                    ),
                    Spelling::Yaml => format!(
                        "`{name}` is the fan-in of the fan-out at `{source}`; it cannot also be one of its branches"
                    ),
                };
                push(at, Kind::BadFork, message);
            }
        }
        if join == fork {
            let message = match spelling {
                Spelling::GraphMacro => "a `parallel` statement cannot join at its own source".to_owned(),
                Spelling::Yaml => format!("the fan-out at `{source}` cannot fan in at `{source}` itself"),
            };
            push(At::Edge { from: fork, to: Target::Node(join) }, Kind::BadFork, message);
        }
    }
    broken
}
