//! `#[tool]`, `ToolNode`, approvals and `react_agent` on a scripted model: tool calls decoded
//! and run, bad arguments reported to the model and corrected, parallel calls on the engine's
//! branches, approve / edit / reject through `Resume` tokens (one carried as bytes to a new
//! app, as another process would), a recover after a crash that runs no finished tool again,
//! structured output, the step limit, and the async API.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;
use tea::models::{
    react_agent, AgentError, AgentState, Approval, ApprovalRequest, ScriptedModel, Tool, ToolError, ToolNode,
};
use tea::{tool, Call, Checkpointer, MemoryStore, Message, Outcome, Resume, ToolCall};

/// Adds two numbers.
#[tool]
fn add(
    /// The first number.
    a: i64,
    /// The second number.
    b: i64,
) -> i64 {
    a + b
}

fn calls(calls: &[(&str, &str, serde_json::Value)]) -> Message {
    Message::tool_calls_of(calls.iter().map(|(id, name, args)| ToolCall::new(*id, *name, args.clone())).collect())
}

/// `message` without the id the `messages` reducer gave it.
fn plain(message: &Message) -> Message {
    let mut message = message.clone();
    message.set_id(None);
    message
}

fn done(outcome: Outcome<AgentState>) -> AgentState {
    match outcome {
        Outcome::Done(state) => state,
        Outcome::Interrupted { resume, .. } => panic!("the agent paused: {:?}", resume.interrupts()),
    }
}

fn paused(outcome: Outcome<AgentState>) -> Resume<AgentState> {
    outcome.interrupted().map(|(_, resume)| resume).expect("the agent paused")
}

#[test]
fn a_tool_call_is_decoded_run_and_answered() {
    let model = ScriptedModel::new([calls(&[("c1", "add", json!({"a": 2, "b": 3}))]), Message::assistant("5")]);
    let app = react_agent(model.clone(), ToolNode::new().with(Add))
        .system_prompt("You add.")
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let out = done(app.invoke(AgentState::user("2 + 3?")).unwrap());
    assert_eq!(out.messages.len(), 4);
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "5"));
    assert_eq!(out.last_text(), "5");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].tools, ["add"]);
    assert_eq!(requests[0].messages[0], Message::system("You add."));
    assert_eq!(plain(&requests[1].messages[3]), Message::tool("c1", "5"));
}

#[test]
fn the_schema_comes_from_the_signature() {
    let schema = Add.parameters();
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["required"], json!(["a", "b"]));
    assert_eq!(schema["properties"]["a"]["type"], "integer");
    assert_eq!(schema["properties"]["a"]["description"], "The first number.");
    assert_eq!(schema["additionalProperties"], false);
    assert_eq!(Add.description(), "Adds two numbers.");
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Unit {
    Celsius,
    Fahrenheit,
}

/// Tells the weather in a city.
///
/// Answers in Celsius unless asked otherwise.
#[tool(name = "weather")]
async fn get_weather(city: String, unit: Option<Unit>) -> Result<String, String> {
    if city.is_empty() {
        return Err("no city given".to_owned());
    }
    Ok(format!("18 degrees {} in {city}", if unit == Some(Unit::Fahrenheit) { "F" } else { "C" }))
}

#[test]
fn options_enums_errors_and_async_tools() {
    let tool = GetWeather;
    assert_eq!(tool.name(), "weather");
    assert_eq!(tool.description(), "Tells the weather in a city.\n\nAnswers in Celsius unless asked otherwise.");
    let schema = tool.parameters();
    assert_eq!(schema["required"], json!(["city"]), "an Option may be left out");
    let run = |args| tea::models::block_on(tool.call(args));
    assert_eq!(run(json!({"city": "Oslo"})), Ok(json!("18 degrees C in Oslo")));
    assert_eq!(run(json!({"city": "Oslo", "unit": "fahrenheit"})), Ok(json!("18 degrees F in Oslo")));
    let failed = run(json!({"city": ""})).unwrap_err();
    assert_eq!(failed, ToolError::Failed { tool: "weather".into(), message: "no city given".into() });
    let bad = run(json!({"city": "Oslo", "unit": "kelvin", "when": "now"})).unwrap_err().to_string();
    assert!(bad.contains("unknown argument `when`"), "{bad}");
    assert!(bad.contains("`unit`: unknown variant `kelvin`"), "{bad}");
    let not_json = run(json!("{city: Oslo")).unwrap_err().to_string();
    assert!(not_json.contains("not a JSON object"), "{not_json}");
}

#[test]
fn bad_arguments_reach_the_model_which_corrects_its_call() {
    let model = ScriptedModel::new([
        calls(&[("c1", "add", json!({"a": "two", "b": 3}))]),
        calls(&[("c2", "add", json!({"a": 2, "b": 3}))]),
        Message::assistant("5"),
    ]);
    let app = react_agent(model.clone(), ToolNode::new().with(Add)).builder().checkpointer(MemoryStore::new()).build();
    let out = done(app.invoke(AgentState::user("2 + 3?")).unwrap());
    let error = out.messages[2].text();
    assert!(error.contains("the arguments of `add` do not fit"), "{error}");
    assert!(error.contains("`a`: invalid type: string \"two\", expected i64"), "{error}");
    assert_eq!(plain(&out.messages[4]), Message::tool("c2", "5"));
    assert_eq!(out.last_text(), "5");
}

#[test]
fn an_unknown_tool_is_a_message_too() {
    let model = ScriptedModel::new([calls(&[("c1", "mul", json!({}))]), Message::assistant("sorry")]);
    let app = react_agent(model, ToolNode::new().with(Add)).builder().checkpointer(MemoryStore::new()).build();
    let out = done(app.invoke(AgentState::user("2 * 3?")).unwrap());
    assert_eq!(out.messages[2].text(), "error: there is no tool `mul`; the tools are: `add`");
}

/// Two calls of this tool meet: each waits (up to 10 s) until both have started.
struct Meeting {
    started: Mutex<usize>,
    all_here: Condvar,
}

static MEETING: Meeting = Meeting { started: Mutex::new(0), all_here: Condvar::new() };

/// Waits for the other call.
#[tool]
fn meet(who: String) -> String {
    let mut started = MEETING.started.lock().unwrap();
    *started += 1;
    MEETING.all_here.notify_all();
    let (started, _) = MEETING.all_here.wait_timeout_while(started, Duration::from_secs(10), |n| *n < 2).unwrap();
    format!("{who} met {}", if *started >= 2 { "the other" } else { "nobody" })
}

#[test]
fn parallel_calls_run_at_once_and_merge_in_call_order() {
    let model = ScriptedModel::new([
        calls(&[("c1", "meet", json!({"who": "ann"})), ("c2", "meet", json!({"who": "bob"}))]),
        Message::assistant("they met"),
    ]);
    let app = react_agent(model, ToolNode::new().with(Meet)).builder().checkpointer(MemoryStore::new()).build();
    let out = done(app.invoke(AgentState::user("meet")).unwrap());
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "ann met the other"));
    assert_eq!(plain(&out.messages[3]), Message::tool("c2", "bob met the other"));
    assert_eq!(out.last_text(), "they met");
}

static DELETED: AtomicUsize = AtomicUsize::new(0);

/// Deletes a file.
#[tool(approval)]
fn delete(path: String) -> String {
    DELETED.fetch_add(1, Ordering::SeqCst);
    format!("deleted {path}")
}

#[test]
fn approval_pauses_with_the_call_and_approve_edit_reject_answer_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tools = || ToolNode::new().with(Delete).with(Add);
    let request = || calls(&[("c1", "delete", json!({"path": "a.txt"}))]);

    // Approve: the tool runs once, on the model's arguments.
    let before = DELETED.load(Ordering::SeqCst);
    let model = ScriptedModel::new([request(), Message::assistant("done")]);
    let app = react_agent(model, tools()).builder().checkpointer(MemoryStore::new()).build();
    let resume = paused(app.invoke(AgentState::user("delete a.txt")).unwrap());
    assert_eq!(DELETED.load(Ordering::SeqCst), before, "nothing runs before the approval");
    let asked: ApprovalRequest = serde_json::from_value(resume.interrupts()[0].value().clone()).unwrap();
    assert_eq!(asked.tool, "delete");
    assert_eq!(asked.tool_call_id, "c1");
    assert_eq!(asked.arguments, json!({"path": "a.txt"}));
    let out = done(app.resume(resume.answer(Approval::Approve)).unwrap());
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "deleted a.txt"));
    assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);

    // Edit: the tool runs on the person's arguments.
    let model = ScriptedModel::new([request(), Message::assistant("done")]);
    let app = react_agent(model, tools()).builder().checkpointer(MemoryStore::new()).build();
    let resume = paused(app.invoke(AgentState::user("delete a.txt")).unwrap());
    let out = done(app.resume(resume.answer(Approval::edit(json!({"path": "b.txt"})))).unwrap());
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "deleted b.txt"));
    assert_eq!(DELETED.load(Ordering::SeqCst), before + 2);

    // Reject: the tool does not run, and the model reads why.
    let model = ScriptedModel::new([request(), Message::assistant("I did not delete it")]);
    let app = react_agent(model.clone(), tools()).builder().checkpointer(MemoryStore::new()).build();
    let resume = paused(app.invoke(AgentState::user("delete a.txt")).unwrap());
    let out = done(app.resume(resume.answer(Approval::reject("keep it"))).unwrap());
    assert_eq!(out.messages[2].text(), "the person rejected this call of `delete`: it did not run. They said: keep it");
    assert_eq!(DELETED.load(Ordering::SeqCst), before + 2);
    assert_eq!(model.requests()[1].messages[2], out.messages[2]);

    // A wrong answer is refused before the thread is claimed: the token stays good.
    let model = ScriptedModel::new([request(), Message::assistant("done")]);
    let app = react_agent(model, tools()).builder().checkpointer(MemoryStore::new()).build();
    let resume = paused(app.invoke(AgentState::user("delete a.txt")).unwrap());
    assert!(app.resume(resume.clone().answer(json!({"decision": "maybe"}))).is_err());
    let out = done(app.resume(resume.answer(Approval::Approve)).unwrap());
    assert_eq!(out.last_text(), "done");
}

/// The tests that count `DELETED` run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn a_token_carried_as_bytes_resumes_in_a_new_app_and_the_tool_runs_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("tea-models-approval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let before = DELETED.load(Ordering::SeqCst);
    // Two calls at once: one needs approval, the other runs and is kept while the first waits.
    let bytes: Vec<u8> = {
        let model = ScriptedModel::new([calls(&[
            ("c1", "delete", json!({"path": "a.txt"})),
            ("c2", "add", json!({"a": 1, "b": 1})),
        ])]);
        let app = react_agent(model, ToolNode::new().with(Delete).with(Add))
            .builder()
            .checkpointer(tea::DirStore::open(&dir).unwrap())
            .build();
        let resume = paused(app.invoke(AgentState::user("clean up")).unwrap());
        assert_eq!(resume.interrupts().len(), 1);
        resume.to_string().into_bytes()
    };
    // "Another process": a new store handle, model and app; the token from its bytes.
    let model = ScriptedModel::new([Message::assistant("deleted, and 1 + 1 = 2")]);
    let app = react_agent(model.clone(), ToolNode::new().with(Delete).with(Add))
        .builder()
        .checkpointer(tea::DirStore::open(&dir).unwrap())
        .build();
    let token: Resume<AgentState> = String::from_utf8(bytes).unwrap().parse().unwrap();
    let id = token.interrupts()[0].id().to_owned();
    let out = done(app.resume(token.clone().answer_to(id, Approval::Approve)).unwrap());
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "deleted a.txt"));
    assert_eq!(plain(&out.messages[3]), Message::tool("c2", "2"));
    assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);
    // The token is spent: a second resume is refused and runs nothing.
    assert!(matches!(app.resume(token.answer(Approval::Approve)), Err(tea::Error::StaleResume { .. })));
    assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);
    assert_eq!(model.remaining(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

static SLOW_RUNS: AtomicUsize = AtomicUsize::new(0);
static CRASHES: AtomicUsize = AtomicUsize::new(0);

/// Finishes at once.
#[tool]
fn quick() -> &'static str {
    SLOW_RUNS.fetch_add(1, Ordering::SeqCst);
    "quick done"
}

/// The store of `recover_after_a_crash_runs_no_finished_tool_again`, which `crashy` watches.
static CRASH_STORE: std::sync::OnceLock<MemoryStore> = std::sync::OnceLock::new();

/// Crashes the first time, once `quick`'s result is in the store (its branch's pending write).
#[tool]
fn crashy() -> String {
    if CRASHES.fetch_add(1, Ordering::SeqCst) == 0 {
        let thread = tea::ThreadId::from("crash-1");
        let stored = || {
            let history = CRASH_STORE.get().and_then(|s| s.history("react_agent", &thread).ok()).unwrap_or_default();
            history.iter().any(|(_, bytes)| bytes.windows(10).any(|w| w == b"quick done"))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !stored() {
            assert!(std::time::Instant::now() < deadline, "`quick`'s result never reached the store");
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("the process died here");
    }
    "crashy done".to_owned()
}

#[test]
fn recover_after_a_crash_runs_no_finished_tool_again() {
    let store = CRASH_STORE.get_or_init(MemoryStore::new).clone();
    let model = ScriptedModel::new([
        calls(&[("c1", "quick", json!({})), ("c2", "crashy", json!({}))]),
        Message::assistant("both done"),
    ]);
    let app =
        react_agent(model.clone(), ToolNode::new().with(Quick).with(Crashy)).builder().checkpointer(store).build();
    let crashed = app.run(Call::start(AgentState::user("go")).on("crash-1"));
    assert!(matches!(crashed, Err(tea::Error::NodePanicked { .. })), "{crashed:?}");
    assert_eq!(SLOW_RUNS.load(Ordering::SeqCst), 1);
    let out = done(app.run(Call::recover("crash-1")).unwrap());
    assert_eq!(SLOW_RUNS.load(Ordering::SeqCst), 1, "the finished tool did not run again");
    assert_eq!(CRASHES.load(Ordering::SeqCst), 2);
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "quick done"));
    assert_eq!(plain(&out.messages[3]), Message::tool("c2", "crashy done"));
    assert_eq!(out.last_text(), "both done");
    assert_eq!(model.requests().len(), 2, "the model was not asked again for the calls");
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Forecast {
    /// The city.
    city: String,
    /// Degrees Celsius.
    celsius: f64,
}

#[test]
fn structured_output_is_asked_for_checked_and_retried() {
    let model = ScriptedModel::new([
        Message::assistant(r#"{"city": "Oslo"}"#),
        Message::assistant(r#"{"city": "Oslo", "celsius": 18.5}"#),
    ]);
    let app = react_agent(model.clone(), ToolNode::new().with(Add))
        .output::<Forecast>()
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let out = done(app.invoke(AgentState::user("weather in Oslo?")).unwrap());
    assert_eq!(out.structured::<Forecast>().unwrap(), Forecast { city: "Oslo".into(), celsius: 18.5 });
    let requests = model.requests();
    let schema = requests[0].json_schema.as_ref().expect("the answer's schema is sent");
    assert_eq!(schema["properties"]["celsius"]["description"], "Degrees Celsius.");
    let retry = requests[1].messages.last().unwrap().text();
    assert!(retry.contains("does not match the required JSON Schema `Forecast`"), "{retry}");
    assert!(retry.contains("missing field `celsius`"), "{retry}");
    // An agent without an output type has no structured answer.
    assert_eq!(AgentState::default().structured::<Forecast>(), Err(AgentError::NoOutput));
}

#[test]
fn the_step_limit_stops_a_model_that_never_answers() {
    let model = ScriptedModel::new((0..5).map(|i| calls(&[(&format!("c{i}"), "add", json!({"a": 1, "b": 1}))])));
    let app = react_agent(model.clone(), ToolNode::new().with(Add))
        .max_steps(2)
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let error = app.invoke(AgentState::user("loop")).unwrap_err();
    assert!(error.to_string().contains("node `agent`"), "{error}");
    assert!(tea::error_chain(&error).contains("after 2 model calls"), "{}", tea::error_chain(&error));
    assert_eq!(model.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_api_awaits_the_model_and_async_tools() {
    let model = ScriptedModel::new([
        calls(&[("c1", "weather", json!({"city": "Oslo"})), ("c2", "add", json!({"a": 1, "b": 2}))]),
        Message::assistant("18 C, and 3"),
    ]);
    let app = react_agent(model, ToolNode::new().with(GetWeather).with(Add))
        .builder()
        .checkpointer(MemoryStore::new())
        .build();
    let out = done(app.invoke_async(AgentState::user("weather?")).await.unwrap());
    assert_eq!(plain(&out.messages[2]), Message::tool("c1", "18 degrees C in Oslo"));
    assert_eq!(plain(&out.messages[3]), Message::tool("c2", "3"));
}

mod own_graph {
    //! `ToolNode` and `tools_condition` in a `graph!` of one's own: the same shape as
    //! `react_agent`, the model and tools given as the run's context.
    use super::*;
    use tea::models::{tools_condition, ChatModel, ChatRequest, ToolsRoute};
    use tea::prelude::*;

    #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    pub struct Chat {
        #[reducer(messages)]
        messages: Vec<Message>,
        call: Option<ToolCall>,
    }

    pub struct Parts {
        model: ScriptedModel,
        tools: ToolNode,
    }

    fn agent(chat: &Chat, ctx: &Ctx<Chat>) -> Result<Command<BotNode>, tea::BoxError> {
        let parts = ctx.context::<Parts>()?;
        let definitions = parts.tools.definitions();
        let reply = parts.model.chat_blocking(ChatRequest::new(&chat.messages).tools(&definitions))?;
        let next = match tools_condition(std::slice::from_ref(&reply.message)) {
            ToolsRoute::Tools => Command::goto(BotNode::Dispatch),
            ToolsRoute::End => Command::end(),
        };
        Ok(next.update(Chat::update().messages(vec![reply.message])))
    }

    fn dispatch(chat: &Chat) -> Command<BotNode> {
        let calls = chat.messages.last().map(Message::tool_calls).unwrap_or_default();
        Command::send(calls.iter().map(|call| SendTo::new(BotNode::Tools, Chat::update().call(Some(call.clone())))))
    }

    fn tools(chat: &Chat, ctx: &Ctx<Chat>, hitl: &mut Hitl) -> Result<ChatUpdate, tea::BoxError> {
        let call = chat.call.as_ref().ok_or("no call")?;
        let message = ctx.context::<Parts>()?.tools.call_blocking(call, ctx, hitl)?;
        Ok(Chat::update().messages(vec![message]))
    }

    graph! {
        Bot for Chat {
            context Parts;
            start -> agent;
            agent -> dispatch | end;
            parallel dispatch => tools* -> agent;
            interruptible tools;
        }
    }

    #[test]
    fn a_graph_of_ones_own_runs_tool_calls_with_approval() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let before = DELETED.load(Ordering::SeqCst);
        let model = ScriptedModel::new([
            calls(&[("c1", "delete", json!({"path": "a.txt"})), ("c2", "add", json!({"a": 1, "b": 2}))]),
            Message::assistant("done"),
        ]);
        let parts = Parts { model, tools: ToolNode::new().with(Delete).with(Add) };
        let app = Bot::builder().checkpointer(MemoryStore::new()).build().with_context(parts);
        let chat = Chat { messages: vec![Message::user("clean up")], call: None };
        let (_, resume) = app.invoke(chat).unwrap().interrupted().expect("paused for the approval");
        assert_eq!(resume.interrupts()[0].value()["tool"], "delete");
        let done = app.resume(resume.answer(Approval::Approve)).unwrap().done().unwrap();
        assert_eq!(plain(&done.messages[2]), Message::tool("c1", "deleted a.txt"));
        assert_eq!(plain(&done.messages[3]), Message::tool("c2", "3"));
        assert_eq!(done.messages[4].text(), "done");
        assert_eq!(DELETED.load(Ordering::SeqCst), before + 1);
    }
}

/// Saves a note for the person, for later conversations too.
#[tool(approval)]
fn save_note(text: String, memory: &tea::Memory) -> Result<String, tea::Error> {
    memory.put(&["notes", "ada"], &text, json!({ "text": text }))?;
    Ok(format!("saved {text:?}"))
}

/// The notes the person saved, in this conversation or an earlier one.
#[tool]
async fn notes(memory: &tea::Memory, limit: Option<usize>) -> Result<Vec<String>, tea::Error> {
    let found = memory.search(&tea::SearchQuery::under(&["notes", "ada"]).limit(limit.unwrap_or(10)))?;
    Ok(found.iter().filter_map(|item| item.value["text"].as_str().map(str::to_owned)).collect())
}

#[test]
fn a_tools_memory_parameter_is_not_the_models_and_needs_a_memory() {
    assert!(SaveNote.uses_memory() && Notes.uses_memory() && !Add.uses_memory());
    assert_eq!(SaveNote.parameters()["required"], json!(["text"]));
    assert_eq!(Notes.parameters()["properties"].as_object().unwrap().len(), 1, "only `limit`");
    // Called without a memory: a failure the model reads, not a panic.
    let failed = tea::models::block_on(Notes.call(json!({}))).unwrap_err();
    assert!(matches!(failed, ToolError::Failed { .. }), "{failed}");
    let memory = tea::Memory::new(MemoryStore::new());
    memory.put(&["notes", "ada"], "milk", json!({ "text": "milk" })).unwrap();
    assert_eq!(tea::models::block_on(Notes.call_with_memory(json!({}), &memory)), Ok(json!(["milk"])));
    // A node with no memory (an app with neither a checkpointer nor a memory) fails, naming it.
    let tools = ToolNode::new().with(Notes);
    let call = ToolCall::new("c1", "notes", json!({}));
    let bare = tea::Ctx::<AgentState>::detached("tools");
    let error = tools.call_blocking(&call, &bare, &mut tea::Hitl::default()).unwrap_err();
    let error = error.downcast::<tea::Error>().expect("a tea error");
    assert!(matches!(&*error, tea::Error::NoMemory { node } if node.as_str() == "tools"), "{error:?}");
    // With one, the call runs.
    let with = tea::Ctx::<AgentState>::detached("tools").with_store(memory);
    let reply = tools.call_blocking(&call, &with, &mut tea::Hitl::default()).unwrap();
    assert_eq!(reply, Message::tool("c1", r#"["milk"]"#));
}

#[test]
fn a_note_saved_with_approval_in_one_thread_is_recalled_in_another() {
    let model = ScriptedModel::new([
        calls(&[("c1", "save_note", json!({"text": "take sunglasses"}))]),
        Message::assistant("Saved."),
        calls(&[("c2", "save_note", json!({"text": "sell the car"}))]),
        Message::assistant("Not saved."),
        calls(&[("c3", "notes", json!({}))]),
        Message::assistant("You noted: take sunglasses."),
    ]);
    let tools = ToolNode::new().with(SaveNote).with(Notes);
    let app = react_agent(model, tools).builder().checkpointer(MemoryStore::new()).build();
    let memory = app.memory().expect("a memory on the app's checkpointer").clone();
    let noted = || memory.search(&tea::SearchQuery::under(&["notes"])).unwrap().len();

    // Monday: the note waits for the person's approval, then is kept.
    let start = |text: &str, thread: &str| Call::start(AgentState::user(text)).on(thread);
    let resume = paused(app.run(start("remember: take sunglasses", "monday")).unwrap());
    assert_eq!(noted(), 0, "nothing is saved before the approval");
    done(app.resume(resume.answer(Approval::Approve)).unwrap());
    assert_eq!(noted(), 1);
    // Tuesday: a rejected note is not kept.
    let resume = paused(app.run(start("remember: sell the car", "tuesday")).unwrap());
    let out = done(app.resume(resume.answer(Approval::reject("no"))).unwrap());
    assert!(out.messages[2].text().contains("rejected"), "{:?}", out.messages[2]);
    assert_eq!(noted(), 1);
    // Wednesday, a new thread: the agent recalls Monday's note.
    let out = done(app.run(start("what are my notes?", "wednesday")).unwrap());
    assert_eq!(plain(&out.messages[2]), Message::tool("c3", r#"["take sunglasses"]"#));
    assert_eq!(out.last_text(), "You noted: take sunglasses.");
}
