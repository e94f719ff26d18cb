//! ARCHITECTURE.md names only paths that exist: every path it writes in backticks — a span
//! with a `/` or ending in `.rs`, `.md` or `.toml`, made only of path characters — is a file or
//! folder of the repository, so that a file moved or removed fails here until the map follows.
//! Its layer table is held to the code by `tests/layers.rs`.
//!
//! A path is read from the repository root, or else (the engine's module paths, `machine/run.rs`)
//! from `tea-runtime/src/`, or else (the YAML crate's folders, `load/`) from `tea-yaml/src/`, as
//! the document's introduction says. A path ending in `/` must be a
//! folder; one `*` in a path's last part (`tests/state_*.rs`) must match at least one file.

use std::path::{Path, PathBuf};

/// Where paths are looked up, in order: the repository root, then tea-runtime's sources, then
/// tea-yaml's.
const BASES: &[&str] = &["", "tea-runtime/src", "tea-yaml/src"];

/// The inline code spans of markdown `text` that look like paths, each with its line number.
/// Fenced code blocks are skipped.
fn paths_in(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut fenced = false;
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            if looks_like_a_path(span) {
                found.push((index + 1, span.to_owned()));
            }
        }
    }
    found
}

/// Whether code span `span` is a path: path characters only, and a `/` or a known extension.
fn looks_like_a_path(span: &str) -> bool {
    !span.is_empty()
        && span.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '*'))
        && (span.contains('/') || [".rs", ".md", ".toml"].iter().any(|ext| span.ends_with(ext)))
}

/// Whether `path` (relative, maybe ending in `/`, maybe with one `*` in its last part) names
/// something under `base`.
fn exists_under(base: &Path, path: &str) -> bool {
    let folder = path.ends_with('/');
    let trimmed = path.trim_end_matches('/');
    let full = base.join(trimmed);
    let Some(last) = full.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { return false };
    match last.split_once('*') {
        None => {
            if folder {
                full.is_dir()
            } else {
                full.exists()
            }
        }
        Some((prefix, suffix)) => {
            let parent = full.parent().map(Path::to_path_buf).unwrap_or_default();
            std::fs::read_dir(parent).into_iter().flatten().flatten().any(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                name.len() >= prefix.len() + suffix.len() && name.starts_with(prefix) && name.ends_with(suffix)
            })
        }
    }
}

/// The paths of `text` (shown as `doc`) that exist under none of `bases` (relative to `root`),
/// each as a problem that says how to fix it.
fn missing_paths(doc: &str, text: &str, root: &Path, bases: &[&str]) -> Vec<String> {
    paths_in(text)
        .into_iter()
        .filter(|(_, path)| !bases.iter().any(|base| exists_under(&root.join(base), path)))
        .map(|(line, path)| {
            let tried: Vec<String> =
                bases.iter().map(|b| if b.is_empty() { "the repository root".to_owned() } else { format!("{b}/") }).collect();
            format!(
                "{doc}:{line}: `{path}` is under none of {}: write the path as it is now (from the repository root), or drop the backticks if it is not a path",
                tried.join(", ")
            )
        })
        .collect()
}

#[test]
fn every_path_in_architecture_md_exists() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md reads");
    let paths = paths_in(&text);
    assert!(paths.len() >= 20, "ARCHITECTURE.md names only {} paths: the scan read nothing", paths.len());
    let problems = missing_paths("ARCHITECTURE.md", &text, &root, BASES);
    assert!(problems.is_empty(), "ARCHITECTURE.md names paths that do not exist:\n{}", problems.join("\n"));
}

#[test]
fn path_check_finds_what_is_missing() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = "Paths: `Cargo.toml`, `tests/`, `machine/run.rs`, `tests/state_*.rs`, `src/nowhere.rs`,\n\
                `Cargo.toml/`, `tests/zz_*.rs`, and not paths: `a -> b;`, `::tea::__private::…`,\n\
                `{parent}/{node}`, `tea_check::Graph`.\n```text\n`in/a/fence.rs`\n```\n";
    let found: Vec<String> = paths_in(text).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        found,
        [
            "Cargo.toml",
            "tests/",
            "machine/run.rs",
            "tests/state_*.rs",
            "src/nowhere.rs",
            "Cargo.toml/",
            "tests/zz_*.rs"
        ]
    );
    let problems = missing_paths("doc", text, &root, BASES);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].starts_with("doc:1: `src/nowhere.rs` is under none of the repository root, tea-runtime/src/"));
    assert!(problems[1].contains("`Cargo.toml/`"), "a file named as a folder: {problems:?}");
    assert!(problems[2].starts_with("doc:2: `tests/zz_*.rs`"), "{problems:?}");
}
