//! A loaded agent as the engine sees it: [`YamlGraph`] implements `tea::Graph` over the
//! tables the loader built (nodes, routing rules, fan-outs; `ir/`), so a YAML agent runs on the
//! same executor, parallel branches, stores and tokens as a `graph!` graph. It is also the
//! agent the actions run in ([`actions::RunningAgent`], [`actions::Composer`]).
//!
//! `YamlGraph`, the `Graph` implementation over those tables: runs a node's `Exec` (Lua,
//! expression, action, interrupt node through `Hitl`; a `type: while_loop` node's body and a node's
//! `steps:` run within the node, `Exec::Loop`/`Exec::Steps`, their nodes' keys replacing a working
//! copy as The Edge Agent's `dict.update`), routes by the first rule that holds, applies updates
//! through the declared types and reducers (`Graph::apply`), keeps only declared keys' branch
//! writes at a fan-in (`Graph::join_update`), and puts `parallel_results` in the fan-in's state.

#[cfg(feature = "net")]
use crate::actions::Action;
use crate::actions::{self, Call};
use crate::ir::{Cond, Exec, Limit, NodeDef, NodeIx, Output, Rule, Tree, YamlGraph};
use crate::lang::lua::ChunkId;
use crate::lang::template;
use crate::state::{State, Update};
use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};
use tea_runtime::__private::NodeStep;
use tea_runtime::{BoxError, BranchState, Ctx, Fork, Goto, Graph, Hitl, NodeFuture, NodeName, PauseFree, SyncGraph};

/// Puts back what a node found on its thread, whatever happens to the node.
struct ContextGuard(Option<crate::lang::scope::RunScope>);

impl Drop for ContextGuard {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            crate::lang::scope::replace(old);
        }
    }
}

/// Makes a node's run context (if it is JSON), its writer and its app's memory the thread's
/// while the guard lives.
fn enter_context(ctx: &Ctx<State>) -> ContextGuard {
    let context = ctx.context::<Value>().ok().cloned();
    let writer = ctx.writer();
    let writer = writer.is_listened().then_some(writer);
    let memory = ctx.store().ok().cloned();
    if context.is_none() && writer.is_none() && memory.is_none() {
        return ContextGuard(None);
    }
    ContextGuard(Some(crate::lang::scope::replace((context.unwrap_or(Value::Null), writer, memory))))
}

/// A node's future with its run's context entered at each poll (it may be polled on any of the
/// runtime's threads).
#[cfg(feature = "net")]
struct InContext<'a> {
    ctx: &'a Ctx<State>,
    inner: NodeFuture<'a, State, NodeIx>,
}

#[cfg(feature = "net")]
impl std::future::Future for InContext<'_> {
    type Output = Result<NodeStep<State, NodeIx>, BoxError>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let _entered = enter_context(self.ctx);
        self.inner.as_mut().poll(cx)
    }
}

impl YamlGraph {
    /// A network action's call: its rendered `with:` with the file's settings as defaults,
    /// checked, and the API key to fall back on (the secret `llm_api_key`).
    #[cfg(feature = "net")]
    pub(crate) fn prepare_net(
        &self,
        action: crate::actions::net::NetAction,
        args: Value,
        state: &State,
    ) -> Result<crate::actions::net::Call, BoxError> {
        use crate::actions::net::Section;
        let mut args = args;
        let settings = match action.section() {
            Some(Section::Llm) => self.agent.settings_llm.as_ref().map(|t| ("llm", t)),
            Some(Section::Notify) => self.agent.settings_notify.as_ref().map(|t| ("notify", t)),
            None => None,
        };
        if let (Some((section, tree)), Value::Object(map)) = (settings, &mut args) {
            let defaults =
                self.render(tree, &self.context(state, None)).map_err(|e| format!("`settings.{section}`: {e}"))?;
            if let Value::Object(defaults) = defaults {
                for (key, value) in defaults {
                    map.entry(key).or_insert(value);
                }
            }
        }
        let key = match action {
            crate::actions::net::NetAction::LlmCall
            | crate::actions::net::NetAction::LlmChat
            | crate::actions::net::NetAction::LlmEmbed => self
                .agent
                .secret_values
                .iter()
                .find(|(n, _)| n == "llm_api_key")
                // The provider's own variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`) when
                // there is no secret: `actions/net/llm.rs`.
                .map(|(_, v)| v.clone()),
            _ => None,
        };
        Ok(crate::actions::net::prepare(action, args, key, &self.agent.shells)?)
    }

    /// A `type: subgraph` node: the child runs on the engine's subgraph hook (its own thread
    /// in the parent's store, a pause inside it pausing this run), from `input` rendered over
    /// `state`; `output` rendered over its final state is the node's update (without `output`:
    /// what the final state changed of `state`, `Schema::changes`).
    fn run_subgraph(
        &self,
        def: &NodeDef,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        let Exec::Subgraph { child, input, output } = &def.exec else {
            return Err(format!("node `{}` is not a subgraph", def.name).into());
        };
        let start = match input {
            None => state.clone(),
            Some(entries) => {
                let ctx = self.context(state, None);
                let mut map = Map::new();
                for (key, tree) in entries {
                    let value =
                        self.render(tree, &ctx).map_err(|e| format!("`input.{key}` of node `{}`: {e}", def.name))?;
                    map.insert(key.clone(), value);
                }
                State::from_map(map)
            }
        };
        let failed: Mutex<Option<String>> = Mutex::new(None);
        let out = |parent: &State, last: State| -> Update {
            let result = match output {
                // No mapping: what the child changed of the parent's state, not its whole
                // state written again through the parent's reducers (an `append` key would get
                // the entries the child started with a second time).
                None => Ok(Update::from_map(self.agent.schema.changes(parent, last.as_map().clone()))),
                Some(entries) => {
                    let ctx = self.context(parent, Some(&last.to_json()));
                    entries
                        .iter()
                        .map(|(key, tree)| {
                            self.render(tree, &ctx)
                                .map(|v| (key.clone(), v))
                                .map_err(|e| format!("`output.{key}` of node `{}`: {e}", def.name))
                        })
                        .collect::<Result<Map<_, _>, String>>()
                        .map(Update::from_map)
                }
            };
            result.unwrap_or_else(|e| {
                if let Ok(mut slot) = failed.lock() {
                    *slot = Some(e);
                }
                Update::new()
            })
        };
        // The child's blocks stop with this run's.
        let child =
            YamlGraph { agent: child.agent.clone(), asynchronous: child.asynchronous, cancel: self.cancel.clone() };
        let step =
            tea_runtime::__private::run_subgraph_mapped(child, &|_: &State| start.clone(), &out, state, ctx, hitl)?;
        if let Some(e) = failed.lock().ok().and_then(|mut slot| slot.take()) {
            return Err(e.into());
        }
        Ok(step)
    }

    /// A node that is neither a `dynamic_parallel` node nor one of its steps.
    fn run_plain(
        &self,
        node: NodeIx,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        if matches!(self.node(node).exec, Exec::Subgraph { .. }) {
            return self.run_subgraph(self.node(node), state, ctx, hitl).map_err(|e| self.redact(e));
        }
        let update = self.run_node(node, state, ctx, hitl).map_err(|e| self.redact(e))?;
        Ok(NodeStep::new(update, None))
    }

    /// A step of an item of `dynamic_parallel` node `of` (`head`: its first), as The Edge
    /// Agent runs items: skipped once the item failed; with `fail_fast`, an item that has not
    /// started when another failed is cancelled; with `max_concurrency`, it waits for a permit;
    /// its own failure (not a pause, not the run's store or lease) is written into the item's
    /// record, which the fan-in turns into a failed result, instead of failing the run.
    fn run_item_step(
        &self,
        node: NodeIx,
        of: NodeIx,
        head: bool,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        use crate::run::items;
        let mut record = items::record(state.as_map());
        if record.contains_key("error") {
            return Ok(NodeStep::new(None, None));
        }
        let fail_fast = matches!(self.node(of).exec, Exec::Send { fail_fast: true, .. });
        let shared = record.get("fan_out").and_then(Value::as_u64).map(items::fan_out);
        let with = |record: Map<String, Value>| Update::new().set(items::ITEM_KEY, Value::Object(record));
        let limit = record.get("limit").and_then(Value::as_u64).map(|n| n.max(1) as usize);
        let began = std::time::Instant::now();
        let result = {
            // The permit first: an item waiting for one has not started, as an item waiting for
            // a worker of The Edge Agent's pool has not.
            let _permit = shared.as_ref().zip(limit).map(|(shared, limit)| shared.acquire(limit));
            if let (true, true, Some(shared)) = (head, fail_fast, &shared) {
                if shared.is_cancelled() {
                    record.insert("error".to_owned(), Value::from(items::CANCELLED));
                    return Ok(NodeStep::new(Some(with(record)), None));
                }
            }
            let result = self.run_plain(node, state, ctx, hitl);
            // Cancel before the permit goes, so that no item it lets start misses the failure.
            if let (Err(e), true, Some(shared)) = (&result, fail_fast, &shared) {
                if hitl.paused_with().is_none() && items::is_item_failure(e.as_ref()) {
                    shared.cancel();
                }
            }
            result
        };
        let ms = record.get("ms").and_then(Value::as_u64).unwrap_or(0) + began.elapsed().as_millis() as u64;
        record.insert("ms".to_owned(), Value::from(ms));
        match result {
            Ok(mut step) => {
                if hitl.paused_with().is_none() {
                    let update = step.update.take().unwrap_or_default();
                    step.update = Some(update.set(items::ITEM_KEY, Value::Object(record)));
                }
                Ok(step)
            }
            Err(e) if hitl.paused_with().is_none() && items::is_item_failure(e.as_ref()) => {
                let message = format!("node `{}`: {}", self.node(node).name, items::describe(e.as_ref()));
                record.insert("error".to_owned(), Value::from(message));
                Ok(NodeStep::new(Some(with(record)), None))
            }
            Err(e) => Err(e),
        }
    }

    fn node(&self, node: NodeIx) -> &NodeDef {
        &self.agent.nodes[node.index()]
    }

    /// The first rule of `rules` that holds on `state`.
    fn choose(&self, rules: &[Rule], state: &State, from: &str) -> Result<Option<Goto<NodeIx>>, BoxError> {
        let mut ctx = None;
        for rule in rules {
            let holds = match &rule.cond {
                Cond::Always => true,
                Cond::Const(b) => *b,
                Cond::Expr { expr, expect, source } => {
                    let ctx = ctx.get_or_insert_with(|| self.context(state, None));
                    let value = self
                        .agent
                        .templates
                        .eval(*expr, ctx)
                        .map_err(|e| format!("the condition `{source}` on the way from `{from}` fails: {e}"))?;
                    value.is_true() == *expect
                }
            };
            if holds {
                return Ok(Some(rule.to));
            }
        }
        Ok(None)
    }

    fn run_node(
        &self,
        node: NodeIx,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<Option<Update>, BoxError> {
        let def = self.node(node);
        if let Some((seen, results)) = self.fan_in(node, state, ctx) {
            let update = self.exec(def, &seen, hitl)?.unwrap_or_default();
            return Ok(Some(self.with_results(node, update, results)));
        }
        self.exec(def, state, hitl)
    }

    /// `update` of fan-in `node` with the branches' `results`: under `parallel_results`, and
    /// under the `output:` key of each `dynamic_parallel` node that meets there.
    fn with_results(&self, node: NodeIx, update: Update, results: Value) -> Update {
        let mut update = update;
        for def in &self.agent.nodes {
            if let (Exec::Send { output: Some(key), .. }, Some((_, join))) = (&def.exec, &def.fork) {
                if *join == node {
                    update = update.set(key.clone(), results.clone());
                }
            }
        }
        update.set("parallel_results", results)
    }

    /// At a fan-in: the state the node reads, with `parallel_results` (the branches' final
    /// states in declared order), and those results, which the node keeps in the state.
    fn fan_in(&self, node: NodeIx, state: &State, ctx: &Ctx<State>) -> Option<(State, Value)> {
        self.seen_at_fan_in(node, state, ctx.branches())
    }

    /// At a pause before fan-in `node` (a breakpoint), whose branches' own final states are
    /// `branches`: `state` as the node will read it, with `parallel_results` and each
    /// `dynamic_parallel` node's `output:` key that meets there, as The Edge Agent's engines
    /// show a paused fan-in. Other nodes' states are left as they are.
    pub(crate) fn show_fan_in(&self, node: &str, state: &mut State, branches: &[BranchState<State>]) {
        let Some(node) = self.node_named(node) else { return };
        if let Some((seen, _)) = self.seen_at_fan_in(node, state, branches) {
            *state = seen;
        }
    }

    /// [`fan_in`](Self::fan_in) with the branches' states given.
    fn seen_at_fan_in(&self, node: NodeIx, state: &State, branches: &[BranchState<State>]) -> Option<(State, Value)> {
        let def = self.node(node);
        if !def.fan_in || (branches.is_empty() && !def.sends_fan_in) {
            return None;
        }
        let states = branches.iter().map(|b| b.state().to_json());
        let results = if def.sends_fan_in {
            // The items of `dynamic_parallel` nodes: The Edge Agent's results.
            let vars = |node: &str| match self.agent.nodes.iter().find(|n| n.name == *node).map(|n| &n.exec) {
                Some(Exec::Send { item_var, index_var, .. }) => Some((item_var.clone(), index_var.clone())),
                _ => None,
            };
            crate::run::items::results(states.collect(), &vars)
        } else {
            Value::Array(states.collect())
        };
        let mut seen = state.clone();
        for (key, value) in self.with_results(node, Update::new(), results.clone()).into_values().unwrap_or_default() {
            seen.map_mut().insert(key, value);
        }
        Some((seen, results))
    }

    /// Whether `node` runs a network action (`llm.call`, `http.*`, `actions.notify`, a hosted
    /// service's).
    pub(crate) fn is_net(&self, node: NodeIx) -> bool {
        #[cfg(feature = "net")]
        if let Exec::Action { action: Action::Net(_) | Action::Service(_), .. } = &self.node(node).exec {
            return true;
        }
        let _ = node;
        false
    }

    /// A network node, awaited: its arguments rendered, then the request awaited on tea-yaml's
    /// runtime (no thread waits for it).
    #[cfg(feature = "net")]
    async fn run_net(&self, node: NodeIx, state: &State, ctx: &Ctx<State>) -> Result<Option<Update>, BoxError> {
        let def = self.node(node);
        let Exec::Action { name, action: action @ (Action::Net(_) | Action::Service(_)), with, output } = &def.exec
        else {
            return Err(format!("node `{}` is not a network action", def.name).into());
        };
        let fan_in = self.fan_in(node, state, ctx);
        let seen = fan_in.as_ref().map_or(state, |(seen, _)| seen);
        let call = {
            let args = self.render(with, &self.context(seen, None)).map_err(|e| format!("`with:` of `{name}`: {e}"))?;
            match action {
                Action::Service(service) => {
                    crate::actions::services::prepare(*service, args, &self.agent.grants, &self.agent.vectors)?
                }
                Action::Net(net) => self.prepare_net(*net, args, seen)?,
                _ => return Err(format!("node `{}` is not a network action", def.name).into()),
            }
        };
        let result = crate::actions::net::spawn(call, &self.agent.grants)?.await?;
        let update = self.output(output, result, seen)?;
        Ok(Some(match fan_in {
            Some((_, results)) => self.with_results(node, update, results),
            None => update,
        }))
    }

    /// A `dynamic_parallel` node's sends: one per item of its `items`, in order, each to the
    /// head of its fan-out with the item and its index as the branch's input.
    fn sends(&self, node: NodeIx, state: &State) -> Result<Vec<(NodeIx, Update)>, BoxError> {
        let def = self.node(node);
        let Exec::Send { items, item_var, index_var, limit, .. } = &def.exec else { return Ok(Vec::new()) };
        let Some(&head) = def.fork.as_ref().and_then(|(heads, _)| heads.first()) else {
            return Err(format!("`dynamic_parallel` node `{}` has no per-item node", def.name).into());
        };
        let ctx = self.context(state, None);
        let value =
            self.agent.templates.eval(*items, &ctx).map_err(|e| format!("`items` of node `{}`: {e}", def.name))?;
        let list = match template::to_json(&value)? {
            Value::Array(list) => list,
            Value::Null => Vec::new(),
            other => {
                return Err(format!(
                    "`items` of node `{}` must give a list, not {}",
                    def.name,
                    crate::state::describe(&other)
                )
                .into())
            }
        };
        let limit = match limit {
            None => None,
            Some(Limit::Fixed(n)) => Some(*n),
            Some(Limit::Expr(expr)) => {
                let value = self
                    .agent
                    .templates
                    .eval(*expr, &ctx)
                    .map_err(|e| format!("`max_concurrency` of node `{}`: {e}", def.name))?;
                match template::to_json(&value)? {
                    Value::Null => None,
                    Value::Number(n) if n.as_u64().is_some_and(|n| n >= 1) => n.as_u64().map(|n| n as usize),
                    Value::String(s) if s.trim().parse::<usize>().is_ok_and(|n| n >= 1) => s.trim().parse().ok(),
                    other => {
                        return Err(format!(
                            "`max_concurrency` of node `{}` must give a positive integer, not {other}",
                            def.name
                        )
                        .into())
                    }
                }
            }
        };
        let id = crate::run::items::new_id();
        let node = def.name.as_str();
        Ok(list
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                let update = Update::new()
                    .set(item_var.clone(), item)
                    .set(index_var.clone(), i as u64)
                    .set(crate::run::items::ITEM_KEY, crate::run::items::start(id, node, i, limit));
                (head, update)
            })
            .collect())
    }

    fn exec(&self, def: &NodeDef, state: &State, hitl: &mut Hitl) -> Result<Option<Update>, BoxError> {
        self.exec_as(&def.name, &def.exec, state, hitl)
    }

    /// Whether `cond` holds on `state` (`what` names it in errors).
    fn holds(&self, cond: &Cond, state: &State, what: &str) -> Result<bool, BoxError> {
        Ok(match cond {
            Cond::Always => true,
            Cond::Const(b) => *b,
            Cond::Expr { expr, expect, source } => {
                let value = self
                    .agent
                    .templates
                    .eval(*expr, &self.context(state, None))
                    .map_err(|e| format!("the condition `{source}` of {what} fails: {e}"))?;
                value.is_true() == *expect
            }
        })
    }

    /// A `type: while_loop` node named `name`: its body in order while `cond` holds, at most
    /// `max` passes (then it stops, as The Edge Agent's Python engine does); or (`steps`) a
    /// node's `steps:`, one pass. Each body node's
    /// update replaces keys of a working copy of the state (The Edge Agent's `dict.update`);
    /// the keys written, with their last values, are the node's update.
    fn run_loop(
        &self,
        name: &NodeName,
        (cond, max, body): (&Cond, usize, &[(NodeName, Exec)]),
        steps: bool,
        state: &State,
        hitl: &mut Hitl,
    ) -> Result<Option<Update>, BoxError> {
        let mut current = state.clone();
        let mut written: Vec<String> = Vec::new();
        let what = format!("loop `{name}`");
        for pass in 0..max {
            if !self.holds(cond, &current, &what)? {
                break;
            }
            for (step, exec) in body {
                let update = self.exec_as(step, exec, &current, hitl).map_err(|e| {
                    let chain = tea_runtime::error_chain(&*e);
                    if steps {
                        format!("step `{step}`: {chain}")
                    } else {
                        format!("loop `{name}`, body node `{step}`, pass {pass}: {chain}")
                    }
                })?;
                let Some(update) = update else { continue };
                let values = update.into_values()?;
                self.refuse_secrets(&values)?;
                let map = current.map_mut();
                for (key, value) in values {
                    if !written.contains(&key) {
                        written.push(key.clone());
                    }
                    map.insert(key, value);
                }
            }
        }
        if written.is_empty() {
            return Ok(None);
        }
        let mut out = Map::new();
        for key in written {
            let value = current.get(&key).cloned().unwrap_or(Value::Null);
            out.insert(key, value);
        }
        Ok(Some(Update::from_map(out)))
    }

    /// Runs `exec`, the work of node `name` (a node of the file, or a loop's body node).
    fn exec_as(
        &self,
        node: &NodeName,
        exec: &Exec,
        state: &State,
        hitl: &mut Hitl,
    ) -> Result<Option<Update>, BoxError> {
        let inner = &self.agent;
        Ok(match exec {
            Exec::Noop | Exec::Send { .. } | Exec::Subgraph { .. } => None,
            Exec::Loop { cond, max, body } => self.run_loop(node, (cond, *max, body), false, state, hitl)?,
            Exec::Steps(body) => self.run_loop(node, (&Cond::Always, 1, body), true, state, hitl)?,
            Exec::Lua(chunk) => inner.lua.run(*chunk, state.shared(), self.cancel.as_ref())?.map(Update::from_map),
            Exec::Python(block) => block.run(state.shared())?.map(Update::from_map),
            Exec::Prolog(block) => block.run(state.shared())?.map(Update::from_map),
            Exec::Expr { expr, key } => {
                let ctx = self.context(state, None);
                let value = template::to_json(&inner.templates.eval(*expr, &ctx)?)?;
                Some(Update::new().set(key.clone(), value))
            }
            Exec::Action { name, action, with, output } => {
                let args =
                    self.render(with, &self.context(state, None)).map_err(|e| format!("`with:` of `{name}`: {e}"))?;
                let call = Call { host: self, node, state };
                let result = actions::call(action, &call, &args)?;
                Some(self.output(output, result, state)?)
            }
            Exec::Composed { name, composed, output } => {
                let result = crate::actions::compose::run(composed, self, node, state)
                    .map_err(|e| format!("`{name}` (node `{node}`): {e}"))?;
                Some(self.output(output, result, state)?)
            }
            Exec::Interrupt { message, state_key, resume_key, .. } => {
                if hitl.answered() == 0 {
                    // First time here: the question is rendered, stored, and asked.
                    let payload = match message {
                        Some(message) => self.render(message, &self.context(state, None))?,
                        None => state[state_key.as_str()].clone(),
                    };
                    let _ = hitl.interrupt::<Value>(&payload);
                    return Ok(message.as_ref().map(|_| Update::new().set(state_key.clone(), payload)));
                }
                // Resumed: the question is in the state already; the answer comes back.
                let answer: Value = hitl.interrupt(&state[state_key.as_str()])?;
                Some(Update::new().set(resume_key.clone(), answer))
            }
        })
    }

    /// An action's result as an update, by the node's `output:`.
    fn output(&self, output: &Output, result: Value, state: &State) -> Result<Update, BoxError> {
        Ok(match output {
            Output::Key(key) => Update::new().set(key.clone(), result),
            Output::Spread => match result {
                Value::Object(map) => Update::from_map(map),
                Value::Null => Update::new(),
                other => Update::new().set("result", other),
            },
            Output::Map(entries) => {
                let ctx = self.context(state, Some(&result));
                let mut map = Map::new();
                for (key, tree) in entries {
                    map.insert(key.clone(), self.render(tree, &ctx).map_err(|e| format!("`output.{key}`: {e}"))?);
                }
                Update::from_map(map)
            }
        })
    }
}

impl Graph for YamlGraph {
    type State = State;
    type Node = NodeIx;

    fn name(&self) -> &str {
        &self.agent.name
    }

    fn fingerprint(&self) -> u64 {
        self.agent.fingerprint
    }

    fn schema_fingerprint(&self) -> u64 {
        self.agent.schema_fingerprint
    }

    fn node_name(&self, node: NodeIx) -> NodeName {
        self.node(node).name.clone()
    }

    fn start(&self, state: &State) -> Option<Goto<NodeIx>> {
        self.try_start(state).ok().flatten()
    }

    fn try_start(&self, state: &State) -> Result<Option<Goto<NodeIx>>, BoxError> {
        self.choose(&self.agent.start, state, "__start__")
    }

    fn run(
        &self,
        node: NodeIx,
        state: &State,
        ctx: &Ctx<State>,
        hitl: &mut Hitl,
    ) -> Result<NodeStep<State, NodeIx>, BoxError> {
        let _context = enter_context(ctx);
        if matches!(self.node(node).exec, Exec::Send { .. }) {
            let sends = self.sends(node, state).map_err(|e| self.redact(e))?;
            return Ok(NodeStep::with_sends(None, sends));
        }
        if let Some((of, head)) = self.node(node).item_of {
            return self.run_item_step(node, of, head, state, ctx, hitl);
        }
        self.run_plain(node, state, ctx, hitl)
    }

    fn is_async(&self, node: NodeIx) -> bool {
        // A step of a `dynamic_parallel` node runs through `run` (which waits for a network
        // action on tea-yaml's runtime), where its item's failures and permits are handled.
        self.asynchronous && self.is_net(node) && self.node(node).item_of.is_none()
    }

    fn run_async<'a>(
        &'a self,
        node: NodeIx,
        state: &'a State,
        ctx: &'a Ctx<State>,
        hitl: &'a mut Hitl,
    ) -> NodeFuture<'a, State, NodeIx> {
        #[cfg(feature = "net")]
        if self.is_net(node) {
            let inner = Box::pin(async move {
                let update = self.run_net(node, state, ctx).await.map_err(|e| self.redact(e))?;
                Ok(NodeStep::new(update, None))
            });
            return Box::pin(InContext { ctx, inner });
        }
        let result = self.run(node, state, ctx, hitl);
        Box::pin(std::future::ready(result))
    }

    fn route(&self, node: NodeIx, state: &State) -> Option<Goto<NodeIx>> {
        self.try_route(node, state).ok().flatten()
    }

    fn try_route(&self, node: NodeIx, state: &State) -> Result<Option<Goto<NodeIx>>, BoxError> {
        let def = self.node(node);
        self.choose(&def.rules, state, def.name.as_str())
    }

    fn fixed_route(&self, node: NodeIx) -> Option<Goto<NodeIx>> {
        match self.node(node).rules.as_slice() {
            [Rule { cond: Cond::Always, to }] => Some(*to),
            _ => None,
        }
    }

    fn reads_branches(&self, join: NodeIx) -> bool {
        self.node(join).fan_in
    }

    fn can_goto(&self, _from: NodeIx, _to: Goto<NodeIx>) -> bool {
        // Routing is by rules (`route`); no node chooses with a command.
        false
    }

    fn node_named(&self, name: &str) -> Option<NodeIx> {
        self.agent.nodes.iter().position(|n| n.name == *name).map(|i| NodeIx(i as u32))
    }

    fn interrupt_before(&self, node: NodeIx) -> bool {
        self.node(node).interrupt_before
    }

    fn interrupt_after(&self, node: NodeIx) -> bool {
        self.node(node).interrupt_after
    }

    fn check_answer(&self, node: NodeIx, answer: &Value) -> Result<(), (&'static str, String)> {
        if let Exec::Interrupt { resume_key, .. } = &self.node(node).exec {
            // Secrets first: a type error would show the value.
            let mut answer_map = Map::new();
            answer_map.insert(resume_key.clone(), answer.clone());
            self.refuse_secrets(&answer_map).map_err(|reason| ("an answer that holds no secret", reason))?;
            if let Some(decl) = self.agent.schema.get(resume_key) {
                if decl.reducer == crate::state::Reducer::Replace {
                    self.agent.schema.check(resume_key, answer).map_err(|reason| (decl.ty.name(), reason))?;
                }
            }
        }
        Ok(())
    }

    fn policy(&self, node: NodeIx) -> Option<&tea_runtime::NodePolicy> {
        self.node(node).policy.as_ref()
    }

    fn pause_timeout(&self, node: NodeIx) -> Option<u64> {
        match &self.node(node).exec {
            Exec::Interrupt { timeout, .. } => *timeout,
            _ => None,
        }
    }

    fn sends(&self, node: NodeIx) -> bool {
        matches!(self.node(node).exec, Exec::Send { .. })
    }

    fn fork(&self, node: NodeIx) -> Option<Fork<'_, NodeIx>> {
        self.node(node).fork.as_ref().map(|(heads, join)| Fork { heads, join: *join })
    }

    fn apply(&self, state: &mut State, update: Update) -> Result<(), BoxError> {
        self.refuse_secrets(update.values())?;
        self.agent.schema.apply(state, update)
    }

    fn join_update(&self, _join: NodeIx, update: Update) -> Option<Update> {
        // Branch writes to keys declared with a reducer merge at the fan-in; the rest stay in
        // their branch (and reach the fan-in through `parallel_results`).
        let schema = &self.agent.schema;
        let values = update.into_values().ok()?;
        let mut kept = Map::new();
        let mut replaced = Vec::new();
        for (key, value) in values {
            if let Some(decl) = schema.get(&key) {
                if decl.reducer == crate::state::Reducer::Replace {
                    replaced.push(key.clone());
                }
                kept.insert(key, value);
            }
        }
        if kept.is_empty() {
            return None;
        }
        Some(Update::from_map(kept).with_replaced(replaced))
    }

    fn keeps_update_on_pause(&self, node: NodeIx) -> bool {
        matches!(self.node(node).exec, Exec::Interrupt { .. })
    }
}

impl actions::RunningAgent for YamlGraph {
    fn grants(&self) -> &Arc<crate::grants::AgentGrants> {
        &self.agent.grants
    }

    fn a2a(&self) -> &crate::actions::a2a::A2aSettings {
        &self.agent.a2a
    }

    #[cfg(feature = "net")]
    fn vectors(&self) -> &Arc<crate::actions::services::vectors::Vectors> {
        &self.agent.vectors
    }

    fn encode(&self, node: &NodeName, state: &State) -> Result<Vec<u8>, tea_runtime::Error> {
        tea_runtime::encode_checkpoint(self, node, state)
    }

    fn decode(&self, bytes: &[u8], source: &str) -> Result<(NodeName, State), tea_runtime::Error> {
        tea_runtime::decode_checkpoint(self, bytes, source)
    }

    fn memory(&self) -> &crate::actions::Memory {
        &self.agent.memory
    }

    fn saved(&self, path: &str) {
        if let Ok(mut last) = self.agent.last_checkpoint.lock() {
            *last = path.to_owned();
        }
    }

    #[cfg(feature = "net")]
    fn prepare_net(
        &self,
        action: crate::actions::net::NetAction,
        args: Value,
        state: &State,
    ) -> Result<crate::actions::net::Call, BoxError> {
        YamlGraph::prepare_net(self, action, args, state)
    }
}

impl crate::actions::Composer for YamlGraph {
    fn render_on(&self, tree: &Tree, state: &State) -> Result<Value, String> {
        self.render(tree, &self.context(state, None))
    }

    fn run_lua(&self, chunk: ChunkId, state: &State) -> Result<Option<Map<String, Value>>, String> {
        self.agent.lua.run(chunk, state.shared(), self.cancel.as_ref())
    }

    fn host(&self) -> &dyn actions::RunningAgent {
        self
    }

    fn render_with(&self, tree: &Tree, state: &State, locals: &Map<String, Value>) -> Result<Value, String> {
        self.render_with_locals(tree, state, locals)
    }

    fn run_node(&self, name: &str, state: &State) -> Result<Option<Map<String, Value>>, BoxError> {
        let _depth = actions::enter_node_call(name)?;
        let def = self.agent.nodes.iter().find(|n| n.name == *name).ok_or_else(|| format!("no node `{name}`"))?;
        let mut hitl = Hitl::default();
        let update = self.exec_as(&def.name, &def.exec, state, &mut hitl).map_err(|e| {
            let chain = tea_runtime::error_chain(&*e);
            format!("node `{name}`: {chain}")
        })?;
        match update {
            None => Ok(None),
            Some(update) => {
                let values = update.into_values()?;
                self.refuse_secrets(&values)?;
                Ok(Some(values))
            }
        }
    }
}

/// A YAML agent that pauses is refused at load without a checkpointer, so every agent that
/// runs without one cannot pause.
impl PauseFree for YamlGraph {}

/// A YAML agent runs with the blocking API too: the graph it runs there has no async node (its
/// network nodes wait for their requests on tea-yaml's runtime).
impl SyncGraph for YamlGraph {}
