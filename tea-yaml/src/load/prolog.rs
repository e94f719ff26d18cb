//! The loader's Prolog blocks (`language: prolog`, `run: { type: prolog, code: … }`, and blocks
//! that look like Prolog): read and checked at load by `crate::prolog`.

use super::*;

impl Loader<'_> {
    /// The `run:` of node `name`, a Prolog block (`language: prolog`).
    pub(super) fn prolog_run(&mut self, run: &Node, name: &str, output: Option<&Node>) -> Exec {
        if let Some(o) = output {
            self.problem(
                o.pos,
                format!("node `{name}`: a Prolog block writes the keys it `return/2`s; `output` is for actions"),
            );
        }
        let text = match &run.kind {
            Kind::Str { text, .. } => text.clone(),
            Kind::Map(_) => match self.prolog_map(run, name) {
                Some(code) => return code,
                None => return Exec::Noop,
            },
            _ => {
                self.problem(run.pos, format!("`run` of node `{name}` must be a Prolog block (text)"));
                return Exec::Noop;
            }
        };
        self.prolog_text(name, run.pos.line, &text)
    }

    /// `run: { type: prolog, code: TEXT }`, or `None` when `run` is not that mapping.
    pub(super) fn prolog_map(&mut self, run: &Node, name: &str) -> Option<Exec> {
        let entries = run.as_map()?;
        let is_prolog = entries.iter().any(|(k, v)| k.as_str() == Some("type") && v.as_str() == Some("prolog"));
        if !is_prolog {
            return None;
        }
        let Some(f) = self.fields(run, &format!("`run` of node `{name}`"), &["type", "code"]) else {
            return Some(Exec::Noop);
        };
        let Some(code) = f.get("code") else {
            self.problem(run.pos, format!("`run` of node `{name}` with `type: prolog` needs `code: TEXT`"));
            return Some(Exec::Noop);
        };
        let Some(text) = code.as_str() else {
            self.problem(code.pos, format!("`code` of node `{name}` must be Prolog text"));
            return Some(Exec::Noop);
        };
        let text = text.to_owned();
        Some(self.prolog_text(name, code.pos.line, &text))
    }

    /// A block's text, starting on `line`, as a Prolog node (its problems reported).
    pub(super) fn prolog_text(&mut self, name: &str, line: usize, text: &str) -> Exec {
        match crate::prolog::Loader::new(&self.env.file).block(name, line, text) {
            Ok(block) => Exec::Prolog(block),
            Err(problems) => {
                for (line, message) in problems {
                    self.problem(Pos { line, column: 1 }, message);
                }
                Exec::Noop
            }
        }
    }

    /// A block with no `language:` that is not Lua but looks like Prolog: Prolog if it reads
    /// as Prolog (feature `prolog`), its problems if it reads as nothing else.
    pub(super) fn prolog_guess(
        &mut self,
        name: &str,
        line: usize,
        text: &str,
    ) -> Option<Result<Exec, Vec<(usize, String)>>> {
        if !crate::prolog::looks_like_prolog(text) {
            return None;
        }
        Some(crate::prolog::Loader::new(&self.env.file).block(name, line, text).map(Exec::Prolog))
    }
}
