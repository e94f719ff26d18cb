//! tea's side of the benchmark in `bench/WORKLOADS.md`: the same workloads as LangGraph's
//! `langgraph_workloads.py`, under the same keys, timed the same way (median seconds per run over
//! the script's repetition counts, after one warm-up run). Every run's result is asserted.
//!
//! ```text
//! tea-bench [--quick] [--json]          the workloads (a table, or one JSON object)
//! tea-bench --rss-paused-threads N      peak RSS with N threads paused in one MemoryStore
//! tea-bench --build-time [--nodes N]    build time of a crate holding one graph! of N (200) nodes
//! tea-bench --only KEY [--loop SECONDS] one workload (with --loop: run it over and over, to profile)
//! tea-bench --yaml-state-scaling        a YAML loop's cost per node with 0 to 1000 extra state keys
//! tea-bench --react-agent [--json]      a 10-turn tool-calling conversation, per turn (react.rs)
//! tea-bench --model-server              the test model server for bench/langgraph_react.py
//! ```

mod build_time;
mod hitl;
mod react;
mod seq;
mod wide;
mod yaml;

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

/// How many times longer `stored` runs than `plain`: the median, over `pairs` pairs of runs
/// one after the other in this process (each warmed once), of the pair's ratio. A row's median
/// swings between runs of this program (the heap's layout, the other core's load) by more
/// than the store costs; a pair's two runs share the moment, so their ratio does not.
fn paired_ratio(pairs: usize, plain: &mut dyn FnMut(), stored: &mut dyn FnMut()) -> f64 {
    plain();
    stored();
    let time = |run: &mut dyn FnMut()| {
        let t0 = Instant::now();
        run();
        t0.elapsed().as_secs_f64()
    };
    let mut ratios: Vec<f64> = (0..pairs)
        .map(|_| {
            let plain = time(plain);
            time(stored) / plain
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// One measured value: a key of the JSON object, and how the table shows it.
struct Row {
    key: &'static str,
    value: f64,
    unit: Unit,
    /// One of the keys of the JSON object.
    script: bool,
}

enum Unit {
    Seconds,
    Ratio,
    Bytes,
    /// Flushes of the store's log in one durable hitl cycle.
    Flushes,
}

/// A workload: its key, its repetitions (`r` = 10, or 3 with `--quick`), whether it is one of
/// the script's keys (the JSON object holds those only), and how to make its run. A run is made
/// just before it is timed and dropped right after, so no other row's store (a sled database
/// with its flusher thread, a PostgreSQL pool) is open while a row is measured; `None`: the
/// row cannot run here (no PostgreSQL server), and is left out.
struct Workload {
    key: &'static str,
    reps: usize,
    script: bool,
    make: Box<dyn FnOnce() -> Option<Run>>,
}

/// One workload's run, called once per repetition.
type Run = Box<dyn FnMut()>;

/// `store` sealed at rest with a fixed benchmark key (the `/sealed` rows: what encryption costs).
fn sealed<C: tea::Checkpointer>(store: C) -> tea::Sealed<C> {
    tea::Sealed::new(store, tea::KeyRing::new(1, [7; 32]))
}

fn w<R: FnMut() + 'static>(key: &'static str, reps: usize, make: impl FnOnce() -> R + 'static) -> Workload {
    Workload { key, reps, script: true, make: Box::new(move || Some(Box::new(make()) as Run)) }
}

fn extra<R: FnMut() + 'static>(key: &'static str, reps: usize, make: impl FnOnce() -> R + 'static) -> Workload {
    Workload { script: false, ..w(key, reps, make) }
}

/// The workloads in the script's order, with the script's repetition counts, plus extras:
/// `chain_8_cpu` (the baseline of `parallel_speedup`), `rayon_8_cpu` (the same loops on rayon
/// without tea), the durable hitl cycle with `Durability::OnPause`, the hitl cycle in its two
/// other forms, and (when a PostgreSQL server answers, see `hitl::postgres_url`) the durable
/// cycle on `PostgresStore`, under the key of `bench/langgraph_postgres.py`, the two YAML
/// agents (`yaml_loop_1000`, `yaml_pipeline_10`), `hitl_cycle_durable/sync_floor` and `/fsync_floor` (four synced
/// log writes without tea: the floor under the durable cycle), the `wide_state` rows' `/no_engine`
/// (the node functions and reducers called in order without tea: the floor under those rows),
/// and the `/sealed` rows: store rows again with their store sealed at rest (`Sealed`), what
/// encryption costs.
fn workloads(r: usize) -> Vec<Workload> {
    use hitl::{Before, Interruptible, Node};
    // The fan-out rows run 5 r times: each takes a fraction of a millisecond, and their first
    // runs (the branch and journal pools waking, the heap growing) made the median of 10 swing
    // by 2x between runs of this program on a small machine.
    let mut all = vec![
        w("sequential_10", r * 10, seq::sequential_10),
        w("sequential_1000", r, seq::sequential_1000),
        w("sequential_1000_memory_store", r, seq::sequential_1000_memory_store),
        w("fanout_100", r * 5, seq::fanout_100),
        w("send_100", r * 5, seq::send_100),
        w("fanout_100_memory_store", r * 5, seq::fanout_100_memory_store),
        w("send_100_memory_store", r * 5, seq::send_100_memory_store),
        extra("sequential_1000_memory_store/sealed", r, seq::sequential_1000_memory_store_sealed),
        extra("fanout_100_memory_store/sealed", r * 5, seq::fanout_100_memory_store_sealed),
        extra("send_100_memory_store/sealed", r * 5, seq::send_100_memory_store_sealed),
        extra("fanout_100_memory_store/group_commit_1ms", r * 5, seq::fanout_100_memory_store_grouped),
        extra("send_100_memory_store/group_commit_1ms", r * 5, seq::send_100_memory_store_grouped),
        w("fanout_io_100", 5, seq::fanout_io_100),
        w("fanout_io_100_async", 5, seq::fanout_io_100_async),
        w("fanout_8_cpu", 3, seq::fanout_8_cpu),
        extra("chain_8_cpu", 3, seq::chain_8_cpu),
        extra("rayon_8_cpu", 3, seq::rayon_8_cpu),
        w("wide_state_25x300", r, wide::wide_state_25x300),
        w("wide_state_9x1200", r, wide::wide_state_9x1200),
        extra("wide_state_25x300/no_engine", r, wide::wide_state_25x300_no_engine),
        extra("wide_state_9x1200/no_engine", r, wide::wide_state_9x1200_no_engine),
        w("hitl_cycle_memory", r * 20, hitl::cycle_memory::<Node>),
        w("hitl_cycle_durable", r * 10, hitl::cycle_durable::<Node>),
        extra("hitl_cycle_memory/sealed", r * 20, hitl::cycle_memory_sealed::<Node>),
        extra("hitl_cycle_durable/sealed", r * 10, hitl::cycle_durable_sealed::<Node>),
        extra("hitl_cycle_durable/sync_floor", r * 10, || hitl::sync_floor(4)),
        extra("hitl_cycle_durable/fsync_floor", r * 10, || hitl::fsync_floor(4)),
        extra("hitl_cycle_durable/buffered", r * 10, hitl::cycle_durable_buffered::<Node>),
        extra("hitl_cycle_durable/on_pause", r * 10, hitl::cycle_durable_on_pause::<Node>),
        extra("hitl_cycle_memory/interruptible", r * 20, hitl::cycle_memory::<Interruptible>),
        extra("hitl_cycle_durable/interruptible", r * 10, hitl::cycle_durable::<Interruptible>),
        extra("hitl_cycle_memory/interrupt_before", r * 20, hitl::cycle_memory::<Before>),
        extra("hitl_cycle_durable/interrupt_before", r * 10, hitl::cycle_durable::<Before>),
        extra("yaml_loop_1000", r, yaml::loop_1000),
        extra("yaml_pipeline_10", r * 10, yaml::pipeline_10),
        extra("react_agent_10_turns", r, react::conversation),
        extra("react_agent_10_turns/model_only", r, react::model_only),
    ];
    #[cfg(feature = "python")]
    all.push(extra("yaml_python_pipeline_10", r * 10, yaml::python_pipeline_10));
    all.push(Workload {
        key: "hitl_cycle_durable_postgres",
        reps: r * 10,
        script: true,
        make: Box::new(|| hitl::cycle_durable_postgres::<Node>().map(|run| Box::new(run) as Run)),
    });
    all
}

fn measure(quick: bool, only: Option<&str>) -> Vec<Row> {
    let r = if quick { 3 } else { 10 };
    let mut rows = Vec::new();
    for workload in workloads(r) {
        if only.is_some_and(|only| only != workload.key) {
            continue;
        }
        let Some(mut run) = (workload.make)() else { continue };
        let value = median(workload.reps, &mut run);
        drop(run);
        rows.push(Row { key: workload.key, value, unit: Unit::Seconds, script: workload.script });
        eprint!(".");
    }
    for (store_less, store, key) in [
        ("fanout_100", "fanout_100_memory_store", "fanout_100_memory_store/over_store_less"),
        ("send_100", "send_100_memory_store", "send_100_memory_store/over_store_less"),
    ] {
        if only.is_some_and(|only| only != key) {
            continue;
        }
        let make = |key: &str| workloads(r).into_iter().find(|w| w.key == key).and_then(|w| (w.make)());
        if let (Some(mut plain), Some(mut stored)) = (make(store_less), make(store)) {
            let value = paired_ratio(r * 10, &mut plain, &mut stored);
            rows.push(Row { key, value, unit: Unit::Ratio, script: true });
            eprint!(".");
        }
    }
    let seconds = |key| rows.iter().find(|row| row.key == key).map(|row| row.value);
    let (chain, fanout, rayon) = (seconds("chain_8_cpu"), seconds("fanout_8_cpu"), seconds("rayon_8_cpu"));
    if let (Some(chain), Some(fanout)) = (chain, fanout) {
        rows.push(Row { key: "parallel_speedup", value: chain / fanout, unit: Unit::Ratio, script: true });
        if let Some(rayon) = rayon {
            rows.push(Row { key: "rayon_speedup", value: chain / rayon, unit: Unit::Ratio, script: false });
        }
    }
    if only.is_none() {
        let bytes = hitl::checkpoint_bytes() as f64;
        rows.push(Row { key: "checkpoint_bytes", value: bytes, unit: Unit::Bytes, script: true });
        use tea::Durability;
        for (key, durability) in [
            ("hitl_cycle_durable_flushes", Durability::EveryStep),
            ("hitl_cycle_durable/buffered_flushes", Durability::Buffered),
            ("hitl_cycle_durable/on_pause_flushes", Durability::OnPause),
        ] {
            let flushes = hitl::flushes_per_cycle::<hitl::Node>(durability) as f64;
            rows.push(Row { key, value: flushes, unit: Unit::Flushes, script: false });
        }
    }
    eprintln!();
    rows
}

/// Runs workload `key` over and over for `seconds` (for a profiler).
fn spin(key: &str, seconds: f64) {
    let make = workloads(1).into_iter().find(|w| w.key == key).unwrap_or_else(|| usage()).make;
    let mut run = make().unwrap_or_else(|| {
        eprintln!("{key} cannot run here");
        std::process::exit(1)
    });
    let t0 = Instant::now();
    let mut runs = 0u64;
    while t0.elapsed().as_secs_f64() < seconds {
        run();
        runs += 1;
    }
    eprintln!("{key}: {runs} runs, {:.3e} s per run", t0.elapsed().as_secs_f64() / runs as f64);
}

/// One JSON object, keys in the script's order.
fn print_json(rows: &[Row]) {
    let fields: Vec<String> = rows
        .iter()
        .filter(|row| row.script)
        .map(|row| {
            let value = match row.unit {
                Unit::Bytes => serde_json::Value::from(row.value as u64),
                _ => serde_json::Value::from(row.value),
            };
            format!(" {}: {value}", serde_json::Value::from(row.key))
        })
        .collect();
    println!("{{\n{}\n}}", fields.join(",\n"));
}

fn print_table(rows: &[Row]) {
    println!("{:<36} {:>14}  note", "workload", "median");
    for row in rows {
        let (value, note) = match row.unit {
            Unit::Seconds => (format!("{:.3e} s", row.value), human(row.value)),
            Unit::Ratio if row.key == "rayon_speedup" => {
                (format!("{:.2}", row.value), "chain_8_cpu / rayon_8_cpu (the machine's own limit)".to_owned())
            }
            Unit::Ratio if row.key.ends_with("/over_store_less") => (
                format!("{:.2}", row.value),
                "the store row over its store-less row, paired runs in one process".to_owned(),
            ),
            Unit::Ratio => (format!("{:.2}", row.value), "chain_8_cpu / fanout_8_cpu".to_owned()),
            Unit::Bytes => (format!("{} B", row.value as u64), "one paused hitl checkpoint".to_owned()),
            Unit::Flushes => (format!("{}", row.value as u64), "SledStore flushes per durable hitl cycle".to_owned()),
        };
        let note = match row.key {
            "sequential_1000" | "sequential_1000_memory_store" | "yaml_loop_1000" => {
                format!("{note}, {:.3} µs per step", row.value * 1e6 / 1000.0)
            }
            "hitl_cycle_memory" | "hitl_cycle_durable" => format!("{note}, {}", <hitl::Node as hitl::Form>::NAME),
            "hitl_cycle_durable_postgres" => {
                format!("{note}, {}, PostgresStore (schema tea_bench)", <hitl::Node as hitl::Form>::NAME)
            }
            "yaml_pipeline_10" | "yaml_python_pipeline_10" => {
                format!("{note}, {:.3} µs per node", row.value * 1e6 / 10.0)
            }
            "hitl_cycle_durable/on_pause" => format!("{note}, the same with .durability(Durability::OnPause)"),
            "wide_state_25x300/no_engine" | "wide_state_9x1200/no_engine" => {
                format!("{note}, the node functions called in order with the reducers, no tea: the workload's own cost")
            }
            "hitl_cycle_durable/sync_floor" => {
                format!("{note}, four synced log writes of a paused checkpoint's size, no tea (sled's sync_file_range)")
            }
            "hitl_cycle_durable/fsync_floor" => {
                format!("{note}, the same four writes, each followed by fdatasync")
            }
            key if key.ends_with("/sealed") => format!("{note}, the row above in a Sealed store (XChaCha20-Poly1305)"),
            key if key.ends_with("/interruptible") => format!("{note}, {}", <hitl::Interruptible as hitl::Form>::NAME),
            key if key.ends_with("/interrupt_before") => format!("{note}, {}", <hitl::Before as hitl::Form>::NAME),
            _ => note,
        };
        println!("{:<36} {:>14}  {note}", row.key, value);
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
         tea-bench --build-time [--nodes N]\n       tea-bench --only KEY [--loop SECONDS]\n       \
         tea-bench --yaml-state-scaling [--json]"
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
    let mut scaling = false;
    let mut react = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = || it.next().and_then(|n| n.parse::<usize>().ok()).unwrap_or_else(|| usage());
        match arg.as_str() {
            "--quick" => quick = true,
            "--json" => json = true,
            "--rss-paused-threads" => rss = Some(number()),
            "--build-time" => build = true,
            "--yaml-state-scaling" => scaling = true,
            "--react-agent" => react = true,
            "--model-server" => return react::serve(),
            "--nodes" => nodes = number(),
            "--only" => only = Some(it.next().unwrap_or_else(|| usage()).clone()),
            "--loop" => seconds = Some(it.next().and_then(|s| s.parse::<f64>().ok()).unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    if let Some(threads) = rss {
        hitl::rss_paused_threads(threads, json);
    } else if react {
        react::report(if quick { 3 } else { 10 }, json);
    } else if scaling {
        yaml::state_scaling(if quick { 3 } else { 10 }, json);
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
