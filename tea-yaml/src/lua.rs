//! `run:` blocks: Lua 5.4 in a sandbox, one VM per OS thread.
//!
//! mlua's `Lua` is not `Sync`, and parallel branches run on rayon's threads, so each thread
//! keeps its own VM (created on first use) with each agent's chunks compiled into it once.
//! Each agent's chunks share a global table that is empty between calls (reads fall through to
//! `state`, `variables` and the safe libraries; a global a block assigns is cleared when the
//! call returns), so nothing a block assigns to a global outlives the call. `state` is a read-only
//! userdata over the state's shared map: a key is converted to Lua only when the block reads it.
//!
//! The sandbox leaves out `os`, `io`, `package`/`require`, `load`, `dofile`, `loadfile`,
//! `collectgarbage`, `rawset` and `debug`; `print` writes to standard error. The libraries are
//! read-only proxies and the metatables behind a block's globals and behind strings are hidden,
//! so no block can change what another block (of any agent on the thread) sees. A memory limit (the VM's
//! allocator refuses beyond it) and an instruction limit (a hook counts instructions) fail the
//! node with a message that says which limit it hit.

use mlua::{
    AnyUserData, Function, HookTriggers, Lua, LuaOptions, MetaMethod, StdLib, Table, UserData, UserDataMethods,
    Value as LuaValue, VmState,
};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// How often the instruction hook runs (instructions between two counts).
const HOOK_EVERY: u32 = 1000;
/// How deep a value returned from Lua may nest (a table that contains itself would not end).
const MAX_DEPTH: usize = 64;

/// The limits a block runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Bytes the thread's VM may hold.
    pub(crate) memory: usize,
    /// Instructions one block may run.
    pub(crate) instructions: u64,
}

/// The Lua blocks of one loaded agent.
#[derive(Debug)]
pub(crate) struct Chunks {
    id: u64,
    /// Dropped with the agent: VMs then forget its compiled chunks.
    alive: Arc<()>,
    sources: Vec<Chunk>,
    variables: Arc<Map<String, Value>>,
    limits: Limits,
}

#[derive(Debug)]
struct Chunk {
    /// The source, preceded by blank lines so that Lua's line numbers are the file's.
    source: String,
    /// The file name Lua reports in messages.
    file: String,
}

/// A chunk of [`Chunks`], by index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkId(usize);

static NEXT_AGENT: AtomicU64 = AtomicU64::new(1);

impl Chunks {
    pub(crate) fn new(variables: Arc<Map<String, Value>>, limits: Limits) -> Self {
        Chunks {
            id: NEXT_AGENT.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
            sources: Vec::new(),
            variables,
            limits,
        }
    }

    /// Compiles `source` (which starts on line `first_line` of `file`) to check it, and keeps
    /// it. `Err((line, message))` for a syntax error.
    pub(crate) fn add(&mut self, file: &str, first_line: usize, source: &str) -> Result<ChunkId, (usize, String)> {
        let padded = format!("{}{source}", "\n".repeat(first_line.saturating_sub(1)));
        let checker = Lua::new_with(StdLib::NONE, LuaOptions::default())
            .map_err(|e| (first_line, format!("Lua could not start: {e}")))?;
        if let Err(error) = checker.load(&padded).set_name(format!("={file}")).into_function() {
            let message = match &error {
                mlua::Error::SyntaxError { message, .. } => message.clone(),
                other => other.to_string(),
            };
            let line = line_of(&message, file).unwrap_or(first_line);
            let message = message.strip_prefix(&format!("{file}:{line}: ")).unwrap_or(&message).to_owned();
            return Err((line, format!("Lua syntax error: {message}")));
        }
        self.sources.push(Chunk { source: padded, file: file.to_owned() });
        Ok(ChunkId(self.sources.len() - 1))
    }

    /// Runs chunk `id` on `state`: `Ok(None)` when it returns nothing (or an empty table),
    /// `Ok(Some(keys))` for a table of keys to write.
    pub(crate) fn run(
        &self,
        id: ChunkId,
        state: &Arc<Map<String, Value>>,
    ) -> Result<Option<Map<String, Value>>, String> {
        VM.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(Vm::new().map_err(|e| format!("Lua could not start: {e}"))?);
            }
            let Some(vm) = slot.as_mut() else { return Err("Lua could not start".to_owned()) };
            vm.run(self, id, state)
        })
    }
}

/// The file line a Lua message points at (`file:12: …`).
fn line_of(message: &str, file: &str) -> Option<usize> {
    let rest = message.strip_prefix(file)?.strip_prefix(':')?;
    rest.split(':').next()?.parse().ok()
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// One thread's Lua VM.
struct Vm {
    lua: Lua,
    /// The safe globals and `state`: what every agent's environment falls back to.
    base: Table,
    /// The `state` userdata, pointed at the state of the call under way.
    state: AnyUserData,
    /// Instructions left to the block under way.
    budget: Rc<Cell<i64>>,
    limits: Option<Limits>,
    agents: HashMap<u64, AgentVm>,
}

/// One agent's chunks in a VM, and their environment.
struct AgentVm {
    alive: Weak<()>,
    functions: Vec<Option<Function>>,
    /// The chunks' globals: empty between calls; reads fall through to `variables` and the VM's
    /// base, writes land here and are cleared when the call returns.
    env: Table,
}

/// A read-only view of a JSON map (the state, the variables).
struct MapView(Option<Arc<Map<String, Value>>>);

impl UserData for MapView {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method(MetaMethod::Index, |lua, this, key: LuaValue| {
            let (Some(map), LuaValue::String(key)) = (&this.0, key) else { return Ok(LuaValue::Nil) };
            match map.get(&*key.to_str()?) {
                Some(value) => to_lua(lua, value),
                None => Ok(LuaValue::Nil),
            }
        });
        methods.add_meta_method(MetaMethod::NewIndex, |_, _, _: mlua::MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime(
                "`state` and `variables` are read-only: return a table with the keys to write instead",
            ))
        });
        methods.add_meta_method(MetaMethod::Pairs, |lua, this, ()| {
            let table = lua.create_table()?;
            if let Some(map) = &this.0 {
                for (key, value) in map.iter() {
                    table.set(key.as_str(), to_lua(lua, value)?)?;
                }
            }
            let next: Function = lua.globals().get("next")?;
            Ok((next, table, LuaValue::Nil))
        });
    }
}

impl Vm {
    fn new() -> mlua::Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::UTF8 | StdLib::COROUTINE;
        let lua = Lua::new_with(libs, LuaOptions::default())?;
        let globals = lua.globals();
        let base = lua.create_table()?;
        for name in [
            "assert",
            "error",
            "ipairs",
            "next",
            "pairs",
            "pcall",
            "rawequal",
            "rawget",
            "rawlen",
            "select",
            "tonumber",
            "tostring",
            "type",
            "xpcall",
            "getmetatable",
            "setmetatable",
            "_VERSION",
        ] {
            base.set(name, globals.get::<LuaValue>(name)?)?;
        }
        for library in ["string", "table", "math", "utf8", "coroutine"] {
            base.set(library, read_only(&lua, globals.get::<Table>(library)?)?)?;
        }
        let print = lua.create_function(|_, args: mlua::MultiValue| {
            let parts: Vec<String> = args.iter().map(|v| v.to_string().unwrap_or_else(|_| "?".into())).collect();
            eprintln!("{}", parts.join("\t"));
            Ok(())
        })?;
        base.set("print", print)?;
        let state = lua.create_userdata(MapView(None))?;
        base.set("state", &state)?;
        // The string metatable's `__index` is the real string library: hide it.
        lua.load("getmetatable('').__metatable = false").set_name("=tea").exec()?;
        let budget = Rc::new(Cell::new(i64::MAX));
        let counter = budget.clone();
        lua.set_global_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |_, _| {
            let left = counter.get() - i64::from(HOOK_EVERY);
            counter.set(left);
            if left < 0 {
                return Err(mlua::Error::runtime(INSTRUCTION_LIMIT));
            }
            Ok(VmState::Continue)
        })?;
        Ok(Vm { lua, base, state, budget, limits: None, agents: HashMap::new() })
    }

    fn run(
        &mut self,
        chunks: &Chunks,
        id: ChunkId,
        state: &Arc<Map<String, Value>>,
    ) -> Result<Option<Map<String, Value>>, String> {
        if self.limits != Some(chunks.limits) {
            self.lua.set_memory_limit(chunks.limits.memory).map_err(|e| e.to_string())?;
            self.limits = Some(chunks.limits);
        }
        self.prepare(chunks, id).map_err(|e| e.to_string())?;
        let Some(agent) = self.agents.get(&chunks.id) else { return Err("the agent's chunks are missing".into()) };
        let Some(function) = agent.functions.get(id.0).and_then(Option::as_ref) else {
            return Err("the chunk is missing".into());
        };
        let outcome = (|| -> mlua::Result<LuaValue> {
            self.state.borrow_mut::<MapView>()?.0 = Some(state.clone());
            self.budget.set(i64::try_from(chunks.limits.instructions).unwrap_or(i64::MAX));
            let result = function.call::<LuaValue>(());
            // The state's map is shared again only with its owner (so applying the update
            // copies nothing).
            self.state.borrow_mut::<MapView>()?.0 = None;
            if !agent.env.is_empty() {
                // The block assigned globals: they do not outlive the call.
                let keys: Vec<LuaValue> =
                    agent.env.pairs::<LuaValue, LuaValue>().filter_map(|p| p.ok().map(|(k, _)| k)).collect();
                for key in keys {
                    agent.env.raw_set(key, LuaValue::Nil)?;
                }
            }
            result
        })();
        match outcome {
            Ok(value) => from_result(value),
            Err(error) => Err(self.explain(error, chunks)),
        }
    }

    /// Makes sure chunk `id` of `chunks` is compiled in this VM, with its agent's environment.
    fn prepare(&mut self, chunks: &Chunks, id: ChunkId) -> mlua::Result<()> {
        if !self.agents.contains_key(&chunks.id) {
            // A new agent: forget the chunks of agents that were dropped.
            self.agents.retain(|_, agent| agent.alive.strong_count() > 0);
            let variables = self.lua.create_userdata(MapView(Some(chunks.variables.clone())))?;
            let scope = self.lua.create_table()?;
            scope.set("variables", variables)?;
            let scope_meta = self.lua.create_table()?;
            scope_meta.set("__index", self.base.clone())?;
            // Blocks cannot reach the tables behind their globals (shared with other agents).
            scope_meta.set("__metatable", false)?;
            scope.set_metatable(Some(scope_meta))?;
            let env = self.lua.create_table()?;
            let env_meta = self.lua.create_table()?;
            env_meta.set("__index", scope)?;
            env_meta.set("__metatable", false)?;
            env.set_metatable(Some(env_meta))?;
            let functions = vec![None; chunks.sources.len()];
            self.agents.insert(chunks.id, AgentVm { alive: Arc::downgrade(&chunks.alive), functions, env });
        }
        let Some(agent) = self.agents.get_mut(&chunks.id) else {
            return Err(mlua::Error::runtime("the agent's chunks are missing"));
        };
        if agent.functions.len() < chunks.sources.len() {
            agent.functions.resize(chunks.sources.len(), None);
        }
        if agent.functions[id.0].is_none() {
            let chunk = &chunks.sources[id.0];
            let function = self
                .lua
                .load(&chunk.source)
                .set_name(format!("={}", chunk.file))
                .set_environment(agent.env.clone())
                .into_function()?;
            agent.functions[id.0] = Some(function);
        }
        Ok(())
    }

    fn explain(&self, error: mlua::Error, chunks: &Chunks) -> String {
        let text = root_message(&error);
        if text.contains(INSTRUCTION_LIMIT) {
            return format!(
                "the Lua block ran over its instruction limit of {} instructions (Engine::lua_instruction_limit)",
                chunks.limits.instructions
            );
        }
        if matches!(root(&error), mlua::Error::MemoryError(_)) || text.contains("not enough memory") {
            // Free what the failed block left behind before the next one runs.
            let _ = self.lua.gc_collect();
            return format!(
                "the Lua block ran out of memory: over its limit of {} bytes (Engine::lua_memory_limit)",
                chunks.limits.memory
            );
        }
        let text = text.split("\nstack traceback:").next().unwrap_or(&text);
        // An error raised inside a callback (reading `state`, `print`) carries its place only
        // in the traceback: name the block's line from there.
        if let mlua::Error::CallbackError { traceback, .. } = &error {
            let file = chunks.sources.first().map_or("", |c| c.file.as_str());
            let place = traceback.lines().map(str::trim).find(|l| !file.is_empty() && l.starts_with(file));
            if let Some(place) = place.and_then(|l| l.split(": ").next()) {
                return format!("Lua error at {place}: {text}");
            }
        }
        format!("Lua error: {text}")
    }
}

const INSTRUCTION_LIMIT: &str = "tea: instruction limit reached";

fn root(error: &mlua::Error) -> &mlua::Error {
    match error {
        mlua::Error::CallbackError { cause, .. } => root(cause),
        other => other,
    }
}

fn root_message(error: &mlua::Error) -> String {
    match root(error) {
        mlua::Error::RuntimeError(message) => message.clone(),
        mlua::Error::MemoryError(message) => message.clone(),
        other => other.to_string(),
    }
}

/// A proxy of `table` that reads through and refuses writes, so a block cannot change a library
/// other blocks use.
fn read_only(lua: &Lua, table: Table) -> mlua::Result<Table> {
    let proxy = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set("__index", table)?;
    meta.set(
        "__newindex",
        lua.create_function(|_, _: mlua::MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime("the standard libraries are read-only here"))
        })?,
    )?;
    meta.set("__metatable", false)?;
    proxy.set_metatable(Some(meta))?;
    Ok(proxy)
}

/// JSON to Lua: null is nil, lists are 1-based tables.
fn to_lua(lua: &Lua, value: &Value) -> mlua::Result<LuaValue> {
    Ok(match value {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => LuaValue::Integer(i),
            None => LuaValue::Number(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                table.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
        Value::Object(map) => {
            let table = lua.create_table_with_capacity(0, map.len())?;
            for (key, item) in map {
                table.raw_set(key.as_str(), to_lua(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// What a block returned: nil or `{}` writes nothing; a table with string keys writes them.
fn from_result(value: LuaValue) -> Result<Option<Map<String, Value>>, String> {
    match value {
        LuaValue::Nil => Ok(None),
        LuaValue::Table(table) => {
            let mut out = Map::new();
            for pair in table.pairs::<LuaValue, LuaValue>() {
                let (key, value) = pair.map_err(|e| e.to_string())?;
                let LuaValue::String(key) = key else {
                    return Err(format!(
                        "the Lua block returned a table with key {} ({}); the keys to write must be strings",
                        key.to_string().unwrap_or_default(),
                        key.type_name()
                    ));
                };
                let key = key.to_str().map_err(|e| e.to_string())?.to_owned();
                let value = to_json(&value, 0).map_err(|e| format!("key `{key}`: {e}"))?;
                out.insert(key, value);
            }
            Ok(if out.is_empty() { None } else { Some(out) })
        }
        other => Err(format!(
            "the Lua block returned {} ({}); it must return a table of keys to write, or nothing",
            other.to_string().unwrap_or_default(),
            other.type_name()
        )),
    }
}

/// Lua to JSON: a table whose keys are exactly 1..n is a list, any other table an object (an
/// empty table is an empty object).
fn to_json(value: &LuaValue, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("the value nests deeper than {MAX_DEPTH} tables (does a table contain itself?)"));
    }
    Ok(match value {
        LuaValue::Nil => Value::Null,
        LuaValue::Boolean(b) => Value::Bool(*b),
        LuaValue::Integer(i) => Value::from(*i),
        LuaValue::Number(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a number JSON can hold"))?,
        LuaValue::String(s) => Value::String(s.to_str().map_err(|e| e.to_string())?.to_owned()),
        LuaValue::Table(table) => {
            // One pass over the pairs; a table whose keys are exactly 1..n is a list.
            let mut pairs = Vec::new();
            for pair in table.clone().pairs::<LuaValue, LuaValue>() {
                pairs.push(pair.map_err(|e| e.to_string())?);
            }
            let len = table.raw_len();
            let is_list = len > 0
                && pairs.len() == len
                && pairs.iter().all(|(k, _)| matches!(k, LuaValue::Integer(i) if *i >= 1 && *i as usize <= len));
            if is_list {
                let mut items = vec![Value::Null; len];
                for (key, item) in &pairs {
                    if let LuaValue::Integer(i) = key {
                        items[*i as usize - 1] = to_json(item, depth + 1)?;
                    }
                }
                Value::Array(items)
            } else {
                let mut map = Map::new();
                for (key, item) in &pairs {
                    let key = match key {
                        LuaValue::String(s) => s.to_str().map_err(|e| e.to_string())?.to_owned(),
                        LuaValue::Integer(i) => i.to_string(),
                        other => return Err(format!("a table key of type {} has no JSON form", other.type_name())),
                    };
                    map.insert(key, to_json(item, depth + 1)?);
                }
                Value::Object(map)
            }
        }
        other => return Err(format!("a Lua {} has no JSON form", other.type_name())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunks() -> Chunks {
        let vars = json!({"threshold": 10});
        let Value::Object(vars) = vars else { unreachable!() };
        Chunks::new(Arc::new(vars), Limits { memory: 16 << 20, instructions: 1_000_000 })
    }

    fn state(v: Value) -> Arc<Map<String, Value>> {
        let Value::Object(m) = v else { unreachable!() };
        Arc::new(m)
    }

    #[test]
    fn blocks_read_state_and_variables_and_return_keys() {
        let mut c = chunks();
        let id = c
            .add("a.yaml", 1, "return { n = (state.n or 0) + variables.threshold, l = {1, 2}, o = {a = true} }")
            .unwrap();
        let out = c.run(id, &state(json!({"n": 1}))).unwrap().unwrap();
        assert_eq!(Value::Object(out), json!({"n": 11, "l": [1, 2], "o": {"a": true}}));
        let none = c.add("a.yaml", 1, "return {}").unwrap();
        assert_eq!(c.run(none, &state(json!({}))).unwrap(), None);
    }

    #[test]
    fn the_sandbox_has_no_os_io_or_loaders_and_state_is_read_only() {
        let mut c = chunks();
        for code in [
            "return os.time()",
            "return io.open('x')",
            "return require('x')",
            "return load('x')",
            "return dofile('x')",
            "return debug.traceback()",
        ] {
            let id = c.add("a.yaml", 1, code).unwrap();
            let err = c.run(id, &state(json!({}))).unwrap_err();
            assert!(err.contains("nil"), "{code}: {err}");
        }
        let id = c.add("a.yaml", 1, "state.x = 1").unwrap();
        assert!(c.run(id, &state(json!({}))).unwrap_err().contains("read-only"));
        let id = c.add("a.yaml", 1, "string.upper = nil").unwrap();
        assert!(c.run(id, &state(json!({}))).unwrap_err().contains("read-only"));
        // No way around the proxies to the tables other blocks share.
        for escape in [
            "rawset(string, 'upper', nil)",
            "getmetatable('').__index.upper = nil",
            "getmetatable(_ENV).__index.string = {}",
            "setmetatable(string, {})",
        ] {
            let id = c.add("a.yaml", 1, escape).unwrap();
            assert!(c.run(id, &state(json!({}))).is_err(), "{escape}");
        }
        let upper = c.add("a.yaml", 1, "return { u = string.upper('x'), m = ('y'):upper() }").unwrap();
        assert_eq!(Value::Object(c.run(upper, &state(json!({}))).unwrap().unwrap()), json!({"u": "X", "m": "Y"}));
        // Globals do not outlive a call.
        let set = c.add("a.yaml", 1, "leak = 1 return {}").unwrap();
        let get = c.add("a.yaml", 1, "return { seen = leak }").unwrap();
        c.run(set, &state(json!({}))).unwrap();
        assert_eq!(c.run(get, &state(json!({}))).unwrap(), None);
    }

    #[test]
    fn limits_fail_the_block_with_a_message_that_says_which() {
        let mut c = chunks();
        let spin = c.add("a.yaml", 1, "while true do end").unwrap();
        assert!(c.run(spin, &state(json!({}))).unwrap_err().contains("instruction limit of 1000000"));
        let hog =
            c.add("a.yaml", 1, "local t = {} for i = 1, 10000000 do t[i] = string.rep('x', 100) .. i end").unwrap();
        let err = c.run(hog, &state(json!({}))).unwrap_err();
        assert!(err.contains("out of memory") || err.contains("instruction limit"), "{err}");
        // The VM still works afterwards.
        let ok = c.add("a.yaml", 1, "return { ok = true }").unwrap();
        assert!(c.run(ok, &state(json!({}))).unwrap().is_some());
    }

    #[test]
    fn syntax_and_runtime_errors_carry_file_lines() {
        let mut c = chunks();
        let (line, message) = c.add("agent.yaml", 7, "local x = 1\nreturn {x = }").unwrap_err();
        assert_eq!(line, 8, "{message}");
        let id = c.add("agent.yaml", 3, "local t = nil\nreturn t.x").unwrap();
        let err = c.run(id, &state(json!({}))).unwrap_err();
        assert!(err.contains("agent.yaml:4:"), "{err}");
        let bad = c.add("agent.yaml", 1, "return 5").unwrap();
        assert!(c.run(bad, &state(json!({}))).unwrap_err().contains("must return a table"));
    }
}
