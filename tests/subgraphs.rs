//! Subgraph nodes: a node of a parent graph that runs a whole child graph, on the parent's store
//! and thread, pausing and resuming inside the child.
//!
//! Every scenario runs on `MemoryStore` and on `SledStore`; the last one pauses inside a child in
//! one process and resumes it in another.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Command as Process;
use tea::prelude::*;

// ---------------------------------------------------------------------------------------------
// A child with the parent's state: `subgraph review = Reviewer;`

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    draft: String,
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    edits: u32,
    verdict: String,
}

/// The child threads `check` ran in, one entry per run.
static CHECKS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn checks(thread_prefix: &str) -> usize {
    CHECKS.lock().unwrap().iter().filter(|t| t.starts_with(thread_prefix)).count()
}

fn check(s: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    CHECKS.lock().unwrap().push(ctx.thread().map(ToString::to_string).unwrap_or_default());
    Doc::update().log(vec![format!("check {}", s.draft)]).edits(1)
}
fn polish(_: &Doc) -> DocUpdate {
    Doc::update().log(vec!["polish".into()]).edits(2)
}
fn judge(s: &Doc, hitl: &mut Hitl) -> Result<DocUpdate, Pause> {
    let verdict: String = hitl.interrupt(format!("verdict on {}?", s.draft))?;
    Ok(Doc::update().verdict(verdict).log(vec!["judge".into()]))
}

graph! {
    /// The child: checks, polishes, asks a human for a verdict.
    pub Reviewer for Doc {
        start -> check;
        check -> polish;
        polish -> judge;
        judge -> end;
        interruptible judge;
    }
}

fn write(_: &Doc) -> DocUpdate {
    Doc::update().draft("d1".into()).log(vec!["write".into()])
}
fn publish(s: &Doc) -> DocUpdate {
    Doc::update().log(vec![format!("publish ({})", s.verdict)])
}

graph! {
    /// The parent: writes, has the draft reviewed by the child graph, publishes.
    pub Desk for Doc {
        start -> write;
        write -> review;
        review -> publish;
        publish -> end;
        subgraph review = Reviewer;
    }
}

fn pause_inside_a_child_and_resume_without_rerunning_it<C: Checkpointer>(store: C, thread: &str) {
    let app = Desk::builder().checkpointer(store).build();
    let (state, resume) =
        app.run(Call::start(Doc::default()).on(thread)).unwrap().interrupted().expect("the child asks");
    // The parent paused before its subgraph node's update: its state is the state before it.
    assert_eq!(state.log, ["write"]);
    let ids: Vec<&str> = resume.interrupts().iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["review/judge#0"]);
    assert_eq!(resume.interrupts()[0].node(), "review");
    assert_eq!(resume.interrupts()[0].value(), "verdict on d1?");

    // The pause is the parent's: `state` lists it, with the child's state in the snapshot.
    let snapshot = app.state(&ThreadId::from(thread)).unwrap().unwrap();
    assert_eq!(snapshot.interrupts[0].id(), "review/judge#0");
    assert_eq!(snapshot.next, ["review"]);
    let child = &snapshot.subgraphs[0];
    assert_eq!((child.node.as_str(), child.graph.as_str()), ("review", "Reviewer"));
    assert_eq!(child.thread.as_str(), format!("{thread}/review@2"));
    assert_eq!(child.state["log"], serde_json::json!(["write", "check d1", "polish"]));

    let token: Resume<Doc> = resume.to_string().parse().unwrap();
    let done = app.resume(token.answer("ship it")).unwrap().done().expect("done");
    assert_eq!(done.log, ["write", "check d1", "polish", "judge", "publish (ship it)"]);
    assert_eq!(done.edits, 3, "the child's sums count once");
    assert_eq!(done.verdict, "ship it");
    assert_eq!(checks(&format!("{thread}/")), 1, "the child's completed nodes did not run again");
}

#[test]
fn a_pause_inside_a_child_pauses_the_parent_memory() {
    pause_inside_a_child_and_resume_without_rerunning_it(MemoryStore::new(), "desk-mem");
}

#[test]
fn a_pause_inside_a_child_pauses_the_parent_sled() {
    let dir = tempdir("sled-pause");
    pause_inside_a_child_and_resume_without_rerunning_it(SledStore::open(&dir).unwrap(), "desk-sled");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_child_runs_on_the_parents_store_under_a_deterministic_thread() {
    let store = MemoryStore::new();
    let app = Desk::builder().checkpointer(store.clone()).build();
    app.run(Call::start(Doc::default()).on("desk-2")).unwrap();
    // The parent's `write` is step 1, so the child of `review` at step 2 is `desk-2/review@2`.
    assert_eq!(store.threads(Reviewer::NAME).unwrap(), [ThreadId::from("desk-2/review@2")]);
    let child = Reviewer::builder().checkpointer(store.clone()).build();
    let snapshot = child.state(&ThreadId::from("desk-2/review@2")).unwrap().unwrap();
    assert_eq!(snapshot.state.log, ["write", "check d1", "polish"], "the child's own state, paused at judge");
    assert_eq!(snapshot.next, ["judge"]);
}

#[test]
fn a_child_graph_still_works_on_its_own() {
    let app = Reviewer::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.invoke(Doc { draft: "x".into(), ..Doc::default() }).unwrap().interrupted().unwrap();
    let done = app.resume(resume.answer("ok")).unwrap().done().unwrap();
    assert_eq!(done.log, ["check x", "polish", "judge"]);
}

#[test]
fn a_wrong_answer_for_the_child_leaves_the_token_good() {
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.invoke(Doc::default()).unwrap().interrupted().unwrap();
    let error = app.resume(resume.clone().answer(42)).unwrap_err();
    assert!(error.to_string().contains("review"), "{error}");
    let done = app.resume(resume.answer("fine")).unwrap().done().unwrap();
    assert_eq!(done.verdict, "fine");
}

// ---------------------------------------------------------------------------------------------
// A child with its own state and a mapping: `subgraph ask_team = Team(to_team => from_team);`

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Team {
    topic: String,
    #[reducer(append)]
    notes: Vec<String>,
    answer: String,
}

fn web(t: &Team) -> TeamUpdate {
    Team::update().notes(vec![format!("web on {}", t.topic)])
}
fn papers(t: &Team) -> TeamUpdate {
    Team::update().notes(vec![format!("papers on {}", t.topic)])
}
fn gather(_: &Team) {}

graph! {
    /// A child with a fan-out whose branches stop at breakpoints and questions.
    pub TeamGraph for Team {
        start -> gather;
        parallel gather => [web, papers] -> expert;
        interrupt expert(topic => answer);
        expert -> end;
        interrupt_before papers;
    }
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Boss {
    question: String,
    #[reducer(append)]
    findings: Vec<String>,
    reply: String,
}

fn to_team(b: &Boss) -> Team {
    Team { topic: b.question.clone(), ..Team::default() }
}
fn from_team(_: &Boss, t: Team) -> BossUpdate {
    Boss::update().findings(t.notes).reply(t.answer)
}
fn frame(_: &Boss) -> BossUpdate {
    Boss::update().findings(vec!["framed".into()])
}
fn other(_: &Boss) -> BossUpdate {
    Boss::update().findings(vec!["other".into()])
}
fn report(_: &Boss) {}

graph! {
    /// The parent runs the team as one branch of its own fan-out.
    pub Supervisor for Boss {
        start -> frame;
        parallel frame => [team, other] -> report;
        report -> end;
        subgraph team = TeamGraph(to_team => from_team);
    }
}

fn pauses_in_a_childs_fan_out_inside_a_parents_fan_out<C: Checkpointer>(store: C) {
    let app = Supervisor::builder().checkpointer(store).build();
    let input = Boss { question: "tea".into(), ..Boss::default() };
    let (_, resume) = app.invoke(input).unwrap().interrupted().expect("the child stops at a breakpoint");
    let ids: Vec<&str> = resume.interrupts().iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["team/before:papers@papers@team"]);
    // Continue the breakpoint: the child's fan-out joins, then its interrupt node asks.
    let (_, resume) = app.resume(resume).unwrap().interrupted().expect("the child's interrupt node asks");
    let ids: Vec<&str> = resume.interrupts().iter().map(|i| i.id()).collect();
    assert_eq!(ids, ["team/expert#0@team"]);
    assert_eq!(resume.interrupts()[0].value(), "tea");
    let done = app.resume(resume.answer_to("team/expert#0@team", "oolong")).unwrap().done().unwrap();
    // Branches merge in declared order: the team's findings, then the sibling's.
    assert_eq!(done.findings, ["framed", "web on tea", "papers on tea", "other"]);
    assert_eq!(done.reply, "oolong");
}

#[test]
fn nested_fan_outs_pause_and_resume_memory() {
    pauses_in_a_childs_fan_out_inside_a_parents_fan_out(MemoryStore::new());
}

#[test]
fn nested_fan_outs_pause_and_resume_sled() {
    let dir = tempdir("sled-fanout");
    pauses_in_a_childs_fan_out_inside_a_parents_fan_out(SledStore::open(&dir).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

// ---------------------------------------------------------------------------------------------
// Two levels deep: a grandchild's pause names the whole path.

graph! {
    /// The middle level: its only node is the `Reviewer` child.
    pub Middle for Doc {
        start -> inner;
        inner -> end;
        subgraph inner = Reviewer;
    }
}

graph! {
    /// The top level.
    pub Top for Doc {
        start -> write;
        write -> outer;
        outer -> end;
        subgraph outer = Middle;
    }
}

#[test]
fn a_pause_two_levels_deep_names_its_path() {
    let app = Top::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.invoke(Doc::default()).unwrap().interrupted().unwrap();
    assert_eq!(resume.interrupts()[0].id(), "outer/inner/judge#0");
    let done = app.resume(resume.answer("deep")).unwrap().done().unwrap();
    assert_eq!(done.log, ["write", "check d1", "polish", "judge"]);
    assert_eq!(done.verdict, "deep");
}

#[test]
fn a_wrongly_typed_answer_to_a_childs_pause_is_bad_resume_value_at_any_depth() {
    // One level: `review/judge` asks for a `String`.
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.run(Call::start(Doc::default()).on("bad-answer-1")).unwrap().interrupted().unwrap();
    let token = resume.to_string();
    let error = app.resume(resume.answer(42)).unwrap_err();
    assert!(
        matches!(&error, Error::BadResumeValue { node, expected, .. } if node == "review/judge" && expected.contains("String")),
        "{error:?}"
    );
    // The token stays good.
    let done = app.resume(token.parse::<Resume<Doc>>().unwrap().answer("fine")).unwrap().done().unwrap();
    assert_eq!(done.verdict, "fine");

    // Two levels: `outer/inner/judge`.
    let app = Top::builder().checkpointer(MemoryStore::new()).build();
    let (_, resume) = app.run(Call::start(Doc::default()).on("bad-answer-2")).unwrap().interrupted().unwrap();
    let token = resume.to_string();
    let error = app.resume(resume.answer(vec![1, 2])).unwrap_err();
    assert!(matches!(&error, Error::BadResumeValue { node, .. } if node == "outer/inner/judge"), "{error:?}");
    let error = app.resume(token.parse::<Resume<Doc>>().unwrap().answer(false)).unwrap_err();
    assert!(matches!(&error, Error::BadResumeValue { .. }), "the token is still good after a bad answer: {error:?}");
    let done = app.resume(token.parse::<Resume<Doc>>().unwrap().answer("deep")).unwrap().done().unwrap();
    assert_eq!(done.log, ["write", "check d1", "polish", "judge"]);
    assert_eq!(done.verdict, "deep");
}

// ---------------------------------------------------------------------------------------------
// A pause-free child in a store-less parent.

fn count(_: &Doc) -> DocUpdate {
    Doc::update().edits(1)
}

graph! {
    pub Counter for Doc {
        start -> count;
        count -> end;
    }
}

graph! {
    pub Twice for Doc {
        start -> first;
        first -> second;
        second -> end;
        subgraph first = Counter;
        subgraph second = Counter;
    }
}

#[test]
fn a_pause_free_child_runs_without_a_store() {
    // `Twice` builds without a checkpointer because its children cannot pause.
    let out = Twice::builder().build().invoke(Doc { edits: 5, ..Doc::default() }).unwrap();
    assert_eq!(out.edits, 7);
}

#[test]
fn drawings_show_the_child() {
    // Mermaid: a `subgraph` block holding the child's nodes and edges, ids prefixed by the node.
    let mermaid = Desk::MERMAID;
    let block =
        "    subgraph review [\"review: Reviewer\"]\n    review____start__([start])\n    review__check[check]\n";
    assert!(mermaid.contains(block), "{mermaid}");
    assert!(mermaid.contains("    review__polish --> review__judge\n"), "{mermaid}");
    assert!(mermaid.contains("    review__judge --> review____end__\n    end\n"), "{mermaid}");
    assert!(mermaid.contains("    write --> review\n"), "the parent's edges reach the block: {mermaid}");
    assert!(!mermaid.contains('\u{1}'), "no marks left: {mermaid:?}");
    // DOT: a cluster with the subgraph node and the child inside.
    let dot = Desk::DOT;
    assert!(dot.starts_with("digraph Desk {\n") && dot.ends_with("}\n"), "{dot}");
    assert!(dot.contains("    subgraph \"cluster_review\" {\n    label=\"review: Reviewer\";\n"), "{dot}");
    assert!(dot.contains("\"review\" [label=\"review: Reviewer\", shape=box3d];"), "{dot}");
    assert!(dot.contains("    \"review__check\" -> \"review__polish\";\n"), "{dot}");
    // Two levels: the grandchild's ids carry the whole path, inside nested blocks.
    assert!(Top::MERMAID.contains("    subgraph outer__inner [\"inner: Reviewer\"]\n"), "{}", Top::MERMAID);
    assert!(Top::MERMAID.contains("    outer__inner__check --> outer__inner__polish\n"), "{}", Top::MERMAID);
    assert!(Top::DOT.contains("subgraph \"cluster_outer__inner\""), "{}", Top::DOT);
    // A graph without children draws as before, and a child's drawing is its own.
    assert!(Reviewer::MERMAID.starts_with("flowchart TD\n    __start__([start])\n    check[check]\n"));
}

// ---------------------------------------------------------------------------------------------
// A process boundary: pause inside the child in one process, resume in another.

const TEST: &str = "a_pause_inside_a_child_resumes_in_another_process";
const ROLE: &str = "TEA_SUBGRAPHS_ROLE";
const DB: &str = "TEA_SUBGRAPHS_DB";
const TOKEN: &str = "TEA_SUBGRAPHS_TOKEN";

fn run_role(role: &str, path: &Path) {
    let app = Desk::builder().checkpointer(SledStore::open(path).unwrap()).build();
    match role {
        "pause" => {
            let (_, resume) = app.run(Call::start(Doc::default()).on("desk-proc")).unwrap().interrupted().unwrap();
            println!("TOKEN={resume}");
        }
        _ => {
            let token: Resume<Doc> = std::env::var(TOKEN).unwrap().parse().unwrap();
            let done = app.resume(token.answer("from afar")).unwrap().done().unwrap();
            println!("STATE={}", serde_json::to_string(&done).unwrap());
        }
    }
}

fn child_process(role: &str, path: &Path, token: Option<&str>, key: &str) -> String {
    let mut command = Process::new(std::env::current_exe().unwrap());
    command.args([TEST, "--exact", "--nocapture", "--test-threads=1"]).env(ROLE, role).env(DB, path);
    if let Some(token) = token {
        command.env(TOKEN, token);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{role} failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let prefix = format!("{key}=");
    // The harness prints `test NAME ... ` on the same line first.
    let line = stdout.lines().find_map(|l| l.find(&prefix).map(|at| &l[at + prefix.len()..]));
    line.map(str::to_owned).expect("the child printed its line")
}

#[test]
fn a_pause_inside_a_child_resumes_in_another_process() {
    if let Ok(role) = std::env::var(ROLE) {
        run_role(&role, Path::new(&std::env::var(DB).unwrap()));
        return;
    }
    let dir = tempdir("process");
    let token = child_process("pause", &dir, None, "TOKEN");
    let state = child_process("resume", &dir, Some(&token), "STATE");
    let done: Doc = serde_json::from_str(&state).unwrap();
    assert_eq!(done.log, ["write", "check d1", "polish", "judge", "publish (from afar)"]);
    std::fs::remove_dir_all(&dir).ok();
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tea-subgraphs-{name}-{}-{}", std::process::id(), rand_suffix()));
    std::fs::remove_dir_all(&dir).ok();
    dir
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

// ---------------------------------------------------------------------------------------------
// `Command::parent`: a child node ends the child and routes its parent.

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    text: String,
    urgent: bool,
    #[reducer(append)]
    trail: Vec<String>,
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Triage {
    text: String,
    #[reducer(append)]
    seen: Vec<String>,
}

fn read(t: &Triage) -> TriageUpdate {
    Triage::update().seen(vec![format!("read {}", t.text)])
}
fn decide(t: &Triage) -> Command<TriagerNode> {
    if t.text.contains("fire") {
        // Out of the child, into the parent's `human` node, with an update of the parent's state.
        Command::parent(HelpdeskNode::Human).update(Ticket::update().trail(vec!["escalated by triage".into()]))
    } else {
        Command::goto(TriagerNode::Fix)
    }
}
fn fix(_: &Triage) -> TriageUpdate {
    Triage::update().seen(vec!["fixed".into()])
}

graph! {
    pub Triager for Triage {
        start -> read;
        read -> decide;
        decide -> fix | end;
        fix -> end;
    }
}

fn to_triage(t: &Ticket) -> Triage {
    Triage { text: t.text.clone(), ..Triage::default() }
}
fn from_triage(_: &Ticket, t: Triage) -> TicketUpdate {
    Ticket::update().trail(t.seen)
}
fn human(_: &Ticket) -> TicketUpdate {
    Ticket::update().trail(vec!["human".into()])
}
fn close(_: &Ticket) -> TicketUpdate {
    Ticket::update().trail(vec!["close".into()])
}
fn is_urgent(t: &Ticket) -> bool {
    t.urgent
}

graph! {
    pub Helpdesk for Ticket {
        start -> human if is_urgent;
        start -> triage;
        triage -> close;
        human -> close;
        close -> end;
        subgraph triage = Triager(to_triage => from_triage);
    }
}

fn command_parent_routes_the_parent<C: Checkpointer>(store: C) {
    let app = Helpdesk::builder().checkpointer(store).build();
    let calm = app.invoke(Ticket { text: "typo".into(), ..Ticket::default() }).unwrap().done().unwrap();
    assert_eq!(calm.trail, ["read typo", "fixed", "close"], "a child that ends normally maps its output");
    let hot = app.invoke(Ticket { text: "fire".into(), ..Ticket::default() }).unwrap().done().unwrap();
    // The jump's update, then the parent's `human` node; the child's output mapping is not applied.
    assert_eq!(hot.trail, ["escalated by triage", "human", "close"]);
}

#[test]
fn command_parent_routes_the_parent_memory() {
    command_parent_routes_the_parent(MemoryStore::new());
}

#[test]
fn command_parent_routes_the_parent_sled() {
    let dir = tempdir("parent");
    command_parent_routes_the_parent(SledStore::open(&dir).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn command_parent_without_a_checkpointer() {
    let out = Helpdesk::builder().build().invoke(Ticket { text: "fire".into(), ..Ticket::default() }).unwrap();
    assert_eq!(out.trail, ["escalated by triage", "human", "close"]);
}

// `Command::parent` from a parallel branch of the child: the child's fan-out finishes, then the
// child ends and routes its parent.

fn spread(_: &Triage) {}
fn scan(t: &Triage) -> Command<ScreenNode> {
    if t.text.contains("fire") {
        Command::parent(RoomNode::Alarm).update(Ticket::update().trail(vec!["alarm raised by scan".into()]))
    } else {
        Command::goto(ScreenNode::Collect).update(Triage::update().seen(vec!["scanned".into()]))
    }
}
fn watch(_: &Triage) -> TriageUpdate {
    Triage::update().seen(vec!["watched".into()])
}
fn collect(_: &Triage) -> TriageUpdate {
    Triage::update().seen(vec!["gathered".into()])
}
fn rescan(_: &Triage) -> TriageUpdate {
    Triage::update().seen(vec!["rescanned".into()])
}

graph! {
    pub Screen for Triage {
        start -> spread;
        parallel spread => [scan, watch] -> collect;
        scan -> collect | rescan;
        rescan -> collect;
        collect -> end;
    }
}

fn alarm(_: &Ticket) -> TicketUpdate {
    Ticket::update().trail(vec!["alarm".into()])
}

graph! {
    pub Room for Ticket {
        start -> alarm if is_urgent;
        start -> screen;
        screen -> close;
        alarm -> close;
        close -> end;
        subgraph screen = Screen(to_triage => from_triage);
    }
}

#[test]
fn command_parent_from_a_childs_parallel_branch_routes_the_parent() {
    #[allow(clippy::type_complexity)] // a store-less app and one with a store, side by side
    let stores: [Option<Box<dyn Fn() -> App<Room, MemoryStore>>>; 2] =
        [None, Some(Box::new(|| Room::builder().checkpointer(MemoryStore::new()).build()))];
    for store in stores {
        let run = |text: &str| {
            let input = Ticket { text: text.into(), ..Ticket::default() };
            match &store {
                None => Room::builder().build().invoke(input).unwrap(),
                Some(app) => app().invoke(input).unwrap().done().unwrap(),
            }
        };
        let calm = run("typo");
        assert_eq!(calm.trail, ["scanned", "watched", "gathered", "close"]);
        // `scan` routes the parent: `watch` still finishes, the child's join does not run, the
        // jump's update and the parent's `alarm` follow.
        let hot = run("fire");
        assert_eq!(hot.trail, ["alarm raised by scan", "alarm", "close"]);
    }
}

#[test]
fn command_parent_from_a_childs_branch_survives_a_recover() {
    // The child's final checkpoint records the jump its branch made: a parent rewound to before
    // the subgraph node and recovered routes the same way without running the child again.
    let store = MemoryStore::new();
    // A short lease: the rewound checkpoint's run counts as gone a moment later (on this clock,
    // which moves only when the test says so).
    let clock = tea::Clock::manual(std::time::SystemTime::now());
    let app = Room::builder()
        .checkpointer(store.clone())
        .lease(std::time::Duration::from_millis(1))
        .clock(clock.clone())
        .build();
    let hot =
        app.run(Call::start(Ticket { text: "fire".into(), ..Ticket::default() }).on("room-1")).unwrap().done().unwrap();
    assert_eq!(hot.trail, ["alarm raised by scan", "alarm", "close"]);
    let thread = tea::ThreadId::from("room-1");
    let first = store.get(Room::NAME, &thread, 1).unwrap().unwrap();
    store.delete(Room::NAME, &thread).unwrap();
    assert_eq!(store.append(Room::NAME, &thread, None, 1, &first, true).unwrap(), tea::AppendOutcome::Written);
    let children: Vec<_> = store.threads(Screen::NAME).unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    let child_checkpoints = store.history(Screen::NAME, &children[0]).unwrap().len();
    clock.advance(std::time::Duration::from_millis(20));
    let again = app.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(again.trail, hot.trail);
    assert_eq!(
        store.history(Screen::NAME, &children[0]).unwrap().len(),
        child_checkpoints,
        "the child did not run again"
    );
}

#[test]
fn command_parent_in_a_graph_run_on_its_own_is_no_route() {
    let error = Triager::builder().build().invoke(Triage { text: "fire".into(), ..Triage::default() }).unwrap_err();
    assert!(matches!(&error, Error::NoRoute { node, goto: Some(to) } if node == "decide" && to == "human"), "{error}");
}

#[test]
fn a_recovered_parent_routes_as_the_finished_child_did() {
    // The child ended with `Command::parent`; its final checkpoint records the jump, so running
    // the subgraph node again (as a recover does) routes the same way without running the child.
    let store = MemoryStore::new();
    // A short lease: the rewound checkpoint's run counts as gone a moment later (on this clock,
    // which moves only when the test says so).
    let clock = tea::Clock::manual(std::time::SystemTime::now());
    let app = Helpdesk::builder()
        .checkpointer(store.clone())
        .lease(std::time::Duration::from_millis(1))
        .clock(clock.clone())
        .build();
    let thread = ThreadId::from("hot-1");
    app.run(Call::start(Ticket { text: "fire".into(), ..Ticket::default() }).on(thread.clone())).unwrap();
    let child = ThreadId::from("hot-1/triage@1");
    assert_eq!(store.threads(Triager::NAME).unwrap(), std::slice::from_ref(&child));
    // Rewind the parent to before `triage` (its first checkpoint) and recover it.
    let parent = Helpdesk::builder().checkpointer(store.clone()).clock(clock.clone()).build();
    let first = parent.history(&thread).unwrap().pop().unwrap();
    assert_eq!(first.next, ["triage"]);
    let rewound = store.get(Helpdesk::NAME, &thread, first.checkpoint).unwrap().unwrap();
    store.delete(Helpdesk::NAME, &thread).unwrap();
    assert_eq!(store.append(Helpdesk::NAME, &thread, None, 1, &rewound, true).unwrap(), tea::AppendOutcome::Written);
    let child_checkpoints = store.history(Triager::NAME, &child).unwrap().len();
    clock.advance(std::time::Duration::from_millis(20));
    let done = parent.run(Call::recover(&thread)).unwrap().done().unwrap();
    assert_eq!(done.trail, ["escalated by triage", "human", "close"]);
    assert_eq!(store.history(Triager::NAME, &child).unwrap().len(), child_checkpoints, "the child did not run again");
}

// A node reached only by `Command::parent`: declared on the subgraph node (`parent -> …`), it is
// reachable, and the child may route the parent to the declared nodes only.

fn sort(t: &Triage) -> Command<SorterNode> {
    if t.text.contains("virus") {
        Command::parent(WardNode::Quarantine).update(Ticket::update().trail(vec!["isolated".into()]))
    } else if t.text.contains("odd") {
        // Not declared by `ward`'s `parent -> …`.
        Command::parent(WardNode::Close).into()
    } else {
        Command::end()
    }
}

fn tidy(_: &Triage) {}

graph! {
    pub Sorter for Triage {
        start -> sort;
        sort -> tidy | end;
        tidy -> end;
    }
}

fn quarantine(_: &Ticket) -> TicketUpdate {
    Ticket::update().trail(vec!["quarantine".into()])
}

graph! {
    /// `quarantine` has no edge into it: only `sorter`'s child routes there.
    pub Ward for Ticket {
        start -> sorter;
        sorter -> close;
        quarantine -> close;
        close -> end;
        subgraph sorter = Sorter(to_triage => from_triage), parent -> quarantine;
    }
}

#[test]
fn a_node_reached_only_by_a_declared_parent_jump_runs() {
    let app = Ward::builder().checkpointer(MemoryStore::new()).build();
    let sick = app.invoke(Ticket { text: "virus".into(), ..Ticket::default() }).unwrap().done().unwrap();
    assert_eq!(sick.trail, ["isolated", "quarantine", "close"]);
    let calm = app.invoke(Ticket { text: "fine".into(), ..Ticket::default() }).unwrap().done().unwrap();
    assert_eq!(calm.trail, ["close"]);
    // A jump the declaration does not list is refused, as a router's undeclared goto is.
    let error = app.invoke(Ticket { text: "odd".into(), ..Ticket::default() }).unwrap_err();
    assert!(matches!(&error, Error::NoRoute { node, goto: Some(to) } if node == "sorter" && to == "close"), "{error}");
    // Store-less, the same.
    let sick = Ward::builder().build().invoke(Ticket { text: "virus".into(), ..Ticket::default() }).unwrap();
    assert_eq!(sick.trail, ["isolated", "quarantine", "close"]);
}

// ---------------------------------------------------------------------------------------------
// Streams: a subgraph node's child steps come before the node's own step, named by their path.

/// The events of a stream as `node` names (`Interrupted`, `Done`), with each step's `log`.
fn steps_of(events: impl Iterator<Item = Result<Event<Doc>, Error>>) -> Vec<(String, Vec<String>)> {
    events
        .map(|event| match event.unwrap() {
            Event::Step { node, state, .. } => (node.to_string(), state.log),
            Event::Interrupted { state, .. } => ("Interrupted".to_owned(), state.log),
            Event::Done(state) => ("Done".to_owned(), state.log),
            other => panic!("unexpected event {other:?}"),
        })
        .collect()
}

fn owned(items: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
    items.iter().map(|(n, log)| ((*n).to_owned(), log.iter().map(|s| (*s).to_owned()).collect())).collect()
}

#[test]
fn a_stream_shows_the_childs_steps_with_their_path() {
    let app = Desk::builder().checkpointer(MemoryStore::new()).build();
    let events: Vec<_> = app.run_stream(Call::start(Doc::default()).on("desk-stream")).collect();
    let resume = match events.last() {
        Some(Ok(Event::Interrupted { resume, .. })) => resume.clone(),
        other => panic!("the child pauses the stream: {other:?}"),
    };
    assert_eq!(
        steps_of(events.into_iter()),
        owned(&[
            ("write", &["write"]),
            ("review/check", &["write", "check d1"]),
            ("review/polish", &["write", "check d1", "polish"]),
            ("Interrupted", &["write"]),
        ])
    );
    // The resumed stream continues inside the child: `judge`, then the subgraph node itself.
    let after = steps_of(app.run_stream(Call::resume(resume.answer("ok"))));
    let full: &[&str] = &["write", "check d1", "polish", "judge"];
    assert_eq!(
        after,
        owned(&[
            ("review/judge", full),
            ("review", full),
            ("publish", &["write", "check d1", "polish", "judge", "publish (ok)"]),
            ("Done", &["write", "check d1", "polish", "judge", "publish (ok)"]),
        ])
    );
}

#[test]
fn a_stream_names_a_grandchilds_steps_by_the_whole_path() {
    let app = Top::builder().checkpointer(MemoryStore::new()).build();
    let events: Vec<_> = app.stream(Doc::default()).map(Result::unwrap).collect();
    let names: Vec<String> = steps_of(events.iter().cloned().map(Ok)).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["write", "outer/inner/check", "outer/inner/polish", "Interrupted"]);
    let Some(Event::Interrupted { resume, .. }) = events.last() else { panic!("paused") };
    let names: Vec<String> =
        steps_of(app.run_stream(Call::resume(resume.clone().answer("deep")))).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["outer/inner/judge", "outer/inner", "outer", "Done"]);
}

#[test]
fn a_store_less_stream_shows_the_childs_steps() {
    let app = Twice::builder().build();
    let names: Vec<String> = steps_of(app.stream(Doc::default())).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["first/count", "first", "second/count", "second", "Done"]);
}

fn aside(_: &Doc) -> DocUpdate {
    Doc::update()
}
fn fork_counter(_: &Doc) {}
fn after_fork(_: &Doc) {}

graph! {
    /// A subgraph node as one branch of a fan-out.
    pub Branching for Doc {
        start -> fork_counter;
        parallel fork_counter => [aside, counted] -> after_fork;
        after_fork -> end;
        subgraph counted = Counter;
    }
}

#[test]
fn a_subgraph_in_a_branch_streams_its_childs_steps_in_the_branch() {
    for store in [None, Some(MemoryStore::new())] {
        let events: Vec<Event<Doc>> = match store {
            None => Branching::builder().build().stream(Doc::default()).map(Result::unwrap).collect(),
            Some(store) => {
                Branching::builder().checkpointer(store).build().stream(Doc::default()).map(Result::unwrap).collect()
            }
        };
        let seen: Vec<(String, Option<String>)> = events
            .iter()
            .filter_map(|event| match event {
                Event::Step { node, branch, .. } => Some((node.to_string(), branch.as_ref().map(|b| b.to_string()))),
                _ => None,
            })
            .collect();
        let step = |node: &str, branch: Option<&str>| (node.to_owned(), branch.map(str::to_owned));
        assert_eq!(
            seen,
            [
                step("fork_counter", None),
                step("aside", Some("aside")),
                step("counted/count", Some("counted")),
                step("counted", Some("counted")),
                step("after_fork", None),
            ]
        );
    }
}

#[test]
fn a_mapped_childs_steps_carry_the_parents_state() {
    // `triage` maps `Ticket` to its own `Triage`: its steps show the parent's state before it.
    let app = Helpdesk::builder().checkpointer(MemoryStore::new()).build();
    let events: Vec<_> = app.stream(Ticket { text: "typo".into(), ..Ticket::default() }).map(Result::unwrap).collect();
    let seen: Vec<(String, Vec<String>)> = events
        .iter()
        .map(|event| match event {
            Event::Step { node, state, .. } => (node.to_string(), state.trail.clone()),
            Event::Done(state) => ("Done".to_owned(), state.trail.clone()),
            Event::Interrupted { .. } => panic!("no pause"),
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    let trail = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        seen,
        [
            ("triage/read".to_owned(), trail(&[])),
            ("triage/decide".to_owned(), trail(&[])),
            ("triage/fix".to_owned(), trail(&[])),
            ("triage".to_owned(), trail(&["read typo", "fixed"])),
            ("close".to_owned(), trail(&["read typo", "fixed", "close"])),
            ("Done".to_owned(), trail(&["read typo", "fixed", "close"])),
        ]
    );
    // A child that routes its parent (`Command::parent`) still reports its steps.
    let hot: Vec<String> = app
        .stream(Ticket { text: "fire".into(), ..Ticket::default() })
        .map(|event| match event.unwrap() {
            Event::Step { node, .. } => node.to_string(),
            _ => "end".to_owned(),
        })
        .collect();
    assert_eq!(hot, ["triage/read", "triage/decide", "triage", "human", "close", "end"]);
}

#[test]
fn invoke_is_unchanged_by_child_streaming() {
    // The same graphs through `invoke`: no events, same results as the streams above.
    let out = Twice::builder().build().invoke(Doc::default()).unwrap();
    assert_eq!(out.edits, 2);
}
