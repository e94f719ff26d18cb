//! The Edge Agent's own agents (`../shared/edge-agent-corpus`, copied from its repository at a
//! pinned commit): how many load in tea, per folder, and what stops the others.
//!
//! The counts only go up: each folder's floor below is what loads today, so a change that makes
//! a real agent stop loading fails here. The whole list — every file with its problems — is
//! written to `target/edge-agent-corpus.txt`, and the most common problems are printed, ranked.
//! On a machine without the corpus (set `TEA_EDGE_AGENT_CORPUS` to its folder, or keep the
//! repository's `shared/` beside the clone) the test says it skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tea::MemoryStore;
use tea_yaml::Engine;

/// The folders of the corpus, and how many of their agent files must load (a floor: raise it
/// when more load). The file counts are those with a top-level `nodes:` key.
const FOLDERS: &[(&str, usize)] = &[
    ("examples", FLOOR_EXAMPLES),
    ("tests", FLOOR_TESTS),
    ("python", FLOOR_PYTHON),
    ("rust", FLOOR_RUST),
    ("rust-tests-inline", FLOOR_RUST_INLINE),
];

// Measured with every feature of tea-yaml (CI's workspace run: `cargo test --workspace
// --all-features`) on 2026-11-27: 204 of the 276 files load (183 before `reflection.loop`, `reason.*` and
// SWI-Prolog's dicts) with Prolog blocks (feature `prolog`), Python blocks (feature
// `python`) and The Edge Agent's providers and vocabulary (issue 25); 139 without Prolog, 87
// before the vocabulary, 44 with `net` alone. Without `net` the agents that call `llm.call` or
// `http.*` do not load, so there the test only reports.
#[cfg(all(feature = "net", feature = "python", feature = "prolog"))]
const FLOOR_EXAMPLES: usize = 138;
#[cfg(all(feature = "net", feature = "python", feature = "prolog"))]
const FLOOR_TESTS: usize = 9;
#[cfg(all(feature = "net", feature = "python", feature = "prolog"))]
const FLOOR_PYTHON: usize = 30;
#[cfg(all(feature = "net", feature = "python", feature = "prolog"))]
const FLOOR_RUST: usize = 4;
#[cfg(all(feature = "net", feature = "python", feature = "prolog"))]
const FLOOR_RUST_INLINE: usize = 54;
#[cfg(all(feature = "net", feature = "python", not(feature = "prolog")))]
const FLOOR_EXAMPLES: usize = 57;
#[cfg(all(feature = "net", feature = "python", not(feature = "prolog")))]
const FLOOR_TESTS: usize = 9;
#[cfg(all(feature = "net", feature = "python", not(feature = "prolog")))]
const FLOOR_PYTHON: usize = 27;
#[cfg(all(feature = "net", feature = "python", not(feature = "prolog")))]
const FLOOR_RUST: usize = 4;
#[cfg(all(feature = "net", feature = "python", not(feature = "prolog")))]
const FLOOR_RUST_INLINE: usize = 42;
#[cfg(all(feature = "net", not(feature = "python")))]
const FLOOR_EXAMPLES: usize = 2;
#[cfg(all(feature = "net", not(feature = "python")))]
const FLOOR_TESTS: usize = 0;
#[cfg(all(feature = "net", not(feature = "python")))]
const FLOOR_PYTHON: usize = 2;
#[cfg(all(feature = "net", not(feature = "python")))]
const FLOOR_RUST: usize = 4;
#[cfg(all(feature = "net", not(feature = "python")))]
const FLOOR_RUST_INLINE: usize = 36;
#[cfg(not(feature = "net"))]
const FLOOR_EXAMPLES: usize = 0;
#[cfg(not(feature = "net"))]
const FLOOR_TESTS: usize = 0;
#[cfg(not(feature = "net"))]
const FLOOR_PYTHON: usize = 0;
#[cfg(not(feature = "net"))]
const FLOOR_RUST: usize = 0;
#[cfg(not(feature = "net"))]
const FLOOR_RUST_INLINE: usize = 0;

fn corpus() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TEA_EDGE_AGENT_CORPUS") {
        return Some(PathBuf::from(dir));
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let beside = here.join("../../shared/edge-agent-corpus");
    beside.is_dir().then_some(beside)
}

fn agent_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            agent_files(&path, out);
        } else if matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            let is_agent = std::fs::read_to_string(&path)
                .map(|text| text.lines().any(|line| line.starts_with("nodes:")))
                .unwrap_or(false);
            if is_agent {
                out.push(path);
            }
        }
    }
}

/// A problem's message without what is particular to one file (names in backquotes), so that
/// the same cause in many files counts once.
fn cause(message: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in message.chars() {
        if c == '`' {
            quoted = !quoted;
            out.push_str(if quoted { "`…" } else { "`" });
        } else if !quoted {
            out.push(c);
        }
    }
    out.split(';').next().unwrap_or_default().trim().to_owned()
}

/// The guide's chapter *Moving from The Edge Agent* (`docs/src/from-the-edge-agent.md`) says
/// how many files of each folder load: with every feature on (the guide's build), its table
/// must say what this test counted.
fn check_the_guide(counted: &[(&str, usize, usize)]) {
    if !cfg!(all(feature = "net", feature = "python", feature = "prolog")) {
        return;
    }
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/from-the-edge-agent.md");
    let Ok(text) = std::fs::read_to_string(&page) else {
        panic!("the guide's page {} is missing", page.display());
    };
    let mut wrong = Vec::new();
    for &(folder, files, loaded) in counted {
        let label = match folder {
            "examples" => "`examples/`",
            "tests" => "`tests/fixtures/`",
            "python" => "`python/tests/`",
            "rust" => "`rust/tests/`",
            _ => "agents inline in its Rust tests",
        };
        let row = text.lines().find(|l| l.starts_with(&format!("| {label} |")));
        let cells: Vec<&str> = row.map(|r| r.split('|').map(str::trim).collect()).unwrap_or_default();
        let said = (cells.get(2).and_then(|c| c.parse().ok()), cells.get(3).and_then(|c| c.parse().ok()));
        if said != (Some(files), Some(loaded)) {
            wrong
                .push(format!("{label}: the guide says {said:?}, the corpus has {files} files of which {loaded} load"));
        }
    }
    let total: usize = counted.iter().map(|c| c.2).sum();
    if !text.contains(&format!("That is {total} ")) {
        wrong.push(format!("the guide's total is not {total}"));
    }
    assert!(wrong.is_empty(), "docs/src/from-the-edge-agent.md is out of date:\n{}", wrong.join("\n"));
}

#[test]
fn the_edge_agents_own_agents_load() {
    let Some(root) = corpus() else {
        eprintln!(
            "skipped: The Edge Agent's corpus is not here (set TEA_EDGE_AGENT_CORPUS or keep shared/ beside the clone)"
        );
        return;
    };
    // Loading runs no code: Python blocks are only compiled, so the corpus may be trusted. The
    // grants are those an operator gives these agents to run them: five write logs and
    // checkpoints under /tmp, read a file there, or name their log file by an environment variable.
    let engine = Engine::new().trust_code(true).allow_read("/tmp").allow_write("/tmp").allow_env("VALIDATION_LOG_PATH");
    let mut report = String::new();
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    let mut short = Vec::new();
    let mut counted = Vec::new();
    for &(folder, floor) in FOLDERS {
        let mut files = Vec::new();
        agent_files(&root.join(folder), &mut files);
        let mut loaded = 0;
        for file in &files {
            let shown = file.strip_prefix(&root).unwrap_or(file).display().to_string();
            match engine.load_file_on(file, MemoryStore::new()) {
                Ok(_) => {
                    loaded += 1;
                    report.push_str(&format!("ok    {shown}\n"));
                }
                Err(error) => {
                    let first = error.problems().first().map(|p| p.message().to_owned()).unwrap_or_default();
                    report.push_str(&format!("error {shown}: {first}\n"));
                    for problem in error.problems() {
                        report.push_str(&format!(
                            "        {}:{}: {}\n",
                            problem.line(),
                            problem.column(),
                            problem.message()
                        ));
                    }
                    let mut seen = std::collections::BTreeSet::new();
                    for problem in error.problems() {
                        let cause = cause(problem.message());
                        if seen.insert(cause.clone()) {
                            *causes.entry(cause).or_default() += 1;
                        }
                    }
                }
            }
        }
        println!("{folder}: {loaded} of {} agent files load (floor {floor})", files.len());
        counted.push((folder, files.len(), loaded));
        if loaded < floor {
            short.push(format!("{folder}: {loaded} load, fewer than the {floor} that loaded before"));
        }
    }
    let mut ranked: Vec<_> = causes.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    println!("what stops the others (files per cause):");
    for (cause, files) in ranked.iter().take(25) {
        println!("{files:5}  {cause}");
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
    if std::fs::create_dir_all(&target).is_ok() {
        std::fs::write(target.join("edge-agent-corpus.txt"), &report).ok();
    }
    assert!(short.is_empty(), "agents of The Edge Agent stopped loading:\n{}", short.join("\n"));
    check_the_guide(&counted);
}
