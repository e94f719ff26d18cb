"""LangGraph's Python SDK against `tea serve`, unchanged: every call of the SDK that tea serves,
each result checked. Run by tea-cli/tests/langgraph_sdk.rs with a pinned `langgraph-sdk` (see
.ci/run), against `tea serve tea-serve/tests/sdk/chat.yaml examples/agents/review.yaml` with a
token file.

    TEA_URL=http://127.0.0.1:PORT TEA_KEY=TOKEN python langgraph_sdk_check.py

Prints one line per call checked; exits non-zero on the first result that is not as expected.
"""

import os
import sys
import uuid

import httpx
from langgraph_sdk import get_sync_client

URL = os.environ["TEA_URL"]
KEY = os.environ["TEA_KEY"]
checked = []


def check(name, condition, seen=None):
    if not condition:
        print(f"FAILED {name}: {seen!r}", file=sys.stderr)
        sys.exit(1)
    checked.append(name)
    print(f"ok {name}")


def status_of(call):
    """The HTTP status a call fails with (None when it succeeds)."""
    try:
        call()
    except httpx.HTTPStatusError as error:
        return error.response.status_code
    return None


def parts(stream):
    return [(part.event, part.data) for part in stream]


client = get_sync_client(url=URL, api_key=KEY)
hello = {"messages": [{"type": "human", "content": "hi"}]}

# ---- access: `x-api-key` (what get_client(api_key=…) sends) ----
check("api key accepted", isinstance(client.assistants.search(), list))
wrong = get_sync_client(url=URL, api_key="not-the-token-0123456789")
check("wrong api key refused", status_of(lambda: wrong.assistants.search()) == 401)

# ---- assistants ----
found = client.assistants.search()
check("assistants.search", sorted(a["assistant_id"] for a in found) == ["chat", "review"], found)
check("assistants.search graph_id", [a["graph_id"] for a in client.assistants.search(graph_id="chat")] == ["chat"])
check("assistants.search limit", len(client.assistants.search(limit=1)) == 1)
check("assistants.count", client.assistants.count() == 2 and client.assistants.count(graph_id="chat") == 1)
chat = client.assistants.get("chat")
check("assistants.get", chat["assistant_id"] == "chat" and chat["graph_id"] == "chat" and "created_at" in chat, chat)
check("assistants.get unknown", status_of(lambda: client.assistants.get("nobody")) == 404)
graph = client.assistants.get_graph("chat")
ids = {node["id"] for node in graph["nodes"]}
check("assistants.get_graph nodes", {"__start__", "answer", "review", "send", "__end__"} <= ids, graph)
check(
    "assistants.get_graph edges",
    {"source": "answer", "target": "review"} in [{k: e[k] for k in ("source", "target")} for e in graph["edges"]],
    graph,
)
schemas = client.assistants.get_schemas("chat")
state = schemas["state_schema"]["properties"]
check("assistants.get_schemas", state["messages"]["type"] == ["array", "null"] and state["sent"]["type"] == ["integer", "null"], schemas)
check("assistants.get_schemas input", schemas["input_schema"]["properties"].keys() == state.keys(), schemas)

# ---- threads ----
thread = client.threads.create(metadata={"suite": "sdk"})
tid = thread["thread_id"]
check("threads.create", thread["status"] == "idle" and thread["metadata"] == {"suite": "sdk"}, thread)
check("threads.get", client.threads.get(tid)["thread_id"] == tid)
check("threads.search", tid in [t["thread_id"] for t in client.threads.search(metadata={"suite": "sdk"})])

# ---- runs.wait to a pause: the state with `__interrupt__` ----
paused = client.runs.wait(tid, "chat", input=hello, context={"user": "Ada"}, config={"recursion_limit": 10})
check("runs.wait to a pause", paused["messages"][-1]["content"] == "Hello Ada, you said: hi", paused)
check("runs.wait __interrupt__", paused["__interrupt__"][0]["value"] is not None and paused["__interrupt__"][0]["id"], paused)
check("threads.get interrupted", client.threads.get(tid)["status"] == "interrupted")

# ---- thread state ----
now = client.threads.get_state(tid)
check("threads.get_state", now["next"] == ["review"] and now["values"]["messages"][-1]["type"] == "ai", now)
check("threads.get_state interrupts", now["interrupts"][0]["id"] == paused["__interrupt__"][0]["id"], now)
check("threads.get_state tasks", now["tasks"][0]["name"] == "review" and now["tasks"][0]["interrupts"], now)
at = client.threads.get_state(tid, checkpoint_id=now["checkpoint"]["checkpoint_id"])
check("threads.get_state at a checkpoint", at["values"] == now["values"], at)
picked = client.threads.get_state(tid, select=["values.messages", "next"], subgraphs=True)
check("threads.get_state select", picked.keys() == {"values", "next"} and list(picked["values"]) == ["messages"], picked)
posted = client.threads.get_state(tid, checkpoint={"checkpoint_id": now["checkpoint"]["checkpoint_id"], "checkpoint_ns": ""})
check("threads.get_state checkpoint", posted["checkpoint"] == now["checkpoint"], posted)
history = client.threads.get_history(tid)
check("threads.get_history", len(history) >= 2 and history[0]["checkpoint"] == now["checkpoint"], history)
selected = client.threads.get_history(tid, limit=1, select=["values.messages", "next"])
check("threads.get_history select", selected[0].keys() == {"values", "next"} and list(selected[0]["values"]) == ["messages"], selected)
check("threads.get_history limit", len(client.threads.get_history(tid, limit=1)) == 1)
older = client.threads.get_history(tid, before=now["checkpoint"])
check("threads.get_history before", older and all(h["checkpoint"] != now["checkpoint"] for h in older), older)
first_state = client.threads.get_history(tid, metadata={"step": 0})
check("threads.get_history metadata", [h["checkpoint"] for h in first_state] == [history[-1]["checkpoint"]], first_state)

oldest = history[-1]["checkpoint"]["checkpoint_id"]
check("a run from a past checkpoint refused", status_of(lambda: client.runs.wait(tid, "chat", checkpoint_id=oldest)) == 422)

# ---- an answer (command.resume), once ----
done = client.runs.wait(tid, "chat", command={"resume": True})
check("runs.wait command.resume", done["sent"] == 1 and done["approved"] is True and "__interrupt__" not in done, done)
check("second answer refused", status_of(lambda: client.runs.wait(tid, "chat", command={"resume": True})) == 409)
check("unknown assistant refused", status_of(lambda: client.runs.wait(None, "nobody", input={})) == 404)

# ---- update_state as a node ----
second = client.threads.create()["thread_id"]
client.runs.wait(second, "chat", input=hello)
update = client.threads.update_state(second, {"approved": False}, as_node="review")
check("threads.update_state", update["checkpoint"]["checkpoint_id"] and update["checkpoint"]["thread_id"] == second, update)
moved = client.threads.get_state(second)
check("threads.update_state moved", moved["values"]["approved"] is False and moved["next"] == [] and not moved["interrupts"], moved)
check("threads.update_state idle", client.threads.get(second)["status"] == "idle")
third = client.threads.create()["thread_id"]
client.runs.wait(third, "chat", input=hello)
client.threads.update_state(third, {"approved": True}, as_node="review")
check("update_state then run on", client.runs.wait(third, "chat")["sent"] == 1)

# ---- streams: modes honoured, several at once ----
streamed = parts(client.runs.stream(None, "chat", input=hello, stream_mode="values"))
names = [e for e, _ in streamed]
check("runs.stream values", set(names) <= {"metadata", "values", "end"} and "values" in names, names)
check("runs.stream values __interrupt__", "__interrupt__" in [d for e, d in streamed if e == "values"][-1], streamed)
updates = parts(client.runs.stream(None, "chat", input=hello, stream_mode="updates"))
check("runs.stream updates", [d for e, d in updates if e == "updates"][0].keys() == {"answer"}, updates)
check("runs.stream updates __interrupt__", any("__interrupt__" in d for e, d in updates if e == "updates"), updates)
check("runs.stream updates only", {e for e, _ in updates} <= {"metadata", "updates", "end"}, updates)
custom = parts(client.runs.stream(None, "chat", input=hello, stream_mode="custom"))
check("runs.stream custom", [d for e, d in custom if e == "custom"] == [{"progress": "answering"}], custom)
debug = parts(client.runs.stream(None, "chat", input=hello, stream_mode="debug"))
check("runs.stream debug", {d["type"] for e, d in debug if e == "debug"} >= {"task", "task_result"}, debug)
tuples = parts(client.runs.stream(None, "chat", input=hello, stream_mode="messages-tuple", context={"user": "Bo"}))
message, meta = [d for e, d in tuples if e == "messages"][0]
check("runs.stream messages-tuple", message["content"] == "Hello Bo, you said: hi" and meta["langgraph_node"] == "answer", tuples)
whole = parts(client.runs.stream(None, "chat", input=hello, stream_mode="messages"))
check("runs.stream messages", [d[0]["type"] for e, d in whole if e == "messages/complete"] == ["ai"], whole)
several = parts(client.runs.stream(None, "chat", input=hello, stream_mode=["values", "updates", "custom"]))
check("runs.stream several modes", {"values", "updates", "custom"} <= {e for e, _ in several}, several)
check("runs.stream bad mode", status_of(lambda: parts(client.runs.stream(None, "chat", input=hello, stream_mode="tokens"))) == 422)
stateless = client.runs.wait(None, "review", input={})
check("stateless runs.wait", stateless["__interrupt__"][0]["id"] == "review#0", stateless)
check("durability", "__interrupt__" in client.runs.wait(None, "chat", input=hello, durability="exit"))
limited = client.runs.wait(None, "chat", input=hello, config={"recursion_limit": 1}, raise_error=False)
check("config.recursion_limit", "__error__" in limited, limited)

# ---- runs on a thread: create, enqueue, get, list, join, join_stream, cancel ----
fourth = client.threads.create()["thread_id"]
first = client.runs.create(fourth, "chat", input=hello)
queued = client.runs.create(fourth, "chat", command={"resume": False}, multitask_strategy="enqueue")
check("runs.create", first["status"] in ("pending", "interrupted") and first["assistant_id"] == "chat", first)
joined = client.runs.join(fourth, first["run_id"])
check("runs.join", "__interrupt__" in joined, joined)
after = client.runs.join(fourth, queued["run_id"])
check("runs.join enqueued", after["approved"] is False and "__interrupt__" not in after, after)
got = client.runs.get(fourth, first["run_id"])
check("runs.get", got["run_id"] == first["run_id"] and got["status"] == "interrupted", got)
listed = client.runs.list(fourth)
check("runs.list", {r["run_id"] for r in listed} == {first["run_id"], queued["run_id"]}, listed)
check("runs.list status", [r["run_id"] for r in client.runs.list(fourth, status="interrupted")] == [first["run_id"]])
check("runs.get elsewhere", status_of(lambda: client.runs.get(tid, first["run_id"])) == 404)
replay = parts(client.runs.join_stream(fourth, first["run_id"], stream_mode="values"))
check("runs.join_stream", [e for e, _ in replay if e not in ("metadata", "end")] and all(e in ("metadata", "values", "end") for e, _ in replay), replay)
client.runs.delete(fourth, queued["run_id"])
check("runs.delete", status_of(lambda: client.runs.get(fourth, queued["run_id"])) == 404)
fifth = client.threads.create()["thread_id"]
client.runs.wait(fifth, "chat", input={**hello, "spin": 40_000_000})
slow = client.runs.create(fifth, "chat", command={"resume": True})
client.runs.cancel(fifth, slow["run_id"], wait=True)
cancelled = client.runs.get(fifth, slow["run_id"])
check("runs.cancel", cancelled["status"] == "error" and cancelled["error"]["code"] == "cancelled", cancelled)
check("runs.cancel rollback refused", status_of(lambda: client.runs.cancel(fifth, slow["run_id"], action="rollback")) == 422)
check("threads.copy", client.threads.copy(tid)["thread_id"] != tid)

# ---- store ----
client.store.put_item(["sdk", "prefs"], "theme", {"color": "green"})
item = client.store.get_item(["sdk", "prefs"], "theme")
check("store.put_item/get_item", item["value"] == {"color": "green"}, item)
check("store.search_items", [i["key"] for i in client.store.search_items(["sdk"])["items"]] == ["theme"])
namespaces = client.store.list_namespaces(prefix=["sdk"])
check("store.list_namespaces", namespaces == {"namespaces": [["sdk", "prefs"]]}, namespaces)
client.store.delete_item(["sdk", "prefs"], "theme")
check("store.delete_item", status_of(lambda: client.store.get_item(["sdk", "prefs"], "theme")) == 404)

client.threads.delete(second)
check("threads.delete", status_of(lambda: client.threads.get(second)) == 404)
print(f"{len(checked)} checks passed")
