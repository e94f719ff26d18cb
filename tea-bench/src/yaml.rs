//! `yaml_loop_1000`, `yaml_pipeline_10` and (feature `python`) `yaml_python_pipeline_10`: the
//! YAML agents of `tea-bench/yaml/` (the shared
//! workloads' `loop.yaml` and `pipeline.yaml`), each loaded once and invoked per run; and
//! `--yaml-state-scaling`, the per-node cost of the loop as the state grows.

use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::time::Instant;
use tea::yaml::{Agent, Engine};

const LOOP: &str = include_str!("../yaml/loop.yaml");
const PIPELINE: &str = include_str!("../yaml/pipeline.yaml");
#[cfg(feature = "python")]
const PYTHON_PIPELINE: &str = include_str!("../yaml/python_pipeline.yaml");

fn load(text: &str) -> Agent {
    Engine::new().load_str(text).unwrap_or_else(|e| panic!("a benchmark agent does not load:\n{e}"))
}

/// One Lua node counting to 1000 through a conditional goto.
pub fn loop_1000() -> impl FnMut() {
    let agent = load(LOOP);
    move || {
        let out = agent.invoke(black_box(json!({ "count": 0 }))).expect("yaml_loop_1000 runs");
        let state = out.done().expect("the loop finishes");
        assert_eq!(state["count"], 1000);
    }
}

/// Ten Lua nodes, a conditional edge and an append reducer.
pub fn pipeline_10() -> impl FnMut() {
    let agent = load(PIPELINE);
    move || {
        let out = agent.invoke(black_box(json!({}))).expect("yaml_pipeline_10 runs");
        let state = out.done().expect("the pipeline finishes");
        assert_eq!(state["done"], true);
        assert_eq!(state["log"].as_array().map(Vec::len), Some(10));
    }
}

/// The pipeline with Python blocks (feature `python`): the file runs unchanged on The Edge
/// Agent's Python engine, which `bench/edge_agent_python.sh` times against this row.
#[cfg(feature = "python")]
pub fn python_pipeline_10() -> impl FnMut() {
    let agent = Engine::new()
        .trust_code(true)
        .load_str(PYTHON_PIPELINE)
        .unwrap_or_else(|e| panic!("a benchmark agent does not load:\n{e}"));
    move || {
        let out = agent.invoke(black_box(json!({}))).expect("yaml_python_pipeline_10 runs");
        let state = out.done().expect("the pipeline finishes");
        assert_eq!(state["done"], true);
        assert_eq!(state["log"].as_array().map(Vec::len), Some(10));
    }
}

/// The loop's cost per node with 0, 10, 100 and 1000 extra keys in the state (each a short
/// string), median of `reps` runs: how a node's cost grows with the state's size.
pub fn state_scaling(reps: usize, json_out: bool) {
    let agent = load(LOOP);
    let mut rows = Vec::new();
    for keys in [0usize, 10, 100, 1000] {
        let mut input = Map::new();
        input.insert("count".into(), json!(0));
        for i in 0..keys {
            input.insert(format!("key_{i:04}"), Value::String(format!("value number {i}")));
        }
        let input = Value::Object(input);
        let run = || {
            let out = agent.invoke(black_box(input.clone())).expect("the loop runs");
            assert_eq!(out.done().expect("the loop finishes")["count"], 1000);
        };
        run();
        let mut times: Vec<f64> = (0..reps)
            .map(|_| {
                let t0 = Instant::now();
                run();
                t0.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        rows.push((keys, times[times.len() / 2] / 1000.0));
    }
    if json_out {
        let fields: Vec<String> = rows.iter().map(|(k, s)| format!(" \"{k}\": {s}")).collect();
        println!("{{\n{}\n}}", fields.join(",\n"));
    } else {
        println!("{:>10} {:>16}", "extra keys", "per node");
        for (keys, seconds) in rows {
            println!("{keys:>10} {:>13.3} µs", seconds * 1e6);
        }
    }
}
