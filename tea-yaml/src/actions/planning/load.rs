//! The loader's side of the `plan.*` actions (`mod.rs`): each node's `with:` checked, its
//! `prompt_template` and `subtask_executor` kept apart to render when they are used.

use crate::actions::compose::load::with_llm_options;
use crate::actions::compose::Composed;
use crate::actions::planning::{Plan, PlanKind, ON_FAILURE, PLANNER_KEYS, STRATEGIES};
use crate::load::*;

impl Loader<'_> {
    /// `uses: plan.*` with its `with:` (`plan.status` and `plan.execute` may have none: they
    /// read `state.plan`).
    pub(crate) fn planning(&mut self, kind: PlanKind, with: Option<&Node>, name: &str, pos: Pos) -> Option<Composed> {
        let action = kind.name();
        let what = format!("`with` of `{action}` (node `{name}`)");
        let empty = Node { pos, kind: Kind::Map(Vec::new()) };
        let with = with.unwrap_or(&empty);
        // `plan.status` asks no model, nor does `plan.execute` with an executor of its own
        // that never replans.
        let entry = |key: &str| {
            with.as_map().unwrap_or_default().iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v.clone())
        };
        let never_replans =
            entry("on_subtask_failure").is_none_or(|n| n.as_str().is_some_and(|s| s != "replan" && !s.contains("{{")));
        let asks = match kind {
            PlanKind::Status => false,
            PlanKind::Execute => entry("subtask_executor").is_none() || !never_replans,
            PlanKind::Decompose | PlanKind::Replan => true,
        };
        let llm = if asks { Some(self.step_action("llm.call", pos, &what)?) } else { None };
        let sends = matches!(kind, PlanKind::Decompose | PlanKind::Replan);
        let allowed = match &llm {
            Some(llm) if sends => with_llm_options(kind.keys(), llm),
            _ => kind.keys().to_vec(),
        };
        let f = self.fields(with, &what, &allowed)?;
        if kind == PlanKind::Decompose && !f.contains_key("goal") {
            self.problem(with.pos, format!("{what} needs `goal`"));
        }
        let mut prompt_template = f.get("prompt_template").map(|n| self.tree(n));
        if let Some(p) = f.get("planner") {
            let w = format!("`planner` of {what}");
            if let Some(g) = self.fields(p, &w, PLANNER_KEYS) {
                self.warn(
                    p.pos,
                    "plan planner",
                    format!(
                        "{w} is read as `plan.decompose`'s options (The Edge Agent's engines pass it on to `llm.call`)"
                    ),
                );
                if let Some(s) = g.get("strategy") {
                    self.literal_choice(s, &format!("`strategy` of {w}"), STRATEGIES);
                }
                if prompt_template.is_none() {
                    prompt_template = g.get("prompt_template").map(|n| self.tree(n));
                }
            }
        }
        if let Some(s) = f.get("strategy") {
            self.literal_choice(s, &format!("`strategy` of {what}"), STRATEGIES);
        }
        if let Some(s) = f.get("on_subtask_failure") {
            self.literal_choice(s, &format!("`on_subtask_failure` of {what}"), ON_FAILURE);
        }
        let executor = match f.get("subtask_executor") {
            None => None,
            Some(e) => {
                let w = format!("`subtask_executor` of {what}");
                let g = self.fields(e, &w, &["action", "uses", "with"])?;
                let Some(a) = g.get("action").or_else(|| g.get("uses")) else {
                    self.problem(e.pos, format!("{w} needs `action: NAME` (and its `with:`)"));
                    return None;
                };
                let action_name = self.string(a, &format!("`action` of {w}"))?.to_owned();
                let resolved = self.step_action(&action_name, a.pos, &w)?;
                #[cfg(feature = "net")]
                if let Action::Net(net) = &resolved {
                    self.net_with(*net, g.get("with").copied(), a, name);
                }
                let args = match g.get("with") {
                    Some(n) => self.action_tree(n, &resolved),
                    None => Tree::Map(Vec::new()),
                };
                Some((action_name, resolved, args))
            }
        };
        // The rest renders when the node runs; `planner.prompt_template` is kept apart too.
        let entries: Vec<(Node, Node)> = with
            .as_map()
            .unwrap_or_default()
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), Some("prompt_template" | "subtask_executor")))
            .map(|(k, v)| match (k.as_str(), v.as_map()) {
                (Some("planner"), Some(entries)) => (
                    k.clone(),
                    Node {
                        pos: v.pos,
                        kind: Kind::Map(
                            entries.iter().filter(|(k, _)| k.as_str() != Some("prompt_template")).cloned().collect(),
                        ),
                    },
                ),
                _ => (k.clone(), v.clone()),
            })
            .collect();
        let args = self.sending_tree(
            &Node { pos: with.pos, kind: Kind::Map(entries) },
            llm.as_ref().map_or(&[][..], sending_keys),
        );
        Some(Composed::Plan(Plan { kind, args, prompt_template, executor, llm }))
    }

    /// A literal that must be one of `choices` (a template is checked when it renders).
    fn literal_choice(&mut self, node: &Node, what: &str, choices: &[&str]) {
        let Some(text) = node.as_str().filter(|t| !t.contains("{{")) else { return };
        if !choices.contains(&text) {
            let hint = suggest(text, choices.iter().copied());
            let list: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
            self.problem(node.pos, format!("{what} is one of {}, not `{text}`{hint}", list.join(", ")));
        }
    }
}
