//! What templates and conditions see when a node runs ([`TemplateScope`]): `state`,
//! `variables`, `secrets` (in arguments that send them out only), `checkpoint`, `context`, and
//! `result` in an `output:` mapping; and rendering a template tree with it.

use crate::ir::{Tree, YamlGraph};
use crate::lang::template::{self, StateObject};
use crate::state::State;
use minijinja::value::Value as Mj;
use serde_json::{Map, Value};
use std::sync::Arc;

/// What templates and conditions see: `state`, `variables`, `secrets` (in [`Tree::Sending`]
/// arguments only), `checkpoint` (`dir`,
/// `last`) and, in an `output:` mapping, `result`.
#[derive(Clone, Debug)]
struct TemplateScope {
    graph: YamlGraph,
    state: Mj,
    result: Option<Mj>,
    /// Rendering an argument that sends secrets out ([`Tree::Sending`]): `secrets` is there.
    secrets: bool,
    /// Names of a composed action's own (a probe's item fields), after the agent's.
    locals: Option<Arc<Map<String, Value>>>,
}

impl minijinja::value::Object for TemplateScope {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Mj) -> Option<Mj> {
        let inner = &self.graph.agent;
        Some(match key.as_str()? {
            "state" => self.state.clone(),
            "variables" => inner.variables.clone(),
            "secrets" if self.secrets => inner.secrets.clone(),
            "checkpoint" => {
                let last = inner.last_checkpoint.lock().map(|l| l.clone()).unwrap_or_default();
                let dir = inner.checkpoint_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default();
                minijinja::context! { dir => dir, last => last }
            }
            "result" => self.result.clone()?,
            "context" => template::to_mj(&crate::lang::scope::run_context()),
            other => template::to_mj(self.locals.as_ref()?.get(other)?),
        })
    }

    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        if self.secrets {
            return minijinja::value::Enumerator::Str(&[
                "state",
                "variables",
                "secrets",
                "checkpoint",
                "result",
                "context",
            ]);
        }
        minijinja::value::Enumerator::Str(&["state", "variables", "checkpoint", "result", "context"])
    }
}

impl YamlGraph {
    /// The template context: `state`, `variables`, `secrets`, `checkpoint`, and `result` in
    /// an `output:` mapping. An object that builds each of them when a template reads it.
    pub(crate) fn context(&self, state: &State, result: Option<&Value>) -> Mj {
        Mj::from_object(TemplateScope {
            graph: self.clone(),
            state: Mj::from_object(StateObject(state.shared().clone())),
            result: result.map(template::to_mj),
            secrets: false,
            locals: None,
        })
    }

    /// Evaluates `tree` in `ctx`.
    pub(crate) fn render(&self, tree: &Tree, ctx: &Mj) -> Result<Value, String> {
        let templates = &self.agent.templates;
        Ok(match tree {
            Tree::Literal(value) => value.clone(),
            Tree::Sending(tree) => match ctx.downcast_object_ref::<TemplateScope>() {
                Some(scope) => self.render(tree, &Mj::from_object(TemplateScope { secrets: true, ..scope.clone() }))?,
                None => self.render(tree, ctx)?,
            },
            Tree::Expr(id) => template::to_json(&templates.eval(*id, ctx)?)?,
            Tree::Template(id) => Value::String(templates.render(*id, ctx)?),
            Tree::List(items) => Value::Array(items.iter().map(|t| self.render(t, ctx)).collect::<Result<_, _>>()?),
            Tree::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, t)| Ok((k.clone(), self.render(t, ctx)?)))
                    .collect::<Result<Map<_, _>, String>>()?,
            ),
        })
    }

    /// `tree` rendered with `state` as the templates' `state` and `locals` as names of their
    /// own (a probe's item fields; `state`, `variables` and the agent's other names win).
    pub(super) fn render_with_locals(
        &self,
        tree: &Tree,
        state: &State,
        locals: &Map<String, Value>,
    ) -> Result<Value, String> {
        let ctx = Mj::from_object(TemplateScope {
            graph: self.clone(),
            state: Mj::from_object(StateObject(state.shared().clone())),
            result: None,
            secrets: false,
            locals: Some(Arc::new(locals.clone())),
        });
        self.render(tree, &ctx)
    }
}
