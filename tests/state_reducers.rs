//! `#[derive(GraphState)]` at run time: each reducer merges as documented, `overwrite_…`
//! bypasses it, and the update reports, prints and serializes only what it writes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tea::prelude::*;
// `Field`, `Reducer`, `Write` and `NodeOutput` are what the derive generates code against
// (`tea::__private`), not what users write: these tests read that generated code.
use tea::__private::{Field, NodeOutput, Reducer, Write};

fn keep_longer(current: &mut String, new: String) {
    if new.len() > current.len() {
        *current = new;
    }
}

#[derive(GraphState, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Review {
    pub draft: String,
    #[reducer(append)]
    pub log: Vec<String>,
    #[reducer(sum)]
    pub revisions: u32,
    #[reducer(max)]
    pub best: i64,
    #[reducer(min)]
    pub low: i64,
    #[reducer(union)]
    pub tags: BTreeSet<String>,
    #[reducer(merge)]
    pub meta: BTreeMap<String, String>,
    #[reducer(with = keep_longer)]
    pub summary: String,
}

/// The other types each reducer fits.
#[derive(GraphState, Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Shapes {
    #[reducer(append)]
    queue: VecDeque<u8>,
    #[reducer(append)]
    text: String,
    #[reducer(union)]
    seen: HashSet<u32>,
    #[reducer(merge)]
    scores: HashMap<String, i32>,
    #[reducer(sum)]
    small: u8,
    #[reducer(sum)]
    signed: i64,
    #[reducer(sum)]
    ratio: f64,
    #[reducer(max)]
    peak: f64,
    #[reducer(replace)]
    explicit: Option<u8>,
}

fn review() -> Review {
    Review {
        draft: "first".into(),
        log: strings(&["a"]),
        revisions: 1,
        best: 5,
        low: 5,
        tags: ["x".to_owned()].into(),
        meta: [("k".to_owned(), "old".to_owned()), ("keep".to_owned(), "1".to_owned())].into(),
        summary: "short".into(),
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn applied(update: ReviewUpdate) -> Review {
    let mut state = review();
    state.apply(update);
    state
}

#[test]
fn replace_assigns_the_new_value() {
    assert_eq!(applied(Review::update().draft("second".into())).draft, "second");
    // An empty update changes nothing.
    assert_eq!(applied(Review::update()), review());

    let mut shapes = Shapes { explicit: Some(1), ..Shapes::default() };
    shapes.apply(Shapes::update().explicit(None));
    assert_eq!(shapes.explicit, None);
}

#[test]
fn append_extends_sequences() {
    assert_eq!(applied(Review::update().log(strings(&["b", "c"]))).log, ["a", "b", "c"]);

    let mut shapes = Shapes { queue: [1, 2].into(), text: "ab".into(), ..Shapes::default() };
    shapes.apply(Shapes::update().queue([3, 4].into()).text("cd".into()));
    assert_eq!(shapes.queue, [1, 2, 3, 4]);
    assert_eq!(shapes.text, "abcd");
}

#[test]
fn sum_adds() {
    assert_eq!(applied(Review::update().revisions(2)).revisions, 3);

    let mut shapes = Shapes { signed: 10, ratio: 0.5, ..Shapes::default() };
    shapes.apply(Shapes::update().signed(-15).ratio(0.25));
    assert_eq!(shapes.signed, -5);
    assert_eq!(shapes.ratio, 0.75);
}

#[test]
fn sum_overflow_panics_with_a_clear_message_in_every_profile() {
    let mut shapes = Shapes { small: 250, ..Shapes::default() };
    let panic = catch_unwind(AssertUnwindSafe(|| shapes.apply(Shapes::update().small(10))))
        .expect_err("250 + 10 overflows a u8");
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert_eq!(message, "`sum` reducer overflowed: 250 + 10 does not fit in u8");
    // The value is left as it was (the panic happened before the write).
    assert_eq!(shapes.small, 250);
}

#[test]
fn max_and_min_keep_the_extreme() {
    assert_eq!(applied(Review::update().best(9)).best, 9);
    assert_eq!(applied(Review::update().best(2)).best, 5);
    assert_eq!(applied(Review::update().low(2)).low, 2);
    assert_eq!(applied(Review::update().low(9)).low, 5);

    let mut shapes = Shapes { peak: 1.5, ..Shapes::default() };
    shapes.apply(Shapes::update().peak(f64::NAN));
    assert_eq!(shapes.peak, 1.5, "NaN is not larger than anything");
    shapes.apply(Shapes::update().peak(2.5));
    assert_eq!(shapes.peak, 2.5);
}

#[test]
fn union_adds_to_sets() {
    let tags = applied(Review::update().tags(["x".to_owned(), "y".to_owned()].into())).tags;
    assert_eq!(tags, BTreeSet::from(["x".to_owned(), "y".to_owned()]));

    let mut shapes = Shapes { seen: [1, 2].into(), ..Shapes::default() };
    shapes.apply(Shapes::update().seen([2, 3].into()));
    assert_eq!(shapes.seen, HashSet::from([1, 2, 3]));
}

#[test]
fn merge_replaces_key_by_key() {
    let update = Review::update().meta([("k".to_owned(), "new".to_owned())].into());
    let meta = applied(update).meta;
    assert_eq!(meta, BTreeMap::from([("k".to_owned(), "new".to_owned()), ("keep".to_owned(), "1".to_owned())]));

    let mut shapes = Shapes { scores: [("a".to_owned(), 1)].into(), ..Shapes::default() };
    shapes.apply(Shapes::update().scores([("a".to_owned(), 5), ("b".to_owned(), 2)].into()));
    assert_eq!(shapes.scores, HashMap::from([("a".to_owned(), 5), ("b".to_owned(), 2)]));
}

#[test]
fn with_calls_the_custom_reducer() {
    assert_eq!(applied(Review::update().summary("longer one".into())).summary, "longer one");
    assert_eq!(applied(Review::update().summary("tiny".into())).summary, "short");
}

#[test]
fn overwrite_bypasses_the_reducer() {
    let state = applied(
        Review::update()
            .overwrite_log(Vec::new())
            .overwrite_revisions(0)
            .overwrite_best(-1)
            .overwrite_low(100)
            .overwrite_tags(BTreeSet::new())
            .overwrite_meta(BTreeMap::new())
            .overwrite_summary("x".into()),
    );
    assert!(state.log.is_empty());
    assert_eq!(state.revisions, 0);
    assert_eq!(state.best, -1);
    assert_eq!(state.low, 100);
    assert!(state.tags.is_empty());
    assert!(state.meta.is_empty());
    assert_eq!(state.summary, "x");
}

#[test]
fn a_later_setter_call_replaces_the_earlier_one() {
    let state = applied(
        Review::update()
            .draft("one".into())
            .draft("two".into())
            .log(strings(&["b"]))
            .log(strings(&["c"]))
            .revisions(10)
            .overwrite_revisions(7)
            .overwrite_best(0)
            .best(6),
    );
    assert_eq!(state.draft, "two");
    assert_eq!(state.log, ["a", "c"]);
    assert_eq!(state.revisions, 7, "the overwrite came last");
    assert_eq!(state.best, 6, "the reduce came last: max(5, 6)");
}

#[test]
fn writes_reports_each_written_field() {
    let empty = Review::update();
    assert!(empty.is_empty());
    assert!((0..Review::FIELDS.len() + 2).all(|i| empty.writes(i).is_none()));

    let update = Review::update().draft("x".into()).log(vec![]).overwrite_tags(BTreeSet::new());
    assert!(!update.is_empty());
    assert_eq!(update.writes(0), Some(Write::Replace)); // draft: replace field
    assert_eq!(update.writes(1), Some(Write::Reduce)); // log: through `append`
    assert_eq!(update.writes(2), None); // revisions: not written
    assert_eq!(update.writes(5), Some(Write::Replace)); // tags: overwritten
    assert_eq!(update.writes(7), None);
    assert_eq!(update.writes(8), None, "out of range");

    assert!(!Review::update().summary(String::new()).is_empty());
}

#[test]
fn fields_describe_the_struct() {
    let fields: Vec<Field> = Review::FIELDS.to_vec();
    let expected = [
        ("draft", "String", Reducer::Replace),
        ("log", "Vec<String>", Reducer::Append),
        ("revisions", "u32", Reducer::Sum),
        ("best", "i64", Reducer::Max),
        ("low", "i64", Reducer::Min),
        ("tags", "BTreeSet<String>", Reducer::Union),
        ("meta", "BTreeMap<String, String>", Reducer::Merge),
        ("summary", "String", Reducer::With("keep_longer")),
    ];
    let expected: Vec<Field> = expected.into_iter().map(|(name, ty, reducer)| Field { name, ty, reducer }).collect();
    assert_eq!(fields, expected);
    assert_eq!(Reducer::With("keep_longer").to_string(), "with = keep_longer");
}

/// Two shapes of "the same" state, differing in one field each: every fingerprint differs.
mod shapes {
    pub mod base {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            #[reducer(append)]
            pub log: Vec<String>,
            pub n: u32,
        }
    }
    pub mod same {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            #[reducer(append)]
            pub log: ::std::vec::Vec<String>,
            pub n: u32,
        }
    }
    pub mod other_type {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            #[reducer(append)]
            pub log: Vec<String>,
            pub n: u64,
        }
    }
    pub mod other_reducer {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            #[reducer(append)]
            pub log: Vec<String>,
            #[reducer(sum)]
            pub n: u32,
        }
    }
    pub mod other_name {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            #[reducer(append)]
            pub log: Vec<String>,
            pub count: u32,
        }
    }
    pub mod other_order {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            pub n: u32,
            #[reducer(append)]
            pub log: Vec<String>,
        }
    }
    #[rustfmt::skip]
    pub mod whitespace {
        #[derive(tea::GraphState, Clone, serde::Serialize, serde::Deserialize)]
        pub struct Doc {
            #[reducer( append )]
            pub log: Vec < String >,
            pub n: u32,
        }
    }
}

#[test]
fn the_schema_fingerprint_follows_names_types_and_reducers() {
    use shapes::*;
    let base = base::Doc::SCHEMA_FINGERPRINT;
    assert_eq!(whitespace::Doc::SCHEMA_FINGERPRINT, base, "spacing is not part of the schema");
    assert_ne!(other_type::Doc::SCHEMA_FINGERPRINT, base);
    assert_ne!(other_reducer::Doc::SCHEMA_FINGERPRINT, base);
    assert_ne!(other_name::Doc::SCHEMA_FINGERPRINT, base);
    assert_ne!(other_order::Doc::SCHEMA_FINGERPRINT, base);
    // The type is hashed as written: a path spelled differently is another schema.
    assert_ne!(same::Doc::SCHEMA_FINGERPRINT, base);
    assert_ne!(Review::SCHEMA_FINGERPRINT, base);
    // A const: usable in patterns and other constants.
    const FINGERPRINT: u64 = base::Doc::SCHEMA_FINGERPRINT;
    assert_eq!(FINGERPRINT, base);
}

#[test]
fn an_update_serializes_only_what_it_writes() {
    let update = Review::update().draft("d".into()).log(strings(&["x"])).overwrite_revisions(3);
    let json = serde_json::to_value(&update).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "draft": "d",
            "log": { "reduce": ["x"] },
            "revisions": { "overwrite": 3 },
        })
    );
    let back: ReviewUpdate = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), json);
    assert_eq!(applied(back), applied(update));

    assert_eq!(serde_json::to_string(&Review::update()).unwrap(), "{}");
    let empty: ReviewUpdate = serde_json::from_str("{}").unwrap();
    assert!(empty.is_empty());
}

#[test]
fn an_update_with_an_unknown_field_does_not_deserialize() {
    let error = serde_json::from_str::<ReviewUpdate>(r#"{"drfat": "x"}"#).unwrap_err();
    assert!(error.to_string().contains("unknown field `drfat`"), "{error}");
}

#[test]
fn update_is_the_default_update() {
    assert_eq!(serde_json::to_value(Review::update()).unwrap(), serde_json::to_value(ReviewUpdate::default()).unwrap());
}

#[test]
fn debug_prints_only_written_fields_and_how() {
    assert_eq!(format!("{:?}", Review::update()), "ReviewUpdate");
    let update =
        Review::update().draft("x".into()).log(strings(&["a"])).overwrite_tags(BTreeSet::new()).summary("s".into());
    assert_eq!(
        format!("{update:?}"),
        r#"ReviewUpdate { draft: "x", log: append(["a"]), tags: overwrite({}), summary: keep_longer("s") }"#
    );
    let pretty = format!("{:#?}", Review::update().revisions(1));
    assert_eq!(pretty, "ReviewUpdate {\n    revisions: sum(\n        1,\n    ),\n}");
}

#[test]
fn a_node_may_return_the_update_or_a_result_of_it() {
    let update = NodeOutput::<Review>::into_update(Review::update().revisions(1)).unwrap();
    assert!(update.is_some_and(|u| u.writes(2) == Some(Write::Reduce)));

    let ok: Result<ReviewUpdate, String> = Ok(Review::update());
    assert!(NodeOutput::<Review>::into_update(ok).unwrap().is_some());

    let failed: Result<ReviewUpdate, &str> = Err("no draft");
    let error = NodeOutput::<Review>::into_update(failed).unwrap_err();
    assert_eq!(error.to_string(), "no draft");
}

#[test]
fn a_state_can_live_in_a_function_body() {
    #[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
    struct Local {
        #[reducer(append)]
        items: Vec<u8>,
    }
    // A second state in the same function: nothing generated collides.
    #[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
    struct Other {
        #[reducer(sum)]
        items: u8,
    }
    let mut local = Local { items: vec![1] };
    local.apply(Local::update().items(vec![2]));
    assert_eq!(local.items, [1, 2]);
    let mut other = Other { items: 1 };
    other.apply(Other::update().items(2));
    assert_eq!(other.items, 3);
}

mod elsewhere {
    use tea::GraphState;

    /// A state in another module, used from outside it.
    #[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
    pub struct Shared {
        #[reducer(append)]
        pub notes: Vec<String>,
        pub done: bool,
        pub(super) step: u8,
        pub(crate) seen: u8,
    }
}

#[test]
fn a_pub_state_is_usable_from_another_module() {
    use elsewhere::{Shared, SharedUpdate};
    // Setters are as visible as their fields.
    let update: SharedUpdate = Shared::update().notes(vec!["n".into()]).done(true).step(1).seen(2);
    let mut shared = Shared { notes: vec![], done: false, step: 0, seen: 0 };
    shared.apply(update);
    assert_eq!(shared.notes, ["n"]);
    assert!(shared.done);
    assert_eq!((shared.step, shared.seen), (1, 2));
}

#[test]
fn raw_identifier_fields_keep_their_names() {
    #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    struct Token {
        r#type: String,
        #[reducer(append)]
        r#loop: Vec<u8>,
    }
    let mut token = Token::default();
    token.apply(Token::update().r#type("word".into()).r#loop(vec![1]));
    token.apply(Token::update().r#loop(vec![2]));
    assert_eq!(token.r#type, "word");
    assert_eq!(token.r#loop, [1, 2]);
    token.apply(Token::update().overwrite_loop(vec![]));
    assert!(token.r#loop.is_empty());

    assert_eq!(Token::FIELDS[0].name, "type");
    assert_eq!(Token::FIELDS[1].name, "loop");
    let update = Token::update().r#type("t".into());
    assert_eq!(format!("{update:?}"), r#"TokenUpdate { type: "t" }"#);
    assert_eq!(serde_json::to_string(&update).unwrap(), r#"{"type":"t"}"#);
}

#[test]
fn the_default_value_of_a_setter_argument_is_inferred() {
    // Setters take exactly the field's type, so literals, `.into()` and `Default::default()`
    // infer without annotations.
    let state =
        applied(Review::update().draft(Default::default()).revisions(2).summary("a much longer summary".into()));
    assert_eq!(state.draft, "");
    assert_eq!(state.revisions, 3);
    assert_eq!(state.summary, "a much longer summary");
}

/// Items named like the generated code's local bindings do not capture them. (Only the setters'
/// argument is plainly `value`, for their documentation.)
#[allow(non_upper_case_globals, dead_code)]
mod hygiene {
    use tea::GraphState;

    const update: u8 = 0;
    const index: u8 = 0;
    const error: u8 = 0;
    const out: u8 = 0;
    const f: u8 = 0;

    #[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
    pub struct Captured {
        pub plain: u8,
        #[reducer(sum)]
        pub total: u8,
    }

    #[test]
    fn local_bindings_are_hygienic() {
        let mut state = Captured { plain: 0, total: 1 };
        state.apply(Captured::update().plain(2).total(3));
        assert_eq!((state.plain, state.total), (2, 4));
        let printed = format!("{:?}", Captured::update().total(1));
        assert_eq!(printed, "CapturedUpdate { total: sum(1) }");
    }
}

/// `#[reducer(messages)]`: a conversation merged by id, also across parallel branches, which
/// merge in declared order whichever finishes first.
mod messages {
    use tea::prelude::*;
    use tea::Message;

    #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    struct Chat {
        #[reducer(messages)]
        messages: Vec<Message>,
    }

    fn ask(_: &Chat) -> ChatUpdate {
        Chat::update().messages(vec![Message::user("weather and time?")])
    }
    fn weather(_: &Chat) -> ChatUpdate {
        std::thread::sleep(std::time::Duration::from_millis(20));
        Chat::update().messages(vec![Message::tool("c1", "rain")])
    }
    fn time(_: &Chat) -> ChatUpdate {
        Chat::update().messages(vec![Message::tool("c2", "noon")])
    }
    fn answer(state: &Chat) -> ChatUpdate {
        // The first answer is corrected in place, by its id.
        let corrected = Message::assistant("Rain at noon.").with_id(state.messages[0].id().unwrap_or_default());
        Chat::update().messages(vec![corrected, Message::remove("msg-3")])
    }

    graph! {
        Talk for Chat {
            start -> ask;
            parallel ask => [weather, time] -> answer;
            answer -> end;
        }
    }

    #[test]
    fn messages_merge_by_id_in_declared_order_with_ids_that_do_not_depend_on_timing() {
        let out = Talk::builder().build().invoke(Chat { messages: vec![Message::assistant("draft")] }).unwrap();
        let shown: Vec<_> = out.messages.iter().map(|m| (m.id().unwrap().to_owned(), m.text())).collect();
        assert_eq!(
            shown,
            [
                ("msg-1".to_owned(), "Rain at noon.".to_owned()),
                ("msg-2".into(), "weather and time?".into()),
                ("msg-4".into(), "noon".into())
            ]
        );
        assert_eq!(Chat::FIELDS[0].reducer, tea::__private::Reducer::Messages);
        assert_eq!(Chat::FIELDS[0].reducer.to_string(), "messages");
    }

    #[test]
    fn removing_an_unknown_message_fails_the_node_naming_the_id() {
        fn forget(_: &Chat) -> ChatUpdate {
            Chat::update().messages(vec![Message::remove("nope")])
        }
        graph! { Forget for Chat { start -> forget; forget -> end; } }
        let error = Forget::builder().build().invoke(Chat::default()).unwrap_err();
        assert!(
            error.to_string().contains("forget") && tea::error_chain(&error).contains("no message has id `nope`"),
            "{error}"
        );
    }
}
