//! The build time of a crate holding one `graph!` of N nodes: a throwaway crate under
//! `target/bench-build<N>/` (path dependency on this workspace's `tea`), built once to compile
//! its dependencies, then built three times more, each after its source is rewritten: those
//! builds compile that crate alone, and the median is reported.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tea-bench sits in the workspace").to_path_buf()
}

fn source(nodes: usize) -> String {
    let mut s = String::from(
        "use tea::prelude::*;\n\n\
         #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]\n\
         pub struct Seq {\n    pub count: u64,\n    #[reducer(append)]\n    pub log: Vec<String>,\n}\n\n",
    );
    for i in 0..nodes {
        writeln!(s, "fn n{i}(s: &Seq) -> SeqUpdate {{\n    Seq::update().count(s.count + 1)\n}}").unwrap();
    }
    s.push_str("\ngraph! {\n    pub Chain for Seq {\n        start -> n0;\n");
    for i in 1..nodes {
        writeln!(s, "        n{} -> n{i};", i - 1).unwrap();
    }
    writeln!(s, "        n{} -> end;\n    }}\n}}\n", nodes - 1).unwrap();
    writeln!(
        s,
        "fn main() {{\n    let out = Chain::builder().build().invoke(Seq::default()).unwrap();\n    \
         assert_eq!(out.count, {nodes});\n}}"
    )
    .unwrap();
    s
}

fn cargo_build(dir: &Path) -> f64 {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let t0 = Instant::now();
    let status = Command::new(cargo)
        .arg("build")
        .arg("--quiet")
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .status()
        .expect("run cargo");
    let seconds = t0.elapsed().as_secs_f64();
    assert!(status.success(), "cargo build of {} failed", dir.display());
    seconds
}

pub fn run(nodes: usize, json: bool) {
    assert!(nodes > 0, "a graph needs a node");
    let root = workspace_root();
    let dir = root.join("target").join(format!("bench-build{nodes}"));
    std::fs::create_dir_all(dir.join("src")).expect("create the throwaway crate");
    let manifest = format!(
        "[package]\nname = \"tea-build{nodes}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\ntea = {{ package = \"tea-graph\", path = {:?} }}\nserde = {{ version = \"1\", features = [\"derive\"] }}\n\n\
         # Not a member of the tea workspace.\n[workspace]\n",
        root.display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    if !dir.join("Cargo.lock").exists() {
        // The workspace's versions of the dependencies: no resolution, nothing new to fetch.
        let _ = std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock"));
    }
    let main = dir.join("src").join("main.rs");
    let text = source(nodes);
    std::fs::write(&main, &text).expect("write main.rs");
    eprintln!("warming the dependencies of {} (dev profile)…", dir.display());
    let warm = cargo_build(&dir);
    // The median of three builds, each after the source is written anew (a new mtime).
    let mut builds: Vec<f64> = (0..3)
        .map(|_| {
            std::fs::write(&main, &text).expect("touch main.rs");
            cargo_build(&dir)
        })
        .collect();
    builds.sort_by(f64::total_cmp);
    let seconds = builds[1];
    if json {
        println!(
            "{}",
            serde_json::json!({ "graph_nodes": nodes, "build_seconds": seconds, "warm_build_seconds": warm })
        );
    } else {
        println!("cargo build of a crate with one graph! of {nodes} nodes (dev profile, deps warm): {seconds:.2} s");
    }
}
