//! Feature `tracing`: the spans and events of runs, collected by a subscriber and checked as a
//! tree (`cargo test --features tracing --test tracing`).
//!
//! The subscriber is the process's global one, since branches run on rayon's workers, where a
//! thread-local subscriber would see nothing; each test picks out its own runs by thread id.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    thread: std::thread::ThreadId,
}

#[derive(Default)]
struct Collected {
    spans: Vec<Seen>,
    events: Vec<Seen>,
}

struct Collector(&'static Mutex<Collected>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collector {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        let parent = ctx.span(id).and_then(|span| span.parent()).map(|parent| parent.id().into_u64());
        self.0.lock().unwrap().spans.push(Seen {
            id: Some(id.into_u64()),
            parent,
            name: attrs.metadata().name().to_owned(),
            target: attrs.metadata().target().to_owned(),
            fields,
            thread: std::thread::current().id(),
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut collected = self.0.lock().unwrap();
        // Ids are reused once a span closes: the newest span with this id is the one recorded.
        if let Some(span) = collected.spans.iter_mut().rev().find(|s| s.id == Some(id.into_u64())) {
            values.record(&mut Fields(&mut span.fields));
        }
    }

    fn on_event(&self, event: &TraceEvent<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let name = fields.remove("message").unwrap_or_default();
        let parent = ctx.event_span(event).map(|span| span.id().into_u64());
        self.0.lock().unwrap().events.push(Seen {
            id: None,
            parent,
            name,
            target: event.metadata().target().to_owned(),
            fields,
            thread: std::thread::current().id(),
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
    for event in collected.events.iter().filter(|e| e.parent == span.id) {
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
    let paused = app.invoke_on("tree", Plan::default()).unwrap();
    let resume = paused.interrupted().expect("paused before review").1;
    let done = app.resume(resume.update(Plan::update().approved(true))).unwrap();
    assert!(done.is_done());

    let expected = "\
run call=invoke
  node node=plan step=1
  fork branches=2 join=gather
    node branch=budget node=budget step=2
    node branch=research node=research step=2
  node node=gather step=4
  paused ids=[\"before:review\"] kinds=[\"before\"] step=4
run call=resume
  node node=review step=5
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
    let error = app.invoke_on("refused", Plan::default()).unwrap_err();
    assert!(matches!(error, Error::NodeFailed { .. }));
    assert_eq!(
        tree("refused", &["call", "node", "error"]),
        "run call=invoke\n  node node=refuse\n  abandoned\n  failed error=NodeFailed node=refuse\n"
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
    app.invoke_on("taken", Plan::default()).unwrap_err();
    let error = app.invoke_on("taken", Plan::default()).unwrap_err();
    assert!(matches!(error, Error::ThreadExists { .. }), "{error:?}");
    let tree = tree("taken", &["call", "error", "expected", "found"]);
    assert!(
        tree.ends_with("run call=invoke\n  conflict expected=None found=Some(2)\n  failed error=ThreadExists\n"),
        "{tree}"
    );
}
