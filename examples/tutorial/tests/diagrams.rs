//! The guide's diagrams are current: each graph of the tutorial, and the example agents the YAML
//! chapter shows, drawn by tea itself (`graph!`'s `MERMAID`, `tea::yaml::Agent::mermaid`) must
//! equal the ```mermaid block that follows its `<!-- diagram: NAME … -->` mark in the chapter.
//!
//! After changing a graph, `TEA_UPDATE_DIAGRAMS=1 cargo test -p tea-tutorial --test diagrams`
//! rewrites the blocks; the test then passes and the diff shows the new drawing.

use std::path::{Path, PathBuf};

// Each step's program, compiled again as a module here so its graph type can be named.
#[allow(dead_code)]
mod step1 {
    include!("../src/bin/step1_first_graph.rs");
    pub const MERMAID: &str = Support::MERMAID;
}
#[allow(dead_code)]
mod step2 {
    include!("../src/bin/step2_approval.rs");
    pub const MERMAID: &str = Support::MERMAID;
}
#[allow(dead_code)]
mod step3 {
    include!("../src/bin/step3_on_disk.rs");
    pub const MERMAID: &str = Support::MERMAID;
}
#[allow(dead_code)]
mod step4 {
    include!("../src/bin/step4_serve.rs");
    pub const MERMAID: &str = Support::MERMAID;
}

fn chapter(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src").join(name)
}

/// The body of the ```mermaid block after `<!-- diagram: {name} ` in `text`, and where it is.
fn block<'t>(text: &'t str, name: &str, file: &Path) -> (usize, &'t str) {
    let mark = format!("<!-- diagram: {name} ");
    let at = text.find(&mark).unwrap_or_else(|| panic!("{}: no `{mark}…-->` mark", file.display()));
    let open = "```mermaid\n";
    let start = at
        + text[at..].find(open).unwrap_or_else(|| panic!("{}: no ```mermaid after {mark}", file.display()))
        + open.len();
    let end =
        start + text[start..].find("```\n").unwrap_or_else(|| panic!("{}: the block never closes", file.display()));
    (start, &text[start..end])
}

/// Asserts that the block `name` of `file` is `drawn` (or, with `TEA_UPDATE_DIAGRAMS` set,
/// writes it there).
fn check(file: &str, name: &str, drawn: &str) {
    let path = chapter(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (start, current) = block(&text, name, &path);
    if current == drawn {
        return;
    }
    if std::env::var_os("TEA_UPDATE_DIAGRAMS").is_some() {
        let updated = format!("{}{drawn}{}", &text[..start], &text[start + current.len()..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "{}: the diagram `{name}` is not the graph's drawing; rerun with TEA_UPDATE_DIAGRAMS=1 to \
         update it.\n--- in the chapter:\n{current}\n--- drawn by tea:\n{drawn}",
        path.display()
    );
}

#[test]
fn the_first_graph_is_drawn_as_the_code_says() {
    check("tutorial-first-graph.md", "step1", step1::MERMAID);
}

#[test]
fn the_approval_graph_is_drawn_as_the_code_says_and_steps_3_and_4_keep_it() {
    check("tutorial-approval.md", "step2", step2::MERMAID);
    assert_eq!(step3::MERMAID, step2::MERMAID, "step 3 runs the graph of step 2");
    assert_eq!(step4::MERMAID, step2::MERMAID, "step 4 serves the graph of step 2");
}

#[test]
fn the_example_agents_are_drawn_as_they_load() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agents");
    for (name, file) in [("review", "review.yaml"), ("research", "research.yaml")] {
        let engine = tea::yaml::Engine::new().checkpointer(tea::MemoryStore::new());
        let agent = engine.load_file(examples.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        check("yaml.md", name, &agent.mermaid());
    }
}

#[test]
fn the_yaml_agent_is_drawn_as_it_loads() {
    let text = include_str!("../support.yaml");
    let engine = tea::yaml::Engine::new().checkpointer(tea::MemoryStore::new());
    let agent = engine.load_str(text).expect("support.yaml loads");
    check("tutorial-yaml.md", "step5", &agent.mermaid());
}
