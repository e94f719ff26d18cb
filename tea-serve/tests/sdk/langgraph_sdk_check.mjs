// LangGraph's JS SDK (`@langchain/langgraph-sdk`, pinned in package.json) against `tea serve`,
// unchanged: every call of the SDK that tea serves, each result checked. Run by
// tea-cli/tests/langgraph_js.rs, beside the modules `npm ci` installed (see .ci/run), against
// `tea serve tea-serve/tests/sdk/chat.yaml examples/agents/review.yaml` with a token file.
//
//     TEA_URL=http://127.0.0.1:PORT TEA_KEY=TOKEN node langgraph_sdk_check.mjs
//
// Prints one line per call checked; exits non-zero on the first result that is not as expected.
// The Python SDK's twin is langgraph_sdk_check.py.

import { Client } from "@langchain/langgraph-sdk";

const URL = process.env.TEA_URL;
const KEY = process.env.TEA_KEY;
const checked = [];

function check(name, condition, seen) {
  if (!condition) {
    console.error(`FAILED ${name}: ${JSON.stringify(seen)}`);
    process.exit(1);
  }
  checked.push(name);
  console.log(`ok ${name}`);
}

/** The HTTP status a call fails with (null when it succeeds). */
async function statusOf(call) {
  try {
    await call();
  } catch (error) {
    if (typeof error?.status === "number") return error.status;
    throw error;
  }
  return null;
}

async function parts(stream) {
  const seen = [];
  for await (const part of stream) seen.push([part.event, part.data]);
  return seen;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const sorted = (xs) => [...xs].sort();
const keys = (o) => sorted(Object.keys(o));
// No retries: a refused call is reported at once, and the checks see each status as sent.
const options = { apiUrl: URL, callerOptions: { maxRetries: 0 } };
const client = new Client({ ...options, apiKey: KEY });
const hello = { messages: [{ type: "human", content: "hi" }] };

// ---- access: `x-api-key` (what `new Client({ apiKey })` sends) ----
check("apiKey accepted", Array.isArray(await client.assistants.search()));
const wrong = new Client({ ...options, apiKey: "not-the-token-0123456789" });
check("wrong apiKey refused", (await statusOf(() => wrong.assistants.search())) === 401);
const none = new Client({ ...options, apiKey: null });
check("no apiKey refused", (await statusOf(() => none.threads.create())) === 401);

// ---- assistants ----
const found = await client.assistants.search();
check("assistants.search", same(sorted(found.map((a) => a.assistant_id)), ["chat", "review"]), found);
const byGraph = await client.assistants.search({ graphId: "chat" });
check("assistants.search graphId", same(byGraph.map((a) => a.graph_id), ["chat"]), byGraph);
check("assistants.search limit", (await client.assistants.search({ limit: 1 })).length === 1);
check("assistants.count", (await client.assistants.count()) === 2 && (await client.assistants.count({ graphId: "chat" })) === 1);
const chat = await client.assistants.get("chat");
check("assistants.get", chat.assistant_id === "chat" && chat.graph_id === "chat" && "created_at" in chat, chat);
check("assistants.get unknown", (await statusOf(() => client.assistants.get("nobody"))) === 404);
const graph = await client.assistants.getGraph("chat");
const ids = new Set(graph.nodes.map((node) => node.id));
check("assistants.getGraph nodes", ["__start__", "answer", "review", "send", "__end__"].every((n) => ids.has(n)), graph);
check("assistants.getGraph edges", graph.edges.some((e) => e.source === "answer" && e.target === "review"), graph);
const schemas = await client.assistants.getSchemas("chat");
const state = schemas.state_schema.properties;
check("assistants.getSchemas", same(state.messages.type, ["array", "null"]) && same(state.sent.type, ["integer", "null"]), schemas);
check("assistants.getSchemas input", same(keys(schemas.input_schema.properties), keys(state)), schemas);

// ---- threads ----
const thread = await client.threads.create({ metadata: { suite: "js-sdk" } });
const tid = thread.thread_id;
check("threads.create", thread.status === "idle" && same(thread.metadata, { suite: "js-sdk" }), thread);
check("threads.get", (await client.threads.get(tid)).thread_id === tid);
const searched = await client.threads.search({ metadata: { suite: "js-sdk" } });
check("threads.search", searched.some((t) => t.thread_id === tid), searched);

// ---- runs.wait to a pause: the state with `__interrupt__` ----
const paused = await client.runs.wait(tid, "chat", { input: hello, context: { user: "Ada" }, config: { recursion_limit: 10 } });
check("runs.wait to a pause", paused.messages.at(-1).content === "Hello Ada, you said: hi", paused);
check("runs.wait __interrupt__", paused.__interrupt__[0].value != null && paused.__interrupt__[0].id, paused);
check("threads.get interrupted", (await client.threads.get(tid)).status === "interrupted");

// ---- thread state ----
const now = await client.threads.getState(tid);
check("threads.getState", same(now.next, ["review"]) && now.values.messages.at(-1).type === "ai", now);
check("threads.getState interrupts", now.interrupts[0].id === paused.__interrupt__[0].id, now);
check("threads.getState tasks", now.tasks[0].name === "review" && now.tasks[0].interrupts.length > 0, now);
const at = await client.threads.getState(tid, now.checkpoint.checkpoint_id);
check("threads.getState at a checkpoint", same(at.values, now.values), at);
const picked = await client.threads.getState(tid, undefined, { select: ["values.messages", "next"], subgraphs: true });
check("threads.getState select", same(keys(picked), ["next", "values"]) && same(Object.keys(picked.values), ["messages"]), picked);
const posted = await client.threads.getState(tid, { checkpoint_id: now.checkpoint.checkpoint_id, checkpoint_ns: "" });
check("threads.getState checkpoint", same(posted.checkpoint, now.checkpoint), posted);
const history = await client.threads.getHistory(tid);
check("threads.getHistory", history.length >= 2 && same(history[0].checkpoint, now.checkpoint), history);
const selected = await client.threads.getHistory(tid, { limit: 1, select: ["values.messages", "next"] });
check("threads.getHistory select", same(keys(selected[0]), ["next", "values"]) && same(Object.keys(selected[0].values), ["messages"]), selected);
check("threads.getHistory limit", (await client.threads.getHistory(tid, { limit: 1 })).length === 1);
const older = await client.threads.getHistory(tid, { before: now.checkpoint });
check("threads.getHistory before", older.length > 0 && older.every((h) => !same(h.checkpoint, now.checkpoint)), older);
const firstState = await client.threads.getHistory(tid, { metadata: { step: 0 } });
check("threads.getHistory metadata", same(firstState.map((h) => h.checkpoint), [history.at(-1).checkpoint]), firstState);

const oldest = history.at(-1).checkpoint.checkpoint_id;
check("a run from a past checkpoint refused", (await statusOf(() => client.runs.wait(tid, "chat", { checkpointId: oldest }))) === 422);

// ---- an answer (command.resume), once ----
const done = await client.runs.wait(tid, "chat", { command: { resume: true } });
check("runs.wait command.resume", done.sent === 1 && done.approved === true && !("__interrupt__" in done), done);
check("second answer refused", (await statusOf(() => client.runs.wait(tid, "chat", { command: { resume: true } }))) === 409);
check("unknown assistant refused", (await statusOf(() => client.runs.wait(null, "nobody", { input: {} }))) === 404);

// ---- updateState as a node ----
const second = (await client.threads.create()).thread_id;
await client.runs.wait(second, "chat", { input: hello });
const update = await client.threads.updateState(second, { values: { approved: false }, asNode: "review" });
check("threads.updateState", update.checkpoint.checkpoint_id && update.checkpoint.thread_id === second, update);
const moved = await client.threads.getState(second);
check("threads.updateState moved", moved.values.approved === false && same(moved.next, []) && moved.interrupts.length === 0, moved);
check("threads.updateState idle", (await client.threads.get(second)).status === "idle");
const third = (await client.threads.create()).thread_id;
await client.runs.wait(third, "chat", { input: hello });
await client.threads.updateState(third, { values: { approved: true }, asNode: "review" });
check("updateState then run on", (await client.runs.wait(third, "chat")).sent === 1);

// ---- streams: modes honoured, several at once ----
const streamed = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: "values" }));
const names = streamed.map(([e]) => e);
check("runs.stream values", names.includes("values") && names.every((e) => ["metadata", "values", "end"].includes(e)), names);
check("runs.stream values __interrupt__", "__interrupt__" in streamed.filter(([e]) => e === "values").at(-1)[1], streamed);
const updates = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: "updates" }));
const updated = updates.filter(([e]) => e === "updates").map(([, d]) => d);
check("runs.stream updates", same(Object.keys(updated[0]), ["answer"]), updates);
check("runs.stream updates __interrupt__", updated.some((d) => "__interrupt__" in d), updates);
check("runs.stream updates only", updates.every(([e]) => ["metadata", "updates", "end"].includes(e)), updates);
const custom = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: "custom" }));
check("runs.stream custom", same(custom.filter(([e]) => e === "custom").map(([, d]) => d), [{ progress: "answering" }]), custom);
const debug = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: "debug" }));
const debugTypes = new Set(debug.filter(([e]) => e === "debug").map(([, d]) => d.type));
check("runs.stream debug", debugTypes.has("task") && debugTypes.has("task_result"), debug);
const tuples = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: "messages-tuple", context: { user: "Bo" } }));
const [message, meta] = tuples.find(([e]) => e === "messages")[1];
check("runs.stream messages-tuple", message.content === "Hello Bo, you said: hi" && meta.langgraph_node === "answer", tuples);
const whole = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: "messages" }));
check("runs.stream messages", same(whole.filter(([e]) => e === "messages/complete").map(([, d]) => d[0].type), ["ai"]), whole);
const several = await parts(client.runs.stream(null, "chat", { input: hello, streamMode: ["values", "updates", "custom"] }));
const severalNames = new Set(several.map(([e]) => e));
check("runs.stream several modes", ["values", "updates", "custom"].every((e) => severalNames.has(e)), several);
check("runs.stream bad mode", (await statusOf(() => parts(client.runs.stream(null, "chat", { input: hello, streamMode: "tokens" })))) === 422);
const stateless = await client.runs.wait(null, "review", { input: {} });
check("stateless runs.wait", stateless.__interrupt__[0].id === "review#0", stateless);
check("durability", "__interrupt__" in (await client.runs.wait(null, "chat", { input: hello, durability: "exit" })));
const limited = await client.runs.wait(null, "chat", { input: hello, config: { recursion_limit: 1 }, raiseError: false });
check("config.recursion_limit", "__error__" in limited, limited);
check("config.recursion_limit raises", await client.runs.wait(null, "chat", { input: hello, config: { recursion_limit: 1 } }).then(() => false, (e) => e instanceof Error && !("status" in e)));

// ---- runs on a thread: create, enqueue, get, list, join, joinStream, cancel, delete ----
const fourth = (await client.threads.create()).thread_id;
const first = await client.runs.create(fourth, "chat", { input: hello });
const queued = await client.runs.create(fourth, "chat", { command: { resume: false }, multitaskStrategy: "enqueue" });
check("runs.create", ["pending", "interrupted"].includes(first.status) && first.assistant_id === "chat", first);
const joined = await client.runs.join(fourth, first.run_id);
check("runs.join", "__interrupt__" in joined, joined);
const after = await client.runs.join(fourth, queued.run_id);
check("runs.join enqueued", after.approved === false && !("__interrupt__" in after), after);
const got = await client.runs.get(fourth, first.run_id);
check("runs.get", got.run_id === first.run_id && got.status === "interrupted", got);
const listed = await client.runs.list(fourth);
check("runs.list", same(sorted(listed.map((r) => r.run_id)), sorted([first.run_id, queued.run_id])), listed);
const interrupted = await client.runs.list(fourth, { status: "interrupted" });
check("runs.list status", same(interrupted.map((r) => r.run_id), [first.run_id]), interrupted);
check("runs.get elsewhere", (await statusOf(() => client.runs.get(tid, first.run_id))) === 404);
const replay = await parts(client.runs.joinStream(fourth, first.run_id, { streamMode: "values" }));
check(
  "runs.joinStream",
  replay.some(([e]) => e === "values") && replay.every(([e]) => ["metadata", "values", "end"].includes(e)),
  replay,
);
const replayAll = await parts(client.runs.joinStream(fourth, first.run_id));
check("runs.joinStream every mode", replayAll.some(([e]) => e === "values") && replayAll.some(([e]) => e === "updates"), replayAll);
await client.runs.delete(fourth, queued.run_id);
check("runs.delete", (await statusOf(() => client.runs.get(fourth, queued.run_id))) === 404);
const fifth = (await client.threads.create()).thread_id;
await client.runs.wait(fifth, "chat", { input: { ...hello, spin: 40_000_000 } });
const slow = await client.runs.create(fifth, "chat", { command: { resume: true } });
await client.runs.cancel(fifth, slow.run_id, true);
const cancelled = await client.runs.get(fifth, slow.run_id);
check("runs.cancel", cancelled.status === "error" && cancelled.error.code === "cancelled", cancelled);
check("runs.cancel rollback refused", (await statusOf(() => client.runs.cancel(fifth, slow.run_id, false, "rollback"))) === 422);
const copied = await client.threads.copy(tid);
check("threads.copy", copied.thread_id !== tid && (await client.threads.getState(copied.thread_id)).values.sent === 1, copied);

// ---- store ----
await client.store.putItem(["js-sdk", "prefs"], "theme", { color: "green" });
const item = await client.store.getItem(["js-sdk", "prefs"], "theme");
check("store.putItem/getItem", same(item.value, { color: "green" }) && same(item.namespace, ["js-sdk", "prefs"]), item);
const items = await client.store.searchItems(["js-sdk"]);
check("store.searchItems", same(items.items.map((i) => i.key), ["theme"]), items);
const namespaces = await client.store.listNamespaces({ prefix: ["js-sdk"] });
check("store.listNamespaces", same(namespaces, { namespaces: [["js-sdk", "prefs"]] }), namespaces);
await client.store.deleteItem(["js-sdk", "prefs"], "theme");
check("store.deleteItem", (await statusOf(() => client.store.getItem(["js-sdk", "prefs"], "theme"))) === 404);

await client.threads.delete(second);
check("threads.delete", (await statusOf(() => client.threads.get(second))) === 404);
console.log(`${checked.length} checks passed`);
