//! The loader's routing: `edges:` and targets, resolved with `goto`, fan-outs and the implicit
//! next node into each node's ordered rules, then the graph-shape checks of tea-check.

use super::*;

impl Loader<'_> {
    pub(crate) fn edges<'n>(&mut self, node: &'n Node) -> Vec<EdgeDraft<'n>> {
        let Some(items) = node.as_seq() else {
            if !matches!(node.kind, Kind::Null) {
                self.problem(node.pos, format!("`edges` must be a list, not {}", node.what()));
            }
            return Vec::new();
        };
        let mut out = Vec::new();
        for item in items {
            let known: Vec<&str> =
                EDGE_KEYS.iter().chain(EDGE_AGENT_EDGE_KEYS.iter().map(|(k, _)| k)).copied().collect();
            let Some(mut f) = self.fields(item, "an edge", &known) else { continue };
            for (key, instead) in EDGE_AGENT_EDGE_KEYS {
                if let Some(node) = f.remove(key) {
                    self.warn(node.pos, key, format!("edge key `{key}` (The Edge Agent's) is ignored: {instead}"));
                }
            }
            let Some(from) = f.get("from").copied() else {
                self.problem(item.pos, "an edge without `from`");
                continue;
            };
            let parallel_type = match f.get("type") {
                None => false,
                Some(t) if t.as_str() == Some("parallel") => true,
                Some(t) => {
                    self.problem(t.pos, "an edge's `type` is `parallel` or absent");
                    false
                }
            };
            let fan_in = f.get("fan_in").copied();
            if let Some(targets) = f.get("targets") {
                self.targets(&f, from, targets, item.pos, &mut out);
                continue;
            }
            match f.get("parallel").map(|p| &p.kind) {
                Some(Kind::Seq(heads)) => {
                    if let Some(to) = f.get("to") {
                        self.problem(to.pos, "a `parallel: [...]` edge lists its branches; drop `to`");
                    }
                    out.push(EdgeDraft {
                        from,
                        pos: item.pos,
                        kind: EdgeKind::Parallel { heads: heads.iter().collect(), fan_in },
                    });
                    continue;
                }
                Some(Kind::Bool(true)) => {}
                Some(Kind::Bool(false)) | None if !parallel_type => {
                    if let Some(fi) = fan_in {
                        self.problem(fi.pos, "`fan_in` belongs to parallel edges");
                    }
                    let Some(to) = f.get("to").copied() else {
                        self.problem(item.pos, "an edge without `to`");
                        continue;
                    };
                    let cond = match (f.get("condition"), f.get("when")) {
                        (Some(c), when) => {
                            let expect = match when.map(|w| &w.kind) {
                                None => true,
                                Some(Kind::Bool(b)) => *b,
                                Some(_) => {
                                    self.problem(
                                        when.map_or(item.pos, |w| w.pos),
                                        "with `condition`, `when` is true or false: the truth the condition must have",
                                    );
                                    true
                                }
                            };
                            match &c.kind {
                                Kind::Map(_) => {
                                    let cf = self.fields(c, "`condition`", &["type", "value"]).unwrap_or_default();
                                    if cf.get("type").and_then(|t| t.as_str()).is_some_and(|t| t != "expression") {
                                        self.problem(c.pos, "`condition.type` must be `expression`");
                                    }
                                    match cf.get("value") {
                                        Some(v) => self.cond(v, expect),
                                        None => {
                                            self.problem(c.pos, "`condition` needs `value: EXPR`");
                                            Cond::Const(false)
                                        }
                                    }
                                }
                                _ => self.cond(c, expect),
                            }
                        }
                        (None, Some(w)) => self.cond(w, true),
                        (None, None) => Cond::Always,
                    };
                    out.push(EdgeDraft { from, pos: item.pos, kind: EdgeKind::Plain { to, cond } });
                    continue;
                }
                Some(Kind::Bool(false)) | None => {}
                Some(_) => {
                    self.problem(item.pos, "`parallel` is true or a list of branch heads");
                    continue;
                }
            }
            // `type: parallel` or `parallel: true`: one branch.
            let Some(to) = f.get("to").copied() else {
                self.problem(item.pos, "a parallel edge without `to`");
                continue;
            };
            for key in ["when", "condition"] {
                if let Some(c) = f.get(key) {
                    self.problem(c.pos, format!("a parallel edge always fans out; `{key}` does not apply"));
                }
            }
            // `to: [a, b]` with `parallel: true`: one branch per name (The Edge Agent's list form).
            let heads = match to.as_seq() {
                Some(names) => names.iter().collect(),
                None => vec![to],
            };
            out.push(EdgeDraft { from, pos: item.pos, kind: EdgeKind::Parallel { heads, fan_in } });
        }
        out
    }

    /// An edge with `targets: { VALUE: NODE, … }` (The Edge Agent's Rust engine): one rule per
    /// entry, in file order, taken when the edge's `when` (or `condition`; `state.result` if
    /// neither) gives VALUE, compared as text.
    pub(crate) fn targets<'n>(
        &mut self,
        f: &HashMap<&str, &'n Node>,
        from: &'n Node,
        targets: &'n Node,
        pos: Pos,
        out: &mut Vec<EdgeDraft<'n>>,
    ) {
        for key in ["to", "parallel", "type", "fan_in"] {
            if let Some(n) = f.get(key) {
                self.problem(n.pos, format!("an edge with `targets` routes by value; `{key}` does not go with it"));
            }
        }
        let (source, at) = match (f.get("when"), f.get("condition")) {
            (Some(a), Some(_)) => {
                self.problem(a.pos, "an edge with `targets` takes one of `when` and `condition`");
                return;
            }
            (Some(c), None) | (None, Some(c)) => match c.as_str() {
                Some(text) => (strip_braces(text.trim()).to_owned(), c.pos),
                None => {
                    self.problem(
                        c.pos,
                        format!("the value an edge's `targets` are chosen by is an expression, not {}", c.what()),
                    );
                    return;
                }
            },
            (None, None) => ("state.result".to_owned(), pos),
        };
        let Some(entries) = targets.as_map() else {
            self.problem(targets.pos, format!("`targets` maps values to nodes, not {}", targets.what()));
            return;
        };
        for (value, to) in entries {
            let Some(value) = value.scalar_text() else {
                self.problem(value.pos, "a key of `targets` is a value the expression gives");
                continue;
            };
            let literal = serde_json::to_string(&value).unwrap_or_default();
            // A boolean's text is `true`/`false` in The Edge Agent's Rust engine (`True` in
            // Jinja's): compared without case.
            let expr = if matches!(value.as_str(), "true" | "false") {
                format!("(({source}) | string | lower) == {literal}")
            } else {
                format!("(({source}) | string) == {literal}")
            };
            let cond = match self.expr_at(at, &expr) {
                Ok(id) => Cond::Expr { expr: id, expect: true, source: Arc::from(format!("{source} == {literal}")) },
                Err(e) => {
                    self.problem(at, format!("the expression `{source}` of an edge's `targets` does not parse: {e}"));
                    return;
                }
            };
            out.push(EdgeDraft { from, pos, kind: EdgeKind::Plain { to, cond } });
        }
    }

    /// A routing target by name: a node or the end.
    pub(crate) fn target(&mut self, index: &HashMap<String, usize>, node: &Node, what: &str) -> Option<Goto<NodeIx>> {
        let Some(name) = node.scalar_text() else {
            self.problem(node.pos, format!("{what} must be a node name"));
            return None;
        };
        if END.contains(&name.as_str()) {
            return Some(Goto::End);
        }
        if START.contains(&name.as_str()) {
            self.problem(node.pos, format!("{what} cannot be `{name}`: nothing goes back to the entry"));
            return None;
        }
        match index.get(&name) {
            Some(&i) => Some(Goto::Node(NodeIx(i as u32))),
            None => {
                let hint = self.hint_node(&name, index);
                self.problem(node.pos, format!("{what} names `{name}`, which is not a node{hint}"));
                None
            }
        }
    }

    /// Resolves every node's routing (goto, edges, fan-outs, the implicit next node) into
    /// rules; returns the start rules and the nodes.
    /// `drafts`: the file's `declared` nodes, then the per-item nodes of its `dynamic_parallel`
    /// nodes; `dynamic`: each `dynamic_parallel` node, its first per-item node and its `fan_in`.
    pub(crate) fn routing(
        &mut self,
        drafts: &[Draft<'_>],
        declared: usize,
        index: &HashMap<String, usize>,
        edges: &[EdgeDraft<'_>],
        dynamic: &[(usize, usize, &Node)],
    ) -> (Option<Vec<Rule>>, Option<Vec<NodeDef>>) {
        let n = drafts.len();
        let before = self.problems.len();
        let mut plain: Vec<Vec<(Rule, Pos)>> = vec![Vec::new(); n];
        let mut start_rules: Vec<(Rule, Pos)> = Vec::new();
        let mut forks: Vec<Option<ForkDraft>> = vec![None; n];
        for &(d, head, fan_in) in dynamic {
            let join = match self.target(index, fan_in, &format!("`fan_in` of node `{}`", drafts[d].name)) {
                Some(Goto::Node(ix)) if ix.index() < declared => Some(ix),
                Some(Goto::Node(ix)) => {
                    let name = &drafts[ix.index()].name;
                    self.problem(fan_in.pos, format!("`fan_in` names `{name}`, a step of a `dynamic_parallel` node"));
                    None
                }
                Some(Goto::End) => {
                    self.problem(fan_in.pos, "`fan_in` must be a node, not the end");
                    None
                }
                None => None,
            };
            forks[d] = Some((vec![NodeIx(head as u32)], join, drafts[d].pos));
        }
        let mut start_has_edges = false;
        for edge in edges {
            let from_name = edge.from.scalar_text().unwrap_or_default();
            let from = if START.contains(&from_name.as_str()) {
                None
            } else if END.contains(&from_name.as_str()) {
                self.problem(edge.from.pos, format!("an edge cannot leave `{from_name}`: the run is over there"));
                continue;
            } else {
                match index.get(&from_name) {
                    Some(&i) => Some(i),
                    None => {
                        let hint = self.hint_node(&from_name, index);
                        self.problem(edge.from.pos, format!("an edge leaves `{from_name}`, which is not a node{hint}"));
                        continue;
                    }
                }
            };
            match &edge.kind {
                EdgeKind::Plain { to, cond } => {
                    let Some(to) = self.target(index, to, "an edge's `to`") else { continue };
                    let rule = Rule { cond: cond.clone(), to };
                    match from {
                        None => {
                            start_has_edges = true;
                            start_rules.push((rule, edge.pos));
                        }
                        Some(i) => plain[i].push((rule, edge.pos)),
                    }
                }
                EdgeKind::Parallel { heads, fan_in } => {
                    let Some(i) = from.or_else(|| index.get(START_FORK).copied()) else {
                        self.problem(edge.from.pos, "the entry cannot fan out; start with a node that fans out");
                        continue;
                    };
                    let fork = Goto::Node(NodeIx(i as u32));
                    if from.is_none() && !start_rules.iter().any(|(r, _)| r.to == fork) {
                        start_has_edges = true;
                        start_rules.push((Rule { cond: Cond::Always, to: fork }, edge.pos));
                    }
                    if drafts[i].after.is_some() || matches!(drafts[i].exec, Exec::Send { .. }) {
                        self.problem(
                            edge.pos,
                            format!("node `{from_name}` is a `dynamic_parallel` node or one of its steps: it has no parallel edges"),
                        );
                        continue;
                    }
                    let mut head_ix = Vec::new();
                    for h in heads {
                        match self.target(index, h, "a parallel branch") {
                            Some(Goto::Node(ix)) => head_ix.push(ix),
                            Some(Goto::End) => {
                                self.problem(h.pos, "a parallel branch must start at a node, not at the end");
                            }
                            None => {}
                        }
                    }
                    let join = match fan_in {
                        Some(f) => match self.target(index, f, "`fan_in`") {
                            Some(Goto::Node(ix)) => Some(ix),
                            Some(Goto::End) => {
                                self.problem(f.pos, "`fan_in` must be a node, not the end");
                                None
                            }
                            None => None,
                        },
                        None => None,
                    };
                    let entry = forks[i].get_or_insert_with(|| (Vec::new(), None, edge.from.pos));
                    for h in head_ix {
                        if entry.0.contains(&h) {
                            self.problem(
                                edge.from.pos,
                                format!("node `{from_name}` fans out to `{}` twice", drafts[h.index()].name),
                            );
                        } else {
                            entry.0.push(h);
                        }
                    }
                    match (entry.1, join) {
                        (Some(a), Some(b)) if a != b => {
                            self.problem(
                                fan_in.map_or(edge.from.pos, |f| f.pos),
                                format!(
                                    "the branches of `{from_name}` meet at one fan-in; `{}` and `{}` are both named",
                                    drafts[a.index()].name,
                                    drafts[b.index()].name
                                ),
                            );
                        }
                        (None, Some(b)) => entry.1 = Some(b),
                        _ => {}
                    }
                }
            }
        }

        // Resolve joins that were not named, and make each head's implicit route the join.
        let mut head_join: Vec<Option<NodeIx>> = vec![None; n];
        let mut fork_of: Vec<Option<(Vec<NodeIx>, NodeIx)>> = vec![None; n];
        for (i, fork) in forks.iter().enumerate() {
            let Some((heads, join, pos)) = fork else { continue };
            let join = match join {
                Some(j) => *j,
                None => match common_successor(drafts, heads, &plain, index) {
                    Some(j) => j,
                    None => {
                        self.problem(
                            *pos,
                            format!(
                                "the branches of `{}` have no single node where they meet; name it with `fan_in: NODE`",
                                drafts[i].name
                            ),
                        );
                        continue;
                    }
                },
            };
            // A `dynamic_parallel` node's unconditional edge to its own fan-in only says again
            // where its items meet (The Edge Agent's files write it).
            if matches!(drafts[i].exec, Exec::Send { .. }) {
                plain[i].retain(|(rule, _)| !(matches!(rule.cond, Cond::Always) && rule.to == Goto::Node(join)));
            }
            if drafts[i].goto.is_some() || !plain[i].is_empty() {
                self.problem(
                    *pos,
                    format!("node `{}` fans out, so it cannot also have `goto` or other edges", drafts[i].name),
                );
            }
            for h in heads {
                head_join[h.index()] = Some(join);
            }
            fork_of[i] = Some((heads.clone(), join));
        }

        let mut nodes = Vec::with_capacity(n);
        let mut places = Places { nodes: Vec::new(), rules: Vec::new(), start: Vec::new(), forks: Vec::new() };
        for (i, draft) in drafts.iter().enumerate() {
            let always = |to| vec![(Rule { cond: Cond::Always, to }, draft.pos)];
            let rules: Vec<(Rule, Pos)> = if let Some(after) = draft.after {
                if !plain[i].is_empty() {
                    self.problem(
                        plain[i][0].1,
                        format!("node `{}` is a step of a `dynamic_parallel` node: its steps run in order, no edge leaves them", draft.name),
                    );
                }
                match after {
                    After::Node(next) => always(Goto::Node(NodeIx(next as u32))),
                    After::Join(d) => match forks[d].as_ref().and_then(|f| f.1) {
                        Some(join) => always(Goto::Node(join)),
                        None => Vec::new(),
                    },
                }
            } else if let Some(goto) = &draft.goto {
                let mut rules = Vec::new();
                for (cond, to) in goto {
                    if let Some(target) = self.target(index, to, &format!("`goto` of node `{}`", draft.name)) {
                        rules.push((Rule { cond: cond.clone(), to: target }, to.pos));
                    }
                }
                rules
            } else if !plain[i].is_empty() {
                std::mem::take(&mut plain[i])
            } else if fork_of[i].is_some() {
                Vec::new()
            } else if let Some(join) = head_join[i] {
                always(Goto::Node(join))
            } else if i + 1 < declared {
                always(Goto::Node(NodeIx(i as u32 + 1)))
            } else {
                always(Goto::End)
            };
            places.nodes.push(draft.pos);
            places.rules.push(rules.iter().map(|(_, p)| *p).collect());
            places.forks.push(forks[i].as_ref().map(|f| f.2));
            let rules = rules.into_iter().map(|(r, _)| r).collect();
            nodes.push(NodeDef {
                name: NodeName::from(draft.name.clone()),
                exec: draft.exec.clone(),
                rules,
                fork: fork_of[i].take(),
                interrupt_before: draft.interrupt_before,
                interrupt_after: draft.interrupt_after,
                fan_in: false,
                sends_fan_in: false,
                item_of: draft.item_of.map(|(d, head)| (NodeIx(d as u32), head)),
                policy: draft.policy,
            });
        }
        let joins: Vec<(usize, bool)> = nodes
            .iter()
            .filter_map(|n| n.fork.as_ref().map(|(_, j)| (j.index(), matches!(n.exec, Exec::Send { .. }))))
            .collect();
        for (j, sends) in joins {
            nodes[j].fan_in = true;
            nodes[j].sends_fan_in |= sends;
        }
        for (node, draft) in nodes.iter().zip(drafts) {
            if let (Some(pos), false) = (draft.marked_fan_in, node.fan_in) {
                self.problem(
                    pos,
                    format!("node `{}` is marked `fan_in: true`, but no parallel edge meets there", draft.name),
                );
            }
        }
        if !start_has_edges {
            start_rules = vec![(Rule { cond: Cond::Always, to: Goto::Node(NodeIx(0)) }, drafts[0].pos)];
        }
        places.start = start_rules.iter().map(|(_, p)| *p).collect();
        let start_rules: Vec<Rule> = start_rules.into_iter().map(|(r, _)| r).collect();
        // The shape checks look at the whole graph: only for a file without other problems (they
        // would be reported again once those are fixed).
        if !self.problems.is_empty() {
            return (None, None);
        }
        self.shape(&nodes, &start_rules, &places);
        if self.problems.len() != before {
            return (None, None);
        }
        (Some(start_rules), Some(nodes))
    }
}

/// Where the parts of the routing are written, for the shape checks' problems.
pub(crate) struct Places {
    pub(crate) nodes: Vec<Pos>,
    /// Per node, where each of its rules is written (an implicit rule: at the node).
    pub(crate) rules: Vec<Vec<Pos>>,
    pub(crate) start: Vec<Pos>,
    /// Per node, where its fan-out is declared.
    pub(crate) forks: Vec<Option<Pos>>,
}

impl Loader<'_> {
    /// The graph checks `graph!` runs (tea-check): reachability, a way to `__end__`, edges that
    /// are never taken or repeated, branches that leave their fan-out, pauses inside nested
    /// fan-outs. Each problem is placed at the node, rule or fan-out it is about.
    pub(crate) fn shape(&mut self, nodes: &[NodeDef], start: &[Rule], places: &Places) {
        let graph = crate::ir::shape(nodes, start, &self.call_edges);
        let target = crate::ir::shape::target;
        for problem in tea_check::check(&graph, tea_check::Spelling::Yaml) {
            let pos = match problem.at {
                tea_check::At::Node(i) => places.nodes.get(i).copied(),
                tea_check::At::Edge { from, to } => {
                    let first = nodes.get(from).and_then(|n| n.rules.iter().position(|r| target(&r.to) == to));
                    match first {
                        Some(k) => places.rules[from].get(k).copied(),
                        None => places.forks.get(from).copied().flatten().or(places.nodes.get(from).copied()),
                    }
                }
                tea_check::At::Listed { from: tea_check::Source::Start, index } => places.start.get(index).copied(),
                tea_check::At::Listed { from: tea_check::Source::Node(i), index } => {
                    places.rules.get(i).and_then(|r| r.get(index)).copied()
                }
                tea_check::At::Fork(i) | tea_check::At::Branch { fork: i, .. } => {
                    places.forks.get(i).copied().flatten().or(places.nodes.get(i).copied())
                }
                _ => places.start.first().copied(),
            };
            let pos = pos.unwrap_or(Pos { line: 1, column: 1 });
            // A node nothing reaches never runs: both of The Edge Agent's engines load such a
            // file, and so does tea, saying so, unless the engine is strict.
            if problem.kind == tea_check::Kind::Unreachable && !self.env.strict {
                let key = format!("unreachable {}", problem.message);
                let message = format!(
                    "{}; it never runs (`tea validate --strict`, `Engine::strict`, refuse it)",
                    problem.message
                );
                self.warn(pos, &key, message);
                continue;
            }
            self.problem(pos, problem.message);
        }
    }
}

/// For a fork without `fan_in`: the one node every branch reaches first by its explicit routing.
pub(crate) fn common_successor(
    drafts: &[Draft<'_>],
    heads: &[NodeIx],
    plain: &[Vec<(Rule, Pos)>],
    index: &HashMap<String, usize>,
) -> Option<NodeIx> {
    let successors = |i: usize| -> Vec<usize> {
        let mut out: Vec<usize> = plain[i]
            .iter()
            .filter_map(|(r, _)| match r.to {
                Goto::Node(n) => Some(n.index()),
                Goto::End => None,
            })
            .collect();
        if let Some(goto) = &drafts[i].goto {
            out.extend(goto.iter().filter_map(|(_, n)| n.scalar_text().and_then(|s| index.get(&s).copied())));
        }
        out
    };
    let reach = |head: usize| -> Vec<usize> {
        let mut seen = vec![head];
        let mut queue = vec![head];
        while let Some(i) = queue.pop() {
            for s in successors(i) {
                if !seen.contains(&s) {
                    seen.push(s);
                    queue.push(s);
                }
            }
        }
        seen
    };
    let sets: Vec<Vec<usize>> = heads.iter().map(|h| reach(h.index())).collect();
    let common: Vec<usize> = sets
        .first()?
        .iter()
        .copied()
        .filter(|c| !heads.iter().any(|h| h.index() == *c) && sets.iter().all(|s| s.contains(c)))
        .collect();
    // The common node reached before the others: none of the others leads to it... keep it
    // simple and unambiguous: exactly one common node, or the one all others follow.
    let firsts: Vec<usize> = common
        .iter()
        .copied()
        .filter(|c| !common.iter().any(|o| o != c && !reach(*o).contains(c) && reach(*c).contains(o)))
        .collect();
    match (common.as_slice(), firsts.as_slice()) {
        ([one], _) => Some(NodeIx(*one as u32)),
        (_, [one]) => Some(NodeIx(*one as u32)),
        _ => None,
    }
}
