#!/usr/bin/env bash
# Times the YAML agents of tea-bench/yaml/ on The Edge Agent's own Python engine and on tea:
# `python_pipeline.yaml` (ten Python nodes; tea's row `yaml_python_pipeline_10`, feature
# `python`) and `loop.yaml` (one Lua node counting to 1000; `yaml_loop_1000`), each file
# unchanged on both. The Edge Agent is not on PyPI: give a checkout of its repository
# (github.com/fabceolin/the_edge_agent); its `python/` package is installed into a venv under
# target/ (with lupa, the Lua it runs `loop.yaml` with).
#
#   bash bench/edge_agent_python.sh PATH/TO/the_edge_agent [REPS]
#
# Prints each engine's median per run and the ratio. Both run here, in the same minutes; the
# machine is noisy, so run it a few times and quote medians.
set -euo pipefail

src=${1:?usage: bash bench/edge_agent_python.sh PATH/TO/the_edge_agent [REPS]}
reps=${2:-200}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -f "$src/python/setup.py" ] || { echo "no The Edge Agent checkout at $src (python/setup.py missing)" >&2; exit 2; }

venv="$root/target/edge-agent-venv"
if ! "$venv/bin/python" -c 'import the_edge_agent, lupa' 2>/dev/null; then
    echo "== installing The Edge Agent's Python engine from $src/python into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet "$src/python" lupa > "$venv/install.log" 2>&1 \
        || { cat "$venv/install.log" >&2; exit 1; }
fi

echo "== building tea-bench (release, feature python)" >&2
cargo build --release --quiet -p tea-bench --features python

edge_agent() {
    # $1: the file, $2: the input (JSON), $3: the check (a Python expression over `st`).
    "$venv/bin/python" - "$1" "$2" "$3" "$reps" <<'PY' 2>/dev/null
import json, statistics, sys, time
from the_edge_agent import YAMLEngine
path, given, check, reps = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
graph = YAMLEngine().load_from_file(path)
def run():
    last = None
    for event in graph.invoke(dict(given)):
        last = event
    return last.get("state", last)
st = run()
assert eval(check), st
times = []
for _ in range(reps):
    t = time.perf_counter()
    run()
    times.append(time.perf_counter() - t)
print(statistics.median(times))
PY
}

tea() {
    target/release/tea-bench --only "$1" | awk -v key="$1" '$1 == key { print $2 }'
}

row() {
    local name=$1 file=$2 input=$3 check=$4 key=$5
    local theirs ours
    theirs=$(edge_agent "$file" "$input" "$check")
    ours=$(tea "$key")
    python3 -c "import sys; t, o = float(sys.argv[1]), float(sys.argv[2]); print(f'{sys.argv[3]:<34} The Edge Agent {t*1e6:10.1f} µs   tea {o*1e6:8.1f} µs   {t/o:6.1f}x')" \
        "$theirs" "$ours" "$name"
}

row "python_pipeline.yaml (10 Python)" tea-bench/yaml/python_pipeline.yaml '{}' \
    'st["done"] is True and len(st["log"]) == 10' yaml_python_pipeline_10
row "loop.yaml (Lua, 1000 passes)" tea-bench/yaml/loop.yaml '{"count": 0}' 'st["count"] == 1000' yaml_loop_1000
