"""A 10-turn tool-calling conversation: LangGraph's prebuilt agent against tea's.

LangGraph's side: ``create_react_agent`` (``langgraph.prebuilt``) with langchain-openai's
``ChatOpenAI`` and an ``InMemorySaver``, against tea-models' test server, served by
``tea-bench --model-server`` (started here). tea's side: ``tea-bench --react-agent --json``,
``react_agent`` with the ``OpenAi`` client against the same server code (tea-bench/src/react.rs).

Each turn adds a user message ("look up item N") to the conversation so far and invokes the
agent on a new thread: the model calls ``lookup(item=N)``, the tool answers, the model answers in
text; two HTTP requests a turn. The floor, ``model_only``, is the same two requests a turn sent
by the client alone (``ChatOpenAI`` bound to the tool, no graph); the overhead per turn is the
difference. Every turn's answer is asserted. Times are medians of ``r`` conversations (10, or 3
with --quick) after one warm-up, per turn.

    target/bench-venv/bin/python bench/langgraph_react.py [--quick] [--json] [--tea-bench PATH]

The venv needs langgraph and langchain-openai (bench/README.md names the versions measured).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

import openai
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

try:  # the HTTP library the openai client is built on (httpx2 in its later versions)
    import httpx2 as http
except ImportError:
    import httpx as http

TURNS = 10
SYSTEM = "You look items up."


@tool
def lookup(item: int) -> str:
    """Looks an item up in the stock."""
    return f"item {item}: 3 in stock"


def expected(turn):
    return f"Done: item {turn}: 3 in stock."


def median(reps, run):
    run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def model(base):
    # No retries: a failed request fails the run, as tea's side. TCP_NODELAY, as reqwest sets it:
    # the client writes a request's headers and body apart, and without it each request waits for
    # the server's delayed ACK (10 to 20 ms on loopback), which would drown what is measured.
    nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    client = openai.DefaultHttpxClient(transport=http.HTTPTransport(socket_options=nodelay))
    return ChatOpenAI(model="bench-model", base_url=base, api_key="bench-key", max_retries=0, http_client=client)


def conversation(base):
    agent = create_react_agent(model(base), [lookup], prompt=SYSTEM, checkpointer=InMemorySaver())
    counter = [0]

    def run():
        counter[0] += 1
        messages = []
        for turn in range(1, TURNS + 1):
            messages = messages + [HumanMessage(f"look up item {turn}")]
            config = {"configurable": {"thread_id": f"c{counter[0]}-t{turn}"}}
            state = agent.invoke({"messages": messages}, config)
            assert state["messages"][-1].content == expected(turn), state["messages"][-1]
            assert len(state["messages"]) == 4 * turn, len(state["messages"])
            messages = state["messages"]

    return run


def model_only(base):
    bound = model(base).bind_tools([lookup])

    def run():
        messages = [("system", SYSTEM)]
        for turn in range(1, TURNS + 1):
            messages.append(HumanMessage(f"look up item {turn}"))
            reply = bound.invoke(messages)
            call = reply.tool_calls[0]
            assert call["args"] == {"item": turn}, call
            messages.append(reply)
            messages.append(ToolMessage(lookup.invoke(call["args"]), tool_call_id=call["id"]))
            reply = bound.invoke(messages)
            assert reply.content == expected(turn), reply
            messages.append(reply)

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 conversations a side instead of 10")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
    parser.add_argument("--tea-bench", default=os.path.join(target, "release", "tea-bench"),
                        help="the tea-bench binary (cargo build --release -p tea-bench)")
    args = parser.parse_args()
    reps = 3 if args.quick else 10
    if not os.path.exists(args.tea_bench):
        sys.exit(f"missing {args.tea_bench}: cargo build --release -p tea-bench")

    server = subprocess.Popen([args.tea_bench, "--model-server"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        line = server.stdout.readline().strip()
        if not line.startswith("BASE="):
            sys.exit(f"tea-bench --model-server said {line!r}")
        base = line[len("BASE="):]
        lg_agent = median(reps, conversation(base)) / TURNS
        lg_floor = median(reps, model_only(base)) / TURNS
    finally:
        server.stdin.close()
        server.wait(timeout=30)

    tea_args = [args.tea_bench, "--react-agent", "--json"] + (["--quick"] if args.quick else [])
    tea = json.loads(subprocess.run(tea_args, check=True, capture_output=True, text=True).stdout)

    result = {
        "langgraph_react_agent_turn": lg_agent,
        "langgraph_model_only_turn": lg_floor,
        "langgraph_overhead_turn": lg_agent - lg_floor,
        "tea_react_agent_turn": tea["react_agent_turn"],
        "tea_model_only_turn": tea["model_only_turn"],
        "tea_overhead_turn": tea["overhead_turn"],
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    ms = lambda s: f"{s * 1e3:.3f} ms"
    print(f"| per turn of a {TURNS}-turn conversation | LangGraph | tea | ratio (LangGraph / tea) |")
    print("|---|---:|---:|---:|")
    for key, label in [("react_agent_turn", "prebuilt agent (2 model calls, 1 tool call)"),
                       ("model_only_turn", "the same requests, client alone"),
                       ("overhead_turn", "framework overhead (difference)")]:
        lg, t = result[f"langgraph_{key}"], result[f"tea_{key}"]
        ratio = f"{lg / t:,.1f}×" if t > 0 else "n/a"
        print(f"| {label} | {ms(lg)} | {ms(t)} | {ratio} |")


if __name__ == "__main__":
    main()
