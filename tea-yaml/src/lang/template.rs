//! Templates and conditions: minijinja, compiled once at load.
//!
//! Conditions (`when`, `condition`, `goto`'s `if`) and single-expression strings
//! (`"{{ state.count }}"`) are minijinja *expressions*; any other string with `{{`/`{%` is a
//! *template* rendered to a string. Both are compiled when the file loads, into one environment
//! owned beside them (a self-referential cell), so evaluating one does no parsing.
//!
//! The context is built per evaluation and cheap: `state` is an object over the state's shared
//! map that converts only the keys a template reads; `variables` and `secrets` are converted
//! once at load.
//!
//! Minijinja expressions and templates compiled once at load into one environment owned beside them
//! (`self_cell`); `state` is a lazy object over the shared map. Fuel and an output cap bound each
//! evaluation. The loader notes which templates read `secrets`: only those under a `Tree::Sending`
//! argument (what a network action sends out) may, and only those are rendered with `secrets` in
//! their context.

use minijinja::value::{Enumerator, Object, ObjectRepr, Value as Mj};
use minijinja::{Environment, Expression, Template, UndefinedBehavior};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The fuel of one evaluation or rendering: minijinja spends one per instruction and one per
/// 64 bytes it allocates or writes, so a loop that does not end, or one that builds a huge
/// string, stops with an error.
pub(crate) const FUEL: u64 = 1_000_000;
/// The most text one template renders: 8 MiB.
pub(crate) const MAX_OUTPUT: usize = 8 << 20;

/// A compiled expression, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExprId(usize);

/// A compiled template, by index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TplId(usize);

/// A value with templates in it (`with:`, `output:` mappings, a `message`), compiled.
#[derive(Clone, Debug)]
pub(crate) enum Tree {
    Literal(Value),
    /// A string that is a single `{{ expr }}`: keeps the expression's JSON type.
    Expr(ExprId),
    Template(TplId),
    List(Vec<Tree>),
    Map(Vec<(String, Tree)>),
    /// An argument that sends a secret out (an API key, request headers): rendered with
    /// `secrets` in its context. Nowhere else do templates see them.
    Sending(Box<Tree>),
}

struct Compiled<'env> {
    exprs: Vec<Expression<'env, 'static>>,
    templates: Vec<Template<'env, 'env>>,
}

self_cell::self_cell!(
    struct Cell {
        owner: Environment<'static>,
        #[not_covariant]
        dependent: Compiled,
    }
);

/// Collects the expressions and templates of a file while it loads.
pub(crate) struct Builder {
    env: Environment<'static>,
    exprs: Vec<String>,
    templates: usize,
    /// The last expression or template compiled reads the variable `secrets`.
    reads_secrets: bool,
}

impl Builder {
    pub(crate) fn new() -> Self {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_fuel(Some(FUEL));
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.add_filter("json", |value: &Mj| -> Result<String, minijinja::Error> {
            serde_json::to_string(value).map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, format!("cannot write JSON: {e}"))
            })
        });
        env.add_filter("fromjson", |text: &str| -> Result<Mj, minijinja::Error> {
            let value: Value = serde_json::from_str(text).map_err(|e| {
                minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, format!("fromjson: not JSON: {e}"))
            })?;
            Ok(to_mj(&value))
        });
        Builder { env, exprs: Vec::new(), templates: 0, reads_secrets: false }
    }

    /// Compiles `source` as an expression; `Err(message)` if it does not parse.
    pub(crate) fn expr(&mut self, source: &str) -> Result<ExprId, String> {
        let compiled = self.env.compile_expression(source).map_err(|e| describe(&e))?;
        self.reads_secrets = compiled.undeclared_variables(false).contains("secrets") || names_secrets(source);
        self.exprs.push(source.to_owned());
        Ok(ExprId(self.exprs.len() - 1))
    }

    /// Compiles `source` as a template rendering to a string.
    pub(crate) fn template(&mut self, source: &str) -> Result<TplId, String> {
        let id = self.templates;
        self.env.add_template_owned(format!("#{id}"), source.to_owned()).map_err(|e| describe(&e))?;
        self.reads_secrets =
            self.env.get_template(&format!("#{id}")).is_ok_and(|t| t.undeclared_variables(false).contains("secrets"))
                || names_secrets(source);
        self.templates += 1;
        Ok(TplId(id))
    }

    /// Whether the last expression or template compiled reads `secrets`.
    pub(crate) fn take_reads_secrets(&mut self) -> bool {
        std::mem::take(&mut self.reads_secrets)
    }

    pub(crate) fn finish(self) -> Result<Templates, String> {
        let Builder { env, exprs, templates, .. } = self;
        let cell = Cell::try_new(env, |env| -> Result<Compiled<'_>, String> {
            let exprs = exprs
                .into_iter()
                .map(|s| env.compile_expression_owned(s).map_err(|e| describe(&e)))
                .collect::<Result<_, _>>()?;
            let templates = (0..templates)
                .map(|i| env.get_template(&format!("#{i}")).map_err(|e| describe(&e)))
                .collect::<Result<_, _>>()?;
            Ok(Compiled { exprs, templates })
        })?;
        Ok(Templates { cell })
    }
}

/// A file's compiled expressions and templates.
pub(crate) struct Templates {
    cell: Cell,
}

impl std::fmt::Debug for Templates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Templates")
    }
}

impl Templates {
    /// Evaluates expression `id` in `ctx`.
    pub(crate) fn eval(&self, id: ExprId, ctx: &Mj) -> Result<Mj, String> {
        self.cell.with_dependent(|_, compiled| compiled.exprs[id.0].eval(ctx.clone()).map_err(|e| describe(&e)))
    }

    /// Renders template `id` in `ctx`, at most [`MAX_OUTPUT`] bytes of it.
    pub(crate) fn render(&self, id: TplId, ctx: &Mj) -> Result<String, String> {
        self.cell.with_dependent(|_, compiled| {
            let mut out = Bounded(Vec::new());
            compiled.templates[id.0].render_captured_to(ctx.clone(), &mut out).map_err(|e| describe(&e))?;
            String::from_utf8(out.0).map_err(|e| format!("the template wrote text that is not UTF-8: {e}"))
        })
    }
}

/// Whether `source` has the word `secrets` (not inside a longer name): what minijinja's own
/// analysis of the variables read might miss (a slice, say), the text does not.
fn names_secrets(source: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    source.match_indices("secrets").any(|(at, _)| {
        !source[..at].chars().next_back().is_some_and(word) && !source[at + 7..].chars().next().is_some_and(word)
    })
}

/// A writer that refuses to hold more than [`MAX_OUTPUT`] bytes.
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_OUTPUT {
            return Err(std::io::Error::other(format!(
                "the template renders more than {MAX_OUTPUT} bytes (the limit)"
            )));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A minijinja error with its detail and the causes it chains.
fn describe(error: &minijinja::Error) -> String {
    if error.kind() == minijinja::ErrorKind::OutOfFuel {
        return format!(
            "the template ran over its limit of {FUEL} steps (each instruction and each 64 bytes it builds or \
             writes is one): does a loop run too long, or build too much text?"
        );
    }
    let mut out = match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.kind().to_string(),
    };
    if let Some(cause) = std::error::Error::source(error) {
        out.push_str(": ");
        out.push_str(&tea_runtime::error_chain(cause));
    }
    out
}

/// The state as a template sees it: an object over the shared map, converting the keys it reads.
#[derive(Debug)]
pub(crate) struct StateObject(pub(crate) Arc<Map<String, Value>>);

impl Object for StateObject {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Mj) -> Option<Mj> {
        self.0.get(key.as_str()?).map(to_mj)
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let keys: Vec<Mj> = self.0.keys().map(|k| Mj::from(k.as_str())).collect();
        Enumerator::Values(keys)
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.0.len())
    }
}

/// JSON to a template value.
pub(crate) fn to_mj(value: &Value) -> Mj {
    match value {
        Value::Null => Mj::from(()),
        Value::Bool(b) => Mj::from(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Mj::from(i)
            } else if let Some(u) = n.as_u64() {
                Mj::from(u)
            } else {
                Mj::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => Mj::from(s.as_str()),
        Value::Array(items) => Mj::from(items.iter().map(to_mj).collect::<Vec<_>>()),
        Value::Object(map) => Mj::from(map.iter().map(|(k, v)| (k.clone(), to_mj(v))).collect::<BTreeMap<_, _>>()),
    }
}

/// A template value to JSON (undefined and none are null).
pub(crate) fn to_json(value: &Mj) -> Result<Value, String> {
    if value.is_undefined() || value.is_none() {
        return Ok(Value::Null);
    }
    serde_json::to_value(value).map_err(|e| format!("the value does not convert to JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx(state: Value) -> Mj {
        let Value::Object(map) = state else { unreachable!() };
        minijinja::context! { state => Mj::from_object(StateObject(Arc::new(map))) }
    }

    #[test]
    fn expressions_keep_types_and_templates_render() {
        let mut b = Builder::new();
        let e = b.expr("state.count + 1").unwrap();
        let c = b.expr("state.count > 2 and state.name").unwrap();
        let t = b.template("Hi {{ state.name }} ({{ state.missing }})").unwrap();
        let f = b.expr("state.raw | fromjson").unwrap();
        let j = b.template("{{ state.list | tojson }}").unwrap();
        let set = b.finish().unwrap();
        let ctx = ctx(json!({"count": 3, "name": "Ada", "raw": "{\"a\": [1]}", "list": [1, "x"]}));
        assert_eq!(to_json(&set.eval(e, &ctx).unwrap()).unwrap(), json!(4));
        assert!(set.eval(c, &ctx).unwrap().is_true());
        assert_eq!(set.render(t, &ctx).unwrap(), "Hi Ada ()");
        assert_eq!(to_json(&set.eval(f, &ctx).unwrap()).unwrap(), json!({"a": [1]}));
        assert_eq!(serde_json::from_str::<Value>(&set.render(j, &ctx).unwrap()).unwrap(), json!([1, "x"]));
    }

    #[test]
    fn syntax_errors_at_build_and_undefined_deeper_access_at_run() {
        let mut b = Builder::new();
        assert!(b.expr("state.count >").is_err());
        assert!(b.template("{{ state.x ").is_err());
        let deep = b.expr("state.user.name").unwrap();
        let set = b.finish().unwrap();
        let err = set.eval(deep, &ctx(json!({}))).unwrap_err();
        assert!(err.contains("undefined"), "{err}");
    }
}
