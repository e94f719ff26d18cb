//! Pauses from inside nodes: interruptible nodes, interrupt nodes (with timeouts), answers by
//! id, and pauses inside parallel branches.

mod store_forward;
use store_forward::forward;

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tea::prelude::*;
use tea::{Hitl, Pause};

#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Form {
    question: String,
    #[reducer(append)]
    transcript: Vec<String>,
    name: String,
    colour: String,
    #[reducer(append)]
    log: Vec<String>,
    #[reducer(sum)]
    turns: u32,
}

fn paused(outcome: Outcome<Form>) -> (Form, Resume<Form>) {
    match outcome {
        Outcome::Interrupted { state, resume } => (state, resume),
        Outcome::Done(state) => panic!("expected a pause, the run finished with {state:?}"),
    }
}

mod two_questions {
    use super::*;

    static RUNS: AtomicUsize = AtomicUsize::new(0);

    fn survey(_: &Form, hitl: &mut Hitl) -> Result<FormUpdate, Pause> {
        RUNS.fetch_add(1, Ordering::SeqCst);
        let name: String = hitl.interrupt("What is your name?")?;
        let colour: String = hitl.interrupt(format!("{name}, what is your favourite colour?"))?;
        Ok(Form::update().name(name).colour(colour).log(vec!["survey".into()]).turns(1))
    }

    graph! {
        pub Survey for Form {
            start -> survey;
            survey -> end;
            interruptible survey;
        }
    }

    #[test]
    fn calls_are_matched_in_order_and_the_node_reruns_from_its_start() {
        let app = Survey::builder().checkpointer(MemoryStore::new()).build();
        let (_, first) = paused(app.invoke(Form::default()).unwrap());
        assert_eq!(first.interrupts().len(), 1);
        assert_eq!(first.interrupts()[0].id(), "survey#0");
        assert_eq!(first.interrupts()[0].value(), "What is your name?");
        assert!(first.interrupts()[0].needs_answer());

        let (state, second) = paused(app.resume(first.answer("Ada")).unwrap());
        assert_eq!(second.interrupts()[0].id(), "survey#1");
        assert_eq!(second.interrupts()[0].value(), "Ada, what is your favourite colour?");
        assert_eq!(state.name, "", "a paused node's update is discarded");

        let done = app.resume(second.answer("blue")).unwrap().done().unwrap();
        assert_eq!((done.name.as_str(), done.colour.as_str()), ("Ada", "blue"));
        assert_eq!(done.log, ["survey"], "the update is applied once");
        assert_eq!(done.turns, 1);
        assert_eq!(RUNS.load(Ordering::SeqCst), 3, "the node ran once per answer plus once");
    }
}

mod bad_answers {
    use super::*;

    fn age(_: &Form, hitl: &mut Hitl) -> Result<FormUpdate, Box<dyn std::error::Error + Send + Sync>> {
        let years: u32 = hitl.interrupt("How old are you?")?;
        Ok(Form::update().name(format!("{years} years")))
    }

    graph! {
        pub Age for Form {
            start -> age;
            age -> end;
            interruptible age;
        }
    }

    #[test]
    fn a_bad_answer_is_refused_and_the_token_still_works() {
        let app = Age::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        match app.resume(resume.clone().answer("forty")).unwrap_err() {
            Error::BadResumeValue { node, expected, reason } => {
                assert_eq!(node, "age");
                assert_eq!(expected, "u32");
                assert!(reason.contains("expected u32"), "{reason}");
            }
            other => panic!("expected BadResumeValue, got {other:?}"),
        }
        let done = app.resume(resume.answer(40)).unwrap().done().unwrap();
        assert_eq!(done.name, "40 years");
    }

    #[test]
    fn answers_must_name_a_pending_pause() {
        let app = Age::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let err = app.resume(resume.clone().answer_to("nope#0", 1)).unwrap_err();
        assert!(matches!(&err, Error::BadResumeValue { reason, .. } if reason.contains("`nope#0`")), "{err:?}");
        let err = app.resume(resume.clone()).unwrap_err();
        assert!(
            matches!(&err, Error::BadResumeValue { reason, .. } if reason.contains("waits for an answer")),
            "{err:?}"
        );
        assert_eq!(app.resume(resume.answer_to("age#0", 7)).unwrap().done().unwrap().name, "7 years");
    }
}

mod interrupt_node {
    use super::*;

    fn prepare(_: &Form) -> FormUpdate {
        Form::update().question("approve?".into()).log(vec!["prepare".into()])
    }
    fn finish(_: &Form) -> FormUpdate {
        Form::update().log(vec!["finish".into()])
    }

    graph! {
        pub Approval for Form {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interrupt ask(question => name);
        }
    }

    #[test]
    fn pauses_with_the_field_and_writes_the_answer() {
        let app = Approval::builder().checkpointer(MemoryStore::new()).build();
        let (state, resume) = paused(app.invoke(Form::default()).unwrap());
        assert_eq!(state.log, ["prepare"]);
        assert_eq!(resume.node(), &"ask");
        assert_eq!(resume.interrupts()[0].value(), "approve?");
        let done = app.resume(resume.answer("yes")).unwrap().done().unwrap();
        assert_eq!(done.name, "yes");
        assert_eq!(done.log, ["prepare", "finish"]);
    }

    graph! {
        pub Gated for Form {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interrupt ask(question => name);
            interrupt_before finish;
        }
    }

    #[test]
    fn a_bad_answer_to_an_interrupt_node_is_refused_before_the_thread_is_touched() {
        let app = Approval::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let thread = resume.thread().clone();
        let head = app.state(&thread).unwrap().unwrap().checkpoint;
        match app.resume(resume.clone().answer(42)).unwrap_err() {
            Error::BadResumeValue { node, expected, .. } => {
                assert_eq!(node, "ask");
                assert!(expected.ends_with("String"), "{expected}");
            }
            other => panic!("expected BadResumeValue, got {other:?}"),
        }
        assert_eq!(app.state(&thread).unwrap().unwrap().checkpoint, head, "nothing was written");
        assert_eq!(app.resume(resume.answer("fine")).unwrap().done().unwrap().name, "fine");
    }

    #[test]
    fn dropping_a_resumed_stream_part_way_puts_the_pause_back() {
        let app = Approval::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        {
            let mut events = app.run_stream(Call::resume(resume.clone().answer("first try")));
            // `ask` runs and writes its answer; the stream is dropped before `finish`.
            assert!(matches!(events.next(), Some(Ok(Event::Step { node, .. })) if node == "ask"));
        }
        let snapshot = app.state(resume.thread()).unwrap().unwrap();
        assert_eq!(snapshot.interrupts.len(), 1, "the thread is paused again");
        let done = app.resume(resume.answer("second try")).unwrap().done().unwrap();
        assert_eq!(done.name, "second try");
        assert_eq!(done.log, ["prepare", "finish"]);
    }

    #[test]
    fn a_finished_resumed_stream_is_not_rolled_back_when_dropped() {
        let app = Approval::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let events: Vec<Event<Form>> =
            app.run_stream(Call::resume(resume.clone().answer("yes"))).collect::<Result<_, _>>().unwrap();
        assert!(matches!(events.last(), Some(Event::Done(state)) if state.name == "yes"));
        let snapshot = app.state(resume.thread()).unwrap().unwrap();
        assert!(snapshot.interrupts.is_empty() && snapshot.next.is_empty(), "the thread stays finished");
        assert!(matches!(app.resume(resume), Err(Error::StaleResume { .. })));
    }

    #[test]
    fn a_token_string_tells_which_pauses_wait_for_an_answer() {
        let app = Gated::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let parsed: Resume<Form> = resume.to_string().parse().unwrap();
        assert_eq!(parsed.interrupts()[0].id(), "ask#0");
        assert!(parsed.interrupts()[0].needs_answer());
        let (_, gate) = paused(app.resume(parsed.answer("yes")).unwrap());
        let parsed: Resume<Form> = gate.to_string().parse().unwrap();
        assert_eq!(parsed.interrupts()[0].id(), "before:finish");
        assert!(!parsed.interrupts()[0].needs_answer());
        assert_eq!(app.resume(parsed).unwrap().done().unwrap().log, ["prepare", "finish"]);
    }

    fn greet(s: &Form) -> FormUpdate {
        let turn = s.turns + 1;
        Form::update().question(format!("turn {turn}: what next?")).turns(1)
    }
    fn more(s: &Form) -> bool {
        s.turns < 5
    }

    graph! {
        pub Conversation for Form {
            start -> greet;
            greet -> listen;
            listen -> greet if more;
            listen -> end;
            interrupt listen(question => transcript);
        }
    }

    #[test]
    fn a_five_turn_conversation_collects_its_transcript() {
        let app = Conversation::builder().checkpointer(MemoryStore::new()).build();
        let (_, mut resume) = paused(app.invoke(Form::default()).unwrap());
        for turn in 1..=5 {
            assert_eq!(resume.interrupts()[0].value(), &format!("turn {turn}: what next?"));
            match app.resume(resume.answer(format!("answer {turn}"))).unwrap() {
                Outcome::Interrupted { resume: next, .. } => resume = next,
                Outcome::Done(state) => {
                    assert_eq!(turn, 5);
                    let expected: Vec<String> = (1..=5).map(|t| format!("answer {t}")).collect();
                    assert_eq!(state.transcript, expected, "the append field collects one entry per answer");
                    return;
                }
            }
        }
        panic!("the conversation did not end after five turns");
    }

    #[test]
    fn the_recursion_limit_counts_each_invocation_not_the_thread() {
        // Each resume runs `listen` and `greet`: 2 steps, within a limit of 3, over 10 in all.
        let app = Conversation::builder().checkpointer(MemoryStore::new()).recursion_limit(3).build();
        let (_, mut resume) = paused(app.invoke(Form::default()).unwrap());
        loop {
            match app.resume(resume.answer("ok")).unwrap() {
                Outcome::Interrupted { resume: next, .. } => resume = next,
                Outcome::Done(state) => {
                    assert_eq!(state.turns, 5);
                    break;
                }
            }
        }
    }

    graph! {
        pub Expiring for Form {
            start -> prepare;
            prepare -> ask;
            ask -> end;
            interrupt ask(question => name, timeout = 1);
        }
    }

    #[test]
    fn a_late_answer_is_expired_and_the_state_stays_readable() {
        // The pause's second passes on the app's clock, not in a wait.
        let clock = tea::Clock::manual(std::time::SystemTime::now());
        let app = Expiring::builder().checkpointer(MemoryStore::new()).clock(clock.clone()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let thread = resume.thread().clone();
        clock.advance(Duration::from_millis(2100));
        match app.resume(resume.answer("too late")).unwrap_err() {
            Error::Expired { thread: t, node } => {
                assert_eq!(t, thread);
                assert_eq!(node, "ask");
            }
            other => panic!("expected Expired, got {other:?}"),
        }
        let snapshot = app.state(&thread).unwrap().unwrap();
        assert_eq!(snapshot.state.log, ["prepare"]);
        assert_eq!(snapshot.interrupts.len(), 1);
    }

    #[test]
    fn an_answer_in_time_is_taken() {
        let app = Expiring::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        assert_eq!(app.resume(resume.answer("quick")).unwrap().done().unwrap().name, "quick");
    }
}

mod branches {
    use super::*;

    static PLAIN_RUNS: AtomicUsize = AtomicUsize::new(0);

    fn split(_: &Form) {}
    fn left(_: &Form, hitl: &mut Hitl) -> Result<FormUpdate, Pause> {
        let v: String = hitl.interrupt("left?")?;
        Ok(Form::update().log(vec![format!("left:{v}")]))
    }
    fn middle(_: &Form) -> FormUpdate {
        PLAIN_RUNS.fetch_add(1, Ordering::SeqCst);
        Form::update().log(vec!["middle".into()])
    }
    fn right(_: &Form, ctx: &Ctx<Form>, hitl: &mut Hitl) -> Result<FormUpdate, Pause> {
        let v: String = hitl.interrupt(format!("right in {}?", ctx.branch().unwrap()))?;
        Ok(Form::update().log(vec![format!("right:{v}")]))
    }
    fn join(s: &Form) -> FormUpdate {
        Form::update().log(vec![format!("join saw {}", s.log.len())])
    }

    graph! {
        pub Panel for Form {
            start -> split;
            parallel split => [left, middle, right] -> join;
            join -> end;
            interruptible left, right;
        }
    }

    #[test]
    fn pausing_branches_share_one_token_and_resume_one_by_one() {
        let app = Panel::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let ids: Vec<&str> = resume.interrupts().iter().map(|i| i.id()).collect();
        assert_eq!(ids, ["left#0@left", "right#0@right"]);
        assert_eq!(resume.interrupts()[1].value(), "right in right?");

        // Two pauses: a bare `answer` is ambiguous.
        let err = app.resume(resume.clone().answer("?")).unwrap_err();
        assert!(matches!(&err, Error::BadResumeValue { reason, .. } if reason.contains("answer_to")), "{err:?}");

        // Answer only the right branch: a new token lists what is left.
        let (_, rest) = paused(app.resume(resume.answer_to("right#0@right", "R")).unwrap());
        let ids: Vec<&str> = rest.interrupts().iter().map(|i| i.id()).collect();
        assert_eq!(ids, ["left#0@left"]);

        let done = app.resume(rest.answer_to("left#0@left", "L")).unwrap().done().unwrap();
        assert_eq!(done.log, ["left:L", "middle", "right:R", "join saw 3"], "merged in declared order");
        assert_eq!(PLAIN_RUNS.load(Ordering::SeqCst), 1, "the branch that completed is not run again");
    }

    fn center(_: &Form) -> FormUpdate {
        Form::update().log(vec!["center".into()])
    }

    graph! {
        pub StreamedPanel for Form {
            start -> split;
            parallel split => [left, center, right] -> join;
            join -> end;
            interruptible left, right;
        }
    }

    #[test]
    fn the_stream_ends_with_every_pending_pause() {
        let app = StreamedPanel::builder().checkpointer(MemoryStore::new()).build();
        let events: Vec<Event<Form>> = app.stream(Form::default()).collect::<Result<_, _>>().unwrap();
        match events.last() {
            Some(Event::Interrupted { resume, .. }) => assert_eq!(resume.interrupts().len(), 2),
            other => panic!("expected the stream to end paused, got {other:?}"),
        }
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::Step { node, branch: Some(b), .. } if *node == "center" && *b == "center")));
    }
}

#[cfg(feature = "sled")]
mod durable {
    use super::*;

    fn first(_: &Form, hitl: &mut Hitl) -> Result<FormUpdate, Pause> {
        let name: String = hitl.interrupt("name?")?;
        let colour: String = hitl.interrupt("colour?")?;
        Ok(Form::update().name(name).colour(colour))
    }

    graph! {
        pub Durable for Form {
            start -> first;
            first -> ask;
            ask -> end;
            interruptible first;
            interrupt ask(question => transcript);
        }
    }

    #[test]
    fn answers_survive_closing_and_reopening_the_store_between_turns() {
        let dir = std::env::temp_dir().join(format!("tea-hitl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let open = || Durable::builder().checkpointer(SledStore::open(&dir).unwrap()).build();
        let mut token = {
            let app = open();
            paused(app.invoke(Form::default()).unwrap()).1.to_string()
        };
        for answer in ["Ada", "blue", "done"] {
            let app = open();
            let resume: Resume<Form> = token.parse().unwrap();
            match app.resume(resume.answer(answer)).unwrap() {
                Outcome::Interrupted { resume, .. } => token = resume.to_string(),
                Outcome::Done(state) => {
                    assert_eq!(answer, "done");
                    assert_eq!((state.name.as_str(), state.colour.as_str()), ("Ada", "blue"));
                    assert_eq!(state.transcript, ["done"]);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// An interrupt node runs no user code: the step before it is written with its pause, and its
/// answer with the resume's claim — two records fewer per cycle, with nothing a crash could
/// lose or repeat that it could not before.
mod interrupt_node_records {
    use super::*;
    use std::sync::Arc;
    use tea::{AppendOutcome, Checkpointer, Error, ThreadId};

    static FINISHED: AtomicUsize = AtomicUsize::new(0);
    static CHECKED: AtomicUsize = AtomicUsize::new(0);

    fn prepare(_: &Form) -> FormUpdate {
        Form::update().question("approve?".into()).log(vec!["prepare".into()])
    }
    fn check(_: &Form) -> FormUpdate {
        CHECKED.fetch_add(1, Ordering::SeqCst);
        Form::update().log(vec!["check".into()])
    }
    fn finish(_: &Form) -> FormUpdate {
        FINISHED.fetch_add(1, Ordering::SeqCst);
        Form::update().log(vec!["finish".into()])
    }

    graph! {
        pub Ask for Form {
            start -> prepare;
            prepare -> ask;
            ask -> finish;
            finish -> end;
            interrupt ask(question => name);
        }
    }

    graph! {
        pub Twice for Form {
            start -> prepare;
            prepare -> ask;
            ask -> again;
            again -> finish;
            finish -> end;
            interrupt ask(question => name);
            interrupt again(question => colour);
        }
    }

    graph! {
        pub Breakpoint for Form {
            start -> prepare;
            prepare -> check;
            check -> end;
            interrupt_before check;
        }
    }

    /// Counts the appends that wrote, passing everything to a `MemoryStore`.
    #[derive(Clone, Default)]
    struct Counting {
        inner: MemoryStore,
        appends: Arc<AtomicUsize>,
    }

    impl Counting {
        fn take(&self) -> usize {
            self.appends.swap(0, Ordering::SeqCst)
        }
    }

    impl Checkpointer for Counting {
        fn append(
            &self,
            graph: &str,
            thread: &ThreadId,
            expected: Option<u64>,
            id: u64,
            bytes: &[u8],
            durable: bool,
        ) -> Result<AppendOutcome, Error> {
            let outcome = self.inner.append(graph, thread, expected, id, bytes, durable)?;
            if outcome == AppendOutcome::Written {
                self.appends.fetch_add(1, Ordering::SeqCst);
            }
            Ok(outcome)
        }
        forward!(inner: head, get, history, threads, delete, prune);
    }

    #[test]
    fn a_cycle_writes_the_claim_the_pause_the_answered_step_and_the_end() {
        let store = Counting::default();
        let app = Ask::builder().checkpointer(store.clone()).build();
        let (state, resume) = paused(app.invoke(Form::default()).unwrap());
        assert_eq!(state.log, ["prepare"]);
        assert_eq!(store.take(), 2, "the claim, then the pause holding prepare's step");
        let thread = resume.thread().clone();
        let paused_at = app.state(&thread).unwrap().unwrap();
        assert_eq!(paused_at.state.log, ["prepare"], "the stored pause holds what prepare wrote");
        assert_eq!(paused_at.state.question, "approve?");

        let done = app.resume(resume.clone().answer("yes")).unwrap().done().unwrap();
        assert_eq!(done.name, "yes");
        assert_eq!(done.log, ["prepare", "finish"]);
        assert_eq!(store.take(), 2, "the answered step claiming the thread, then the end");

        let history = app.history(&thread).unwrap();
        assert_eq!(history.len(), 4, "{:?}", history.iter().map(|s| &s.next).collect::<Vec<_>>());
        assert_eq!(history[0].state.name, "yes", "newest first: the end");
        assert!(history[2].interrupts.len() == 1 && history[2].state.log == ["prepare"], "the pause");

        // The token is spent by the claim the answered step made.
        assert!(matches!(app.resume(resume.answer("again")), Err(Error::StaleResume { .. })));
        assert_eq!(store.take(), 0, "a refused resume writes nothing");
    }

    #[test]
    fn of_two_resumes_of_one_token_at_an_interrupt_node_one_goes_on() {
        FINISHED.store(0, Ordering::SeqCst);
        let app = Ask::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let results: Vec<Result<Outcome<Form>, Error>> = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..8)
                .map(|i| {
                    let (app, resume) = (&app, resume.clone());
                    scope.spawn(move || app.resume(resume.answer(format!("answer {i}"))))
                })
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "{results:?}");
        for result in &results {
            assert!(matches!(result, Ok(_) | Err(Error::StaleResume { .. })), "{result:?}");
        }
        assert_eq!(FINISHED.load(Ordering::SeqCst), 1, "the node after the answer ran once");
    }

    #[test]
    fn an_answer_that_reaches_another_interrupt_node_claims_with_that_pause() {
        let store = Counting::default();
        let app = Twice::builder().checkpointer(store.clone()).build();
        let (_, first) = paused(app.invoke(Form::default()).unwrap());
        store.take();
        let (state, second) = paused(app.resume(first.clone().answer("Ada")).unwrap());
        assert_eq!(state.name, "Ada");
        assert_eq!(second.node(), &"again");
        assert_eq!(store.take(), 1, "one write: the next pause, holding the answer, claims the thread");
        assert!(matches!(app.resume(first.answer("Bob")), Err(Error::StaleResume { .. })));
        let done = app.resume(second.answer("blue")).unwrap().done().unwrap();
        assert_eq!((done.name.as_str(), done.colour.as_str()), ("Ada", "blue"));
        assert_eq!(done.log, ["prepare", "finish"]);
    }

    #[test]
    fn a_breakpoint_writes_the_step_before_it_with_its_pause() {
        CHECKED.store(0, Ordering::SeqCst);
        let store = Counting::default();
        let app = Breakpoint::builder().checkpointer(store.clone()).build();
        let (state, resume) = paused(app.invoke(Form::default()).unwrap());
        assert_eq!(state.log, ["prepare"]);
        assert_eq!(store.take(), 2, "the claim, then the pause holding prepare's step");
        assert_eq!(CHECKED.load(Ordering::SeqCst), 0);
        let done = app.resume(resume).unwrap().done().unwrap();
        assert_eq!(done.log, ["prepare", "check"]);
        assert_eq!(store.take(), 2, "the claim, then the end");
    }

    static FAILS: AtomicUsize = AtomicUsize::new(1);

    fn flaky(_: &Form) -> Result<FormUpdate, Box<dyn std::error::Error + Send + Sync>> {
        if FAILS.fetch_sub(1, Ordering::SeqCst) > 0 {
            return Err("down".into());
        }
        Ok(Form::update().log(vec!["flaky".into()]))
    }

    graph! {
        pub Flaky for Form {
            start -> prepare;
            prepare -> ask;
            ask -> flaky;
            flaky -> end;
            interrupt ask(question => name);
        }
    }

    #[test]
    fn a_failure_after_the_answered_interrupt_node_puts_the_pause_back() {
        let app = Flaky::builder().checkpointer(MemoryStore::new()).build();
        let (_, resume) = paused(app.invoke(Form::default()).unwrap());
        let thread = resume.thread().clone();
        let err = app.resume(resume.clone().answer("no")).unwrap_err();
        assert!(matches!(&err, Error::NodeFailed { node, .. } if node == "flaky"), "{err:?}");
        let stopped = app.state(&thread).unwrap().unwrap();
        assert_eq!(stopped.interrupts.len(), 1, "paused at `ask` again: no node after it completed");
        assert_eq!(stopped.state.log, ["prepare"]);
        let done = app.resume(resume.answer("yes")).unwrap().done().unwrap();
        assert_eq!((done.name.as_str(), &done.log[..]), ("yes", &["prepare".to_owned(), "flaky".to_owned()][..]));
    }
}
