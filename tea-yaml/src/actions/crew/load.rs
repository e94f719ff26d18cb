//! The loader's side of the `agent.*` actions (`mod.rs`): `settings.agents`, and each node's
//! `with:` with the agents it names checked against them.

use crate::actions::compose::load::with_llm_options;
use crate::actions::compose::Composed;
use crate::actions::crew::{AgentDef, Crew, CrewKind, AGGREGATIONS};
use crate::load::*;

/// The keys of an agent of `settings.agents`.
const AGENT_KEYS: &[&str] = &["model", "system_prompt", "temperature", "max_tokens", "timeout", "tools", "retry"];

impl Loader<'_> {
    /// `settings.agents`: each agent's `llm.call` options.
    pub(crate) fn crew_agents(&mut self, node: &Node) {
        let Some(entries) = node.as_map() else {
            self.problem(
                node.pos,
                format!("`settings.agents` maps agent names to their settings, not {}", node.what()),
            );
            return;
        };
        let mut agents = Vec::new();
        for (k, v) in entries {
            let Some(name) = self.string(k, "an agent's name in `settings.agents`") else { continue };
            let name = name.to_owned();
            let what = format!("agent `{name}` of `settings.agents`");
            let Some(f) = self.fields(v, &what, AGENT_KEYS) else { continue };
            let mut def = AgentDef { attempts: 3, backoff: 2.0, ..AgentDef::default() };
            def.model = f.get("model").map(|n| n.to_json());
            if let Some(s) = f.get("system_prompt") {
                def.system_prompt = self.string(s, &format!("`system_prompt` of {what}")).map(str::to_owned);
            }
            if let Some(t) = f.get("temperature") {
                match t.to_json().as_f64() {
                    Some(x) if (0.0..=2.0).contains(&x) => def.temperature = Some(t.to_json()),
                    _ => self.problem(t.pos, format!("`temperature` of {what} is a number from 0.0 to 2.0")),
                }
            }
            def.max_tokens = f.get("max_tokens").map(|n| n.to_json());
            def.timeout = f.get("timeout").map(|n| n.to_json());
            if let Some(t) = f.get("tools") {
                self.warn(
                    t.pos,
                    "settings.agents.tools",
                    format!(
                        "`tools` of {what} is ignored, as The Edge Agent's engines ignore it: its agents answer with \
                         text (`reason.react` calls tools)"
                    ),
                );
            }
            if let Some(r) = f.get("retry") {
                if let Some(g) = self.fields(r, &format!("`retry` of {what}"), &["max_attempts", "backoff"]) {
                    if let Some(n) = g.get("max_attempts") {
                        match n.kind {
                            Kind::Int(i) if (1..=1000).contains(&i) => def.attempts = i as u64,
                            _ => self.problem(n.pos, format!("`retry.max_attempts` of {what} is from 1 to 1000")),
                        }
                    }
                    if let Some(n) = g.get("backoff") {
                        match n.to_json().as_f64() {
                            Some(x) if (1.0..=10.0).contains(&x) => def.backoff = x,
                            _ => self.problem(n.pos, format!("`retry.backoff` of {what} is a factor from 1 to 10")),
                        }
                    }
                }
            }
            agents.push((name, def));
        }
        self.crew = Arc::new(agents);
    }

    /// An agent name written in the file: one of `settings.agents`.
    fn crew_name(&mut self, node: &Node, what: &str) {
        let Some(name) = node.as_str().filter(|n| !n.contains("{{")) else { return };
        if self.crew.iter().any(|(n, _)| n == name) {
            return;
        }
        let known: Vec<String> = self.crew.iter().map(|(n, _)| n.clone()).collect();
        let hint = suggest(name, known.iter().map(String::as_str));
        let declared = if known.is_empty() { " (the file declares none)".to_owned() } else { String::new() };
        self.problem(
            node.pos,
            format!("{what} names agent `{name}`, which `settings.agents` does not declare{declared}{hint}"),
        );
    }

    /// `uses: agent.*` with its `with:`.
    pub(crate) fn crew(&mut self, kind: CrewKind, with: &Node, name: &str) -> Option<Composed> {
        let action = kind.name();
        let what = format!("`with` of `{action}` (node `{name}`)");
        let llm = self.step_action("llm.call", with.pos, &what)?;
        let allowed = with_llm_options(kind.keys(), &llm);
        let f = self.fields(with, &what, &allowed)?;
        let required: &[&str] = match kind {
            CrewKind::Dispatch => &["agent", "task"],
            CrewKind::Parallel => &["agents", "task"],
            CrewKind::Sequential => &["agents"],
            CrewKind::Coordinate => &["leader", "workers", "task"],
        };
        for key in required {
            if !f.contains_key(key) {
                self.problem(with.pos, format!("{what} needs `{key}`"));
            }
        }
        for key in ["agent", "leader"] {
            if let Some(n) = f.get(key) {
                self.crew_name(n, &format!("`{key}` of {what}"));
            }
        }
        for key in ["agents", "workers"] {
            if let Some(n) = f.get(key) {
                match &n.kind {
                    Kind::Seq(items) => {
                        for item in items {
                            self.crew_name(item, &format!("`{key}` of {what}"));
                        }
                    }
                    Kind::Str { text, .. } if text.contains("{{") => {}
                    _ => self.problem(n.pos, format!("`{key}` of {what} is a list of agent names")),
                }
            }
        }
        if let Some(a) = f.get("aggregation") {
            if let Some(text) = a.as_str().filter(|t| !t.contains("{{")) {
                if !AGGREGATIONS.contains(&text) {
                    let hint = suggest(text, AGGREGATIONS.iter().copied());
                    self.problem(
                        a.pos,
                        format!(
                            "`aggregation` of {what} is `collect`, `vote`, `first` or `consensus`, not `{text}`{hint}"
                        ),
                    );
                }
            }
        }
        let args = match self.sending_tree(with, sending_keys(&llm)) {
            Tree::Map(entries) => entries,
            _ => Vec::new(),
        };
        Some(Composed::Crew(Crew { kind, args, agents: self.crew.clone(), llm }))
    }
}
