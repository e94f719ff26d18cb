"""LangGraph's side of `hitl_cycle_durable_postgres`: the `hitl_cycle_durable` workload of
WORKLOADS.md (the shared script's graph and cycle) on LangGraph's `PostgresSaver`.

Run:  pip install langgraph langgraph-checkpoint-postgres 'psycopg[binary]'
      python bench/langgraph_postgres.py [--quick] [--url postgres://postgres@127.0.0.1:5432/test]
          [--workloads DIR]   (the directory of langgraph_workloads.py; default ../shared/bench)
Prints one JSON object: {"hitl_cycle_durable_postgres": median seconds per cycle}. The saver's
tables go in a schema of their own (`lg_bench_<pid>`), dropped at the end.
"""
import itertools, json, os, sys

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.types import Command

# The graph and the timing of the shared script, so both sides run the same workload.
_shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench")
if "--workloads" in sys.argv:
    _shared = sys.argv[sys.argv.index("--workloads") + 1]
sys.path.insert(0, _shared)
from langgraph_workloads import QUICK, hitl, median  # noqa: E402


def main():
    url = "postgres://postgres@127.0.0.1:5432/test"
    if "--url" in sys.argv:
        url = sys.argv[sys.argv.index("--url") + 1]
    r = 3 if QUICK else 10
    schema = f"lg_bench_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            # The saver's own connection, with its tables in the schema.
            with PostgresSaver.from_conn_string(f"{url}?options=-csearch_path%3D{schema}") as saver:
                saver.setup()
                app = hitl(saver)
                ids = itertools.count()

                def cycle():
                    cfg = {"configurable": {"thread_id": f"p{next(ids)}"}}
                    app.invoke({"question": "", "answer": "", "log": []}, cfg)
                    res = app.invoke(Command(resume="yes"), cfg)
                    assert res["answer"] == "yes" and res["log"] == ["prepare", "ask", "finish"], res

                seconds = median(cycle, r * 10)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
    print(json.dumps({"hitl_cycle_durable_postgres": seconds}, indent=1))


if __name__ == "__main__":
    main()
