//! `run:` blocks in Prolog (feature `prolog`): Scryer Prolog, with The Edge Agent's contract.
//!
//! A block is Prolog when its node says `language: prolog`, when its `run:` is `{ type:
//! prolog, code: … }`, or when it names no language, is not Lua, and looks like Prolog as The
//! Edge Agent tells (a `% prolog` first line, `:-`, `state(`, `return(`, `findall(`, CLP(FD)'s
//! `#=`, …) and reads as Prolog.
//!
//! As The Edge Agent runs a block: the state's keys are `state(Key, Value)` facts; the block's
//! clauses are read by Prolog's own reader, one by one: facts and rules are asserted for the
//! run, directives (`:- G`) and queries (anything else, `?- G` too) are called in order;
//! `return(Key, Value)` writes `Key` (the last write of a key wins). A query that fails ends the
//! block and writes nothing, as in The Edge Agent (a validation that does not hold leaves the
//! state as it was); an exception fails the node with the Prolog error and the clause's line.
//! Values: JSON numbers are numbers, strings atoms, `true`/`false`/`null` atoms, arrays lists
//! and objects `json([key=Value, …])` terms (Scryer has no SWI-Prolog dicts; `get_dict/3`,
//! `put_dict/4` and `dict_pairs/3` work on them). Going back, atoms are strings except `true`,
//! `false` and `null`, a list of characters (a double-quoted string) is a string, and any other
//! compound term is written as its text. A value crosses from Prolog to Rust as JSON text (one
//! atom, written by the support in Prolog, read by serde_json), never as a Prolog term, so no
//! value is converted by recursion on the Rust stack.
//!
//! Prolog is sandboxed by an allowlist, so Prolog blocks need no trust (as in The Edge Agent,
//! whose Prolog runs without it): a block calls the pure predicates tea lists (arithmetic,
//! comparison, terms, atoms and strings, lists, `between`, sorting, pairs, assoc, CLP(FD),
//! `dif`, `format` into atoms or strings, tea's `state/2` and `return/2`, the SWI-Prolog helpers
//! below), the meta-predicates tea lists (`call/N` and `maplist/N` for any N, `findall`,
//! `forall`, `foldl`, `include`, `exclude`, `partition`, `bagof`/`setof` with `^`,
//! `aggregate_all`, `catch`, `once`, `ignore`, `\+`, `->`, `;`) whose goal arguments are
//! checked the same way, assert/retract of its own predicates, and the predicates it defines.
//! Anything else — files, streams, flags, operators, module loading, global variables
//! (`bb_put/2`), other modules' predicates (`M:G`), the machine's internals (`'$…'`), the
//! process — is refused: when the file loads if the text names it, else when it is called (a
//! goal or closure known only at run time is checked then). Each query may make
//! [`INFERENCES`] inferences; beyond, the node fails ("ran away"). Builders that make a large
//! term in one inference are bounded ([`MAX_LIST`], [`MAX_TEXT`]), as are what a block
//! returns ([`RETURN_UNITS`]), what it asserts ([`ASSERT_UNITS`]) and how deep either nests
//! ([`MAX_DEPTH`]); each limit ends the node with an error naming it.
//!
//! One Scryer machine serves the process, on a thread of its own (`tea-prolog`, started on
//! first use with `library(lists)` and tea's support predicates; `library(clpz)`, CLP(FD) as
//! The Edge Agent preloads it, joins the first time a block uses it). Blocks run on it one at a
//! time, as The Edge Agent's Python engine locks its SWI-Prolog: Prolog nodes of parallel
//! branches take turns. Every dynamic predicate of the machine's user module — the `state/2`
//! facts, the block's clauses, every clause a run asserted, `nb_setval/2`'s values — is emptied
//! before and after each run, and a block cannot reach Scryer's own global variables, flags or
//! operators, so no run sees what another (of the same agent or another) left.
//!
//! `prolog.query` (The Edge Agent's WebAssembly action) gets its input as bound terms, never as
//! text spliced into code: the loader makes each `{{ expr }}` of its `code` and `facts` a
//! Prolog variable bound to the value when the node runs (and `with: { bindings }` binds named
//! variables the same way).
//!
//! Prolog `run:` blocks on Scryer Prolog, The Edge Agent's contract (`state/2` facts in, `return/2`
//! out). The loader (`load.rs`) hands it a block written `language: prolog`, `run: { type:
//! prolog, code }`, or one with no `language:` that is not Lua and looks like Prolog; `split` cuts
//! the text into clauses at their end tokens (each with its file line), and the support predicates
//! of `prolog.pl`, consulted into the process's one machine (owned by a thread of its own,
//! `tea-prolog`, which takes queries one at a time over a channel; a panic inside Scryer restarts
//! it), read each clause with Prolog's reader and check it against the sandbox at load
//! (`'$tea_check'`). `Block::run` passes the state and the clauses (as character codes, which no
//! text can break) to `'$tea_run'`, which asserts the facts and rules, calls the queries under an
//! inference limit (an allowlist: goals and closures held in variables checked when called),
//! returns `return/2`'s keys as one atom of bounded JSON text, and empties every dynamic predicate
//! of the user module; `load.rs` also binds `prolog.query`'s `{{ }}` as variables, never as
//! text spliced into code.

use serde_json::{Map, Value};

/// How many inferences one query (a clause of a block that is called) may make before it is
/// stopped: some seconds of work.
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
pub(crate) const INFERENCES: u64 = 20_000_000;

/// The largest value a block may return (each `return/2`), and the largest set of bindings
/// `prolog.query` may answer: in units of one per cell of the term plus one per character of
/// each atom in it.
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
pub(crate) const RETURN_UNITS: u64 = 200_000;

/// How deeply a returned or asserted term may nest (a list's items one level below the list,
/// its tail not).
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
pub(crate) const MAX_DEPTH: u64 = 1_000;

/// The largest clause a block may assert (`assertz/1` and the like, `nb_setval/2`), in the
/// units of [`RETURN_UNITS`].
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
pub(crate) const ASSERT_UNITS: u64 = 100_000;

/// The longest list `length/2` may build and the largest arity `functor/3` may (each is one
/// inference, however large).
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
pub(crate) const MAX_LIST: u64 = 1_000_000;

/// The longest atom `atom_concat/3` may build, in characters.
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
pub(crate) const MAX_TEXT: u64 = 1_000_000;

/// A problem with a block: the file's line, and the message.
pub(crate) type Problem = (usize, String);

/// Whether a block that names no language looks like Prolog (The Edge Agent's own test).
pub(crate) fn looks_like_prolog(source: &str) -> bool {
    let code = source.trim();
    if code.starts_with("% prolog") || code.starts_with("%prolog") {
        return true;
    }
    [":-", "?-", "state(", "return(", "assertz(", "findall(", "all_different(", "#=", "#<", "#>", "ins ", "labeling"]
        .iter()
        .any(|p| code.contains(p))
}

/// What a load needs to take a block for Prolog: the file's name.
pub(crate) struct Loader {
    file: String,
}

impl Loader {
    pub(crate) fn new(file: &str) -> Self {
        Loader { file: file.to_owned() }
    }

    /// The block of node `node`, starting on line `first_line`: read and checked now, so that
    /// a syntax error or a refused call is a load problem at its line.
    pub(crate) fn block(&self, node: &str, first_line: usize, source: &str) -> Result<Block, Vec<Problem>> {
        let at = |(line, message): Problem| vec![(line, format!("node `{node}`: {message}"))];
        let (source, loaded) = load_code_calls(source);
        let mut clauses = split(&source, first_line).map_err(at)?;
        // The clauses of each `tea_load_code` text go before the clause that loads them.
        for (offset, text) in loaded.into_iter().rev() {
            let line = first_line + offset;
            let inner = split(&text, line).map_err(at)?;
            let before = clauses.iter().rposition(|(start, _)| *start <= line).unwrap_or(0);
            clauses.splice(before..before, inner);
        }
        imp::compile(&self.file, node, first_line, clauses)
    }
}

/// The Edge Agent's `tea_load_code("…")` calls in `source`, each a text of clauses loaded
/// into the block: `source` with each call replaced by `true` (and the line breaks it held, so
/// lines stay put), and each text with the line (from the block's first) where it starts.
/// The clauses are the block's own, read and checked at load as its other clauses are.
fn load_code_calls(source: &str) -> (String, Vec<(usize, String)>) {
    const CALL: &str = "tea_load_code(";
    if !source.contains(CALL) {
        return (source.to_owned(), Vec::new());
    }
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut texts = Vec::new();
    let mut line = 0;
    let mut i = 0;
    let starts_call = |i: usize| {
        CALL.chars().enumerate().all(|(k, c)| chars.get(i + k) == Some(&c))
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '%' {
            while i < chars.len() && chars[i] != '\n' {
                out.push(chars[i]);
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            // A block comment, copied whole (a quote in it opens nothing).
            let end = (i + 2..chars.len().saturating_sub(1))
                .find(|&j| chars[j] == '*' && chars[j + 1] == '/')
                .map_or(chars.len(), |j| j + 2);
            for &ch in &chars[i..end] {
                line += usize::from(ch == '\n');
                out.push(ch);
            }
            i = end;
            continue;
        }
        if c == '\'' || c == '"' || c == '`' {
            // Quoted text, copied whole (a `0'c` code is two characters: copied as they are).
            out.push(c);
            i += 1;
            if c == '\'' && out[..out.len() - 1].ends_with('0') {
                continue;
            }
            while i < chars.len() {
                let q = chars[i];
                out.push(q);
                i += 1;
                if q == '\n' {
                    line += 1;
                } else if q == '\\' && i < chars.len() {
                    out.push(chars[i]);
                    i += 1;
                } else if q == c {
                    break;
                }
            }
            continue;
        }
        if starts_call(i) {
            // `tea_load_code(` layout `"text"` layout `)`
            let mut j = i + CALL.chars().count();
            let mut breaks = 0;
            while j < chars.len() && chars[j].is_whitespace() {
                breaks += usize::from(chars[j] == '\n');
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                let opened = line + breaks;
                let mut text = String::new();
                j += 1;
                let mut closed = false;
                while j < chars.len() {
                    match chars[j] {
                        '\\' if j + 1 < chars.len() => {
                            let e = chars[j + 1];
                            text.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                other => other,
                            });
                            breaks += usize::from(e == '\n');
                            j += 2;
                        }
                        '"' if chars.get(j + 1) == Some(&'"') => {
                            text.push('"');
                            j += 2;
                        }
                        '"' => {
                            closed = true;
                            j += 1;
                            break;
                        }
                        other => {
                            breaks += usize::from(other == '\n');
                            text.push(other);
                            j += 1;
                        }
                    }
                }
                while closed && j < chars.len() && chars[j].is_whitespace() {
                    breaks += usize::from(chars[j] == '\n');
                    j += 1;
                }
                if closed && chars.get(j) == Some(&')') {
                    texts.push((opened, text));
                    out.push_str("true");
                    out.extend(std::iter::repeat_n('\n', breaks));
                    line += breaks;
                    i = j + 1;
                    continue;
                }
            }
        }
        if c == '\n' {
            line += 1;
        }
        out.push(c);
        i += 1;
    }
    (out, texts)
}

/// At a `'` (index `*i`) right after the `0` of a `0'c` character code (a `0` that ends no
/// longer name or number): copies the code (`'`, the character, and its escape or doubled
/// quote) to `out`, moves `*i` past it and says so; else leaves both as they were.
pub(crate) fn copy_char_code(chars: &[char], i: &mut usize, out: &mut String) -> bool {
    let code = chars.get(*i) == Some(&'\'')
        && out.ends_with('0')
        && !out[..out.len() - 1].ends_with(|p: char| p.is_alphanumeric() || p == '_');
    if !code {
        return false;
    }
    out.push('\'');
    *i += 1;
    if let Some(&next) = chars.get(*i) {
        out.push(next);
        *i += 1;
        if next == '\\' || (next == '\'' && chars.get(*i) == Some(&'\'')) {
            if let Some(&escaped) = chars.get(*i) {
                out.push(escaped);
                *i += 1;
            }
        }
    }
    true
}

/// The clauses of a block, each with its first line in the file and its text ending with the
/// end token `.` (added to the last clause when it has none, as The Edge Agent does).
fn split(source: &str, first_line: usize) -> Result<Vec<(usize, String)>, Problem> {
    let chars: Vec<char> = source.chars().collect();
    let mut clauses = Vec::new();
    let mut current = String::new();
    let mut start: Option<usize> = None;
    let mut line = first_line;
    let mut i = 0;
    // For each open brace, whether it opened a dict.
    let mut braces: Vec<bool> = Vec::new();
    let symbol = |c: char| "+-*/\\^<>=~:.?@#&$".contains(c);
    while i < chars.len() {
        let c = chars[i];
        // Comments: not part of any clause.
        if c == '%' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            let opened = line;
            i += 2;
            loop {
                match chars.get(i) {
                    None => return Err((opened, "a comment `/*` is never closed".to_owned())),
                    Some('*') if chars.get(i + 1) == Some(&'/') => {
                        i += 2;
                        break;
                    }
                    Some(ch) => {
                        if *ch == '\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            current.push(' ');
            continue;
        }
        if c == '\n' {
            line += 1;
        }
        if !c.is_whitespace() && start.is_none() {
            start = Some(line);
        }
        // Quoted atoms, strings and back-quoted text: copied whole (doubled quotes and
        // backslash escapes stay inside).
        if c == '\'' || c == '"' || c == '`' {
            // `0'c` is a character code, not a quote.
            if copy_char_code(&chars, &mut i, &mut current) {
                continue;
            }
            let opened = line;
            let mut breaks = 0;
            current.push(c);
            i += 1;
            loop {
                match chars.get(i) {
                    None => return Err((opened, format!("a quoted text opened with {c} is never closed"))),
                    Some('\\') => {
                        current.push('\\');
                        if let Some(&next) = chars.get(i + 1) {
                            if next == '\n' {
                                line += 1;
                            }
                            current.push(next);
                        }
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        current.push(q);
                        i += 1;
                        if chars.get(i) == Some(&c) {
                            current.push(c);
                            i += 1;
                        } else {
                            current.extend(std::iter::repeat_n('\n', breaks));
                            break;
                        }
                    }
                    Some('\n') => {
                        // SWI-Prolog reads a line break inside quotes as one; ISO Prolog wants
                        // it escaped. The break itself goes after the closing quote, so the
                        // lines after the text keep their numbers.
                        line += 1;
                        breaks += 1;
                        current.push_str("\\n");
                        i += 1;
                    }
                    Some(&other) => {
                        current.push(other);
                        i += 1;
                    }
                }
            }
            continue;
        }
        // SWI-Prolog dicts, `Tag{k: V, …}` (a tag, often `_`, right before the brace), read as
        // tea's objects `json([k:V, …])`; any other brace is a curly term.
        if c == '{' {
            let tagged = current.ends_with(|p: char| p.is_alphanumeric() || p == '_');
            if tagged {
                while current.ends_with(|p: char| p.is_alphanumeric() || p == '_') {
                    current.pop();
                }
                current.push_str("json([");
            } else {
                current.push('{');
            }
            braces.push(tagged);
            i += 1;
            continue;
        }
        if c == '}' {
            current.push_str(if braces.pop() == Some(true) { "])" } else { "}" });
            i += 1;
            continue;
        }
        // The end token: a `.` that is not part of a symbol (`=..`) and is followed by layout,
        // a comment, or the end.
        let after = chars.get(i + 1).copied();
        let before = current.chars().last();
        let ends = c == '.' && !before.is_some_and(symbol) && after.is_none_or(|a| a.is_whitespace() || a == '%');
        current.push(c);
        i += 1;
        if ends {
            if let Some(at) = start.take() {
                clauses.push((at, std::mem::take(&mut current)));
            }
            current.clear();
        }
    }
    if let Some(at) = start {
        let text = current.trim_end();
        if !text.is_empty() {
            clauses.push((at, format!("{text} .")));
        }
    }
    Ok(clauses)
}

/// A value of the state as Prolog text (always readable: atoms are quoted, control
/// characters escaped, floats written with a fraction).
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
fn to_prolog(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&format!("({i})"));
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                let text = format!("{f:?}");
                let text = match (text.contains('.'), text.find('e')) {
                    (false, Some(e)) => format!("{}.0{}", &text[..e], &text[e..]),
                    (false, None) => format!("{text}.0"),
                    _ => text,
                };
                out.push('(');
                out.push_str(&text);
                out.push(')');
            }
        }
        Value::String(s) => quote(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                to_prolog(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("json([");
            pairs(map, out);
            out.push_str("])");
        }
    }
}

/// `'key'=Value, …` of an object.
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
fn pairs(map: &Map<String, Value>, out: &mut String) {
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        quote(key, out);
        out.push('=');
        to_prolog(value, out);
    }
}

/// `text` as a quoted atom.
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
fn quote(text: &str, out: &mut String) {
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:x}\\", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// The clauses as `[c(Line, Codes), …]`: character codes, which no text can break.
#[cfg_attr(not(feature = "prolog"), allow(dead_code))]
fn clauses_term(clauses: &[(usize, String)]) -> String {
    let mut out = String::from("[");
    for (i, (line, text)) in clauses.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("c({line},["));
        for (j, c) in text.chars().enumerate() {
            if j > 0 {
                out.push(',');
            }
            out.push_str(&(c as u32).to_string());
        }
        out.push_str("])");
    }
    out.push(']');
    out
}

#[cfg(feature = "prolog")]
pub(crate) use imp::query;

pub(crate) use imp::Block;

#[cfg(not(feature = "prolog"))]
mod imp {
    use super::Problem;
    use serde_json::{Map, Value};
    use std::sync::Arc;

    /// A Prolog block: none without the feature `prolog`.
    #[derive(Clone, Debug)]
    pub(crate) enum Block {}

    impl Block {
        pub(crate) fn run(&self, _: &Arc<Map<String, Value>>) -> Result<Option<Map<String, Value>>, String> {
            match *self {}
        }
    }

    /// `prolog.query`: not registered without the feature.
    #[allow(dead_code)]
    pub(crate) fn query(_: &Map<String, Value>, _: &Value) -> Result<Value, String> {
        Err("prolog.query needs tea built with the cargo feature `prolog`".to_owned())
    }

    pub(super) fn compile(_: &str, node: &str, line: usize, _: Vec<(usize, String)>) -> Result<Block, Vec<Problem>> {
        Err(vec![(
            line,
            format!(
                "node `{node}` is Prolog: tea runs Prolog blocks when built with the cargo feature `prolog` \
                 (`--features prolog`)"
            ),
        )])
    }
}

#[cfg(feature = "prolog")]
mod imp {
    use super::{clauses_term, pairs, Problem, ASSERT_UNITS, INFERENCES, MAX_DEPTH, MAX_LIST, MAX_TEXT, RETURN_UNITS};
    use scryer_prolog::{LeafAnswer, Machine, MachineBuilder, OutputStreamConfig, StreamConfig, Term};
    use serde_json::{Map, Value};
    use std::fmt;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::{mpsc, Arc, Mutex, OnceLock};

    /// tea's support predicates: `state/2`, `return/2`, reading and running a block, the
    /// sandbox, and SWI-Prolog's predicates The Edge Agent's blocks use.
    const SUPPORT: &str = include_str!("prolog.pl");

    /// A query for the Prolog thread, whether it needs CLP(FD), and where the answer goes.
    struct Job {
        query: String,
        clpz: bool,
        reply: mpsc::Sender<Result<Option<Term>, String>>,
    }

    /// The Prolog thread, started on first use: it owns the one machine of the process.
    static WORKER: OnceLock<Result<Mutex<mpsc::Sender<Job>>, String>> = OnceLock::new();

    /// Whether a text uses CLP(FD) (`library(clpz)`, loaded into the machine the first time a
    /// block needs it: it is most of a machine's start-up).
    pub(super) fn needs_clpz(text: &str) -> bool {
        [
            "#=",
            "#<",
            "#>",
            "#\\",
            " in ",
            " ins ",
            "label",
            "all_different",
            "all_distinct",
            "tuples_in",
            "sum(",
            "clpfd",
            "clpz",
        ]
        .iter()
        .any(|t| text.contains(t))
    }

    /// Runs `query` on the process's machine and returns the binding of `Result`. Queries run
    /// one at a time (as The Edge Agent's Python engine locks its SWI-Prolog).
    fn ask(query: String, clpz: bool) -> Result<Option<Term>, String> {
        let worker = WORKER.get_or_init(|| {
            let (send, receive) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("tea-prolog".to_owned())
                .stack_size(64 << 20)
                .spawn(move || serve(receive))
                .map(|_| Mutex::new(send))
                .map_err(|e| format!("the Prolog thread could not start: {e}"))
        });
        let worker = worker.as_ref().map_err(Clone::clone)?;
        let (reply, answer) = mpsc::channel();
        worker
            .lock()
            .map_err(|_| "the Prolog thread is gone".to_owned())?
            .send(Job { query, clpz, reply })
            .map_err(|_| "the Prolog thread is gone".to_owned())?;
        answer.recv().map_err(|_| "the Prolog thread stopped during a query".to_owned())?
    }

    /// The Prolog thread: one machine, started on the first job; a panic inside Scryer drops
    /// it (the next job starts a fresh one) and is that job's error.
    fn serve(jobs: mpsc::Receiver<Job>) {
        let mut machine: Option<Machine> = None;
        let mut clpz_loaded = false;
        for job in jobs {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let machine = machine.get_or_insert_with(|| {
                    // What a block writes (`write/1`, `format/2`) goes to standard error, as
                    // Lua's `print`: standard output is `tea run`'s result.
                    let streams = StreamConfig::in_memory()
                        .with_user_output(OutputStreamConfig::stderr())
                        .with_user_error(OutputStreamConfig::stderr());
                    let mut machine = MachineBuilder::default().with_streams(streams).build();
                    machine.consult_module_string("user", SUPPORT);
                    machine
                });
                // The support's last predicate answers only if all of it loaded (a machine that
                // failed to load it is not used: Scryer is not safe to query then).
                if !matches!(answer(machine, "'$tea_support_loaded'(Result)."), Ok(Some(Term::Atom(ok))) if ok == "ok")
                {
                    return Err("tea's Prolog support did not load into Scryer Prolog".to_owned());
                }
                if job.clpz && !clpz_loaded {
                    answer(machine, "use_module(library(clpz)).")?;
                    clpz_loaded = true;
                }
                answer(machine, &job.query)
            }));
            let result = match outcome {
                Ok(result) => result,
                Err(_) => {
                    machine = None;
                    clpz_loaded = false;
                    Err("Scryer Prolog failed inside (a panic); the machine is started afresh".to_owned())
                }
            };
            let _ = job.reply.send(result);
        }
    }

    /// The first answer of `query`, binding `Result`.
    fn answer(machine: &mut Machine, query: &str) -> Result<Option<Term>, String> {
        let mut answers = machine.run_query(query.to_owned());
        match answers.next() {
            Some(Ok(LeafAnswer::LeafAnswer { bindings, .. })) => Ok(bindings.get("Result").cloned()),
            Some(Ok(LeafAnswer::True)) | Some(Ok(LeafAnswer::False)) | None => Ok(None),
            Some(Ok(LeafAnswer::Exception(term))) | Some(Err(term)) => Err(text(&term)),
        }
    }

    /// A compiled Prolog block.
    #[derive(Clone)]
    pub(crate) struct Block(Arc<Compiled>);

    struct Compiled {
        node: String,
        file: String,
        /// The clauses as the support's `[c(Line, Codes), …]`.
        clauses: String,
        /// The block uses CLP(FD).
        clpz: bool,
    }

    impl fmt::Debug for Block {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "Prolog({})", self.0.node)
        }
    }

    /// Reads and checks clauses (`[c(Line, Codes), …]`): the line and message of the first
    /// that does not read or that the sandbox refuses.
    fn check(term: &str, clpz: bool) -> Result<(), (Option<usize>, String)> {
        let checked = ask(format!("'$tea_check'({term}, Result)."), clpz);
        match checked {
            Ok(Some(Term::Atom(ok))) if ok == "ok" => Ok(()),
            Ok(Some(Term::Compound(error, args))) if error == "error" && args.len() == 2 => {
                let line = match &args[0] {
                    Term::Integer(n) => n.to_string().parse().ok(),
                    _ => None,
                };
                Err((line, format!("Prolog {}", text(&args[1]))))
            }
            Ok(other) => Err((None, format!("the Prolog text could not be checked ({other:?})"))),
            Err(e) => Err((None, format!("Prolog: {e}"))),
        }
    }

    pub(super) fn compile(
        file: &str,
        node: &str,
        first_line: usize,
        clauses: Vec<(usize, String)>,
    ) -> Result<Block, Vec<Problem>> {
        let term = clauses_term(&clauses);
        let clpz = clauses.iter().any(|(_, text)| needs_clpz(text));
        check(&term, clpz)
            .map_err(|(line, message)| vec![(line.unwrap_or(first_line), format!("node `{node}`: {message}"))])?;
        Ok(Block(Arc::new(Compiled { node: node.to_owned(), file: file.to_owned(), clauses: term, clpz })))
    }

    /// `'$tea_run'(Mode, State, Clauses, Limits, Result)` on this thread's machine.
    fn run_clauses(mode: &str, state: &Map<String, Value>, clauses: &str, clpz: bool) -> Result<Option<Term>, String> {
        let mut query = format!("'$tea_run'({mode}, [");
        pairs(state, &mut query);
        query.push_str(&format!(
            "], {clauses}, limits({INFERENCES}, {RETURN_UNITS}, {MAX_DEPTH}, {ASSERT_UNITS}, {MAX_LIST}, {MAX_TEXT}), \
             Result)."
        ));
        ask(query, clpz)
    }

    /// What `'$tea_run'` answered.
    enum Outcome {
        /// The JSON text of the returns (block) or of the bindings (query).
        Ok(String),
        /// A query failed: nothing written.
        Failed,
        /// An error, at the line (0 when unknown), with its message.
        Error(String, String),
        /// A query ran over the inference limit, at the line.
        Limit(String),
    }

    /// `ok(Json)`, `failed(Line)`, `error(Line, Message)` or `limit(Line)`, each argument an
    /// atom or an integer (what crosses from Prolog is small by construction: values come as
    /// one atom of JSON text).
    fn outcome(result: Option<Term>) -> Result<Outcome, String> {
        let line = |t: &Term| match t {
            Term::Integer(n) => n.to_string(),
            _ => "0".to_owned(),
        };
        Ok(match result {
            Some(Term::Compound(ok, args)) if ok == "ok" && args.len() == 1 => match &args[0] {
                Term::Atom(json) | Term::String(json) => Outcome::Ok(json.clone()),
                other => return Err(format!("the Prolog result is not JSON text ({})", text(other))),
            },
            Some(Term::Compound(failed, _)) if failed == "failed" => Outcome::Failed,
            Some(Term::Compound(error, args)) if error == "error" && args.len() == 2 => {
                Outcome::Error(line(&args[0]), text(&args[1]))
            }
            Some(Term::Compound(limit, args)) if limit == "limit" && args.len() == 1 => Outcome::Limit(line(&args[0])),
            other => {
                return Err(format!("gave no result ({})", other.as_ref().map_or_else(|| "none".to_owned(), text)))
            }
        })
    }

    /// The JSON text Prolog wrote (bounded there in size; serde_json bounds its depth).
    fn parse(json: &str) -> Result<Value, String> {
        serde_json::from_str(json).map_err(|e| {
            if e.to_string().contains("recursion limit") {
                "a returned value is nested deeper than JSON values may be here (128 levels)".to_owned()
            } else {
                format!("the value Prolog returned is not JSON ({e})")
            }
        })
    }

    /// Whether `name` reads as a Prolog variable (`X`, `_Tea1`, `Result_2`).
    fn is_variable(name: &str) -> bool {
        let mut chars = name.chars();
        chars.next().is_some_and(|c| c == '_' || c.is_ascii_uppercase())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
    }

    /// The action `prolog.query` (The Edge Agent's WebAssembly build): `with: { code, facts,
    /// bindings }`; the clauses of `facts` then `code` run as a block does (`state/2` holds the
    /// state), and the result is `{ bindings: [{Var: value, …}], success }`, the variables of the
    /// last query (`?- Goal.` or any goal) in its first solution; `success: false` and no
    /// bindings when a query fails.
    ///
    /// `bindings: {Var: value, …}` binds each variable `Var` of the queries to its value, a term
    /// (never text read as code): a string is an atom. The loader turns each `{{ expr }}` of
    /// `code` and `facts` into such a variable (`_TeaArgN`, bound in every clause), and a quoted
    /// text with `{{ }}` in it into one bound to the rendered text (`_TeaStrN`, characters, for
    /// `"…"`; `_TeaAtomN`, an atom, for `'…'`): what the input holds is data, whatever quotes
    /// it has.
    pub(crate) fn query(state: &Map<String, Value>, args: &Value) -> Result<Value, String> {
        let code = match args.get("code") {
            Some(Value::String(code)) => code.as_str(),
            Some(other) => return Err(format!("prolog.query: `code` is Prolog text, not {other}")),
            None => return Err("prolog.query needs `code` (Prolog text) in `with:`".to_owned()),
        };
        let mut source = String::new();
        match args.get("facts") {
            None | Some(Value::Null) => {}
            Some(Value::String(facts)) => {
                source.push_str(facts);
                source.push('\n');
            }
            Some(other) => return Err(format!("prolog.query: `facts` is Prolog text, not {other}")),
        }
        source.push_str(code);
        let mut bound = String::from("[");
        match args.get("bindings") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (i, (name, value)) in map.iter().enumerate() {
                    if !is_variable(name) {
                        return Err(format!(
                            "prolog.query: `bindings` names Prolog variables (`Q`, `Name_1`), not `{name}`"
                        ));
                    }
                    if i > 0 {
                        bound.push(',');
                    }
                    bound.push_str(&format!("'{name}'="));
                    match value {
                        Value::String(text) if name.starts_with("_TeaStr") => {
                            bound.push_str("'$tea_chars'(");
                            super::quote(text, &mut bound);
                            bound.push(')');
                        }
                        other => super::to_prolog(other, &mut bound),
                    }
                }
            }
            Some(other) => {
                return Err(format!("prolog.query: `bindings` is a mapping of variables to values, not {other}"))
            }
        }
        bound.push(']');
        let clauses = super::split(&source, 1).map_err(|(line, m)| format!("prolog.query: line {line}: {m}"))?;
        let term = clauses_term(&clauses);
        let clpz = needs_clpz(&source);
        check(&term, clpz).map_err(|(line, m)| match line {
            Some(line) => format!("prolog.query: line {line}: {m}"),
            None => format!("prolog.query: {m}"),
        })?;
        let at = |line: &str| if line == "0" { String::new() } else { format!(" at line {line}") };
        match outcome(run_clauses(&format!("query({bound})"), state, &term, clpz)?)
            .map_err(|e| format!("prolog.query {e}"))?
        {
            Outcome::Ok(json) => {
                let bindings = parse(&json).map_err(|e| format!("prolog.query: {e}"))?;
                Ok(serde_json::json!({ "bindings": [bindings], "success": true }))
            }
            Outcome::Failed => Ok(serde_json::json!({ "bindings": [], "success": false })),
            Outcome::Error(line, message) => Err(format!("prolog.query: Prolog error{}: {message}", at(&line))),
            Outcome::Limit(line) => {
                Err(format!("prolog.query: the query{} ran away: stopped after {INFERENCES} inferences", at(&line)))
            }
        }
    }

    impl Block {
        /// Runs the block on `state`: `Ok(None)` for no writes (nothing returned, or a query
        /// failed), `Ok(Some(keys))` for the keys `return/2` wrote.
        pub(crate) fn run(&self, state: &Arc<Map<String, Value>>) -> Result<Option<Map<String, Value>>, String> {
            let this = &*self.0;
            let at = |line: &str| if line == "0" { this.file.clone() } else { format!("{}:{line}", this.file) };
            let result = run_clauses("block", state, &this.clauses, this.clpz)
                .and_then(outcome)
                .map_err(|e| format!("Prolog error in node `{}` ({}): {e}", this.node, this.file))?;
            match result {
                Outcome::Ok(json) => match parse(&json) {
                    Ok(Value::Object(out)) => Ok(Some(out).filter(|m| !m.is_empty())),
                    Ok(other) => Err(format!("Prolog block of node `{}` returned {other}, not an object", this.node)),
                    Err(e) => Err(format!("Prolog error in node `{}` ({}): {e}", this.node, this.file)),
                },
                Outcome::Failed => Ok(None),
                Outcome::Error(line, message) => {
                    Err(format!("Prolog error at {} (node `{}`): {message}", at(&line), this.node))
                }
                Outcome::Limit(line) => Err(format!(
                    "Prolog query at {} (node `{}`) ran away: stopped after {INFERENCES} inferences",
                    at(&line),
                    this.node
                )),
            }
        }
    }

    /// A term as text (an error's message, a line): at most [`TEXT_DEPTH`] levels and
    /// [`TEXT_LENGTH`] characters of it, built with a stack of its own (never recursing on the
    /// thread's stack, whatever the term).
    fn text(term: &Term) -> String {
        enum Step<'a> {
            Term(&'a Term, usize),
            Str(&'static str),
            Owned(String),
        }
        let mut out = String::new();
        let mut stack = vec![Step::Term(term, 0)];
        while let Some(step) = stack.pop() {
            if out.len() > TEXT_LENGTH {
                out.push('…');
                break;
            }
            let (term, depth) = match step {
                Step::Str(s) => {
                    out.push_str(s);
                    continue;
                }
                Step::Owned(s) => {
                    out.push_str(&s);
                    continue;
                }
                Step::Term(term, depth) => (term, depth),
            };
            if depth > TEXT_DEPTH {
                out.push('…');
                continue;
            }
            let (open, items, close): (Option<String>, &[Term], &'static str) = match term {
                Term::Atom(a) => {
                    out.push_str(a);
                    continue;
                }
                Term::String(s) => {
                    out.push_str(s);
                    continue;
                }
                Term::Integer(n) => {
                    out.push_str(&n.to_string());
                    continue;
                }
                Term::Float(f) => {
                    out.push_str(&f.to_string());
                    continue;
                }
                Term::Rational(r) => {
                    out.push_str(&r.to_string());
                    continue;
                }
                Term::Var(v) => {
                    out.push_str(v);
                    continue;
                }
                Term::List(items) => (Some("[".to_owned()), items.as_slice(), "]"),
                Term::Compound(name, args) => (Some(format!("{name}(")), args.as_slice(), ")"),
                _ => {
                    out.push('?');
                    continue;
                }
            };
            if let Some(open) = open {
                stack.push(Step::Str(close));
                for (i, item) in items.iter().enumerate().rev() {
                    stack.push(Step::Term(item, depth + 1));
                    if i > 0 {
                        stack.push(Step::Str(","));
                    }
                }
                stack.push(Step::Owned(open));
            }
        }
        out
    }

    /// How deep [`text`] writes a term.
    const TEXT_DEPTH: usize = 30;
    /// How long [`text`] writes a term (bytes, then `…`).
    const TEXT_LENGTH: usize = 4_000;
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn clauses_split_at_end_tokens_only() {
        let clauses =
            split("a(1).\nb :- X = 'x. y', Y = \"p. q\",\n  Z =.. [f], W = 1.5. % c.\nstate(k, V)", 10).unwrap();
        let lines: Vec<usize> = clauses.iter().map(|c| c.0).collect();
        assert_eq!(lines, [10, 11, 13]);
        // What follows a comment's end of line starts the next clause (whitespace is no part of it).
        assert_eq!(clauses[2].1.trim(), "state(k, V) .");
        assert!(clauses[1].1.contains("=.."));
        assert!(split("x :- y = 'open", 1).is_err());
    }
}

/// Loading its `with:` (part of the loading layer, `crate::load`).
pub(crate) mod load;
