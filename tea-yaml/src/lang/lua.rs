//! `run:` blocks: Lua 5.4 in a sandbox, one VM per OS thread.
//!
//! mlua's `Lua` is not `Sync`, and parallel branches run on rayon's threads, so each thread
//! keeps its own VM (created on first use) with each agent's chunks compiled into it once.
//! Each agent's chunks share a global table that is empty between calls (reads fall through to
//! `state`, `variables` and the safe libraries; a global a block assigns is cleared when the
//! call returns), so nothing a block assigns to a global outlives the call. `state` is a lazy
//! userdata over the state's shared map: a key is converted to Lua only when the block reads it.
//! A block may write `state` as The Edge Agent's blocks do (`state.x = 1`): the writes stay in
//! the call's own copy, and `return state` writes the keys it changed.
//!
//! The sandbox leaves out `os`, `io`, `package`/`require`, `load`, `dofile`, `loadfile`,
//! `collectgarbage`, `rawset` and `debug`; `print` writes to standard error. The libraries are
//! read-only proxies and the metatables behind a block's globals and behind strings are hidden,
//! so no block can change what another block (of any agent on the thread) sees. A memory limit (the VM's
//! allocator refuses beyond it) and an instruction limit (a hook counts instructions) fail the
//! node with a message that says which limit it hit.
//!
//! One sandboxed Lua VM per OS thread (mlua's `Lua` is not `Sync`), each agent's chunks compiled
//! into it once; `state` is a lazy userdata that converts only the keys a block reads, and takes
//! writes into the call's own copy (`return state` writes the keys changed, as The Edge Agent's
//! Rust engine hands blocks a copy); `variables` is read-only; memory, instruction and time limits.
//! A `Watch` shared by the instruction hook and the bounded library functions (`string.rep`,
//! `table.move`, the pattern functions) records why a block stopped; `pcall`, `xpcall` and
//! `coroutine.resume/close` are wrapped to raise it again, so no block catches a limit. An async
//! run's graph carries a cancel flag the hook reads.

use mlua::{
    AnyUserData, Function, HookTriggers, Lua, LuaOptions, MetaMethod, MultiValue, StdLib, Table, UserData,
    UserDataMethods, Value as LuaValue, VmState,
};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the instruction hook runs (instructions between two counts).
const HOOK_EVERY: u32 = 1000;
/// How deep a value returned from Lua may nest (a table that contains itself would not end).
const MAX_DEPTH: usize = 64;

/// How many steps of Lua's pattern matcher one instruction of the budget pays for: a pattern
/// whose worst case on its subject is more than this many times the instructions left is
/// refused before it runs (see [`pattern_cost`]).
const PATTERN_STEPS_PER_INSTRUCTION: f64 = 16.0;

/// The limits a block runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Bytes the thread's VM may hold.
    pub(crate) memory: usize,
    /// Instructions one block may run.
    pub(crate) instructions: u64,
    /// How long one block may run.
    pub(crate) time: Duration,
}

/// Why a block was stopped. Once set, every later count of the hook stops the block again, and
/// the functions that catch errors (`pcall`, `xpcall`, `coroutine.resume`, `coroutine.close`)
/// raise it again: no block can catch a limit and carry on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Instructions,
    Memory,
    Time,
    Cancelled,
}

impl Stop {
    /// The text of the Lua error that carries it.
    fn marker(self) -> &'static str {
        match self {
            Stop::Instructions => "tea: instruction limit reached",
            Stop::Memory => "tea: memory limit reached",
            Stop::Time => "tea: time limit reached",
            Stop::Cancelled => "tea: the run was cancelled",
        }
    }

    fn error(self) -> mlua::Error {
        mlua::Error::runtime(self.marker())
    }
}

/// What the hook and the bounded library functions of a VM share with the call under way.
#[derive(Default)]
struct Watch {
    /// Instructions left to the block under way.
    budget: Cell<i64>,
    /// When the block must stop.
    deadline: Cell<Option<Instant>>,
    /// Set by the caller to stop the block (a run that was dropped).
    cancel: RefCell<Option<Arc<AtomicBool>>>,
    stopped: Cell<Option<Stop>>,
    /// The VM's memory limit, for the functions that size their result.
    memory: Cell<usize>,
}

impl Watch {
    fn stop(&self, why: Stop) -> mlua::Error {
        self.stopped.set(Some(why));
        why.error()
    }

    /// The check the hook makes every [`HOOK_EVERY`] instructions.
    fn tick(&self, instructions: i64) -> mlua::Result<()> {
        if let Some(why) = self.stopped.get() {
            return Err(why.error());
        }
        let left = self.budget.get().saturating_sub(instructions);
        self.budget.set(left);
        if left < 0 {
            return Err(self.stop(Stop::Instructions));
        }
        if self.deadline.get().is_some_and(|d| Instant::now() >= d) {
            return Err(self.stop(Stop::Time));
        }
        if self.cancel.borrow().as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(self.stop(Stop::Cancelled));
        }
        Ok(())
    }
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
    /// The source, as written (Lua numbers its lines from 1).
    source: String,
    /// The file name Lua reports in messages.
    file: String,
    /// The file's line the source starts on: Lua's line numbers in messages are moved by it
    /// (rather than padding the source with blank lines, which would make a file of many
    /// blocks quadratic in memory).
    first_line: usize,
}

/// A chunk of [`Chunks`], by index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChunkId(usize);

impl ChunkId {
    /// Its index among the agent's chunks.
    pub(crate) fn index(self) -> usize {
        self.0
    }
}

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
    /// it. `Err((line, column, message))` for a syntax error: the file's line, and the 1-based
    /// column (in characters) in the block's own line of the token Lua names (1 when it cannot
    /// be told).
    pub(crate) fn add(
        &mut self,
        file: &str,
        first_line: usize,
        source: &str,
    ) -> Result<ChunkId, (usize, usize, String)> {
        let offset = first_line.saturating_sub(1);
        if let Some((line, column)) = close_attribute(source) {
            return Err((
                line + offset,
                column,
                "Lua: to-be-closed variables (`<close>`) are not supported in `run:` blocks: their `__close` \
                 can run where the block's limits do not reach"
                    .to_owned(),
            ));
        }
        if let Err(message) = check(file, source) {
            let line = line_of(&message, &shown(file)).unwrap_or(1);
            let column = column_of(file, source, line, &message).unwrap_or(1);
            let message = message.strip_prefix(&format!("{}:{line}: ", shown(file))).unwrap_or(&message).to_owned();
            return Err((line + offset, column, format!("Lua syntax error: {}", relines(&message, file, offset))));
        }
        self.sources.push(Chunk { source: source.to_owned(), file: file.to_owned(), first_line });
        Ok(ChunkId(self.sources.len() - 1))
    }

    /// Runs chunk `id` on `state`: `Ok(None)` when it returns nothing (or an empty table),
    /// `Ok(Some(keys))` for a table of keys to write. `cancel`: set, it stops the block.
    pub(crate) fn run(
        &self,
        id: ChunkId,
        state: &Arc<Map<String, Value>>,
        cancel: Option<&Arc<AtomicBool>>,
    ) -> Result<Option<Map<String, Value>>, String> {
        VM.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(Vm::new().map_err(|e| format!("Lua could not start: {e}"))?);
            }
            let Some(vm) = slot.as_mut() else { return Err("Lua could not start".to_owned()) };
            *vm.watch.cancel.borrow_mut() = cancel.cloned();
            let result = vm.run(self, id, state);
            *vm.watch.cancel.borrow_mut() = None;
            result
        })
    }
}

/// Compiles `source` as chunk `file` (text only: a block that starts like precompiled bytecode,
/// ESC `Lua`, is refused); a syntax error's message as Lua words it (`file:LINE: …`).
fn check(file: &str, source: &str) -> Result<(), String> {
    let compiled = CHECKER.with(|checker| {
        checker.load(source).set_name(format!("={file}")).set_mode(mlua::chunk::ChunkMode::Text).into_function()
    });
    compiled.map(drop).map_err(|error| match error {
        mlua::Error::SyntaxError { message, .. } => message,
        other => other.to_string(),
    })
}

/// How many places of a syntax error's token on its line [`column_of`] tries at most.
const MAX_CUTS: usize = 32;

/// The 1-based column (in characters) in line `line` of `source` of the token that the syntax
/// error `message` (for chunk `file`) names: Lua says `near 'TOKEN'` but gives no column. The
/// parser stops at the first token that cannot come next, so the block cut just after that
/// token fails with the very same message, while cut after an earlier occurrence of the same
/// text (a valid one) it fails at its end (`near <eof>`): the first occurrence on the line whose
/// cut repeats the message is the token. `near <eof>`: just after the line's last character.
fn column_of(file: &str, source: &str, line: usize, message: &str) -> Option<usize> {
    let near = &message[message.rfind(" near ")? + " near ".len()..];
    let start = source.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum::<usize>();
    let text = source.get(start..)?.split('\n').next()?;
    let column = |at: usize| text[..at].chars().count() + 1;
    if near.trim_end() == "<eof>" {
        return Some(column(text.trim_end().len()));
    }
    let token = near.trim_end().strip_prefix('\'')?.strip_suffix('\'')?;
    if token.is_empty() {
        return None;
    }
    // The cuts tried are bounded (a hostile line could hold the token many thousand times).
    let mut places = text.match_indices(token).map(|(at, _)| at).take(MAX_CUTS);
    let found =
        places.clone().find(|&at| check(file, &source[..start + at + token.len()]).err().as_deref() == Some(message));
    // An unfinished string (`near '"abc'`) is named so only when a line ends it; cut at the end
    // of its text, it ends at `<eof>` instead: it is where its text first occurs.
    found.or_else(|| places.next().filter(|_| token.starts_with(['"', '\'']))).map(column)
}

/// The line and column of the first `<close>` attribute (`local x <close> = …`) in `source`, if
/// any.
fn close_attribute(source: &str) -> Option<(usize, usize)> {
    let mut at = 0;
    while let Some(found) = source[at..].find('<') {
        let start = at + found;
        let rest = source[start + 1..].trim_start();
        if let Some(after) = rest.strip_prefix("close") {
            if after.trim_start().starts_with('>') {
                let line_start = source[..start].rfind('\n').map_or(0, |n| n + 1);
                let line = 1 + source[..start].matches('\n').count();
                return Some((line, source[line_start..start].chars().count() + 1));
            }
        }
        at = start + 1;
    }
    None
}

/// `text` with every `file:N:` Lua wrote moved down by `offset` lines (to the agent file's).
fn relines(text: &str, file: &str, offset: usize) -> String {
    let shown = shown(file);
    if (offset == 0 && shown.len() == file.len()) || file.is_empty() {
        return text.to_owned();
    }
    let marker = format!("{shown}:");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&marker) {
        let after = &rest[at + marker.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        // The whole file name, where Lua may have shown only its start.
        out.push_str(&rest[..at]);
        out.push_str(file);
        out.push(':');
        match after[..digits].parse::<usize>() {
            Ok(n) if after[digits..].starts_with(':') => out.push_str(&(n + offset).to_string()),
            _ => out.push_str(&after[..digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// How Lua names a chunk called `=file` in its messages: the first `LUA_IDSIZE - 1` (59) bytes
/// of `file`, read as UTF-8 as mlua reads messages (a character cut in two shows as `\u{FFFD}`).
/// A longer path (most absolute ones) is shown cut, and only its start finds it.
fn shown(file: &str) -> std::borrow::Cow<'_, str> {
    const SHOWN: usize = 59;
    String::from_utf8_lossy(&file.as_bytes()[..file.len().min(SHOWN)])
}

/// The chunk line a Lua message points at (`file:12: …`, `file` as Lua shows it).
fn line_of(message: &str, file: &str) -> Option<usize> {
    let rest = message.strip_prefix(file)?.strip_prefix(':')?;
    rest.split(':').next()?.parse().ok()
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
    /// A bare VM that compiles blocks at load, to check them.
    static CHECKER: Lua = Lua::new_with(StdLib::NONE, LuaOptions::default()).unwrap_or_else(|_| Lua::new());
}

/// One thread's Lua VM.
struct Vm {
    lua: Lua,
    /// The safe globals and `state`: what every agent's environment falls back to.
    base: Table,
    /// The `state` userdata, pointed at the state of the call under way.
    state: AnyUserData,
    /// The `context` userdata (read-only), pointed at the run context of the call under way.
    context: AnyUserData,
    /// The limits of the block under way, shared with the hook.
    watch: Rc<Watch>,
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

/// A view of a JSON map: `variables` (read-only) or `state`, which a block may also write, as
/// The Edge Agent's Rust engine hands its blocks a copy of the state (`state.x = 1`, then
/// `return state`). A key is converted to Lua when first read; a table read from it is kept,
/// so that changing it in place is seen again (and by `return state`). Writes go to the call's
/// own copy, never to the state: only the table the block returns writes keys.
struct MapView {
    /// `variables` or `context` (read-only views), for the error a write gets.
    name: &'static str,
    map: Option<Arc<Map<String, Value>>>,
    /// `state`: writable. `variables`: not.
    writable: bool,
    /// This call's writes and the tables read so far, by key; `None` before the first.
    local: Option<Table>,
    /// Keys this call set to `nil`.
    removed: Vec<String>,
}

impl MapView {
    fn new(name: &'static str, map: Option<Arc<Map<String, Value>>>, writable: bool) -> Self {
        MapView { name, map, writable, local: None, removed: Vec::new() }
    }

    /// The call is over: its copy goes.
    fn reset(&mut self) {
        self.map = None;
        self.local = None;
        self.removed.clear();
    }

    /// What `return state` writes: each key the block assigned, or a table it read (and so may
    /// have changed), whose value now differs from the state's. (Keys set to `nil` are kept, as
    /// The Edge Agent merges a returned table into the state.)
    fn changes(&self, budget: &mut usize) -> Result<Option<Map<String, Value>>, String> {
        let Some(local) = &self.local else { return Ok(None) };
        let mut out = Map::new();
        for pair in local.pairs::<LuaValue, LuaValue>() {
            let (key, value) = pair.map_err(|e| e.to_string())?;
            let LuaValue::String(key) = key else { continue };
            let key = key.to_str().map_err(|e| e.to_string())?.to_owned();
            let value = to_json(&value, 0, budget).map_err(|e| format!("state key `{key}`: {e}"))?;
            if self.map.as_ref().and_then(|m| m.get(&key)) != Some(&value) {
                out.insert(key, value);
            }
        }
        Ok(if out.is_empty() { None } else { Some(out) })
    }
}

impl UserData for MapView {
    fn add_methods<M: UserDataMethods<Self>>(methods: &mut M) {
        methods.add_meta_method_mut(MetaMethod::Index, |lua, this, key: LuaValue| {
            let (Some(map), LuaValue::String(key)) = (&this.map, key) else { return Ok(LuaValue::Nil) };
            let name = key.to_str()?.to_owned();
            if let Some(local) = &this.local {
                let value: LuaValue = local.raw_get(name.as_str())?;
                if !value.is_nil() || this.removed.contains(&name) {
                    return Ok(value);
                }
            }
            let value = match map.get(&name) {
                Some(value) => to_lua(lua, value)?,
                None => return Ok(LuaValue::Nil),
            };
            if this.writable && matches!(value, LuaValue::Table(_)) {
                let local = match &this.local {
                    Some(local) => local.clone(),
                    None => this.local.insert(lua.create_table()?).clone(),
                };
                local.raw_set(name.as_str(), &value)?;
            }
            Ok(value)
        });
        methods.add_meta_method_mut(MetaMethod::NewIndex, |lua, this, (key, value): (LuaValue, LuaValue)| {
            if !this.writable || this.map.is_none() {
                return Err(mlua::Error::runtime(format!("`{}` is read-only", this.name)));
            }
            let LuaValue::String(key) = key else {
                return Err(mlua::Error::runtime("the keys of `state` are strings"));
            };
            let name = key.to_str()?.to_owned();
            let local = match &this.local {
                Some(local) => local.clone(),
                None => this.local.insert(lua.create_table()?).clone(),
            };
            this.removed.retain(|k| *k != name);
            if value.is_nil() {
                this.removed.push(name.clone());
            }
            local.raw_set(name.as_str(), value)
        });
        methods.add_meta_method(MetaMethod::Pairs, |lua, this, ()| {
            let table = lua.create_table()?;
            if let Some(map) = &this.map {
                for (key, value) in map.iter() {
                    if !this.removed.contains(key) {
                        table.set(key.as_str(), to_lua(lua, value)?)?;
                    }
                }
            }
            if let Some(local) = &this.local {
                for pair in local.pairs::<LuaValue, LuaValue>() {
                    let (key, value) = pair?;
                    table.set(key, value)?;
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
        let print = lua.create_function(|_, args: mlua::MultiValue| {
            let parts: Vec<String> = args.iter().map(|v| v.to_string().unwrap_or_else(|_| "?".into())).collect();
            eprintln!("{}", parts.join("\t"));
            Ok(())
        })?;
        base.set("print", print)?;
        // `emit(value)`: a custom event of the run's stream (nothing outside a stream).
        let emit = lua.create_function(|_, value: LuaValue| {
            // As big as a block's result may be.
            let mut budget = 64 << 20;
            let value = to_json(&value, 0, &mut budget).map_err(mlua::Error::runtime)?;
            crate::lang::scope::emit(value);
            Ok(())
        })?;
        base.set("emit", emit)?;
        let state = lua.create_userdata(MapView::new("state", None, true))?;
        base.set("state", &state)?;
        let context = lua.create_userdata(MapView::new("context", None, false))?;
        base.set("context", &context)?;
        // The string metatable's `__index` is the real string library: hide it.
        lua.load("getmetatable('').__metatable = false").set_name("=tea").exec()?;
        let watch = Rc::new(Watch::default());
        watch.budget.set(i64::MAX);
        let hook = watch.clone();
        lua.set_global_hook(HookTriggers::new().every_nth_instruction(HOOK_EVERY), move |_, _| {
            hook.tick(i64::from(HOOK_EVERY))?;
            Ok(VmState::Continue)
        })?;
        bound(&lua, &globals, &base, &watch)?;
        for library in ["string", "table", "math", "utf8", "coroutine"] {
            base.set(library, read_only(&lua, globals.get::<Table>(library)?)?)?;
        }
        Ok(Vm { lua, base, state, context, watch, limits: None, agents: HashMap::new() })
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
        let outcome = (|| -> mlua::Result<Result<Option<Map<String, Value>>, String>> {
            self.state.borrow_mut::<MapView>()?.map = Some(state.clone());
            self.context.borrow_mut::<MapView>()?.map = match crate::lang::scope::run_context() {
                Value::Object(context) => Some(Arc::new(context)),
                _ => None,
            };
            self.watch.budget.set(i64::try_from(chunks.limits.instructions).unwrap_or(i64::MAX));
            self.watch.deadline.set(Instant::now().checked_add(chunks.limits.time));
            self.watch.memory.set(chunks.limits.memory);
            self.watch.stopped.set(None);
            let result = function.call::<LuaValue>(()).map(|value| {
                // `return state`: the keys the block changed in its copy.
                let returns_state = matches!(&value, LuaValue::UserData(ud) if *ud == self.state);
                match self.watch.stopped.get() {
                    // Stopped, though the block returned (a limit hit inside a finalizer, say).
                    Some(why) => Err(self.explain(why.error(), chunks)),
                    None if returns_state => match self.state.borrow::<MapView>() {
                        Ok(view) => view.changes(&mut chunks.limits.memory.clone()),
                        Err(e) => Err(e.to_string()),
                    },
                    None => from_result(value, chunks.limits.memory),
                }
            });
            // The state's map is shared again only with its owner (so applying the update
            // copies nothing).
            self.state.borrow_mut::<MapView>()?.reset();
            self.context.borrow_mut::<MapView>()?.reset();
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
        let result = match outcome {
            Ok(result) => result,
            Err(error) => {
                let chunk = &chunks.sources[id.0];
                Err(relines(&self.explain(error, chunks), &chunk.file, chunk.first_line.saturating_sub(1)))
            }
        };
        // Nothing runs on the budget of a finished block (a finalizer the collector runs later
        // starts stopped), until the next block resets it.
        self.watch.stopped.set(Some(self.watch.stopped.get().unwrap_or(Stop::Instructions)));
        result
    }

    /// Makes sure chunk `id` of `chunks` is compiled in this VM, with its agent's environment.
    fn prepare(&mut self, chunks: &Chunks, id: ChunkId) -> mlua::Result<()> {
        if !self.agents.contains_key(&chunks.id) {
            // A new agent: forget the chunks of agents that were dropped.
            self.agents.retain(|_, agent| agent.alive.strong_count() > 0);
            let variables =
                self.lua.create_userdata(MapView::new("variables", Some(chunks.variables.clone()), false))?;
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
                .set_mode(mlua::chunk::ChunkMode::Text)
                .set_environment(agent.env.clone())
                .into_function()?;
            agent.functions[id.0] = Some(function);
        }
        Ok(())
    }

    fn explain(&self, error: mlua::Error, chunks: &Chunks) -> String {
        let text = root_message(&error);
        let stopped = self.watch.stopped.get();
        if stopped == Some(Stop::Instructions) || text.contains(Stop::Instructions.marker()) {
            return format!(
                "the Lua block ran over its instruction limit of {} instructions (Engine::lua_instruction_limit)",
                chunks.limits.instructions
            );
        }
        if stopped == Some(Stop::Time) || text.contains(Stop::Time.marker()) {
            return format!(
                "the Lua block ran over its time limit of {:?} (Engine::lua_time_limit)",
                chunks.limits.time
            );
        }
        if stopped == Some(Stop::Cancelled) || text.contains(Stop::Cancelled.marker()) {
            return "the Lua block was stopped: its run was cancelled (the caller dropped it)".to_owned();
        }
        if stopped == Some(Stop::Memory)
            || matches!(root(&error), mlua::Error::MemoryError(_))
            || text.contains("not enough memory")
            || text.contains(Stop::Memory.marker())
        {
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

/// Makes the VM's catchers and looping library functions keep to the block's limits:
/// `pcall`, `xpcall`, `coroutine.resume` and `coroutine.close` raise a stopped block's error
/// again; `string.rep` and `table.move` size their work first; the pattern functions refuse a
/// pattern whose backtracking could outrun the instructions left.
fn bound(lua: &Lua, globals: &Table, base: &Table, watch: &Rc<Watch>) -> mlua::Result<()> {
    // After a protected call: a stopped block, or a memory error (which the VM's allocator
    // raises), is raised again, so no catcher can swallow it.
    let w = watch.clone();
    let check = lua.create_function(move |_, results: MultiValue| {
        if let Some(why) = w.stopped.get() {
            return Err(why.error());
        }
        if let (Some(LuaValue::Boolean(false)), Some(error)) = (results.front(), results.get(1)) {
            let memory = match error {
                LuaValue::String(s) => s.to_str().is_ok_and(|s| s.contains("not enough memory")),
                LuaValue::Error(e) => matches!(root(e), mlua::Error::MemoryError(_)),
                _ => false,
            };
            if memory {
                return Err(w.stop(Stop::Memory));
            }
        }
        Ok(results)
    })?;
    let coroutine: Table = globals.get("coroutine")?;
    let wrap: (Function, Function, Function, Function) = lua
        .load(
            "local check, pcall, xpcall, resume, close = ...
             return function(...) return check(pcall(...)) end,
                    function(...) return check(xpcall(...)) end,
                    function(...) return check(resume(...)) end,
                    function(...) return check(close(...)) end",
        )
        .set_name("=tea")
        .call((
            check,
            globals.get::<Function>("pcall")?,
            globals.get::<Function>("xpcall")?,
            coroutine.get::<Function>("resume")?,
            coroutine.get::<Function>("close")?,
        ))?;
    // `__gc` finalizers run with the VM's hooks off, where no limit reaches them: a metatable
    // with one is refused (an object is marked for finalization only when its metatable has
    // `__gc` as it is set).
    let guarded: Function = lua
        .load(
            "local setmetatable, rawget, type, error = ...
             return function(t, mt)
                 if type(mt) == 'table' and rawget(mt, '__gc') ~= nil then
                     error('`__gc` finalizers are not run in `run:` blocks', 2)
                 end
                 return setmetatable(t, mt)
             end",
        )
        .set_name("=tea")
        .call((
            globals.get::<Function>("setmetatable")?,
            globals.get::<Function>("rawget")?,
            globals.get::<Function>("type")?,
            globals.get::<Function>("error")?,
        ))?;
    base.set("setmetatable", guarded)?;
    base.set("pcall", wrap.0)?;
    base.set("xpcall", wrap.1)?;
    coroutine.set("resume", wrap.2)?;
    coroutine.set("close", wrap.3)?;

    // `string.rep`: its result sized against the memory limit before it is built, and paid
    // for; an empty result returned at once (the C loop would run `n` times for nothing).
    let string: Table = globals.get("string")?;
    let rep: Function = string.get("rep")?;
    let w = watch.clone();
    let bounded_rep =
        lua.create_function(move |lua, (s, n, sep): (mlua::LuaString, mlua::Integer, Option<mlua::LuaString>)| {
            let unit = s.as_bytes().len() as i128;
            let sep_len = sep.as_ref().map_or(0, |sep| sep.as_bytes().len()) as i128;
            let total = if n <= 0 { 0 } else { i128::from(n) * (unit + sep_len) - sep_len };
            if total <= 0 {
                return lua.create_string("");
            }
            let memory = w.memory.get() as i128;
            if total > memory {
                return Err(mlua::Error::runtime(format!(
                    "string.rep: the result would be {total} bytes, over the Lua memory limit of {memory} bytes"
                )));
            }
            w.tick((total / 64) as i64)?;
            rep.call::<mlua::LuaString>((s, n, sep))
        })?;
    string.set("rep", bounded_rep)?;

    // `table.move`: one instruction of the budget per element, paid before it moves.
    let table: Table = globals.get("table")?;
    let move_: Function = table.get("move")?;
    let w = watch.clone();
    let bounded_move = lua.create_function(move |_, args: MultiValue| {
        let int = |i: usize| match args.get(i) {
            Some(LuaValue::Integer(n)) => Some(*n),
            Some(LuaValue::Number(f)) if f.fract() == 0.0 => Some(*f as i64),
            _ => None,
        };
        if let (Some(f), Some(e)) = (int(1), int(2)) {
            let count = i128::from(e) - i128::from(f) + 1;
            if count > 0 {
                w.tick(i64::try_from(count).unwrap_or(i64::MAX))?;
            }
        }
        move_.call::<MultiValue>(args)
    })?;
    table.set("move", bounded_move)?;

    // The pattern functions: refused when the worst case of the pattern on the subject is
    // beyond the instructions left; the subject's length is paid for.
    for (name, pattern_at, anchors) in [("find", 1, true), ("match", 1, true), ("gmatch", 1, false), ("gsub", 1, true)]
    {
        let original: Function = string.get(name)?;
        let w = watch.clone();
        let bounded = lua.create_function(move |_, args: MultiValue| {
            let plain =
                name == "find" && args.get(3).is_some_and(|p| !matches!(p, LuaValue::Nil | LuaValue::Boolean(false)));
            if let (Some(LuaValue::String(subject)), Some(LuaValue::String(pattern)), false) =
                (args.front(), args.get(pattern_at), plain)
            {
                let len = subject.as_bytes().len();
                let cost = pattern_cost(&pattern.as_bytes(), len, anchors);
                let left = w.budget.get().max(0) as f64 * PATTERN_STEPS_PER_INSTRUCTION;
                if cost > left {
                    return Err(mlua::Error::runtime(format!(
                        "string.{name}: the pattern `{}` could take about {cost:.0e} steps on a subject of {len} \
                         bytes (it backtracks), more than the instruction budget left allows; match a shorter \
                         subject or use fewer `*`, `+`, `-` in the pattern",
                        String::from_utf8_lossy(&pattern.as_bytes())
                    )));
                }
                w.tick((len / 16) as i64)?;
            }
            original.call::<MultiValue>(args)
        })?;
        string.set(name, bounded)?;
    }
    Ok(())
}

/// The worst-case steps of Lua's backtracking matcher for `pattern` on a subject of `len`
/// bytes: each `*`, `+` or `-` that something follows can try every length (a factor `len + 1`
/// each), each `?` two ways, and an unanchored search every start (`anchors`: the function
/// honours a leading `^`). A quantifier at the pattern's end tries one length and succeeds.
pub(crate) fn pattern_cost(pattern: &[u8], len: usize, anchors: bool) -> f64 {
    let mut i = 0;
    let anchored = anchors && pattern.first() == Some(&b'^');
    if anchored {
        i = 1;
    }
    // Per item: its quantifier, if any.
    let mut items: Vec<Option<u8>> = Vec::new();
    while i < pattern.len() {
        match pattern[i] {
            b'(' | b')' => {
                i += 1;
                continue;
            }
            b'$' if i + 1 == pattern.len() => break,
            b'%' => match pattern.get(i + 1) {
                Some(b'b') => {
                    i += 4;
                    items.push(None);
                    continue;
                }
                Some(b'f') => {
                    i = skip_set(pattern, i + 2);
                    continue;
                }
                _ => i += 2,
            },
            b'[' => i = skip_set(pattern, i),
            _ => i += 1,
        }
        match pattern.get(i) {
            Some(&q @ (b'*' | b'+' | b'-' | b'?')) => {
                items.push(Some(q));
                i += 1;
            }
            _ => items.push(None),
        }
    }
    let last = items.len().saturating_sub(1);
    let mut cost = if anchored { 1.0 } else { len as f64 + 1.0 };
    for (k, item) in items.iter().enumerate() {
        match item {
            Some(b'?') => cost *= 2.0,
            Some(_) if k < last => cost *= len as f64 + 1.0,
            _ => {}
        }
    }
    cost
}

/// The index just past the set `[…]` that starts at `start` (or past the end).
fn skip_set(pattern: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    if pattern.get(i) == Some(&b'^') {
        i += 1;
    }
    // A `]` first is a member, not the end.
    if pattern.get(i) == Some(&b']') {
        i += 1;
    }
    while i < pattern.len() {
        match pattern[i] {
            b'%' => i += 2,
            b']' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

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
/// The conversion counts what it builds against `memory` bytes (a table referenced twice is
/// counted twice, as it is copied twice).
fn from_result(value: LuaValue, memory: usize) -> Result<Option<Map<String, Value>>, String> {
    let mut budget = memory;
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
                let value = to_json(&value, 0, &mut budget).map_err(|e| format!("key `{key}`: {e}"))?;
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

/// About what one JSON value costs besides its text, for the conversion's budget.
const JSON_VALUE_COST: usize = 32;

/// Lua to JSON: a table whose keys are exactly 1..n is a list, any other table an object (an
/// empty table is an empty object). Each value built is paid from `budget` (bytes).
fn to_json(value: &LuaValue, depth: usize, budget: &mut usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("the value nests deeper than {MAX_DEPTH} tables (does a table contain itself?)"));
    }
    let text = match value {
        LuaValue::String(s) => s.as_bytes().len(),
        _ => 0,
    };
    *budget = budget.checked_sub(JSON_VALUE_COST + text).ok_or_else(|| {
        "the value is larger than the Lua memory limit once converted (a table or string used many times \
         counts each time; Engine::lua_memory_limit)"
            .to_owned()
    })?;
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
                        items[*i as usize - 1] = to_json(item, depth + 1, budget)?;
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
                    *budget = budget.checked_sub(key.len()).ok_or("the value is larger than the Lua memory limit")?;
                    map.insert(key, to_json(item, depth + 1, budget)?);
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
        Chunks::new(Arc::new(vars), Limits { memory: 16 << 20, instructions: 1_000_000, time: Duration::from_secs(10) })
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
        let out = c.run(id, &state(json!({"n": 1})), None).unwrap().unwrap();
        assert_eq!(Value::Object(out), json!({"n": 11, "l": [1, 2], "o": {"a": true}}));
        let none = c.add("a.yaml", 1, "return {}").unwrap();
        assert_eq!(c.run(none, &state(json!({})), None).unwrap(), None);
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
            let err = c.run(id, &state(json!({})), None).unwrap_err();
            assert!(err.contains("nil"), "{code}: {err}");
        }
        let id = c.add("a.yaml", 1, "variables.x = 1").unwrap();
        assert!(c.run(id, &state(json!({})), None).unwrap_err().contains("read-only"));
        let id = c.add("a.yaml", 1, "string.upper = nil").unwrap();
        assert!(c.run(id, &state(json!({})), None).unwrap_err().contains("read-only"));
        // No way around the proxies to the tables other blocks share.
        for escape in [
            "rawset(string, 'upper', nil)",
            "getmetatable('').__index.upper = nil",
            "getmetatable(_ENV).__index.string = {}",
            "setmetatable(string, {})",
        ] {
            let id = c.add("a.yaml", 1, escape).unwrap();
            assert!(c.run(id, &state(json!({})), None).is_err(), "{escape}");
        }
        let upper = c.add("a.yaml", 1, "return { u = string.upper('x'), m = ('y'):upper() }").unwrap();
        assert_eq!(Value::Object(c.run(upper, &state(json!({})), None).unwrap().unwrap()), json!({"u": "X", "m": "Y"}));
        // Globals do not outlive a call.
        let set = c.add("a.yaml", 1, "leak = 1 return {}").unwrap();
        let get = c.add("a.yaml", 1, "return { seen = leak }").unwrap();
        c.run(set, &state(json!({})), None).unwrap();
        assert_eq!(c.run(get, &state(json!({})), None).unwrap(), None);
    }

    #[test]
    fn limits_fail_the_block_with_a_message_that_says_which() {
        let mut c = chunks();
        let spin = c.add("a.yaml", 1, "while true do end").unwrap();
        assert!(c.run(spin, &state(json!({})), None).unwrap_err().contains("instruction limit of 1000000"));
        let hog =
            c.add("a.yaml", 1, "local t = {} for i = 1, 10000000 do t[i] = string.rep('x', 100) .. i end").unwrap();
        let err = c.run(hog, &state(json!({})), None).unwrap_err();
        assert!(err.contains("out of memory") || err.contains("instruction limit"), "{err}");
        // The VM still works afterwards.
        let ok = c.add("a.yaml", 1, "return { ok = true }").unwrap();
        assert!(c.run(ok, &state(json!({})), None).unwrap().is_some());
    }

    #[test]
    fn syntax_and_runtime_errors_carry_file_lines() {
        let mut c = chunks();
        let (line, column, message) = c.add("agent.yaml", 7, "local x = 1\nreturn {x = }").unwrap_err();
        assert_eq!((line, column), (8, 13), "{message}");
        let id = c.add("agent.yaml", 3, "local t = nil\nreturn t.x").unwrap();
        let err = c.run(id, &state(json!({})), None).unwrap_err();
        assert!(err.contains("agent.yaml:4:"), "{err}");
        let bad = c.add("agent.yaml", 1, "return 5").unwrap();
        assert!(c.run(bad, &state(json!({})), None).unwrap_err().contains("must return a table"));
    }

    #[test]
    fn a_syntax_error_is_placed_at_the_token_lua_names_not_at_an_earlier_one_like_it() {
        let mut c = chunks();
        let at = |c: &mut Chunks, code: &str| {
            let (line, column, message) = c.add("a.yaml", 1, code).unwrap_err();
            (line, column, message)
        };
        // The second `=` is the bad one; the first is fine.
        let (line, column, message) = at(&mut c, "local x = = 1");
        assert_eq!((line, column), (1, 11), "{message}");
        assert!(message.contains("near '='"), "{message}");
        // An earlier `}` on the line closes a table; the last one is unexpected.
        assert_eq!(at(&mut c, "local t = {a = {}, b = }").1, 24);
        // A name that is also part of an earlier name.
        let (line, column, message) = at(&mut c, "local a = 1\nreturn max x");
        assert_eq!((line, column), (2, 12), "{message}");
        // Columns count characters, not bytes.
        let (line, column, message) = at(&mut c, "local s = \"été\" = 1");
        assert_eq!((line, column), (1, 17), "{message}");
        // The end of the block: just after the last line's text.
        let (line, column, message) = at(&mut c, "if true then\n  return {}");
        assert!(message.contains("<eof>"), "{message}");
        assert_eq!((line, column), (2, 12), "{message}");
        // An unfinished string: where it starts.
        let (line, column, message) = at(&mut c, "local s = 1\nlocal t = \"abc\nreturn {}");
        assert_eq!((line, column), (2, 11), "{message}");
    }

    #[test]
    fn errors_in_a_file_with_a_long_path_carry_its_whole_name_and_lines() {
        // Lua shows at most 59 bytes of a chunk's name: an absolute path is often longer.
        let file = "/home/someone/projects/agents-of-the-team/very/deep/folder/of/agents/review.yaml";
        let mut c = chunks();
        let (line, column, message) = c.add(file, 7, "local x = 1\nreturn {x = }").unwrap_err();
        assert_eq!((line, column), (8, 13), "{message}");
        assert!(!message.contains("/home/"), "the message repeats a cut path: {message}");
        let id = c.add(file, 3, "local t = nil\nreturn t.x").unwrap();
        let err = c.run(id, &state(json!({})), None).unwrap_err();
        assert!(err.contains(&format!("{file}:4:")), "{err}");
        let first = c.add(file, 1, "local t = nil\nreturn t.x").unwrap();
        let err = c.run(first, &state(json!({})), None).unwrap_err();
        assert!(err.contains(&format!("{file}:2:")), "{err}");
    }

    #[test]
    fn a_path_cut_inside_a_character_still_finds_its_lines() {
        // Lua cuts the name at byte 59, here inside `é`.
        let file = format!("{}é/agent.yaml", "a".repeat(58));
        let mut c = chunks();
        let (line, column, message) = c.add(&file, 7, "local x = 1\nreturn {x = }").unwrap_err();
        assert_eq!((line, column), (8, 13), "{message}");
        assert!(!message.contains('\u{FFFD}'), "{message}");
        let id = c.add(&file, 3, "local t = nil\nreturn t.x").unwrap();
        let err = c.run(id, &state(json!({})), None).unwrap_err();
        assert!(err.contains(&format!("{file}:4:")), "{err}");
    }

    /// How long a block stopped by a limit may take before the test calls it a runaway: what
    /// these blocks would do without their limits takes years, so the bound is generous for a
    /// debug build on a machine running other builds (speed is the benchmarks' business).
    const RUNAWAY: Duration = Duration::from_secs(30);

    fn quick(c: &mut Chunks, code: &str) -> (Result<Option<Map<String, Value>>, String>, std::time::Duration) {
        let id = c.add("a.yaml", 1, code).unwrap();
        let began = Instant::now();
        let result = c.run(id, &state(json!({})), None);
        (result, began.elapsed())
    }

    #[test]
    fn a_limit_cannot_be_caught_and_the_vm_works_afterwards() {
        let mut c = chunks();
        for code in [
            "while true do pcall(function() while true do end end) end",
            "while true do xpcall(function() while true do end end, function(e) return e end) end",
            "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
            "while true do pcall(tostring, setmetatable({}, { __tostring = function() while true do end end })) end",
            "while true do pcall(function() setmetatable({}, { __gc = function() while true do end end }) end) end",
            "local ok = pcall(function() while true do end end) return { caught = ok }",
        ] {
            eprintln!("{code}");
            let (result, took) = quick(&mut c, code);
            let err = result.unwrap_err();
            assert!(err.contains("instruction limit of 1000000"), "{code}: {err}");
            assert!(took < RUNAWAY, "{code}: {took:?}");
        }
        let (result, _) =
            quick(&mut c, "while true do pcall(function() local t = {} for i = 1, 1e9 do t[i] = {} end end) end");
        assert!(result.unwrap_err().contains("out of memory"));
        let (ok, _) = quick(&mut c, "return { ok = pcall(error, 'x') == false }");
        assert_eq!(Value::Object(ok.unwrap().unwrap()), json!({ "ok": true }));
    }

    #[test]
    fn a_wall_clock_deadline_stops_a_block_with_instructions_left() {
        let mut c = Chunks::new(
            Arc::new(Map::new()),
            Limits { memory: 16 << 20, instructions: u64::MAX, time: Duration::from_millis(200) },
        );
        let (result, took) = quick(&mut c, "while true do pcall(function() while true do end end) end");
        assert!(result.unwrap_err().contains("time limit of 200ms"));
        assert!(took < Duration::from_secs(10), "{took:?}");
        let cancel = Arc::new(AtomicBool::new(true));
        let id = c.add("a.yaml", 1, "while true do end").unwrap();
        let err = c.run(id, &state(json!({})), Some(&cancel)).unwrap_err();
        assert!(err.contains("cancelled"), "{err}");
    }

    #[test]
    fn library_functions_that_loop_or_allocate_keep_to_the_limits() {
        let mut c = chunks();
        let (ok, took) = quick(&mut c, "return { n = #string.rep('', math.maxinteger) + #('x'):rep(3, ',') }");
        assert_eq!(Value::Object(ok.unwrap().unwrap()), json!({ "n": 5 }));
        assert!(took < RUNAWAY, "{took:?}");
        for (code, says) in [
            ("return { s = string.rep('x', math.maxinteger) }", "over the Lua memory limit"),
            ("return { s = ('x'):rep(1 << 40, 'yy') }", "over the Lua memory limit"),
            ("table.move({}, 1, math.maxinteger, 2)", "instruction limit"),
            ("return { r = string.rep('a', 40):find(string.rep('.-', 12) .. 'b') }", "backtracks"),
            ("return { r = (string.rep('a', 40)):match(string.rep('(.-)', 12) .. 'b') }", "backtracks"),
            ("for w in string.rep('a', 5000):gmatch('a*a*a*b') do end", "backtracks"),
            ("return { r = string.rep('a ', 50000):gsub('%s*(.-)%s*x', '') }", "backtracks"),
        ] {
            let (result, took) = quick(&mut c, code);
            let err = result.unwrap_err();
            assert!(err.contains(says), "{code}: {err}");
            assert!(took < RUNAWAY, "{code}: {took:?}");
        }
        // Ordinary patterns on ordinary text run.
        let text = "  the quick brown fox  ".repeat(50);
        let code = format!(
            "local s = '{text}' return {{ t = #(s:match('^%s*(.-)%s*$')), n = select(2, s:gsub('%s+', ' ')), \
             w = s:find('brown', 1, true) > 0, k = s:match('(%w+) fox') }}"
        );
        let (ok, _) = quick(&mut c, &code);
        let ok = Value::Object(ok.unwrap().unwrap());
        assert_eq!(ok["k"], "brown", "{ok}");
    }

    #[test]
    fn a_returned_value_is_converted_within_the_memory_limit() {
        let mut c = chunks();
        for code in [
            "local t = {} for i = 1, 60 do t = { t, t } end return { t = t }",
            "local s = string.rep('x', 8 << 20 >> 2) local l = {} for i = 1, 2000 do l[i] = s end return { l = l }",
        ] {
            let (result, took) = quick(&mut c, code);
            let err = result.unwrap_err();
            assert!(err.contains("larger than the Lua memory limit"), "{code}: {err}");
            assert!(took < RUNAWAY, "{code}: {took:?}");
        }
    }

    #[test]
    fn precompiled_chunks_and_code_that_runs_where_no_limit_reaches_are_refused() {
        let mut c = chunks();
        let (_, _, message) = c.add("a.yaml", 1, "\x1bLua\x54\x00return {}").unwrap_err();
        assert!(message.contains("binary") || message.contains("text"), "{message}");
        let (line, column, message) =
            c.add("a.yaml", 4, "local a = 1\nlocal x < close > = setmetatable({}, {})").unwrap_err();
        assert!(message.contains("`<close>`") && (line, column) == (5, 9), "{line}:{column}: {message}");
        let (result, _) = quick(&mut c, "setmetatable({}, { __gc = function() end })");
        assert!(result.unwrap_err().contains("`__gc`"));
        let (ok, _) = quick(&mut c, "return { n = getmetatable(setmetatable({}, { __index = {} })) ~= nil }");
        assert_eq!(Value::Object(ok.unwrap().unwrap()), json!({ "n": true }));
    }
}
