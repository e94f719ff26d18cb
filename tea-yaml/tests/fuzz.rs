//! Property tests that stay: random and mutated agent files, random JSON through the Lua
//! bridge, random templates. Whatever the input, the loader answers `Ok` or a `LoadError` and a
//! run answers `Ok` or an `Error`, never a panic, an abort or a hang. Case counts are bounded so
//! the file runs in seconds; the inputs that once crashed or hung are kept as regressions in
//! `hostile_load.rs` and `hostile_run.rs`.

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Map, Value};
use std::time::Duration;
use tea::MemoryStore;
use tea_yaml::{Engine, State};

/// The agent files mutated: the examples beside the crate (when the source tree has them) and
/// one with every kind of node.
static SEEDS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/agents");
    let mut seeds: Vec<String> = ["research.yaml", "interview.yaml", "checkpoints.yaml"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(examples.join(f)).ok())
        .collect();
    seeds.push(EVERY.to_owned());
    seeds
});

const EVERY: &str = r#"
name: every
variables: &v { a: 1, b: [x, y] }
state: { log: { type: list, reducer: append }, n: int }
config: { checkpointer: memory, interrupt_before: [ask] }
nodes:
  - { name: start, run: "return { n = 1, log = { 'a' } }" }
  - { name: ask, type: interrupt, message: "ok {{ state.n }}?", resume_key: ok }
  - name: fan
    type: dynamic_parallel
    items: "{{ [1, 2] }}"
    fan_in: join
    steps:
      - run: return { log = { tostring(state.item) } }
  - { name: join, run: "return {}", goto: [{ if: "state.n > 3", to: start }, { to: __end__ }] }
edges:
  - { from: __start__, to: start }
  - { from: start, to: ask, when: "state.n" }
"#;

/// Pieces of YAML and of the agent format that random files are made of.
const PIECES: &[&str] = &[
    "\n",
    "  ",
    "- ",
    ": ",
    "name",
    "nodes",
    "run",
    "goto",
    "edges",
    "from",
    "to",
    "when",
    "type",
    "interrupt",
    "dynamic_parallel",
    "subgraph",
    "file",
    "items",
    "fan_in",
    "steps",
    "uses",
    "with",
    "output",
    "state",
    "variables",
    "config",
    "&a ",
    "*a",
    "[",
    "]",
    "{",
    "}",
    ",",
    "'",
    "\"",
    "{{ ",
    " }}",
    "{% ",
    " %}",
    "|",
    "return {}",
    "__end__",
    "__start__",
    "__tea_item",
    "secrets.x",
    "x",
    "1",
    "-1",
    "~",
    "true",
    "null",
    "#",
    "---",
    "? ",
    "!!str ",
    "\t",
    "é",
    "\u{0}",
];

fn config(cases: u32) -> Config {
    Config { cases, failure_persistence: None, ..Config::default() }
}

fn engine() -> Engine {
    Engine::new()
        .action("test.echo", |_: &State, args: &Value| Ok(args.clone()))
        .secret("x", "a-secret-value")
        .checkpointer(MemoryStore::new())
        .lua_instruction_limit(1_000_000)
}

/// One edit of a file: at a position (a fraction of its length), cut, insert a piece, or
/// repeat a span.
#[derive(Clone, Debug)]
enum Edit {
    Cut(f64, usize),
    Insert(f64, &'static str),
    Repeat(f64, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0.0..1.0, 1usize..40).prop_map(|(at, n)| Edit::Cut(at, n)),
        (0.0..1.0, proptest::sample::select(PIECES)).prop_map(|(at, p)| Edit::Insert(at, p)),
        (0.0..1.0, 1usize..30, 1usize..4).prop_map(|(at, n, times)| Edit::Repeat(at, n, times)),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for e in edits {
        let at = |f: f64, len: usize| ((len as f64) * f) as usize;
        match *e {
            Edit::Cut(f, n) => {
                let start = at(f, bytes.len());
                let end = (start + n).min(bytes.len());
                bytes.drain(start..end);
            }
            Edit::Insert(f, piece) => {
                let start = at(f, bytes.len());
                bytes.splice(start..start, piece.bytes());
            }
            Edit::Repeat(f, n, times) => {
                let start = at(f, bytes.len());
                let span: Vec<u8> = bytes[start..(start + n).min(bytes.len())].to_vec();
                for _ in 0..times {
                    bytes.splice(start..start, span.iter().copied());
                }
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Loads `text` and, if it loads, runs it once: every answer is fine but a panic.
/// Runs a mutated file. Its relative paths (`checkpoint.save` writes `checkpoints/….ckpt` in the
/// seed) resolve in a scratch directory of this test process, never in the source tree.
fn load_and_run(text: &str) {
    static SCRATCH: std::sync::LazyLock<std::path::PathBuf> = std::sync::LazyLock::new(|| {
        let dir = std::env::temp_dir().join(format!("tea-yaml-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::env::set_current_dir(&dir).unwrap();
        dir
    });
    std::sync::LazyLock::force(&SCRATCH);
    let Ok(agent) = engine().load_str(text) else { return };
    let _ = agent.invoke(json!({ "items": [1, 2], "n": 2 }));
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn mutated_agent_files_load_or_fail_with_a_load_error(seed in 0..4usize, edits in proptest::collection::vec(edit(), 1..8)) {
        load_and_run(&apply(&SEEDS[seed % SEEDS.len()], &edits));
    }

    #[test]
    fn files_of_random_pieces_load_or_fail_with_a_load_error(pieces in proptest::collection::vec(proptest::sample::select(PIECES), 0..120)) {
        load_and_run(&pieces.concat());
    }
}

/// JSON values the Lua bridge carries both ways unchanged: no nulls in lists (Lua's lists end at
/// the first nil) and no empty lists (an empty table comes back as an empty object).
fn lua_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e15f64..1e15).prop_map(|f| json!(f)),
        ".{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 1..6).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z][a-z0-9_]{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn values_cross_the_lua_bridge_unchanged(v in lua_json()) {
        let agent = engine().load_str("nodes:\n  - { name: copy, run: 'return { out = state.v }' }\n").unwrap();
        let out = agent.invoke(json!({ "v": v.clone() })).unwrap().done().unwrap();
        let back = &out["out"];
        // A float that is a whole number may come back as one; compare as numbers.
        prop_assert!(same(back, &v), "{v} came back as {back}");
    }

    #[test]
    fn random_lua_blocks_answer_or_fail_within_their_limits(pieces in proptest::collection::vec(proptest::sample::select(&[
        "return ", "{", "}", "(", ")", "state", ".v", "string.rep", "('x', 1e9)", "pcall", "while true do ", " end",
        "for i = 1, 1e9 do ", "local t = {} ", "t = {t, t} ", "x", "..", ",", "=", "1", "nil", "error('e')",
        "coroutine.wrap(function() end)()", "setmetatable({}, {})", ":rep(3)", "'a'", "string.find('aaaa', '(.-)*b')",
    ][..]), 0..30)) {
        let text = format!("nodes:\n  - name: block\n    run: |\n      {}\n", pieces.concat());
        // A block with `state(` reads as Prolog (as in The Edge Agent); the process's one Prolog
        // machine boots on the first such block, once, before any is timed.
        std::sync::LazyLock::force(&PROLOG_BOOTED);
        let began = std::time::Instant::now();
        load_and_run(&text);
        prop_assert!(began.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn random_templates_render_or_fail_within_their_fuel(pieces in proptest::collection::vec(proptest::sample::select(&[
        "{{ ", " }}", "{% for i in range(100000) %}", "{% endfor %}", "{% if state.n %}", "{% endif %}", "'x'",
        " * ", "100000000", " ~ ", " | upper", " | list", " | tojson", "state.n", "state.items", "[1, 2]", "x",
        "variables", "(", ")", "loop.index", "{% set ns = namespace(s='a') %}", "{% set ns.s = ns.s ~ ns.s %}",
        "ns.s | length",
    ][..]), 0..30)) {
        let text = format!("nodes:\n  - name: t\n    uses: test.echo\n    with:\n      t: |-\n        {}\n", pieces.concat());
        let began = std::time::Instant::now();
        load_and_run(&text);
        prop_assert!(began.elapsed() < Duration::from_secs(10));
    }
}

/// The feature `prolog`'s machine, started (by loading a Prolog block) outside the timed cases.
static PROLOG_BOOTED: std::sync::LazyLock<()> = std::sync::LazyLock::new(|| {
    let _ = engine().load_str("nodes:\n  - name: p\n    run: |\n      state(x, X), return(y, X).\n");
});

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
