//! A hostile agent file: alias bombs, deep nesting, huge mappings, thousands of bad targets,
//! subgraph files named over and over or nested without end, files that are not files, and
//! reserved names. Each ends in a clear load error (naming the limit and the line) or loads,
//! quickly, without running out of stack or memory.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tea_yaml::{Engine, LoadError};

/// Generous for a debug build on a busy machine; the figures measured are in the README.
const QUICK: Duration = Duration::from_secs(5);

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tea-yaml-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn load_err(text: &str) -> (LoadError, Duration) {
    let began = Instant::now();
    let err = Engine::new().load_str(text).expect_err("the file must not load");
    (err, began.elapsed())
}

fn mentions(err: &LoadError, words: &[&str]) -> bool {
    err.problems().iter().any(|p| words.iter().all(|w| p.message().contains(w)))
}

/// "billion laughs": nine levels of nine aliases, 9^9 strings from 400 bytes.
fn laughs(under: &str) -> String {
    let mut text = format!("{under}:\n  a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
    for w in names.windows(2) {
        let (prev, next) = (w[0], w[1]);
        text.push_str(&format!(
            "  {next}: &{next} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
        ));
    }
    text.push_str("nodes:\n  - { name: a, run: 'return {}' }\n");
    text
}

#[test]
fn an_alias_bomb_is_refused_naming_the_limit_and_line() {
    for under in ["variables", "state", "description"] {
        let text = laughs(under);
        let (err, took) = load_err(&text);
        assert!(took < QUICK, "{under}: {took:?}");
        assert!(mentions(&err, &["values", "1000000", "limit", "alias"]), "{err}");
        let line = err.problems()[0].line();
        assert!((2..=10).contains(&line), "{err}");
    }
    // A long string repeated by aliases is counted by its bytes.
    let long = "x".repeat(1 << 20);
    let mut text = format!("variables:\n  s: &s {long}\n  l: [");
    text.push_str(&vec!["*s"; 100].join(", "));
    text.push_str("]\nnodes:\n  - { name: a, run: 'return {}' }\n");
    let (err, took) = load_err(&text);
    assert!(took < QUICK, "{took:?}");
    assert!(mentions(&err, &["bytes of text", "limit"]), "{err}");
}

#[test]
fn deep_nesting_is_a_load_error_not_a_stack_overflow() {
    for depth in [10_000, 100_000] {
        let mut text = String::from("variables:\n  deep:\n    ");
        text.push_str(&"- ".repeat(depth));
        text.push_str("x\nnodes:\n  - { name: a, run: 'return {}' }\n");
        let (err, took) = load_err(&text);
        assert!(took < QUICK, "{depth}: {took:?}");
        assert!(mentions(&err, &["nest more than 128", "limit"]), "{err}");
        // The same nesting as an agent's `with:` (converted by the loader's tree walk).
        let mut text = String::from("nodes:\n  - name: a\n    uses: file.write\n    with:\n      path:\n        ");
        text.push_str(&"- ".repeat(depth));
        text.push_str("x\n");
        let (err, _) = load_err(&text);
        assert!(mentions(&err, &["nest more than 128"]), "{err}");
    }
    // Nesting within the limit loads.
    let mut text = String::from("variables:\n  deep: ");
    text.push_str(&"[".repeat(100));
    text.push_str(&"]".repeat(100));
    text.push_str("\nnodes:\n  - { name: a, run: 'return {}' }\n");
    Engine::new().load_str(&text).unwrap();
}

/// `keys` variables, each a line of its own, and a node that reads the last one.
fn many_keys(keys: usize) -> String {
    let mut text = String::from("variables:\n");
    for i in 0..keys {
        text.push_str(&format!("  key_number_{i}: value {i}\n"));
    }
    text.push_str(&format!("nodes:\n  - {{ name: a, run: 'return {{ n = variables.key_number_{} }}' }}\n", keys - 1));
    text
}

/// The fastest of three loads of `text`: the least disturbed by whatever else the machine runs.
fn fastest_load(text: &str) -> Duration {
    (0..3)
        .map(|_| {
            let began = Instant::now();
            Engine::new().load_str(text).unwrap();
            began.elapsed()
        })
        .min()
        .unwrap()
}

#[test]
fn a_mapping_of_fifty_thousand_keys_loads_in_linear_time() {
    let text = many_keys(50_000);
    let agent = Engine::new().load_str(&text).unwrap();
    let out = agent.invoke(serde_json::json!({})).unwrap().done().unwrap();
    assert_eq!(out["n"], "value 49999");
    // Linear, not quadratic: ten times the keys take about ten times as long (a quadratic
    // loader would take a hundred times). Compared with each other rather than with a clock,
    // the two loads are slowed alike by a busy machine.
    let small = fastest_load(&many_keys(3_000));
    let large = fastest_load(&many_keys(30_000));
    let ratio = large.as_secs_f64() / small.as_secs_f64().max(1e-6);
    assert!(ratio < 40.0, "3 000 keys: {small:?}, 30 000 keys: {large:?} ({ratio:.1}x)");
    // Over the key limit: refused, at the key past it.
    let mut text = String::from("variables:\n");
    for i in 0..100_001 {
        text.push_str(&format!("  k{i}: {i}\n"));
    }
    text.push_str("nodes:\n  - { name: a, run: 'return {}' }\n");
    let (err, _) = load_err(&text);
    assert!(mentions(&err, &["more than 100000 keys", "limit"]), "{err}");
    assert_eq!(err.problems()[0].line(), 100_002, "{err}");
}

#[test]
fn thousands_of_unknown_targets_are_reported_in_linear_time() {
    let mut text = String::from("nodes:\n");
    for i in 0..4_000 {
        text.push_str(&format!("  - {{ name: node_{i}, run: 'return {{}}', goto: missing_target_{i} }}\n"));
    }
    let (err, took) = load_err(&text);
    assert!(took < QUICK, "{took:?}");
    assert_eq!(err.problems().len(), 4_000, "one problem per target");
    // The first ones still say what was meant.
    assert!(err.problems()[0].message().contains("missing_target_0"), "{err}");
}

#[test]
fn a_subgraph_file_named_many_times_is_loaded_once_and_depth_is_bounded() {
    let dir = dir("subgraphs");
    // Each file names the next one twice: 2^15 loads without a cache.
    for level in 0..15 {
        let text = if level == 14 {
            "nodes:\n  - { name: leaf, run: 'return { leaf = true }' }\n".to_owned()
        } else {
            let next = format!("f{}.yaml", level + 1);
            format!(
                "nodes:\n  - {{ name: one, type: subgraph, file: {next} }}\n  - {{ name: two, type: subgraph, file: {next} }}\n"
            )
        };
        std::fs::write(dir.join(format!("f{level}.yaml")), text).unwrap();
    }
    let began = Instant::now();
    let agent = Engine::new().load_file(dir.join("f0.yaml")).unwrap();
    assert!(began.elapsed() < QUICK, "{:?}", began.elapsed());
    assert_eq!(agent.nodes(), ["one", "two"]);
    // A chain deeper than the limit: refused, naming it.
    for level in 0..20 {
        let text = format!("nodes:\n  - {{ name: n, type: subgraph, file: d{}.yaml }}\n", level + 1);
        std::fs::write(dir.join(format!("d{level}.yaml")), text).unwrap();
    }
    std::fs::write(dir.join("d20.yaml"), "nodes:\n  - { name: leaf, run: 'return {}' }\n").unwrap();
    let err = Engine::new().load_file(dir.join("d0.yaml")).unwrap_err();
    assert!(err.to_string().contains("more than 16 deep (the limit)"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[cfg(unix)]
#[test]
fn files_that_are_not_regular_files_are_refused_without_reading() {
    let dir = dir("special");
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.yaml")).unwrap();
    let fifo = dir.join("fifo.yaml");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
    std::fs::write(dir.join("parent.yaml"), "nodes:\n  - { name: child, type: subgraph, file: /dev/zero }\n").unwrap();
    let began = Instant::now();
    let err = Engine::new().load_file(dir.join("parent.yaml")).unwrap_err();
    assert!(err.to_string().contains("it is under `/dev`"), "{err}");
    let err = Engine::new().load_file(dir.join("zero.yaml")).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    if made {
        // Opening a FIFO with no writer would block forever.
        let err = Engine::new().load_file(&fifo).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
    let err = Engine::new().load_file(&dir).unwrap_err();
    assert!(err.to_string().contains("a directory"), "{err}");
    assert!(began.elapsed() < QUICK, "{:?}", began.elapsed());
    // Too large: refused before it is read.
    let big = dir.join("big.yaml");
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(9 << 20).unwrap();
    let err = Engine::new().load_file(&big).unwrap_err();
    assert!(err.to_string().contains("larger than 8388608 bytes (the limit)"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn reserved_names_are_refused_at_load() {
    let (err, _) = load_err(
        r#"
nodes:
  - name: fan
    type: dynamic_parallel
    items: "{{ state.items }}"
    item_var: __tea_item
    fan_in: done
    steps:
      - run: return {}
  - name: done
    run: return {}
"#,
    );
    assert!(mentions(&err, &["`item_var` of node `fan` names `__tea_item`", "keeps for itself"]), "{err}");
    assert_eq!(err.problems()[0].line(), 6, "{err}");
    for (text, what) in [
        ("state: { __tea_x: list }\nnodes:\n  - { name: a, run: 'return {}' }\n", "state key `__tea_x`"),
        (
            "nodes:\n  - { name: a, run: { type: expression, value: '1', output_key: __tea_item } }\n",
            "`output_key` of node `a`",
        ),
        ("nodes:\n  - { name: a, uses: file.read, with: { path: x }, output: __end__ }\n", "`output` of node `a`"),
        (
            "config: { checkpointer: memory }\nnodes:\n  - { name: a, type: interrupt, resume_key: __tea_answer }\n",
            "`resume_key` of node `a`",
        ),
    ] {
        let (err, _) = load_err(text);
        assert!(mentions(&err, &[what, "keeps for itself"]), "{err}");
    }
}

#[test]
fn many_lua_blocks_load_in_linear_time_and_keep_their_lines() {
    let block = |i: usize| format!("  - {{ name: n{i}, run: 'return {{ n = {i} }}' }}\n");
    let mut text = String::from("nodes:\n");
    for i in 0..4_000 {
        text.push_str(&block(i));
    }
    text.push_str("  - name: last\n    run: |\n      local x = 1\n      return { x = }\n");
    let (err, took) = load_err(&text);
    assert!(took < QUICK, "{took:?}");
    assert_eq!(err.problems().len(), 1, "{err}");
    assert_eq!(err.problems()[0].line(), 4_005, "{err}");
    // Over the node limit: refused at the first node past it.
    let mut text = String::from("nodes:\n");
    for i in 0..20_000 {
        text.push_str(&block(i));
    }
    let (err, took) = load_err(&text);
    assert!(took < QUICK, "{took:?}");
    assert!(mentions(&err, &["more than 4096 nodes", "limit"]), "{err}");
    assert_eq!(err.problems()[0].line(), 4_098, "{err}");
}
