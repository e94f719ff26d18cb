//! The loader's Prolog blocks (`language: prolog`, `run: { type: prolog, code: … }`, and blocks
//! that look like Prolog): read and checked at load by `crate::lang::prolog`.

use crate::load::*;

impl Loader<'_> {
    /// The `run:` of node `name`, a Prolog block (`language: prolog`).
    pub(crate) fn prolog_run(&mut self, run: &Node, name: &str, output: Option<&Node>) -> Exec {
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
    pub(crate) fn prolog_map(&mut self, run: &Node, name: &str) -> Option<Exec> {
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
    pub(crate) fn prolog_text(&mut self, name: &str, line: usize, text: &str) -> Exec {
        match crate::lang::prolog::Loader::new(&self.env.file).block(name, line, text) {
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
    pub(crate) fn prolog_guess(
        &mut self,
        name: &str,
        line: usize,
        text: &str,
    ) -> Option<Result<Exec, Vec<(usize, String)>>> {
        if !crate::lang::prolog::looks_like_prolog(text) {
            return None;
        }
        Some(crate::lang::prolog::Loader::new(&self.env.file).block(name, line, text).map(Exec::Prolog))
    }
}

/// Whether `action` is the engine's own `prolog.query` (not one a host registered under that
/// name), directly or behind `ratelimit.wrap`.
pub(crate) fn is_prolog_query(action: &Action) -> bool {
    match action {
        #[cfg(feature = "prolog")]
        Action::User(f) => std::sync::Arc::ptr_eq(f, &crate::actions::prolog_query()),
        Action::RateLimit { inner, .. } => is_prolog_query(inner),
        _ => false,
    }
}

impl Loader<'_> {
    /// The arguments of an action (`with:` of a node, a step's or a tool's): those of the
    /// engine's `prolog.query` as [`prolog_query_tree`](Self::prolog_query_tree) makes them,
    /// any other's as a tree whose sending keys may read `secrets`.
    pub(crate) fn action_tree(&mut self, node: &Node, action: &Action) -> Tree {
        if is_prolog_query(action) {
            self.prolog_query_tree(node)
        } else {
            self.sending_tree(node, sending_keys(action))
        }
    }

    /// `with: { code, facts, bindings }` of `prolog.query`: `code` and `facts` are Prolog text,
    /// never a template rendered into code. Each `{{ expr }}` in them becomes a fresh variable
    /// (`_TeaArgN`) bound, when the node runs, to the expression's value as a term; a quoted
    /// text with `{{ }}` in it becomes one variable bound to the rendered text (`_TeaStrN`,
    /// characters, for `"…"` and `` `…` ``; `_TeaAtomN`, an atom, for `'…'`). So an input that
    /// closes a quote is still data. `{% %}` and `{# #}` are refused. `bindings: {Var: value}`
    /// (values may be templates) binds variables of the queries the same way.
    pub(crate) fn prolog_query_tree(&mut self, node: &Node) -> Tree {
        let Kind::Map(entries) = &node.kind else { return self.tree(node) };
        let mut out = Vec::with_capacity(entries.len() + 1);
        let mut bound: Vec<(String, Tree)> = Vec::new();
        let mut given: Option<&Node> = None;
        let mut count = 0;
        for (k, v) in entries {
            let key = k.scalar_text().unwrap_or_default();
            match (key.as_str(), &v.kind) {
                ("code" | "facts", Kind::Str { text, .. }) => {
                    let text = self.prolog_query_text(&key, v.pos, text, &mut count, &mut bound);
                    out.push((key, Tree::Literal(Value::String(text))));
                }
                ("bindings", _) => given = Some(v),
                _ => {
                    let tree = self.tree(v);
                    out.push((key, tree));
                }
            }
        }
        if let Some(b) = given {
            match &b.kind {
                Kind::Map(pairs) => {
                    for (k, v) in pairs {
                        let name = k.scalar_text().unwrap_or_default();
                        let tree = self.tree(v);
                        bound.push((name, tree));
                    }
                }
                Kind::Null => {}
                _ => self.problem(b.pos, "`bindings` of `prolog.query` is a mapping of Prolog variables to values"),
            }
        }
        if !bound.is_empty() {
            out.push(("bindings".to_owned(), Tree::Map(bound)));
        }
        Tree::Map(out)
    }

    /// `text` (the `key` of `prolog.query`, at `pos`) with each `{{ }}` made a variable, whose
    /// value goes to `bound`.
    fn prolog_query_text(
        &mut self,
        key: &str,
        pos: Pos,
        text: &str,
        count: &mut usize,
        bound: &mut Vec<(String, Tree)>,
    ) -> String {
        if !text.contains("{{") && !text.contains("{%") && !text.contains("{#") {
            return text.to_owned();
        }
        if text.contains("{%") || text.contains("{#") {
            self.problem(
                pos,
                format!(
                    "`{key}` of `prolog.query` is Prolog text, not a template: `{{% %}}` and `{{# #}}` would write the \
                     input into the code; pass values as `{{{{ expr }}}}` (each is bound to a Prolog variable), in \
                     `bindings:`, or read them with `state/2`"
                ),
            );
            return text.to_owned();
        }
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        let starts = |i: usize, s: &str| s.chars().enumerate().all(|(k, c)| chars.get(i + k) == Some(&c));
        while i < chars.len() {
            let c = chars[i];
            if c == '%' {
                while i < chars.len() && chars[i] != '\n' {
                    out.push(chars[i]);
                    i += 1;
                }
                continue;
            }
            if starts(i, "/*") {
                let end =
                    (i + 2..chars.len().saturating_sub(1)).find(|&j| starts(j, "*/")).map_or(chars.len(), |j| j + 2);
                out.extend(&chars[i..end]);
                i = end;
                continue;
            }
            // `0'c`: a character code, not a quote.
            if crate::lang::prolog::copy_char_code(&chars, &mut i, &mut out) {
                continue;
            }
            if c == '\'' || c == '"' || c == '`' {
                // The quoted text, to its closing quote (escapes and doubled quotes inside).
                let mut j = i + 1;
                let mut inner = String::new();
                let mut closed = false;
                while j < chars.len() {
                    let q = chars[j];
                    if q == '\\' && j + 1 < chars.len() {
                        inner.push(match chars[j + 1] {
                            'n' => '\n',
                            't' => '\t',
                            other => other,
                        });
                        j += 2;
                    } else if q == c && chars.get(j + 1) == Some(&c) {
                        inner.push(c);
                        j += 2;
                    } else if q == c {
                        closed = true;
                        j += 1;
                        break;
                    } else {
                        inner.push(q);
                        j += 1;
                    }
                }
                if closed && inner.contains("{{") {
                    *count += 1;
                    let name = if c == '\'' { format!("_TeaAtom{count}") } else { format!("_TeaStr{count}") };
                    let tree = self.text(pos, &inner);
                    let tree = match tree {
                        // A single `{{ expr }}` keeps its type: rendered as text here.
                        Tree::Expr(_) => match self.template_at(pos, &inner) {
                            Ok(id) => Tree::Template(id),
                            Err(e) => {
                                self.problem(pos, format!("the template `{inner}` does not parse: {e}"));
                                Tree::Literal(Value::Null)
                            }
                        },
                        other => other,
                    };
                    bound.push((name.clone(), tree));
                    out.push_str(&name);
                    // The line breaks the text held, so the lines after it keep their numbers.
                    out.extend(chars[i..j].iter().filter(|&&ch| ch == '\n'));
                } else {
                    out.extend(&chars[i..j]);
                }
                i = j;
                continue;
            }
            if starts(i, "{{") {
                let Some(end) = (i + 2..chars.len().saturating_sub(1)).find(|&j| starts(j, "}}")) else {
                    self.problem(pos, format!("`{key}` of `prolog.query`: a `{{{{` is never closed"));
                    return text.to_owned();
                };
                let inner: String = chars[i + 2..end].iter().collect();
                *count += 1;
                let name = format!("_TeaArg{count}");
                let tree = match self.expr_at(pos, inner.trim()) {
                    Ok(id) => Tree::Expr(id),
                    Err(e) => {
                        self.problem(pos, format!("the template `{{{{{inner}}}}}` does not parse: {e}"));
                        Tree::Literal(Value::Null)
                    }
                };
                bound.push((name.clone(), tree));
                // A space on each side: the variable never joins a neighbouring token.
                out.push(' ');
                out.push_str(&name);
                out.push(' ');
                out.extend(chars[i..end].iter().filter(|&&ch| ch == '\n'));
                i = end + 2;
                continue;
            }
            out.push(c);
            i += 1;
        }
        out
    }
}
