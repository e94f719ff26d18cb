//! Writes the big graphs: chains of 10 and 1000 nodes a fan-out of 100 branches, one whose branches block 20 ms and one whose
//! async branches await a 20 ms timer, each a
//! `graph!` with one node function per node, into `$OUT_DIR/graphs.rs`.

use std::fmt::Write as _;
use std::path::PathBuf;

/// A module `name` holding a chain `n0 -> n1 -> … -> n{len-1}` over `Seq`, each node `count += 1`.
fn chain(out: &mut String, module: &str, graph: &str, len: usize) {
    writeln!(out, "pub mod {module} {{\n    use super::*;").unwrap();
    for i in 0..len {
        writeln!(out, "    fn n{i}(s: &Seq) -> SeqUpdate {{ Seq::update().count(s.count + 1) }}").unwrap();
    }
    writeln!(out, "    graph! {{\n        pub {graph} for Seq {{\n            start -> n0;").unwrap();
    for i in 1..len {
        writeln!(out, "            n{} -> n{i};", i - 1).unwrap();
    }
    writeln!(out, "            n{} -> end;\n        }}\n    }}\n}}", len - 1).unwrap();
}

/// A module `name` holding `a`, `parallel a => [b0, …] -> join`, each `bi` appending `i`
/// (after blocking `block_ms` milliseconds, a stand-in for a synchronous LLM or HTTP call).
fn fanout(out: &mut String, module: &str, graph: &str, width: usize, block_ms: u64) {
    writeln!(out, "pub mod {module} {{\n    use super::*;").unwrap();
    writeln!(out, "    fn a(_: &Seq) -> SeqUpdate {{ Seq::update().count(0) }}").unwrap();
    for i in 0..width {
        let block = if block_ms > 0 {
            format!("std::thread::sleep(std::time::Duration::from_millis({block_ms})); ")
        } else {
            String::new()
        };
        writeln!(out, "    fn b{i}(_: &Seq) -> SeqUpdate {{ {block}Seq::update().log(vec![{i}.to_string()]) }}")
            .unwrap();
    }
    writeln!(out, "    fn join(s: &Seq) -> SeqUpdate {{ Seq::update().count(s.log.len() as u64) }}").unwrap();
    let heads: Vec<String> = (0..width).map(|i| format!("b{i}")).collect();
    writeln!(
        out,
        "    graph! {{\n        pub {graph} for Seq {{\n            start -> a;\n            \
         parallel a => [{}] -> join;\n            join -> end;\n        }}\n    }}\n}}",
        heads.join(", ")
    )
    .unwrap();
}

/// A module `name` holding `a`, `parallel a => [b0, …] -> join` with every `bi` an async node
/// that awaits a `block_ms` tokio timer (a stand-in for an async LLM or HTTP call), then appends `i`.
fn fanout_async(out: &mut String, module: &str, graph: &str, width: usize, block_ms: u64) {
    writeln!(out, "pub mod {module} {{\n    use super::*;").unwrap();
    writeln!(out, "    fn a(_: &Seq) -> SeqUpdate {{ Seq::update().count(0) }}").unwrap();
    for i in 0..width {
        writeln!(
            out,
            "    async fn b{i}(_: &Seq) -> SeqUpdate {{ \
             tokio::time::sleep(std::time::Duration::from_millis({block_ms})).await; \
             Seq::update().log(vec![{i}.to_string()]) }}"
        )
        .unwrap();
    }
    writeln!(out, "    fn join(s: &Seq) -> SeqUpdate {{ Seq::update().count(s.log.len() as u64) }}").unwrap();
    let heads: Vec<String> = (0..width).map(|i| format!("b{i}")).collect();
    writeln!(
        out,
        "    graph! {{\n        pub {graph} for Seq {{\n            start -> a;\n            \
         parallel a => [{}] -> join;\n            join -> end;\n            async {};\n        }}\n    }}\n}}",
        heads.join(", "),
        heads.join(", ")
    )
    .unwrap();
}

fn main() {
    let mut out = String::new();
    chain(&mut out, "seq10", "Seq10", 10);
    chain(&mut out, "seq1000", "Seq1000", 1000);
    fanout(&mut out, "fan100", "Fan100", 100, 0);
    fanout(&mut out, "fan_io100", "FanIo100", 100, 20);
    fanout_async(&mut out, "fan_io100_async", "FanIo100Async", 100, 20);
    let path = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("graphs.rs");
    std::fs::write(path, out).expect("write the generated graphs");
    println!("cargo:rerun-if-changed=build.rs");
}
