//! `run:` blocks in Python (feature `python`): CPython embedded through PyO3, with The Edge
//! Agent's Python semantics.
//!
//! A block is Python when its node says `language: python`, or when it has no `language:` and
//! is not Lua but compiles as Python (tea stays Lua-first, as The Edge Agent's Rust engine).
//! Python cannot be sandboxed, so a file with a Python block loads only when the engine trusts
//! code ([`Engine::trust_code`](crate::Engine::trust_code)); without the feature such a file
//! does not load and the error says to build with `--features python`.
//!
//! As The Edge Agent runs a block: a block whose text contains `return` is the body of a
//! function (`def __run_func__(): …`) whose returned dict is the update (anything else is
//! written under `result`); a block without one runs as it is, and its top-level names that do
//! not start with `_` are the update (modules, functions and classes it defines are left out).
//! In scope: `state` (a dict copy of the state), `variables` (the file's `variables:`),
//! `config` (an empty dict), `node` (the node's name), `parallel_results` (at a fan-in; each
//! entry a dict whose keys also read as attributes, `r.state`, as The Edge Agent's results), and
//! the modules `json` and — when the text names them — `datetime` and `requests`. `secrets`
//! are not: in tea no code that writes the state sees a secret. `${name}` is replaced by
//! variable `name` once, at load (The Edge Agent's GitLab-style references); `{{ }}` in a
//! block is Python, not a template. `print` writes to standard error, as Lua's.
//!
//! The block is compiled at load (a syntax error is a load problem at its line). Each call
//! holds the GIL for the whole block (PyO3's `Python::attach`; the interpreter starts on first
//! use): Python blocks of parallel branches run one at a time, and nothing else in tea waits
//! for the GIL, so branches cannot deadlock on it. The update is converted to JSON values and
//! goes through the declared types and reducers as a Lua block's returned table does.
//!
//! Python `run:` blocks: the loader asks it about a block written `language: python` or one with no
//! `language:` that is not Lua (`Loader::block`, `Loader::guess`), it compiles it once into a code
//! object (The Edge Agent's wrapping in `def __run_func__()` when the text says `return`; blank
//! lines first so lines are the file's) and refuses it unless the engine trusts code; `Block::run`
//! attaches to the interpreter (the GIL, per call), copies the block's prepared globals, converts
//! the state to a dict and the update back to JSON, which `run/graph.rs` applies as a Lua block's
//! table (`Exec::Python`). `code_execute` runs `code.execute`'s code (in trusted files:
//! `actions::Action::CodeExecute`) through a small Python runner that captures its output and stops
//! it at its timeout.

use serde_json::{Map, Value};
use std::sync::Arc;

/// Lua keywords and operators that are not Python: a block with one of them is taken for Lua
/// when it compiles as neither (The Edge Agent's own heuristic), so the Lua error is shown.
fn looks_like_lua(source: &str) -> bool {
    let trimmed = source.trim_start();
    if trimmed.starts_with("-- lua") || trimmed.starts_with("--lua") || source.contains("..") {
        return true;
    }
    let words = source.split(|c: char| !(c.is_alphanumeric() || c == '_'));
    words.into_iter().any(|w| matches!(w, "local" | "then" | "end" | "elseif"))
}

/// What a load needs to know to take a block for Python: the file, its variables, and whether
/// the engine trusts code.
pub(crate) struct Loader {
    file: String,
    #[cfg_attr(not(feature = "python"), allow(dead_code))]
    variables: Arc<Map<String, Value>>,
    trusted: bool,
}

/// A problem with a block: the file's line, and the message.
pub(crate) type Problem = (usize, String);

impl Loader {
    pub(crate) fn new(file: &str, variables: Arc<Map<String, Value>>, trusted: bool) -> Self {
        Loader { file: file.to_owned(), variables, trusted }
    }

    /// The block of node `node` written `language: python`, starting on line `first_line`.
    pub(crate) fn block(&self, node: &str, first_line: usize, source: &str) -> Result<Block, Vec<Problem>> {
        let compiled = imp::compile(self, node, first_line, source);
        self.trust(node, first_line, compiled)
    }

    /// A block of node `node` with no `language:` that is not Lua (`lua_error`, at
    /// `lua_line`): Python if it compiles as Python; else the error of the language it looks
    /// like (Lua when it has Lua's keywords, as The Edge Agent tells them apart).
    pub(crate) fn guess(
        &self,
        node: &str,
        first_line: usize,
        source: &str,
        lua_line: usize,
        lua_error: String,
    ) -> Result<Block, Vec<Problem>> {
        match imp::compile(self, node, first_line, source) {
            Ok(block) => self.trust(node, first_line, Ok(block)),
            Err(_) if looks_like_lua(source) => Err(vec![(lua_line, lua_error)]),
            Err(python) if cfg!(feature = "python") => Err(python
                .into_iter()
                .map(|(line, message)| (line, format!("{message} (nor is it Lua: {lua_error})")))
                .collect()),
            Err(_) => Err(vec![(
                lua_line,
                format!(
                    "{lua_error} (if the block is Python, The Edge Agent's default, tea runs it when built with the \
                     cargo feature `python`: `--features python`)"
                ),
            )]),
        }
    }

    fn trust(&self, node: &str, line: usize, compiled: Result<Block, Vec<Problem>>) -> Result<Block, Vec<Problem>> {
        match compiled {
            Ok(block) if self.trusted => Ok(block),
            Ok(_) => Err(vec![(
                line,
                format!(
                    "node `{node}` is Python, which tea cannot sandbox: {} runs Python only when you trust it \
                     (`Engine::trust_code(true)`, `tea run --trust`)",
                    self.file
                ),
            )]),
            Err(problems) => Err(problems),
        }
    }
}

pub(crate) use imp::{code_execute, Block};

/// `code.execute`'s arguments (The Edge Agent's): `code` is required.
pub(crate) const CODE_EXECUTE_KEYS: &[&str] = &["code", "timeout", "max_output_bytes", "language"];

/// `code.execute`'s result when it does not run the code: The Edge Agent's, with `why`.
pub(crate) fn code_not_run(why: &str) -> Value {
    serde_json::json!({
        "success": false,
        "stdout": "",
        "stderr": "",
        "return_value": null,
        "error": why,
        "execution_time_ms": 0.0,
    })
}

/// `code.execute`'s `code`, `timeout` (seconds, 30) and `max_output_bytes` (65536), checked.
fn code_args(args: &Value) -> Result<(String, f64, usize), String> {
    let code = match args.get("code") {
        Some(Value::String(code)) => code.clone(),
        None | Some(Value::Null) => return Err("code.execute needs `code`, the Python to run".to_owned()),
        Some(other) => return Err(format!("code.execute: `code` must be a string, not {other}")),
    };
    match args.get("language") {
        None | Some(Value::Null) => {}
        Some(Value::String(l)) if l == "python" => {}
        Some(other) => return Err(format!("code.execute runs Python (`language: python`), not {other}")),
    }
    let timeout = match args.get("timeout") {
        None | Some(Value::Null) => 30.0,
        Some(t) => t
            .as_f64()
            .filter(|t| *t > 0.0 && *t <= 86_400.0)
            .ok_or_else(|| format!("code.execute: `timeout` must be a number of seconds up to a day, not {t}"))?,
    };
    let max = match args.get("max_output_bytes") {
        None | Some(Value::Null) => 65_536,
        Some(n) => n
            .as_u64()
            .filter(|n| (1..=16 << 20).contains(n))
            .ok_or_else(|| format!("code.execute: `max_output_bytes` must be from 1 to 16 MiB, not {n}"))?
            as usize,
    };
    Ok((code, timeout, max))
}

#[cfg(not(feature = "python"))]
mod imp {
    use super::{Loader, Problem};
    use serde_json::{Map, Value};
    use std::sync::Arc;

    /// A Python block: none without the feature `python`.
    #[derive(Clone, Debug)]
    pub(crate) enum Block {}

    /// `code.execute` without the feature `python`: it says so.
    pub(crate) fn code_execute(args: &Value, _: &Map<String, Value>) -> Result<Value, String> {
        super::code_args(args)?;
        Ok(super::code_not_run(
            "code.execute runs Python, which this build leaves out: it needs tea-yaml's cargo feature `python`",
        ))
    }

    impl Block {
        pub(crate) fn run(&self, _: &Arc<Map<String, Value>>) -> Result<Option<Map<String, Value>>, String> {
            match *self {}
        }

        pub(crate) fn value(&self, _: &Arc<Map<String, Value>>, _: &Map<String, Value>) -> Result<Value, String> {
            match *self {}
        }
    }

    pub(super) fn compile(_: &Loader, node: &str, line: usize, _: &str) -> Result<Block, Vec<Problem>> {
        Err(vec![(
            line,
            format!(
                "node `{node}` is Python: tea runs Python blocks when built with the cargo feature `python` \
                 (`--features python`)"
            ),
        )])
    }
}

#[cfg(feature = "python")]
mod imp {
    use super::{Loader, Problem};
    use pyo3::exceptions::PySyntaxError;
    use pyo3::prelude::*;
    use pyo3::types::code::PyCodeInput;
    use pyo3::types::{PyBool, PyCode, PyCodeMethods, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
    use serde_json::{Map, Number, Value};
    use std::ffi::CString;
    use std::fmt;
    use std::sync::Arc;

    /// How deep a value returned from Python may nest (a list that contains itself would not end).
    const MAX_DEPTH: usize = 64;

    /// `code.execute`'s runner, run as `python3 -I -c CHILD_RUNNER` in a process of its own: it
    /// reads `{code, state, max_bytes}` as JSON on its standard input, runs the code with
    /// `state` among its globals, its `print`s and `sys.stdout`/`sys.stderr` captured (what C
    /// code or child processes write to the descriptors goes nowhere), and writes The Edge
    /// Agent's result as JSON on a copy of its standard output, then exits at once (threads the
    /// code left running do not hold it). The time limit is the parent's: it kills the process.
    const CHILD_RUNNER: &str = r#"
import contextlib, io, json, os, sys, time
def main():
    reply = os.dup(1)
    request = json.loads(sys.stdin.buffer.read())
    nowhere = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(nowhere, fd)
    code, state, max_bytes = request["code"], request["state"], request["max_bytes"]
    out, err = io.StringIO(), io.StringIO()
    scope = {"__builtins__": __builtins__, "state": state, "__name__": "__code_execute__"}
    started = time.perf_counter()
    success, error = True, None
    try:
        compiled = compile(code, "<code.execute>", "exec")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            exec(compiled, scope)
    except SyntaxError as e:
        success, error = False, "SyntaxError: %s at line %s" % (e.msg, e.lineno)
    except BaseException as e:
        try:
            success, error = False, str(e) or type(e).__name__
        except BaseException:
            success, error = False, type(e).__name__
    elapsed = (time.perf_counter() - started) * 1000.0
    def cut(text):
        data = text.encode("utf-8", "replace")
        if len(data) <= max_bytes:
            return text
        return data[:max_bytes].decode("utf-8", "ignore") + "\n... [output truncated]"
    value = scope.get("result")
    try:
        value = json.loads(json.dumps(value, allow_nan=False))
    except BaseException:
        # A `result` that is no JSON value is shown as Python prints it.
        try:
            value = repr(value)
        except BaseException:
            value = "<%s>" % type(value).__name__
    text = json.dumps({
        "success": success,
        "stdout": cut(out.getvalue()) if success else "",
        "stderr": cut(err.getvalue()),
        "return_value": value,
        "error": error,
        "execution_time_ms": elapsed,
    }).encode("utf-8")
    while text:
        text = text[os.write(reply, text):]
    os._exit(0)
main()
"#;

    /// The Python that runs `code.execute`: the embedded interpreter's own program
    /// (`{base_exec_prefix}/bin/python3.X`) when it is there, else `python3` on the `PATH`.
    fn interpreter() -> &'static std::ffi::OsStr {
        static FOUND: std::sync::OnceLock<std::ffi::OsString> = std::sync::OnceLock::new();
        FOUND.get_or_init(|| {
            let own = Python::attach(|py| -> PyResult<Option<std::path::PathBuf>> {
                let sys = py.import("sys")?;
                let prefix: String = sys.getattr("base_exec_prefix")?.extract()?;
                let (major, minor): (u32, u32) = (
                    sys.getattr("version_info")?.getattr("major")?.extract()?,
                    sys.getattr("version_info")?.getattr("minor")?.extract()?,
                );
                let program = std::path::Path::new(&prefix).join("bin").join(format!("python{major}.{minor}"));
                Ok(program.is_file().then_some(program))
            });
            match own {
                Ok(Some(program)) => program.into_os_string(),
                _ => "python3".into(),
            }
        })
    }

    /// `code.execute` (The Edge Agent's): `args.code` run by Python in a child process (in a
    /// file the engine trusts; the caller checks), which is killed — with every process it
    /// started — when `timeout` is up, whatever the code does (catch `BaseException`, sleep,
    /// block in C): the call returns within the timeout and a few milliseconds.
    pub(crate) fn code_execute(args: &Value, state: &Map<String, Value>) -> Result<Value, String> {
        use std::io::{Read, Write};
        use std::process::{Command, Stdio};
        use std::time::{Duration, Instant};
        let (code, timeout, max) = super::code_args(args)?;
        let request = serde_json::json!({ "code": code, "state": state, "max_bytes": max }).to_string();
        let program = interpreter();
        let mut command = Command::new(program);
        command.args(["-I", "-c", CHILD_RUNNER]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // A process group of its own, so that the timeout kills whatever the code started too.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let started = Instant::now();
        let mut child = command
            .spawn()
            .map_err(|e| format!("code.execute: cannot start Python (`{}`): {e}", program.to_string_lossy()))?;
        let group = Group(child.id());
        let (mut stdin, mut stdout, mut stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // Written and read by threads of their own: none of the pipes can stall the timeout.
        std::thread::spawn(move || {
            if let Some(stdin) = stdin.as_mut() {
                // A child that died first is reported by its exit.
                let _ = stdin.write_all(request.as_bytes());
            }
        });
        let (sent, reply) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(stdout) = stdout.as_mut() {
                let _ = stdout.read_to_end(&mut bytes);
            }
            let _ = sent.send(bytes);
        });
        let (sent_err, complaint) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(stderr) = stderr.as_mut() {
                let _ = stderr.take(64 << 10).read_to_end(&mut bytes);
            }
            let _ = sent_err.send(bytes);
        });
        let limit = Duration::from_secs_f64(timeout);
        let answered = reply.recv_timeout(limit);
        // The code's process is over once it answered (it exits at once) or its time is up:
        // its group goes, and nothing it started outlives the call.
        group.kill();
        let _ = child.kill();
        let status = child.wait();
        let elapsed = started.elapsed().as_secs_f64() * 1000.0;
        let Ok(bytes) = answered else {
            return Ok(serde_json::json!({
                "success": false,
                "stdout": "",
                "stderr": "",
                "return_value": null,
                "error": format!("Execution timed out after {timeout} seconds"),
                "execution_time_ms": elapsed,
            }));
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(result @ Value::Object(_)) => Ok(result),
            _ => {
                let said = complaint.recv_timeout(Duration::from_millis(100)).unwrap_or_default();
                let said = String::from_utf8_lossy(&said);
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                let why = match said.trim() {
                    "" => format!("Python ended ({status}) before it gave a result"),
                    said => format!("Python ended ({status}) before it gave a result: {said}"),
                };
                Ok(serde_json::json!({
                    "success": false,
                    "stdout": "",
                    "stderr": "",
                    "return_value": null,
                    "error": why,
                    "execution_time_ms": elapsed,
                }))
            }
        }
    }

    /// The process group of a `code.execute` child (its id is the child's).
    struct Group(u32);

    impl Group {
        /// Kills every process of the group (one already gone is no error).
        fn kill(&self) {
            #[cfg(unix)]
            if let Ok(id) = libc::pid_t::try_from(self.0) {
                // SAFETY: `kill` takes plain integers; a negative id names the process group
                // the child leads (`process_group(0)`), so no other process is signalled.
                unsafe {
                    libc::kill(-id, libc::SIGKILL);
                }
            }
        }
    }

    /// A compiled Python block.
    #[derive(Clone)]
    pub(crate) struct Block(Arc<Compiled>);

    struct Compiled {
        code: Py<PyCode>,
        /// What every call's globals start from (copied per call): `__builtins__`, `print`,
        /// `node`, and the modules `json` and (when named) `datetime`.
        base: Py<PyDict>,
        /// The block is the body of `__run_func__` (its text contains `return`).
        wrapped: bool,
        node: String,
        /// The file name the code object carries (Python's tracebacks name it).
        file: String,
        variables: Arc<Map<String, Value>>,
        /// The text names `requests` (imported when the block runs, as The Edge Agent does).
        uses_requests: bool,
    }

    impl fmt::Debug for Block {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Python({})", self.0.node)
        }
    }

    /// `${name}` replaced by `str(variables[name])` where `name` is a variable (The Edge Agent's
    /// GitLab-style references); any other `${…}` stays.
    fn substitute(py: Python<'_>, source: &str, variables: &Map<String, Value>) -> PyResult<String> {
        let mut out = String::with_capacity(source.len());
        let mut rest = source;
        while let Some(at) = rest.find("${") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 2..];
            match after.find('}').map(|end| (&after[..end], end)) {
                Some((name, end)) if !name.is_empty() && variables.contains_key(name) => {
                    out.push_str(&to_py(py, &variables[name])?.str()?.to_string_lossy());
                    rest = &after[end + 1..];
                }
                _ => {
                    out.push_str("${");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    pub(super) fn compile(loader: &Loader, node: &str, first_line: usize, source: &str) -> Result<Block, Vec<Problem>> {
        let failed = |message: String| vec![(first_line, format!("node `{node}`: {message}"))];
        Python::attach(|py| {
            let source = substitute(py, source, &loader.variables).map_err(|e| failed(e.to_string()))?;
            // As The Edge Agent: a block that says `return` anywhere is a function's body.
            let wrapped = source.contains("return");
            // Blank lines first, so that Python's line numbers are the file's.
            let text = if wrapped {
                let body: Vec<String> = source.split('\n').map(|line| format!("    {line}")).collect();
                format!(
                    "{}def __run_func__():\n{}\n__result__ = __run_func__()\n",
                    "\n".repeat(first_line.saturating_sub(2)),
                    body.join("\n")
                )
            } else {
                format!("{}{source}", "\n".repeat(first_line.saturating_sub(1)))
            };
            let text = CString::new(text).map_err(|_| failed("the Python block contains a NUL byte".to_owned()))?;
            let file = CString::new(loader.file.clone()).unwrap_or_else(|_| c"<agent>".to_owned());
            // Compiled quietly: a `SyntaxWarning` (as for Prolog's `X is 1`, which parses as
            // Python) is no load problem, and a load prints nothing.
            let quiet = py
                .import("warnings")
                .and_then(|w| {
                    let guard = w.call_method0("catch_warnings")?;
                    guard.call_method0("__enter__")?;
                    w.call_method1("simplefilter", ("ignore",))?;
                    Ok(guard)
                })
                .ok();
            let compiled = PyCode::compile(py, &text, &file, PyCodeInput::File);
            if let Some(guard) = quiet {
                let _ = guard.call_method1("__exit__", (py.None(), py.None(), py.None()));
            }
            let code = compiled.map_err(|error| {
                if error.is_instance_of::<PySyntaxError>(py) {
                    let value = error.value(py);
                    let line = value.getattr("lineno").ok().and_then(|l| l.extract::<usize>().ok());
                    let message = value
                        .getattr("msg")
                        .ok()
                        .and_then(|m| m.extract::<String>().ok())
                        .unwrap_or_else(|| error.to_string());
                    let kind = error.get_type(py).name().map(|n| n.to_string()).unwrap_or_default();
                    vec![(line.unwrap_or(first_line).max(1), format!("node `{node}`: Python {kind}: {message}"))]
                } else {
                    failed(format!("Python could not compile the block: {error}"))
                }
            })?;
            let base = base_globals(py, node, source.contains("datetime")).map_err(|e| failed(e.to_string()))?;
            Ok(Block(Arc::new(Compiled {
                code: code.unbind(),
                base: base.unbind(),
                wrapped,
                node: node.to_owned(),
                file: loader.file.clone(),
                variables: loader.variables.clone(),
                uses_requests: source.contains("requests"),
            })))
        })
    }

    impl Block {
        /// Runs the block on `state`: `Ok(None)` for no writes, `Ok(Some(keys))` for the keys
        /// to write (JSON values, checked and reduced by the caller as Lua's are).
        pub(crate) fn run(&self, state: &Arc<Map<String, Value>>) -> Result<Option<Map<String, Value>>, String> {
            let this = &*self.0;
            Python::attach(|py| {
                let outcome = this.call(py, state);
                outcome.map_err(|error| this.explain(py, &error))?
            })
        }

        /// Runs the block as a step of a composed action (The Edge Agent's `exec` of a
        /// generator, corrector or evaluator): `extra` are more globals (`output`,
        /// `reflection_output`, …; `re` is imported too), and what it gives is its value — what
        /// it returns, else what it assigned to `result`, else null.
        pub(crate) fn value(
            &self,
            state: &Arc<Map<String, Value>>,
            extra: &Map<String, Value>,
        ) -> Result<Value, String> {
            let this = &*self.0;
            Python::attach(|py| {
                let outcome = (|| {
                    let (_, locals) = this.execute(py, state, Some(extra))?;
                    let name = if this.wrapped { "__result__" } else { "result" };
                    Ok(match locals.get_item(name)? {
                        Some(value) => to_json(&value, 0).map_err(|e| format!("the block gave {e}")),
                        None => Ok(Value::Null),
                    })
                })();
                outcome.map_err(|error: PyErr| this.explain(py, &error))?
            })
        }
    }

    impl Compiled {
        fn call(
            &self,
            py: Python<'_>,
            state: &Map<String, Value>,
        ) -> PyResult<Result<Option<Map<String, Value>>, String>> {
            let (_, locals) = self.execute(py, state, None)?;
            self.update(py, &locals)
        }

        /// Runs the code object on `state` (with `extra` globals): its globals and locals.
        fn execute<'py>(
            &self,
            py: Python<'py>,
            state: &Map<String, Value>,
            extra: Option<&Map<String, Value>>,
        ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
            let globals = self.base.bind(py).copy()?;
            let dict = map_to_py(py, state)?;
            // `parallel_results`, and a `dynamic_parallel` node's `output:` key holding them.
            for (key, value) in state {
                if key == "parallel_results" || is_results(value) {
                    let results = results_to_py(py, &globals, value)?;
                    dict.set_item(key, &results)?;
                    if key == "parallel_results" {
                        globals.set_item("parallel_results", results)?;
                    }
                }
            }
            globals.set_item("state", dict)?;
            globals.set_item("variables", map_to_py(py, &self.variables)?)?;
            let context = match crate::lang::scope::run_context() {
                Value::Object(context) => context,
                _ => Map::new(),
            };
            globals.set_item("context", map_to_py(py, &context)?)?;
            globals.set_item("config", PyDict::new(py))?;
            if self.uses_requests {
                globals.set_item("requests", py.import("requests")?)?;
            } else {
                globals.set_item("requests", py.None())?;
            }
            if let Some(extra) = extra {
                globals.set_item("re", py.import("re")?)?;
                for (key, value) in extra {
                    globals.set_item(key, to_py(py, value)?)?;
                }
            }
            let locals = PyDict::new(py);
            self.code.bind(py).run(Some(&globals), Some(&locals))?;
            Ok((globals, locals))
        }

        /// What a node's block writes: the dict it returned, else the names it assigned.
        fn update(
            &self,
            py: Python<'_>,
            locals: &Bound<'_, PyDict>,
        ) -> PyResult<Result<Option<Map<String, Value>>, String>> {
            if self.wrapped {
                let result = match locals.get_item("__result__")? {
                    Some(result) => result,
                    None => return Ok(Ok(None)),
                };
                if let Ok(dict) = result.cast::<PyDict>() {
                    return Ok(dict_to_map(dict, "the returned dict").map(|m| Some(m).filter(|m| !m.is_empty())));
                }
                // The Edge Agent writes anything else (None too) under `result`.
                return Ok(to_json(&result, 0)
                    .map(|value| Some(Map::from_iter([("result".to_owned(), value)])))
                    .map_err(|e| format!("the block returned {e}")));
            }
            // No `return`: the names the block assigned are the update.
            let types = py.import("types")?;
            let skipped = PyTuple::new(
                py,
                [
                    types.getattr("ModuleType")?,
                    types.getattr("FunctionType")?,
                    types.getattr("BuiltinFunctionType")?,
                    py.import("builtins")?.getattr("type")?,
                ],
            )?;
            let mut out = Map::new();
            for (key, value) in locals.iter() {
                let Ok(key) = key.cast::<PyString>().map(|k| k.to_string()) else { continue };
                if key.starts_with('_') || value.is_instance(&skipped)? {
                    continue;
                }
                match to_json(&value, 0) {
                    Ok(v) => {
                        out.insert(key, v);
                    }
                    Err(e) => return Ok(Err(format!("the block's name `{key}` holds {e}"))),
                }
            }
            Ok(Ok(Some(out).filter(|m| !m.is_empty())))
        }

        /// A Python exception as a node's error: its type, its message, and the block's line
        /// it came through.
        fn explain(&self, py: Python<'_>, error: &PyErr) -> String {
            let kind = error.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".to_owned());
            let message = error.value(py).str().map(|s| s.to_string()).unwrap_or_default();
            let mut line = None;
            let mut tb = error.traceback(py).map(|t| t.into_any());
            while let Some(frame) = tb {
                let here = frame
                    .getattr("tb_frame")
                    .and_then(|f| f.getattr("f_code"))
                    .and_then(|c| c.getattr("co_filename"))
                    .and_then(|n| n.extract::<String>())
                    .is_ok_and(|n| n == self.file);
                if here {
                    line = frame.getattr("tb_lineno").and_then(|l| l.extract::<usize>()).ok().or(line);
                }
                tb = frame.getattr("tb_next").ok().filter(|n| !n.is_none());
            }
            let what = if message.is_empty() { kind } else { format!("{kind}: {message}") };
            match line {
                Some(line) => format!("Python error at {}:{line}: {what}", self.file),
                None => format!("Python error: {what}"),
            }
        }
    }

    /// The globals every call of a block starts from.
    fn base_globals<'py>(py: Python<'py>, node: &str, datetime: bool) -> PyResult<Bound<'py, PyDict>> {
        let globals = PyDict::new(py);
        let builtins = py.import("builtins")?;
        globals.set_item("__builtins__", &builtins)?;
        globals.set_item("__name__", "__tea__")?;
        // `print` writes to standard error (standard output is the CLI's result), as Lua's.
        let kwargs = PyDict::new(py);
        kwargs.set_item("file", py.import("sys")?.getattr("stderr")?)?;
        let print = py.import("functools")?.getattr("partial")?.call((builtins.getattr("print")?,), Some(&kwargs))?;
        globals.set_item("print", print)?;
        globals.set_item("node", node)?;
        globals.set_item("json", py.import("json")?)?;
        if datetime {
            globals.set_item("datetime", py.import("datetime")?)?;
        }
        // The Edge Agent's fan-in blocks read a result's fields as attributes (`r.state`,
        // `r.success`): each entry of `parallel_results` is a dict that also answers them.
        let scope = PyDict::new(py);
        py.run(
            c"class ParallelResult(dict):\n    __slots__ = ()\n    def __getattr__(self, name):\n        try:\n            return self[name]\n        except KeyError:\n            raise AttributeError(name) from None\n",
            Some(&scope),
            None,
        )?;
        if let Some(class) = scope.get_item("ParallelResult")? {
            globals.set_item(RESULT_CLASS, class)?;
        }
        Ok(globals)
    }

    /// The name, among a block's globals, of the class of `parallel_results`' entries.
    const RESULT_CLASS: &str = "__tea_parallel_result__";

    /// Whether `value` is a list of `dynamic_parallel` results (each an object with `branch`,
    /// `success` and `state`).
    fn is_results(value: &Value) -> bool {
        let Value::Array(items) = value else { return false };
        !items.is_empty()
            && items.iter().all(|item| {
                item.as_object().is_some_and(|o| ["branch", "success", "state"].iter().all(|k| o.contains_key(*k)))
            })
    }

    /// `parallel_results` for a block: its object entries as [`RESULT_CLASS`] dicts.
    fn results_to_py<'py>(
        py: Python<'py>,
        globals: &Bound<'py, PyDict>,
        results: &Value,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (Value::Array(items), Some(class)) = (results, globals.get_item(RESULT_CLASS)?) else {
            return to_py(py, results);
        };
        let list = PyList::empty(py);
        for item in items {
            let value = to_py(py, item)?;
            if item.is_object() {
                list.append(class.call1((value,))?)?;
            } else {
                list.append(value)?;
            }
        }
        Ok(list.into_any())
    }

    fn map_to_py<'py>(py: Python<'py>, map: &Map<String, Value>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (key, value) in map {
            dict.set_item(key, to_py(py, value)?)?;
        }
        Ok(dict)
    }

    /// JSON to Python: null, booleans, integers, floats, strings, lists and dicts.
    pub(super) fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
        Ok(match value {
            Value::Null => py.None().into_bound(py),
            Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.into_pyobject(py)?.into_any(),
                (None, Some(u)) => u.into_pyobject(py)?.into_any(),
                _ => PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any(),
            },
            Value::String(s) => PyString::new(py, s).into_any(),
            Value::Array(items) => {
                let items = items.iter().map(|v| to_py(py, v)).collect::<PyResult<Vec<_>>>()?;
                PyList::new(py, items)?.into_any()
            }
            Value::Object(map) => map_to_py(py, map)?.into_any(),
        })
    }

    fn dict_to_map(dict: &Bound<'_, PyDict>, what: &str) -> Result<Map<String, Value>, String> {
        let mut out = Map::new();
        for (key, value) in dict.iter() {
            let Ok(key) = key.cast::<PyString>().map(|k| k.to_string()) else {
                return Err(format!(
                    "{what} has key {} ({}); the keys to write must be strings",
                    key.repr().map(|r| r.to_string()).unwrap_or_default(),
                    type_name(&key)
                ));
            };
            let value = to_json(&value, 0).map_err(|e| format!("key `{key}` of {what}: {e}"))?;
            out.insert(key, value);
        }
        Ok(out)
    }

    fn type_name(value: &Bound<'_, PyAny>) -> String {
        value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
    }

    /// Python to JSON: None, bool, int (within 64 bits), float (finite), str, list and tuple,
    /// dict with str keys. Anything else is an error naming its type.
    fn to_json(value: &Bound<'_, PyAny>, depth: usize) -> Result<Value, String> {
        if depth > MAX_DEPTH {
            return Err(format!("a value nested deeper than {MAX_DEPTH} lists or dicts (does one contain itself?)"));
        }
        if value.is_none() {
            return Ok(Value::Null);
        }
        if let Ok(b) = value.cast_exact::<PyBool>() {
            return Ok(Value::Bool(b.is_true()));
        }
        if value.is_instance_of::<PyInt>() {
            if let Ok(i) = value.extract::<i64>() {
                return Ok(Value::from(i));
            }
            if let Ok(u) = value.extract::<u64>() {
                return Ok(Value::from(u));
            }
            let text = value.str().map(|s| s.to_string()).unwrap_or_default();
            return Err(format!("the integer {text}, which does not fit in 64 bits (JSON numbers here do)"));
        }
        if let Ok(f) = value.cast::<PyFloat>() {
            let f = f.value();
            return Number::from_f64(f)
                .map(Value::Number)
                .ok_or_else(|| format!("the float {f}, which JSON cannot hold"));
        }
        if let Ok(s) = value.cast::<PyString>() {
            return s.to_str().map(|s| Value::String(s.to_owned())).map_err(|e| e.to_string());
        }
        if let Ok(list) = value.cast::<PyList>() {
            return list.iter().map(|v| to_json(&v, depth + 1)).collect::<Result<_, _>>().map(Value::Array);
        }
        if let Ok(tuple) = value.cast::<PyTuple>() {
            return tuple.iter().map(|v| to_json(&v, depth + 1)).collect::<Result<_, _>>().map(Value::Array);
        }
        if let Ok(dict) = value.cast::<PyDict>() {
            let mut out = Map::new();
            for (key, item) in dict.iter() {
                let Ok(key) = key.cast::<PyString>().map(|k| k.to_string()) else {
                    return Err(format!(
                        "a dict with key {} ({}); JSON keys are strings",
                        key.repr().map(|r| r.to_string()).unwrap_or_default(),
                        type_name(&key)
                    ));
                };
                out.insert(key, to_json(&item, depth + 1)?);
            }
            return Ok(Value::Object(out));
        }
        let repr = value.repr().map(|r| r.to_string()).unwrap_or_default();
        let repr =
            if repr.chars().count() > 60 { format!("{}…", repr.chars().take(60).collect::<String>()) } else { repr };
        Err(format!(
            "a value of Python type `{}` ({repr}), which is not JSON: write None, bool, int, float, str, list or dict",
            type_name(value)
        ))
    }
}
