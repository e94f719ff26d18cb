//! The loader's side of `validate.extraction` and `retry.loop` (`mod.rs`): the file's
//! `extraction_schema`, `validation_constraints`, `semantic_probes` and `validation_logging`
//! read and checked at load, and each node's `with:`.

use crate::actions::compose::Composed;
use crate::actions::extraction::{Config, Extraction, Probe, Retry, Schema, Validator, MAX_RETRIES};
use crate::load::*;

/// The keys of `validate.extraction`'s `with:`.
const EXTRACTION_ARGS: &[&str] =
    &["entities", "relationships", "source_text", "schema", "constraints", "probes", "logging", "agent_name"];
/// The keys of `retry.loop`'s `with:`.
const RETRY_ARGS: &[&str] = &["validate", "validate_args", "correct", "max_retries", "retry_delay"];

impl Loader<'_> {
    /// Reads the file's `validate.extraction` keys (each checked now, used or not).
    pub(crate) fn extraction_top(&mut self, top: &HashMap<&str, &Node>) -> Config {
        let mut out = Config::default();
        if let Some(node) = top.get("extraction_schema") {
            out.schema = self.extraction_schema(node, "`extraction_schema`");
        }
        if let Some(node) = top.get("validation_constraints") {
            out.rules = self.constraints(node, "`validation_constraints`");
        }
        if let Some(node) = top.get("semantic_probes") {
            out.probes = self.probes(node, "`semantic_probes`");
        }
        if let Some(node) = top.get("validation_logging") {
            out.log = self.logging(node, "`validation_logging`");
        }
        out
    }

    fn names(&mut self, node: &Node, what: &str) -> Vec<String> {
        let Some(items) = node.as_seq() else {
            self.problem(node.pos, format!("{what} must be a list of names, not {}", node.what()));
            return Vec::new();
        };
        items.iter().filter_map(|i| self.string(i, &format!("an entry of {what}")).map(str::to_owned)).collect()
    }

    fn flag(&mut self, node: &Node, what: &str) -> bool {
        match node.kind {
            Kind::Bool(b) => b,
            _ => {
                self.problem(node.pos, format!("{what} must be true or false, not {}", node.what()));
                false
            }
        }
    }

    fn extraction_schema(&mut self, node: &Node, what: &str) -> Option<Schema> {
        let f = self.fields(node, what, &["entities", "relationships", "guide_extraction", "confidence_tracking"])?;
        let mut schema = Schema::default();
        if let Some(e) = f.get("entities") {
            let w = format!("`entities` of {what}");
            if let Some(g) = self.fields(e, &w, &["required_fields", "optional_fields", "type_field"]) {
                if let Some(n) = g.get("required_fields") {
                    schema.entity_fields = self.names(n, &format!("`required_fields` of {w}"));
                }
                if let Some(n) = g.get("optional_fields") {
                    self.names(n, &format!("`optional_fields` of {w}"));
                }
                if let Some(n) = g.get("type_field") {
                    self.string(n, &format!("`type_field` of {w}"));
                }
            }
        }
        if let Some(r) = f.get("relationships") {
            let w = format!("`relationships` of {what}");
            let keys = ["types", "required_fields", "optional_fields", "type_requirements"];
            if let Some(g) = self.fields(r, &w, &keys) {
                if let Some(n) = g.get("types") {
                    schema.types = self.names(n, &format!("`types` of {w}"));
                }
                if let Some(n) = g.get("required_fields") {
                    schema.relationship_fields = self.names(n, &format!("`required_fields` of {w}"));
                }
                if let Some(n) = g.get("optional_fields") {
                    self.names(n, &format!("`optional_fields` of {w}"));
                }
                if let Some(n) = g.get("type_requirements") {
                    match n.as_map() {
                        Some(entries) => {
                            for (k, v) in entries {
                                let Some(kind) = self.string(k, &format!("a type of `type_requirements` of {w}"))
                                else {
                                    continue;
                                };
                                let kind = kind.to_owned();
                                let fields = self.names(v, &format!("`type_requirements.{kind}` of {w}"));
                                schema.type_requirements.push((kind, fields));
                            }
                        }
                        None => self.problem(
                            n.pos,
                            format!("`type_requirements` of {w} maps a relationship type to the fields it needs"),
                        ),
                    }
                }
            }
        }
        if let Some(n) = f.get("guide_extraction") {
            // Read before the load (`Schema::guide`): it writes `variables.extraction_prompt`.
            self.flag(n, &format!("`guide_extraction` of {what}"));
        }
        if let Some(n) = f.get("confidence_tracking") {
            schema.confidence_tracking = self.flag(n, &format!("`confidence_tracking` of {what}"));
        }
        Some(schema)
    }

    /// `validation_constraints: { language: prolog, rules }`: the rules, compiled now with no
    /// facts (a syntax error is a load problem at its line).
    fn constraints(&mut self, node: &Node, what: &str) -> Option<(String, usize)> {
        let f = self.fields(node, what, &["language", "rules"])?;
        if let Some(l) = f.get("language") {
            if let Some(lang) = self.string(l, &format!("`language` of {what}")) {
                if lang != "prolog" {
                    self.problem(l.pos, format!("`language` of {what} must be `prolog`, not `{lang}`"));
                }
            }
        }
        let rules = f.get("rules")?;
        let text = self.string(rules, &format!("`rules` of {what}"))?.to_owned();
        if text.trim().is_empty() {
            return None;
        }
        let line = rules.pos.line;
        let program = crate::actions::extraction::program(&[], &[], &text, false);
        match crate::lang::prolog::Loader::new(&self.env.file).block("validate.extraction", line, &program) {
            Ok(_) => Some((text, line)),
            Err(problems) => {
                for (at, message) in problems {
                    self.problem(Pos { line: at, column: 1 }, format!("{what}: {message}"));
                }
                None
            }
        }
    }

    fn probes(&mut self, node: &Node, what: &str) -> Vec<Probe> {
        let Some(items) = node.as_seq() else {
            self.problem(node.pos, format!("{what} must be a list of probes, not {}", node.what()));
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let w = format!("probe {i} of {what}");
            let Some(f) = self.fields(item, &w, &["for_each", "where", "probe", "on_fail"]) else { continue };
            let relationships = match f.get("for_each").map(|n| (n, n.as_str())) {
                Some((_, Some("relationship"))) => true,
                Some((_, Some("entity"))) => false,
                Some((n, _)) => {
                    let text = n.scalar_text().unwrap_or_default();
                    let hint = suggest(&text, ["entity", "relationship"]);
                    self.problem(n.pos, format!("`for_each` of {w} is `entity` or `relationship`, not `{text}`{hint}"));
                    continue;
                }
                None => {
                    self.problem(item.pos, format!("{w} needs `for_each: entity | relationship`"));
                    continue;
                }
            };
            let filter = match f.get("where") {
                None => None,
                Some(n) => {
                    let Some(source) = self.string(n, &format!("`where` of {w}")) else { continue };
                    let source = source.to_owned();
                    match self.expr_at(n.pos, &source) {
                        Ok(id) => Some(id),
                        Err(e) => {
                            self.problem(n.pos, format!("`where` of {w}, `{source}`, does not parse: {e}"));
                            continue;
                        }
                    }
                }
            };
            let Some(p) = f.get("probe") else {
                self.problem(item.pos, format!("{w} needs `probe:` (the question, a template)"));
                continue;
            };
            let Some(source) = self.string(p, &format!("`probe` of {w}")) else { continue };
            let source = source.to_owned();
            let question = self.text(p.pos, &source);
            let reject = match f.get("on_fail").map(|n| (n, n.as_str())) {
                None | Some((_, Some("reject"))) => true,
                Some((_, Some("warn"))) => false,
                Some((n, _)) => {
                    let text = n.scalar_text().unwrap_or_default();
                    let hint = suggest(&text, ["reject", "warn"]);
                    self.problem(n.pos, format!("`on_fail` of {w} is `reject` or `warn`, not `{text}`{hint}"));
                    true
                }
            };
            out.push(Probe { relationships, filter, question, source, reject });
        }
        out
    }

    /// `validation_logging`: the log's path when failures are logged.
    fn logging(&mut self, node: &Node, what: &str) -> Option<String> {
        let keys = ["enabled", "log_failures", "log_path", "include_source", "include_timestamp"];
        let f = self.fields(node, what, &keys)?;
        for key in ["include_source", "include_timestamp"] {
            if let Some(n) = f.get(key) {
                if self.flag(n, &format!("`{key}` of {what}")) {
                    self.warn(
                        n.pos,
                        key,
                        format!(
                            "`{key}` of {what} is ignored, as The Edge Agent's engines ignore it: each line holds \
                             its timestamp and the source's hash"
                        ),
                    );
                }
            }
        }
        let enabled = f.get("enabled").is_some_and(|n| self.flag(n, &format!("`enabled` of {what}")));
        let failures = f.get("log_failures").is_none_or(|n| self.flag(n, &format!("`log_failures` of {what}")));
        let path = match f.get("log_path") {
            Some(n) => self.string(n, &format!("`log_path` of {what}"))?.to_owned(),
            None => "./validation_failures.jsonl".to_owned(),
        };
        if !(enabled && failures) {
            return None;
        }
        let at = f.get("log_path").map_or(node.pos, |n| n.pos);
        if path.contains("${") {
            // Expanded when a failure is logged: its variables must be granted, and the
            // path it expands to is confined then.
            if let Err(e) = crate::actions::extraction::expand(&path, &self.grants) {
                self.problem(at, format!("`log_path` of {what}: {e}"));
                return None;
            }
            return Some(path);
        }
        let confined = self.confined(at, &format!("`log_path` of {what}"), &path, crate::grants::Access::Write)?;
        Some(confined.display().to_string())
    }

    /// `uses: validate.extraction` with its `with:` (keys the file's top level gives unless
    /// the node gives them).
    pub(crate) fn validate_extraction(&mut self, with: Option<&Node>, name: &str, pos: Pos) -> Option<Extraction> {
        let what = format!("`with` of `validate.extraction` (node `{name}`)");
        let empty = Node { pos, kind: Kind::Map(Vec::new()) };
        let with = with.unwrap_or(&empty);
        let f = self.fields(with, &what, EXTRACTION_ARGS)?;
        let mut extraction = Extraction {
            config: self.extraction.clone(),
            llm: None,
            args: Tree::Literal(Value::Null),
            file: self.env.file.clone(),
        };
        if let Some(n) = f.get("schema") {
            extraction.config.schema = self.extraction_schema(n, &format!("`schema` of {what}"));
        }
        if let Some(n) = f.get("constraints") {
            extraction.config.rules = self.constraints(n, &format!("`constraints` of {what}"));
        }
        if let Some(n) = f.get("probes") {
            extraction.config.probes = self.probes(n, &format!("`probes` of {what}"));
        }
        if let Some(n) = f.get("logging") {
            extraction.config.log = self.logging(n, &format!("`logging` of {what}"));
        }
        if !extraction.config.probes.is_empty() {
            extraction.llm = Some(self.step_action("llm.call", pos, &format!("the probes of node `{name}`"))?);
        }
        let args = Node {
            pos: with.pos,
            kind: Kind::Map(
                with.as_map()
                    .unwrap_or_default()
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), Some("schema" | "constraints" | "probes" | "logging")))
                    .cloned()
                    .collect(),
            ),
        };
        extraction.args = self.tree(&args);
        Some(extraction)
    }

    /// `uses: retry.loop` with its `with:`; the correction node is checked once every node is
    /// known ([`check_calls`](Self::check_calls)).
    pub(crate) fn retry_loop(&mut self, with: &Node, name: &str) -> Option<Retry> {
        let what = format!("`with` of `retry.loop` (node `{name}`)");
        let f = self.fields(with, &what, RETRY_ARGS)?;
        let Some(v) = f.get("validate") else {
            self.problem(with.pos, format!("{what} needs `validate: ACTION` (`validate.extraction` or another)"));
            return None;
        };
        let validate = match self.string(v, &format!("`validate` of {what}")).map(str::to_owned) {
            Some(validator) if validator == "validate.extraction" && !self.env.actions.contains_key(&validator) => {
                self.validate_extraction(None, name, v.pos).map(|e| Validator::Extraction(Arc::new(e)))
            }
            Some(validator) => self
                .step_action(&validator, v.pos, &format!("`validate` of {what}"))
                .map(|action| Validator::Action { name: validator, action }),
            None => None,
        };
        let validate_args = match f.get("validate_args") {
            Some(n) if n.as_map().is_some() || matches!(n.kind, Kind::Null) => self.tree(n),
            Some(n) => {
                self.problem(n.pos, format!("`validate_args` of {what} must be a mapping, not {}", n.what()));
                return None;
            }
            None => Tree::Literal(Value::Null),
        };
        let Some(c) = f.get("correct") else {
            self.problem(with.pos, format!("{what} needs `correct: NODE` (the node that corrects)"));
            return None;
        };
        let correct = self.string(c, &format!("`correct` of {what}"))?.to_owned();
        if correct == name {
            self.problem(c.pos, format!("`correct` of {what} names the node itself; name the node that corrects"));
            return None;
        }
        self.calls.push((c.pos, name.to_owned(), correct.clone()));
        let number = |loader: &mut Self, key: &str, default: Value| -> Option<Tree> {
            let Some(n) = f.get(key) else { return Some(Tree::Literal(default)) };
            let tree = loader.tree(n);
            if let Tree::Literal(value) = &tree {
                let ok = match key {
                    "max_retries" => value.as_u64().is_some_and(|n| n <= MAX_RETRIES),
                    _ => value.as_f64().is_some_and(|s| (0.0..=3600.0).contains(&s)),
                };
                if !ok {
                    let bound = match key {
                        "max_retries" => format!("a whole number from 0 to {MAX_RETRIES}"),
                        _ => "seconds, from 0 to 3600".to_owned(),
                    };
                    loader.problem(n.pos, format!("`{key}` of {what} is {bound}, not {value}"));
                    return None;
                }
            }
            Some(tree)
        };
        let max_retries = number(self, "max_retries", Value::from(1));
        let retry_delay = number(self, "retry_delay", Value::from(0));
        Some(Retry {
            validate: validate?,
            validate_args,
            correct,
            max_retries: max_retries?,
            retry_delay: retry_delay?,
        })
    }

    /// The nodes `retry.loop` nodes call: each a node of the file that runs a block or an
    /// action (not a pause, a loop over items or a child agent), reached through its caller.
    pub(crate) fn check_calls(&mut self, drafts: &[Draft<'_>], index: &HashMap<String, usize>) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (pos, caller, callee) in std::mem::take(&mut self.calls) {
            let Some(&to) = index.get(&callee) else {
                let hint = self.hint_node(&callee, index);
                self.problem(pos, format!("`correct` of node `{caller}` names `{callee}`, which is not a node{hint}"));
                continue;
            };
            match &drafts[to].exec {
                Exec::Composed { composed, .. } if matches!(**composed, Composed::Retry(_)) => {
                    self.problem(
                        pos,
                        format!(
                            "`correct` of node `{caller}` names `{callee}`, a `retry.loop` itself; a correction node \
                             runs a `run:` block or an action (a loop of loops could call itself forever)"
                        ),
                    );
                    continue;
                }
                Exec::Interrupt { .. } | Exec::Send { .. } | Exec::Subgraph { .. } => {
                    self.problem(
                        pos,
                        format!(
                            "`correct` of node `{caller}` names `{callee}`, which pauses, fans out or runs a child \
                             agent; `retry.loop` runs a node of a `run:` block or an action"
                        ),
                    );
                    continue;
                }
                _ => {}
            }
            if drafts[to].interrupt_before || drafts[to].interrupt_after {
                self.problem(
                    pos,
                    format!("`correct` of node `{caller}` names `{callee}`, which has a breakpoint; `retry.loop` runs it without pausing"),
                );
                continue;
            }
            if let Some(&from) = index.get(&caller) {
                out.push((from, to));
            }
        }
        out
    }
}

/// A composed action of this module: `retry.loop` or `validate.extraction`.
pub(crate) fn composed(
    loader: &mut Loader<'_>,
    action: &str,
    with: Option<&Node>,
    name: &str,
    pos: Pos,
) -> Option<Composed> {
    match action {
        "retry.loop" => {
            let Some(with) = with else {
                loader.problem(pos, format!("`retry.loop` (node `{name}`) needs `with: {{ validate, correct, … }}`"));
                return None;
            };
            loader.retry_loop(with, name).map(|r| Composed::Retry(Box::new(r)))
        }
        _ => loader.validate_extraction(with, name, pos).map(|e| Composed::Extraction(Arc::new(e))),
    }
}
