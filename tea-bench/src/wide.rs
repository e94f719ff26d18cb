//! `wide_state_25x300` and `wide_state_9x1200`: LangGraph's wide_state graph, ported from the
//! script. `one -> two -> {three, four} -> five -> six -> (end if len(messages) > n else one)`
//! over a 15-field state whose lists hold shared references to one nested input dict.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;
use tea::prelude::*;

/// A message: the script's nested dict, shared by reference like a Python object.
pub type Msg = Arc<Dict>;
/// A dict of the script's input: top-level keys to (shared) nested values.
pub type Dict = BTreeMap<String, Arc<Value>>;

/// The script's `Wide`: list fields append (`operator.add`), the `Optional[str]` fields with a
/// keep-the-last-value reducer keep the last non-empty value, dicts or-merge (`operator.or_`),
/// the rest replace.
#[derive(GraphState, Clone, Debug, Default, Serialize, Deserialize)]
pub struct Wide {
    #[reducer(append)]
    pub messages: Vec<Msg>,
    #[reducer(append)]
    pub trigger_events: Vec<Msg>,
    #[reducer(with = keep_last)]
    pub primary_issue_medium: Option<String>,
    pub autoresponse: Option<String>,
    #[reducer(with = keep_last)]
    pub issue: Option<String>,
    pub relevant_rules: Option<Vec<Msg>>,
    pub memory_docs: Option<Vec<Msg>>,
    #[reducer(append)]
    pub categorizations: Vec<Msg>,
    #[reducer(append)]
    pub responses: Vec<Msg>,
    #[reducer(with = keep_last)]
    pub user_info: Option<String>,
    #[reducer(with = keep_last)]
    pub crm_info: Option<String>,
    #[reducer(with = keep_last)]
    pub email_thread_id: Option<String>,
    #[reducer(merge)]
    pub slack_participants: Dict,
    pub bot_id: Option<String>,
    #[reducer(merge)]
    pub notified_assignees: Dict,
}

/// `y if y else x` (the script's `keep_last`, `y or x` and `y if y else x` alike).
fn keep_last(current: &mut Option<String>, new: Option<String>) {
    if new.as_deref().is_some_and(|s| !s.is_empty()) {
        *current = new;
    }
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0x9E37_79B9_7F4A_7C15) };
}

/// The script's `rnd()`: `n` random lowercase letters, each a uniform draw (`random.choices`
/// draws one per letter). xorshift64* gives 64 random bits; each pair of letters is the high
/// word of `bits * 676` (a number in 0..676 = 26², two letters) and keeps the low word for the
/// next, so one draw gives 8 letters with a bias under 2^-26 (the bits left after 4 pairs),
/// where 16 bits per letter gave 4 letters a draw and a bias of 2^-11. Every call computes all
/// `n` letters anew: only the generator is cheaper, not the work the script's node does.
fn rnd(n: usize) -> Option<String> {
    RNG.with(|rng| {
        let mut x = rng.get();
        let mut draw = || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_F491_4F6C_DD1D)
        };
        let mut bytes = vec![0u8; n];
        let mut chunks = bytes.chunks_exact_mut(8);
        for chunk in &mut chunks {
            let mut bits = draw();
            for pair in chunk.chunks_exact_mut(2) {
                let wide = u128::from(bits) * 676;
                pair.copy_from_slice(&PAIRS[(wide >> 64) as usize]);
                bits = wide as u64;
            }
        }
        let mut bits = draw();
        for byte in chunks.into_remainder() {
            let wide = u128::from(bits) * 26;
            *byte = b'a' + (wide >> 64) as u8;
            bits = wide as u64;
        }
        rng.set(x);
        Some(String::from_utf8(bytes).expect("ASCII letters"))
    })
}

/// Every pair of lowercase letters, `aa` to `zz`, at index `26 * first + second`.
const PAIRS: [[u8; 2]; 676] = {
    let mut pairs = [[0u8; 2]; 676];
    let mut i = 0;
    while i < 676 {
        pairs[i] = [b'a' + (i / 26) as u8, b'a' + (i % 26) as u8];
        i += 1;
    }
    pairs
};

/// The script's dict case: `v[-1]` when it is a dict (it always is here), else `{}`.
fn last_dict(v: &[Msg]) -> Dict {
    v.last().map(|m| Dict::clone(m)).unwrap_or_default()
}

fn one(s: &Wide, n: usize) -> WideUpdate {
    Wide::update().trigger_events(s.messages.clone()).primary_issue_medium(rnd(n)).autoresponse(rnd(n))
}
fn two(s: &Wide, n: usize) -> WideUpdate {
    let v = &s.trigger_events;
    Wide::update().issue(rnd(n)).relevant_rules(Some(v.clone())).categorizations(v.clone())
}
fn three(s: &Wide, n: usize) -> WideUpdate {
    Wide::update().memory_docs(Some(s.messages.clone())).user_info(rnd(n))
}
fn four(s: &Wide, n: usize) -> WideUpdate {
    Wide::update().crm_info(rnd(n)).email_thread_id(rnd(n)).slack_participants(last_dict(&s.messages))
}
fn five(s: &Wide, n: usize) -> WideUpdate {
    let v = &s.messages;
    Wide::update().responses(v.clone()).bot_id(rnd(n)).notified_assignees(last_dict(v))
}
fn six(s: &Wide, _: usize) -> WideUpdate {
    Wide::update().messages(s.responses.clone())
}

/// One module per `n`: node functions bound to `n` and the graph, whose loop ends once
/// `len(messages) > n`.
macro_rules! wide_graph {
    ($module:ident, $graph:ident, $n:literal) => {
        mod $module {
            use super::*;

            const N: usize = $n;
            fn one(s: &Wide) -> WideUpdate {
                super::one(s, N)
            }
            fn two(s: &Wide) -> WideUpdate {
                super::two(s, N)
            }
            fn three(s: &Wide) -> WideUpdate {
                super::three(s, N)
            }
            fn four(s: &Wide) -> WideUpdate {
                super::four(s, N)
            }
            fn five(s: &Wide) -> WideUpdate {
                super::five(s, N)
            }
            fn six(s: &Wide) -> WideUpdate {
                super::six(s, N)
            }
            fn enough(s: &Wide) -> bool {
                s.messages.len() > N
            }

            graph! {
                pub $graph for Wide {
                    start -> one;
                    one -> two;
                    parallel two => [three, four] -> five;
                    five -> six;
                    six -> end if enough;
                    six -> one;
                }
            }
        }
    };
}

wide_graph!(w300, Wide300, 300);
wide_graph!(w1200, Wide1200, 1200);

/// The script's `wide_input(a, b)`: one message, a dict of `a` keys, each a dict of `b` keys,
/// each a 25-item list.
fn wide_input(a: usize, b: usize) -> Wide {
    let item =
        [Value::from("hi?".repeat(10)), Value::from(true), Value::from(1), Value::from(6327816386138u64), Value::Null];
    let list: Vec<Value> = item.iter().cycle().take(item.len() * 5).cloned().collect();
    let message: Dict = (0..a)
        .map(|i| {
            let inner: serde_json::Map<String, Value> =
                (0..b).map(|j| (j.to_string().repeat(10), Value::Array(list.clone()))).collect();
            (i.to_string().repeat(10), Arc::new(Value::Object(inner)))
        })
        .collect();
    Wide { messages: vec![Arc::new(message)], ..Wide::default() }
}

/// The list lengths the script's loop ends with, computed from its recurrences.
struct Lengths {
    messages: usize,
    trigger_events: usize,
    categorizations: usize,
    responses: usize,
}

fn expected(n: usize) -> Lengths {
    let mut l = Lengths { messages: 1, trigger_events: 0, categorizations: 0, responses: 0 };
    loop {
        l.trigger_events += l.messages;
        l.categorizations += l.trigger_events;
        l.responses += l.messages;
        l.messages += l.responses;
        if l.messages > n {
            return l;
        }
    }
}

fn check(out: &Wide, a: usize, n: usize) {
    let want = expected(n);
    assert_eq!(out.messages.len(), want.messages);
    assert_eq!(out.trigger_events.len(), want.trigger_events);
    assert_eq!(out.categorizations.len(), want.categorizations);
    assert_eq!(out.responses.len(), want.responses);
    assert!(out.messages.iter().all(|m| Arc::ptr_eq(m, &out.messages[0])), "every message is the input dict");
    assert_eq!(out.relevant_rules.as_ref().map(Vec::len), Some(out.trigger_events.len()));
    assert_eq!(out.slack_participants.len(), a);
    assert_eq!(out.notified_assignees.len(), a);
    for field in [&out.primary_issue_medium, &out.autoresponse, &out.issue, &out.user_info, &out.bot_id] {
        assert_eq!(field.as_ref().map(String::len), Some(n));
    }
    assert_eq!(out.crm_info.as_ref().zip(out.email_thread_id.as_ref()).map(|(c, e)| c.len() + e.len()), Some(2 * n));
}

/// The workload without tea: the node functions called in the graph's order on one state, each
/// update applied through the state's reducers (`GraphState::apply`), `three` and `four` both
/// reading the state `two` left, as branches do, applied in declared order. What the workload
/// itself costs (its random letters, its lists' reference counts, its allocations): the floor
/// under the `wide_state` rows, which no engine goes below.
fn without_engine(input: Wide, n: usize) -> Wide {
    let mut s = input;
    loop {
        let update = one(&s, n);
        s.apply(update);
        let update = two(&s, n);
        s.apply(update);
        let (left, right) = (three(&s, n), four(&s, n));
        s.apply(left);
        s.apply(right);
        let update = five(&s, n);
        s.apply(update);
        let update = six(&s, n);
        s.apply(update);
        if s.messages.len() > n {
            return s;
        }
    }
}

pub fn wide_state_25x300() -> impl FnMut() {
    let app = w300::Wide300::builder().build();
    move || check(&app.invoke(wide_input(5, 5)).expect("wide_state_25x300 runs"), 5, 300)
}

pub fn wide_state_9x1200() -> impl FnMut() {
    let app = w1200::Wide1200::builder().build();
    move || check(&app.invoke(wide_input(3, 3)).expect("wide_state_9x1200 runs"), 3, 1200)
}

/// `wide_state_25x300/no_engine`: [`without_engine`], checked as the row is.
pub fn wide_state_25x300_no_engine() -> impl FnMut() {
    || check(&without_engine(wide_input(5, 5), 300), 5, 300)
}

/// `wide_state_9x1200/no_engine`: [`without_engine`], checked as the row is.
pub fn wide_state_9x1200_no_engine() -> impl FnMut() {
    || check(&without_engine(wide_input(3, 3), 1200), 3, 1200)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_without_tea_ends_where_the_graph_does() {
        let app = w300::Wide300::builder().build();
        let graph = app.invoke(wide_input(5, 5)).expect("the graph runs");
        let alone = without_engine(wide_input(5, 5), 300);
        check(&graph, 5, 300);
        check(&alone, 5, 300);
        let lengths = |w: &Wide| {
            let lists = [&w.messages, &w.trigger_events, &w.categorizations, &w.responses];
            let kept = [w.relevant_rules.as_ref().map(Vec::len), w.memory_docs.as_ref().map(Vec::len)];
            (lists.map(Vec::len), kept, w.slack_participants.len(), w.notified_assignees.len())
        };
        assert_eq!(lengths(&graph), lengths(&alone));
    }

    #[test]
    fn rnd_draws_n_lowercase_letters_each_about_equally_often() {
        let mut counts = [0usize; 26];
        let mut texts = std::collections::HashSet::new();
        for _ in 0..200 {
            let text = rnd(1299).expect("rnd gives a string");
            assert_eq!(text.len(), 1299);
            for byte in text.bytes() {
                assert!(byte.is_ascii_lowercase(), "{byte}");
                counts[usize::from(byte - b'a')] += 1;
            }
            texts.insert(text);
        }
        assert_eq!(texts.len(), 200, "every call draws new letters");
        // 259 800 letters: 9 992 expected per letter, a standard deviation of about 98.
        for (letter, count) in counts.iter().enumerate() {
            assert!((9_500..=10_500).contains(count), "letter {letter}: {count}");
        }
    }
}
