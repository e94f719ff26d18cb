//! Feature `tracing`: the spans and events of runs, collected by a subscriber and checked as a
//! tree (`cargo test -p tea-integration-tests --test tracing`).
//!
//! The subscriber is the process's global one, since branches run on rayon's workers, where a
//! thread-local subscriber would see nothing; each test picks out its own runs by thread id.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, OnceLock};
use tea::prelude::*;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event as TraceEvent, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// A span or an event as the collector saw it.
#[derive(Clone, Debug)]
struct Seen {
    /// The span's id (`None` for events).
    id: Option<u64>,
    parent: Option<u64>,
    /// The span's name, or an event's message.
    name: String,
    target: String,
    fields: BTreeMap<String, String>,
    /// The names of the fields as they were given a value, at the span's creation and by each
    /// `record` after it, in order: a formatter prints every one (so a name twice is printed twice).
    recorded: Vec<String>,
    thread: std::thread::ThreadId,
    /// When the span was created or the event emitted, and when the span closed: ticks of one
    /// counter for all threads.
    at: u64,
    closed: Option<u64>,
}

/// The collector's clock: one tick per span created or closed and per event.
fn tick() -> u64 {
    static TICKS: AtomicU64 = AtomicU64::new(0);
    TICKS.fetch_add(1, Ordering::SeqCst)
}

#[derive(Default)]
struct Collected {
    spans: Vec<Seen>,
    events: Vec<Seen>,
}

struct Collector(&'static Mutex<Collected>);

struct Fields<'a>(&'a mut BTreeMap<String, String>, Option<&'a mut Vec<String>>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
        if let Some(recorded) = &mut self.1 {
            recorded.push(field.name().to_owned());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
        if let Some(recorded) = &mut self.1 {
            recorded.push(field.name().to_owned());
        }
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collector {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let (mut fields, mut recorded) = (BTreeMap::new(), Vec::new());
        attrs.record(&mut Fields(&mut fields, Some(&mut recorded)));
        let parent = ctx.span(id).and_then(|span| span.parent()).map(|parent| parent.id().into_u64());
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).spans.push(Seen {
            id: Some(id.into_u64()),
            parent,
            name: attrs.metadata().name().to_owned(),
            target: attrs.metadata().target().to_owned(),
            fields,
            recorded,
            thread: std::thread::current().id(),
            at: tick(),
            closed: None,
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut collected = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ids are reused once a span closes: the newest span with this id is the one recorded.
        if let Some(span) = collected.spans.iter_mut().rev().find(|s| s.id == Some(id.into_u64())) {
            values.record(&mut Fields(&mut span.fields, Some(&mut span.recorded)));
        }
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        let mut collected = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(span) = collected.spans.iter_mut().rev().find(|s| s.id == Some(id.into_u64())) {
            span.closed = Some(tick());
        }
    }

    fn on_event(&self, event: &TraceEvent<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields, None));
        let name = fields.remove("message").unwrap_or_default();
        let parent = ctx.event_span(event).map(|span| span.id().into_u64());
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).events.push(Seen {
            id: None,
            parent,
            name,
            target: event.metadata().target().to_owned(),
            fields,
            recorded: Vec::new(),
            thread: std::thread::current().id(),
            at: tick(),
            closed: None,
        });
    }
}

/// What the global collector has seen so far.
fn collected() -> &'static Mutex<Collected> {
    static COLLECTED: OnceLock<&'static Mutex<Collected>> = OnceLock::new();
    COLLECTED.get_or_init(|| {
        let collected: &'static Mutex<Collected> = Box::leak(Box::default());
        let subscriber = tracing_subscriber::registry().with(Collector(collected));
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        collected
    })
}

/// The spans and events of the runs on `thread`: each `run` span with that thread and
/// everything below it. Rendered as an indented tree, one line per span or event, with the
/// fields in `shown` (checkpoint and store spans are left out: see `checkpoints_of`).
fn tree(thread: &str, shown: &[&str]) -> String {
    let collected = collected().lock().unwrap();
    let mut out = String::new();
    let roots = collected
        .spans
        .iter()
        .filter(|s| s.name == "run" && s.fields.get("thread").map(String::as_str) == Some(thread));
    for root in roots {
        render(&collected, root, 0, shown, &mut out);
    }
    out
}

fn render(collected: &Collected, span: &Seen, depth: usize, shown: &[&str], out: &mut String) {
    // Checkpoint and store spans are not drawn; their events are, as their parent's.
    let hidden = span.name == "checkpoint" || span.name == "store";
    let inner = if hidden { depth } else { depth + 1 };
    if !hidden {
        out.push_str(&line(span, depth, shown));
    }
    // Children in the order they were created; events in the order they were emitted. Spans
    // and events are listed apart: their relative order across rayon's threads is not fixed.
    // A fan-out's branches start in any order: they are drawn sorted.
    let mut children: Vec<&Seen> = collected.spans.iter().filter(|s| s.parent == span.id).collect();
    if span.name == "fork" {
        children.sort_by_key(|s| s.fields.get("branch").cloned());
    }
    for child in children {
        render(collected, child, inner, shown, out);
    }
    // A checkpoint's `written` event is checked on its own (`checkpoints are written …`).
    for event in collected.events.iter().filter(|e| e.parent == span.id && e.name != "written") {
        out.push_str(&line(event, inner, shown));
    }
}

fn line(seen: &Seen, depth: usize, shown: &[&str]) -> String {
    let mut line = format!("{}{}", "  ".repeat(depth), seen.name);
    for (key, value) in &seen.fields {
        if shown.contains(&key.as_str()) {
            line.push_str(&format!(" {key}={value}"));
        }
    }
    line.push('\n');
    line
}

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Plan {
    #[reducer(append)]
    log: Vec<String>,
    approved: bool,
}

/// Both branches wait here for each other, so they must run on two threads at once: the
/// second one on a rayon worker.
static BOTH_BRANCHES: Barrier = Barrier::new(2);

fn plan(_: &Plan) -> PlanUpdate {
    Plan::update().log(vec!["plan".into()])
}
fn research(_: &Plan) -> PlanUpdate {
    BOTH_BRANCHES.wait();
    Plan::update().log(vec!["research".into()])
}
fn budget(_: &Plan) -> PlanUpdate {
    BOTH_BRANCHES.wait();
    Plan::update().log(vec!["budget".into()])
}
fn gather(_: &Plan) -> PlanUpdate {
    Plan::update().log(vec!["gather".into()])
}
fn review(s: &Plan) -> Result<PlanUpdate, String> {
    if s.approved {
        Ok(Plan::update().log(vec!["review".into()]))
    } else {
        Err("not approved".into())
    }
}

graph! {
    pub Proposal for Plan {
        start -> plan;
        parallel plan => [research, budget] -> gather;
        gather -> review;
        review -> end;
        interrupt_before review;
    }
}

const SHOWN: &[&str] = &["call", "node", "branch", "step", "join", "branches", "kinds", "ids", "error"];

#[test]
fn a_run_with_a_fan_out_and_a_pause_is_one_tree_of_spans() {
    collected();
    let app = Proposal::builder().checkpointer(MemoryStore::new()).build();
    let paused = app.run(Call::start(Plan::default()).on("tree")).unwrap();
    let resume = paused.interrupted().expect("paused before review").1;
    let done = app.resume(resume.update(Plan::update().approved(true))).unwrap();
    assert!(done.is_done());

    let expected = "\
run call=invoke
  node node=plan step=1
    started
  fork branches=2 join=gather
    node branch=budget node=budget step=2
      started
    node branch=research node=research step=2
      started
  node node=gather step=4
    started
  paused ids=[\"before:review\"] kinds=[\"before\"] step=4
run call=resume
  node node=review step=5
    started
  resumed
  done step=5
";
    assert_eq!(tree("tree", SHOWN), expected);

    let collected = collected().lock().unwrap();
    let of_thread: Vec<&Seen> = collected.spans.iter().filter(|s| s.target == "tea").collect();
    let runs: Vec<u64> = of_thread
        .iter()
        .filter(|s| s.name == "run" && s.fields.get("thread").map(String::as_str) == Some("tree"))
        .filter_map(|s| s.id)
        .collect();
    let fork = of_thread.iter().find(|s| s.name == "fork" && runs.contains(&s.parent.unwrap())).unwrap();
    let branch_nodes: Vec<&&Seen> = of_thread.iter().filter(|s| s.name == "node" && s.parent == fork.id).collect();
    assert_eq!(branch_nodes.len(), 2);
    assert_ne!(branch_nodes[0].thread, branch_nodes[1].thread, "the branches ran on two threads");
    for node in
        of_thread.iter().filter(|s| s.name == "node" && (s.parent == fork.id || runs.contains(&s.parent.unwrap())))
    {
        let micros: u64 = node.fields["duration_us"].parse().unwrap();
        assert!(micros < 60_000_000, "node {:?} recorded its duration", node.fields["node"]);
    }

    // Every checkpoint of the runs is written inside its run, as one store append.
    let checkpoints: Vec<&&Seen> =
        of_thread.iter().filter(|s| s.name == "checkpoint" && runs.contains(&s.parent.unwrap())).collect();
    assert!(!checkpoints.is_empty());
    for checkpoint in &checkpoints {
        let stores: Vec<&&Seen> = of_thread.iter().filter(|s| s.parent == checkpoint.id).collect();
        assert_eq!(stores.len(), 1, "one store call per checkpoint: {checkpoint:?}");
        assert_eq!(stores[0].name, "store");
        assert_eq!(stores[0].fields["op"], "append");
        assert!(checkpoint.fields["bytes"].parse::<usize>().unwrap() > 0);
        assert!(checkpoint.fields.contains_key("duration_us"));
    }
    // … and says so, in it, with a `written` event.
    for checkpoint in &checkpoints {
        let written: Vec<&Seen> =
            collected.events.iter().filter(|e| e.parent == checkpoint.id && e.name == "written").collect();
        assert_eq!(written.len(), 1, "one `written` event per checkpoint: {checkpoint:?}");
        assert!(written[0].fields.contains_key("id"), "{written:?}");
        assert!(written[0].at < checkpoint.closed.unwrap());
    }
    let pauses: Vec<&&&Seen> = checkpoints.iter().filter(|c| c.fields["pause"] == "true").collect();
    assert_eq!(pauses.len(), 1, "one paused checkpoint");
    assert_eq!(pauses[0].fields["durable"], "true", "a pause is flushed");
    assert_eq!(pauses[0].parent, Some(runs[0]));
}

fn refuse(_: &Plan) -> Result<PlanUpdate, String> {
    Err("the budget is gone".into())
}

graph! {
    pub Refused for Plan {
        start -> refuse;
        refuse -> end;
    }
}

#[test]
fn a_failed_run_reports_the_error_variant() {
    collected();
    let app = Refused::builder().checkpointer(MemoryStore::new()).build();
    let error = app.run(Call::start(Plan::default()).on("refused")).unwrap_err();
    assert!(matches!(error, Error::NodeFailed { .. }));
    assert_eq!(
        tree("refused", &["call", "node", "error"]),
        "run call=invoke\n  node node=refuse\n    started\n  abandoned\n  failed error=NodeFailed node=refuse\n"
    );
    let collected = collected().lock().unwrap();
    let failed = collected
        .events
        .iter()
        .find(|e| e.name.starts_with("failed") && e.fields.get("node").map(String::as_str) == Some("refuse"));
    assert!(failed.is_some());
    assert!(collected.events.iter().filter(|e| e.target == "tea").all(|e| !e.name.is_empty()));
}

#[test]
fn starting_a_thread_that_exists_reports_the_conflict() {
    collected();
    // Not `Proposal`: its branches' barrier belongs to the span-tree test.
    let app = Refused::builder().checkpointer(MemoryStore::new()).build();
    app.run(Call::start(Plan::default()).on("taken")).unwrap_err();
    let error = app.run(Call::start(Plan::default()).on("taken")).unwrap_err();
    assert!(matches!(error, Error::ThreadExists { .. }), "{error:?}");
    let tree = tree("taken", &["call", "error", "expected", "found"]);
    assert!(
        tree.ends_with("run call=invoke\n  conflict expected=None found=Some(2)\n  failed error=ThreadExists\n"),
        "{tree}"
    );
}

fn left(_: &Plan) -> PlanUpdate {
    Plan::update().log(vec!["left".into()])
}
fn right(_: &Plan) -> PlanUpdate {
    Plan::update().log(vec!["right".into()])
}

graph! {
    // `Proposal` without its barrier (which pairs the branches of one run at a time).
    pub Steady for Plan {
        start -> plan;
        parallel plan => [left, right] -> gather;
        gather -> review;
        review -> end;
        interrupt_before review;
    }
}

/// Each field of a span is given its value once (a formatter such as tracing-subscriber's `fmt`
/// prints every value a span is given: `call="invoke" call="invoke_async"` before it was), and a
/// node's start is seen when it starts (its `started` event, before its span closes), on both
/// drivers and for every call that starts or continues a run.
#[test]
fn span_fields_are_set_once_and_a_node_is_seen_starting() {
    collected();
    let app = Refused::builder().checkpointer(MemoryStore::new()).build();
    app.run(Call::start(Plan::default()).on("once-sync")).unwrap_err();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let proposal = Steady::builder().checkpointer(MemoryStore::new()).build();
    let approved = Plan { approved: true, ..Plan::default() };
    runtime.block_on(async {
        let paused = proposal.run_async(Call::start(approved.clone()).on("once-async")).await.unwrap();
        let resume = paused.interrupted().expect("paused before review").1;
        assert!(proposal.resume_async(resume).await.unwrap().is_done());
    });
    drop(runtime);

    let collected = collected().lock().unwrap();
    let of = |thread: &str| -> Vec<&Seen> {
        let runs: Vec<Option<u64>> = collected
            .spans
            .iter()
            .filter(|s| s.name == "run" && s.fields.get("thread").map(String::as_str) == Some(thread))
            .map(|s| s.id)
            .collect();
        // The runs and every span under them.
        let mut spans: Vec<&Seen> = collected.spans.iter().filter(|s| runs.contains(&s.id)).collect();
        let mut grew = true;
        while grew {
            let before = spans.len();
            // A span id is reused once its span closed: a child is one made while its parent was open.
            let under = |parent: &Seen, child: &Seen| {
                child.parent == parent.id
                    && child.at > parent.at
                    && parent.closed.is_none_or(|closed| child.at < closed)
            };
            let found: Vec<&Seen> = collected
                .spans
                .iter()
                .filter(|span| spans.iter().any(|parent| under(parent, span)))
                .filter(|span| !spans.iter().any(|s| std::ptr::eq(*s, *span)))
                .collect();
            spans.extend(found);
            grew = spans.len() > before;
        }
        spans
    };
    for (thread, calls) in [("once-sync", vec!["invoke"]), ("once-async", vec!["invoke_async", "resume_async"])] {
        let spans = of(thread);
        let runs: Vec<&str> = spans.iter().filter(|s| s.name == "run").map(|s| s.fields["call"].as_str()).collect();
        assert_eq!(runs, calls, "{thread}");
        for span in &spans {
            let mut names = span.recorded.clone();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), span.recorded.len(), "a field set twice in {span:?}");
        }
        let nodes: Vec<&&Seen> = spans.iter().filter(|s| s.name == "node").collect();
        assert!(!nodes.is_empty(), "{thread}");
        for node in nodes {
            let started = collected
                .events
                .iter()
                .find(|e| e.name == "started" && e.parent == node.id && e.at > node.at)
                .unwrap_or_else(|| panic!("no `started` event in {node:?}"));
            assert!(started.at < node.closed.expect("the node's span closed"), "{node:?}");
        }
    }
}
