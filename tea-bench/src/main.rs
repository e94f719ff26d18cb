//! tea's side of the benchmark in `bench/WORKLOADS.md`: the same workloads as LangGraph's
//! `langgraph_workloads.py`, under the same keys, timed the same way (median seconds per run over
//! the script's repetition counts, after one warm-up run). Every run's result is asserted.
//!
//! ```text
//! tea-bench [--quick] [--json]          the workloads (a table, or one JSON object)
//! tea-bench --rss-paused-threads N      peak RSS with N threads paused in one MemoryStore
//! tea-bench --build-time [--nodes N]    build time of a crate holding one graph! of N (200) nodes
//! tea-bench --only KEY [--loop SECONDS] one workload (with --loop: run it over and over, to profile)
//! ```

mod build_time;
mod hitl;
mod seq;
mod wide;

use std::time::Instant;

/// Median seconds per run of `run`, after one warm-up run (as the script's `median`).
fn median(reps: usize, mut run: impl FnMut()) -> f64 {
    run();
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let t0 = Instant::now();
            run();
            t0.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// One measured value: a key of the JSON object, and how the table shows it.
struct Row {
    key: &'static str,
    value: f64,
    unit: Unit,
}

enum Unit {
    Seconds,
    Ratio,
    Bytes,
}

/// A workload: its key, its repetitions (at full length), and a run.
type Workload = (&'static str, usize, Box<dyn FnMut()>);

/// The workloads in the script's order, with the script's repetition counts (`r` = 10, or 3
/// with `--quick`), plus `chain_8_cpu`, the baseline of `parallel_speedup`.
fn workloads(r: usize) -> Vec<Workload> {
    vec![
        ("sequential_10", r * 10, Box::new(seq::sequential_10())),
        ("sequential_1000", r, Box::new(seq::sequential_1000())),
        ("sequential_1000_memory_store", r, Box::new(seq::sequential_1000_memory_store())),
        ("fanout_100", r, Box::new(seq::fanout_100())),
        ("fanout_8_cpu", 3, Box::new(seq::fanout_8_cpu())),
        ("chain_8_cpu", 3, Box::new(seq::chain_8_cpu())),
        ("wide_state_25x300", r, Box::new(wide::wide_state_25x300())),
        ("wide_state_9x1200", r, Box::new(wide::wide_state_9x1200())),
        ("hitl_cycle_memory", r * 20, Box::new(hitl::cycle_memory())),
        ("hitl_cycle_durable", r * 10, Box::new(hitl::cycle_durable())),
    ]
}

fn measure(quick: bool, only: Option<&str>) -> Vec<Row> {
    let r = if quick { 3 } else { 10 };
    let mut rows = Vec::new();
    for (key, reps, mut run) in workloads(r) {
        if only.is_some_and(|only| only != key) {
            continue;
        }
        rows.push(Row { key, value: median(reps, &mut run), unit: Unit::Seconds });
        eprint!(".");
    }
    let seconds = |key| rows.iter().find(|row| row.key == key).map(|row| row.value);
    if let (Some(chain), Some(fanout)) = (seconds("chain_8_cpu"), seconds("fanout_8_cpu")) {
        rows.push(Row { key: "parallel_speedup", value: chain / fanout, unit: Unit::Ratio });
    }
    if only.is_none() {
        rows.push(Row { key: "checkpoint_bytes", value: hitl::checkpoint_bytes() as f64, unit: Unit::Bytes });
    }
    eprintln!();
    rows
}

/// Runs workload `key` over and over for `seconds` (for a profiler).
fn spin(key: &str, seconds: f64) {
    let (_, _, mut run) = workloads(1).into_iter().find(|w| w.0 == key).unwrap_or_else(|| usage());
    let t0 = Instant::now();
    let mut runs = 0u64;
    while t0.elapsed().as_secs_f64() < seconds {
        run();
        runs += 1;
    }
    eprintln!("{key}: {runs} runs, {:.3e} s per run", t0.elapsed().as_secs_f64() / runs as f64);
}

fn print_json(rows: &[Row]) {
    let mut out = serde_json::Map::new();
    for row in rows.iter().filter(|row| row.key != "chain_8_cpu") {
        let value = match row.unit {
            Unit::Bytes => serde_json::Value::from(row.value as u64),
            _ => serde_json::Value::from(row.value),
        };
        out.insert(row.key.to_owned(), value);
    }
    println!("{}", serde_json::to_string_pretty(&out).expect("numbers serialize"));
}

fn print_table(rows: &[Row]) {
    println!("{:<30} {:>14}  note", "workload", "median");
    for row in rows {
        let (value, note) = match row.unit {
            Unit::Seconds => (format!("{:.3e} s", row.value), human(row.value)),
            Unit::Ratio => (format!("{:.2}", row.value), "chain_8_cpu / fanout_8_cpu".to_owned()),
            Unit::Bytes => (format!("{} B", row.value as u64), "one paused hitl checkpoint".to_owned()),
        };
        let note = match row.key {
            "sequential_1000" | "sequential_1000_memory_store" => {
                format!("{note}, {:.3} µs per step", row.value * 1e6 / 1000.0)
            }
            "hitl_cycle_memory" | "hitl_cycle_durable" => format!("{note}, pause form: {}", hitl::FORM),
            _ => note,
        };
        println!("{:<30} {:>14}  {note}", row.key, value);
    }
}

fn human(seconds: f64) -> String {
    if seconds >= 1e-3 {
        format!("{:.3} ms", seconds * 1e3)
    } else {
        format!("{:.3} µs", seconds * 1e6)
    }
}

/// A `kB` line of `/proc/self/status`, in bytes.
pub(crate) fn proc_status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

fn usage() -> ! {
    eprintln!(
        "usage: tea-bench [--quick] [--json]\n       tea-bench --rss-paused-threads N\n       \
         tea-bench --build-time [--nodes N]\n       tea-bench --only KEY [--loop SECONDS]"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut quick = false;
    let mut json = false;
    let mut rss = None;
    let mut build = false;
    let mut nodes = 200;
    let mut only = None;
    let mut seconds = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = || it.next().and_then(|n| n.parse::<usize>().ok()).unwrap_or_else(|| usage());
        match arg.as_str() {
            "--quick" => quick = true,
            "--json" => json = true,
            "--rss-paused-threads" => rss = Some(number()),
            "--build-time" => build = true,
            "--nodes" => nodes = number(),
            "--only" => only = Some(it.next().unwrap_or_else(|| usage()).clone()),
            "--loop" => seconds = Some(it.next().and_then(|s| s.parse::<f64>().ok()).unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    if let Some(threads) = rss {
        hitl::rss_paused_threads(threads, json);
    } else if build {
        build_time::run(nodes, json);
    } else if let (Some(key), Some(seconds)) = (&only, seconds) {
        spin(key, seconds);
    } else {
        let rows = measure(quick, only.as_deref());
        if json {
            print_json(&rows);
        } else {
            print_table(&rows);
        }
    }
}
