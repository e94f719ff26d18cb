#!/usr/bin/env bash
# Runs the workloads of WORKLOADS.md on LangGraph (the shared script, in a venv) and on tea
# (tea-bench, release build), then prints one table: key, LangGraph s, tea s, ratio.
#
#   bash bench/compare.sh [--quick] [--skip-build-time]
#
# --quick            fewer repetitions on both sides (the script's own --quick)
# --skip-build-time  skip the build time of the 200-node graph! crate
# Outputs are kept in target/bench-out/.
#
# hitl_cycle_durable_postgres runs on both sides when PostgreSQL answers at $TEA_BENCH_POSTGRES_URL
# (default postgres://postgres@127.0.0.1:5432/test): LangGraph's PostgresSaver through
# bench/langgraph_postgres.py, tea's PostgresStore in tea-bench.
set -euo pipefail

root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
cd "$root"

quick=()
build_time=1
for arg in "$@"; do
    case "$arg" in
        --quick) quick=(--quick) ;;
        --skip-build-time) build_time=0 ;;
        *) echo "usage: bash bench/compare.sh [--quick] [--skip-build-time]" >&2; exit 2 ;;
    esac
done

script="${TEA_BENCH_SCRIPT:-$root/../shared/bench/langgraph_workloads.py}"
[ -f "$script" ] || { echo "missing $script" >&2; exit 1; }
venv="$root/target/bench-venv"
out="$root/target/bench-out"
mkdir -p "$out"

if ! "$venv/bin/python" -c 'import langgraph, langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres, psycopg' 2>/dev/null; then
    echo "== creating $venv (langgraph, langgraph-checkpoint-sqlite, langgraph-checkpoint-postgres, psycopg)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet langgraph langgraph-checkpoint-sqlite langgraph-checkpoint-postgres 'psycopg[binary]'
fi

pg_url="${TEA_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
export TEA_BENCH_POSTGRES_URL="$pg_url"
if "$venv/bin/python" -c 'import psycopg, sys; psycopg.connect(sys.argv[1], connect_timeout=3).close()' "$pg_url" 2>/dev/null; then
    postgres=1
else
    echo "== no PostgreSQL at $pg_url: hitl_cycle_durable_postgres is skipped" >&2
    postgres=0
fi

echo "== building tea-bench (release)" >&2
cargo build --release --quiet -p tea-bench

echo "== LangGraph: $script ${quick[*]}" >&2
"$venv/bin/python" "$script" "${quick[@]}" > "$out/langgraph.json"
if [ "$postgres" = 1 ]; then
    echo "== LangGraph: bench/langgraph_postgres.py ${quick[*]} (PostgresSaver)" >&2
    "$venv/bin/python" bench/langgraph_postgres.py "${quick[@]}" --url "$pg_url" --workloads "$(dirname "$script")" \
        > "$out/langgraph_postgres.json"
else
    rm -f "$out/langgraph_postgres.json"
fi

echo "== tea: cargo run --release -p tea-bench -- --json ${quick[*]}" >&2
cargo run --release --quiet -p tea-bench -- --json "${quick[@]}" > "$out/tea.json"

echo "== tea: 10 000 paused threads in one MemoryStore" >&2
cargo run --release --quiet -p tea-bench -- --rss-paused-threads 10000 --json > "$out/rss.json"

if [ "$build_time" = 1 ]; then
    echo "== tea: build time of a crate with one graph! of 200 nodes" >&2
    cargo run --release --quiet -p tea-bench -- --build-time --nodes 200 --json > "$out/build.json"
else
    rm -f "$out/build.json"
fi

lg_version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("langgraph"), "(langgraph-checkpoint-postgres", m.version("langgraph-checkpoint-postgres") + ")")')
python3 - "$out" "$lg_version" "${quick[*]:-full}" <<'PY'
import json, os, platform, subprocess, sys, datetime

out, lg_version, mode = sys.argv[1], sys.argv[2], sys.argv[3]
lg = json.load(open(os.path.join(out, "langgraph.json")))
lg_pg = os.path.join(out, "langgraph_postgres.json")
if os.path.exists(lg_pg):
    lg.update(json.load(open(lg_pg)))
tea = json.load(open(os.path.join(out, "tea.json")))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
print(f"date: {datetime.datetime.now().isoformat(timespec='seconds')}  mode: {mode}")
print(f"machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {cpu}")
print(f"{rustc}; Python {platform.python_version()}, langgraph {lg_version}")
print()
print("| key | LangGraph s | tea s | ratio (LangGraph / tea) |")
print("|---|---:|---:|---:|")
for key, lg_s in lg.items():
    t = tea.get(key)
    if t is None:
        print(f"| {key} | {lg_s:.3e} | missing | |")
        continue
    print(f"| {key} | {lg_s:.3e} | {t:.3e} | {lg_s / t:,.0f}× |")
print()
print(f"parallel_speedup (tea, chain / fan-out of 8 CPU loops): {tea['parallel_speedup']:.2f}")
for key in ("fanout_100_memory_store", "send_100_memory_store"):
    ratio = tea.get(f"{key}/over_store_less")
    if ratio is not None:
        print(f"{key} over its store-less row, paired runs in one process: {ratio:.2f}×")
print(f"checkpoint_bytes (one paused hitl checkpoint, envelope included): {tea['checkpoint_bytes']}")
rss = json.load(open(os.path.join(out, "rss.json")))
print(f"10 000 paused threads in one MemoryStore: peak RSS {rss['peak_rss_bytes'] / 2**20:.1f} MiB, "
      f"{rss['bytes_per_paused_thread']} bytes per paused thread "
      f"(history of {rss['checkpoints_per_paused_thread']} checkpoints, {rss['checkpoint_bytes_per_paused_thread']} bytes)")
path = os.path.join(out, "build.json")
if os.path.exists(path):
    b = json.load(open(path))
    print(f"build of a crate with one graph! of {b['graph_nodes']} nodes (dev profile, deps warm): "
          f"{b['build_seconds']:.2f} s")
PY

# A 10-turn tool-calling conversation: react_agent against LangGraph's create_react_agent on one test server.
"$venv/bin/python" -c 'import langchain_openai' 2>/dev/null || "$venv/bin/pip" install --quiet 'langchain-openai==1.7.4'
echo && "$venv/bin/python" bench/langgraph_react.py "${quick[@]}"
