//! `Resume` tokens as strings: round trips, size, what they carry, and what happens to garbage,
//! truncated, altered and wrongly signed ones.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memo {
    #[reducer(append)]
    trail: Vec<String>,
    body: String,
}

fn write(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["write".into()])
}
fn review(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["review".into()])
}
fn left(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["left".into()])
}
fn right(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["right".into()])
}
fn join(_: &Memo) -> MemoUpdate {
    Memo::update().trail(vec!["join".into()])
}

graph! {
    pub Review for Memo { start -> write; write -> review; review -> end; interrupt_before review; }
}

graph! {
    /// Both branches stop: one token with two pauses.
    pub Split for Memo {
        start -> write;
        parallel write => [left, right] -> join;
        join -> end;
        interrupt_before left;
        interrupt_after right;
    }
}

fn app() -> App<Review, MemoryStore> {
    Review::builder().checkpointer(MemoryStore::new()).build()
}

#[track_caller]
fn pause<G: tea::SyncGraph<State = Memo>, C: Checkpointer>(app: &App<G, C>, thread: &str, input: Memo) -> Resume<Memo> {
    match app.run(Call::start(input).on(thread)) {
        Ok(Outcome::Interrupted { resume, .. }) => resume,
        other => panic!("expected a pause, got {other:?}"),
    }
}

#[track_caller]
fn invalid(result: Result<impl std::fmt::Debug, Error>) -> &'static str {
    match result {
        Err(Error::InvalidToken { reason }) => reason,
        other => panic!("expected InvalidToken, got {other:?}"),
    }
}

// A small URL-safe base64 codec (no padding), to look inside tokens.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, c)| {
            n | ((ALPHABET.iter().position(|a| a == c).expect("base64") as u32) << (18 - 6 * i))
        });
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

#[test]
fn our_base64_matches_the_tokens() {
    let text = pause(&app(), "codec", Memo::default()).to_string();
    assert_eq!(encode(&decode(&text)), text);
    assert_eq!(encode(b"tea"), "dGVh");
    assert_eq!(encode(b"te"), "dGU");
    assert_eq!(decode("dGVhIQ"), b"tea!");
}

#[test]
fn a_token_round_trips_through_its_string() {
    let app = app();
    let resume = pause(&app, "round-trip", Memo::default());
    let text = resume.to_string();
    assert!(text.bytes().all(|c| ALPHABET.contains(&c)), "URL-safe, unpadded: {text}");
    let parsed: Resume<Memo> = text.parse().unwrap();
    assert_eq!(parsed.to_string(), text);
    assert_eq!(parsed.thread().as_str(), "round-trip");
    assert_eq!(*parsed.node(), "review");
    assert_eq!(parsed.interrupts(), resume.interrupts());
    // Surrounding whitespace (a trailing newline from a file or a form) is ignored.
    let padded: Resume<Memo> = format!("  {text}\n").parse().unwrap();
    assert_eq!(padded.to_string(), text);
    let done = app.resume(parsed.update(Memo::update().body("approved".into()))).unwrap().done().unwrap();
    assert_eq!(done.trail, ["write", "review"]);
    assert_eq!(done.body, "approved");
}

#[test]
fn a_parsed_token_lists_its_interrupts_with_ids_and_nodes() {
    let app = Split::builder().checkpointer(MemoryStore::new()).build();
    let resume = pause(&app, "split", Memo::default());
    let parsed: Resume<Memo> = resume.to_string().parse().unwrap();
    let pauses: Vec<(String, String)> =
        parsed.interrupts().iter().map(|i| (i.id().to_owned(), i.node().to_string())).collect();
    assert_eq!(
        pauses,
        [("before:left@left".to_owned(), "left".to_owned()), ("after:right@right".into(), "right".into())]
    );
    assert!(parsed.interrupts().iter().all(|i| i.value().is_null()), "breakpoints carry no payload");
    assert_eq!(*parsed.node(), "left", "the first pause");
    // One resume continues both branches.
    let done = app.resume(parsed).unwrap().done().unwrap();
    assert_eq!(done.trail, ["write", "left", "right", "join"]);
}

#[test]
fn a_token_carries_ids_not_the_state() {
    let app = app();
    let marker = "ZEBRA-7781-QUOKKA";
    let body = format!("{marker} {}", "lorem ipsum ".repeat(20 * 1024 / 12));
    assert!(body.len() >= 20 * 1024);
    let big = pause(&app, "thread-0001", Memo { body: body.clone(), ..Memo::default() }).to_string();
    let small = pause(&app, "thread-0002", Memo::default()).to_string();
    assert_eq!(big.len(), small.len(), "the state's size does not change the token's");
    assert!(big.len() < 160, "{} characters: {big}", big.len());
    let bytes = decode(&big);
    assert!(!bytes.windows(marker.len()).any(|w| w == marker.as_bytes()), "the token holds no state");
    assert!(!big.contains(marker));
    // The state is in the store, where the token points.
    let snapshot = app.state(&ThreadId::from("thread-0001")).unwrap().unwrap();
    assert_eq!(snapshot.state.body, body);
}

#[test]
fn garbage_is_an_invalid_token_with_a_clear_reason() {
    let long = "A".repeat(70 * 1024);
    let cases: [(&str, &str); 7] = [
        ("", "truncated"),
        ("   ", "truncated"),
        ("not a token!", "base64"),
        ("%%%%", "base64"),
        ("a+b/c===", "base64"),
        ("AAAA", "unknown version"),
        (&long, "too long"),
    ];
    for (text, expected) in cases {
        let reason = invalid(text.parse::<Resume<Memo>>());
        assert!(reason.contains(expected), "{text:.20}: {reason}");
    }
    // A valid record with bad flags, or with bytes after it.
    let text = pause(&app(), "garbage", Memo::default()).to_string();
    let mut bytes = decode(&text);
    bytes[1] = 7;
    assert!(invalid(encode(&bytes).parse::<Resume<Memo>>()).contains("flags"));
    let mut bytes = decode(&text);
    bytes.extend_from_slice(b"xyz");
    assert!(invalid(encode(&bytes).parse::<Resume<Memo>>()).contains("trailing"));
}

#[test]
fn every_truncation_of_a_token_is_refused() {
    for signed in [false, true] {
        let builder = Review::builder().checkpointer(MemoryStore::new());
        let app = if signed { builder.sign_tokens("k").build() } else { builder.build() };
        let text = pause(&app, "truncated", Memo::default()).to_string();
        for len in 0..text.len() {
            let reason = invalid(text[..len].parse::<Resume<Memo>>());
            assert!(reason.contains("truncated") || reason.contains("base64"), "{len}: {reason}");
        }
        // And byte by byte below the base64.
        let bytes = decode(&text);
        for len in 0..bytes.len() {
            let reason = invalid(encode(&bytes[..len]).parse::<Resume<Memo>>());
            assert!(reason.contains("truncated"), "{len} bytes: {reason}");
        }
        assert!(app.resume(text.parse().unwrap()).unwrap().is_done());
    }
}

/// Where the fields of a token record start.
const GRAPH: usize = 2;
const GRAPH_FINGERPRINT: usize = 10;
const SCHEMA_FINGERPRINT: usize = 18;
const PAUSE: usize = 26;
const THREAD: usize = 34;

/// The record with its checksum recomputed: what a forger of an unsigned token can do.
fn with_checksum(record: &[u8]) -> Vec<u8> {
    let mut out = record.to_vec();
    out.extend_from_slice(&crc32fast::hash(record).to_le_bytes());
    out
}

#[test]
fn a_mistyped_unsigned_token_is_refused_by_its_checksum_not_read_as_another_thread() {
    let app = app();
    let victim = pause(&app, "victim", Memo::default());
    let _other = pause(&app, "victin", Memo::default());
    let text = victim.to_string();
    let bytes = decode(&text);
    assert_eq!(u16::from_le_bytes([bytes[THREAD], bytes[THREAD + 1]]), 6, "the thread id's length");
    assert_eq!(&bytes[THREAD + 2..THREAD + 8], b"victim");
    // Every one-bit change anywhere in the token.
    for byte in 0..bytes.len() {
        for bit in 0..8 {
            let mut altered = bytes.clone();
            altered[byte] ^= 1 << bit;
            invalid(encode(&altered).parse::<Resume<Memo>>().and_then(|r| app.resume(r)));
        }
    }
    // Every one-character typo of the string, and `victim` → `victin` in the record.
    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (i, c) in text.char_indices() {
        let typo = ALPHABET.chars().find(|&a| a != c).unwrap();
        let mistyped = format!("{}{typo}{}", &text[..i], &text[i + 1..]);
        let result = mistyped.parse::<Resume<Memo>>().and_then(|r| app.resume(r));
        assert!(matches!(result, Err(Error::InvalidToken { .. })), "typo at {i}: {result:?}");
    }
    let mut renamed = bytes.clone();
    renamed[THREAD + 7] = b'n';
    assert!(invalid(encode(&renamed).parse::<Resume<Memo>>()).contains("checksum"));
    // Truncated anywhere: refused.
    for len in 1..text.len() {
        assert!(matches!(text[..len].parse::<Resume<Memo>>(), Err(Error::InvalidToken { .. })), "{len} chars");
    }
    assert!(app.resume(text.parse().unwrap()).unwrap().is_done(), "the thread was left alone");
    assert!(app.state(&"victin".into()).unwrap().unwrap().interrupts.len() == 1, "and so was its neighbour");
}

#[test]
fn a_changed_field_with_a_recomputed_checksum_is_caught_by_what_it_names() {
    // The checksum catches accidents; a deliberate change (checksum recomputed) still meets the
    // graph, fingerprint and thread checks. Only `.sign_tokens` resists forgery.
    let app = app();
    let text = pause(&app, "fields", Memo::default()).to_string();
    let bytes = decode(&text);
    let record = &bytes[..bytes.len() - 4];
    for byte in 0..THREAD + 8 {
        for bit in 0..8 {
            let mut altered = record.to_vec();
            altered[byte] ^= 1 << bit;
            let result = encode(&with_checksum(&altered)).parse::<Resume<Memo>>().and_then(|r| app.resume(r));
            let ok = match (byte, &result) {
                (0 | 1, Err(Error::InvalidToken { .. })) => true,
                (GRAPH..GRAPH_FINGERPRINT, Err(Error::GraphMismatch { .. })) => true,
                (GRAPH_FINGERPRINT..SCHEMA_FINGERPRINT, Err(Error::SchemaMismatch { what: "graph", .. })) => true,
                (SCHEMA_FINGERPRINT..PAUSE, Err(Error::SchemaMismatch { what: "state struct", .. })) => true,
                (PAUSE..THREAD, Err(Error::StaleResume { .. })) => true,
                // The length of the thread id: the rest no longer parses.
                (THREAD | 35, Err(Error::InvalidToken { .. })) => true,
                // Another thread, or not UTF-8 any more.
                (_, Err(Error::CheckpointNotFound { .. } | Error::InvalidToken { .. })) => byte >= THREAD + 2,
                _ => false,
            };
            assert!(ok, "bit {bit} of byte {byte}: {result:?}");
        }
    }
    assert!(app.resume(text.parse().unwrap()).unwrap().is_done(), "the thread was left alone");
}

#[test]
fn signed_tokens_refuse_every_alteration_another_key_and_no_signature() {
    let store = MemoryStore::new();
    let signer = Review::builder().checkpointer(store.clone()).sign_tokens(b"the key").build();
    let stranger = Review::builder().checkpointer(store.clone()).sign_tokens(b"another key").build();
    let plain = Review::builder().checkpointer(store).build();
    let text = pause(&signer, "signed", Memo::default()).to_string();
    let bytes = decode(&text);
    assert_eq!(bytes[1], 1, "flagged as signed");
    let unsigned_len = decode(&pause(&plain, "unsign", Memo::default()).to_string()).len();
    assert_eq!(bytes.len(), unsigned_len + 32, "an HMAC-SHA256 follows the record and its checksum");

    for byte in 0..bytes.len() {
        for bit in 0..8 {
            let mut altered = bytes.clone();
            altered[byte] ^= 1 << bit;
            let result = encode(&altered).parse::<Resume<Memo>>().and_then(|r| signer.resume(r));
            invalid(result);
        }
    }
    assert!(invalid(stranger.resume(text.parse().unwrap())).contains("signature"));
    // The record alone, flagged unsigned (checksum recomputed): the signer wants a signature.
    let mut stripped = bytes[..bytes.len() - 32 - 4].to_vec();
    stripped[1] = 0;
    assert!(invalid(signer.resume(encode(&with_checksum(&stripped)).parse().unwrap())).contains("not signed"));
    // The record alone, still flagged signed: truncated.
    assert!(invalid(encode(&bytes[..bytes.len() - 32]).parse::<Resume<Memo>>()).contains("truncated"));

    let done = signer.resume(text.parse().unwrap()).unwrap().done().unwrap();
    assert_eq!(done.trail, ["write", "review"]);
}

#[test]
fn an_empty_signing_key_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let app = Review::builder().checkpointer(store.clone()).sign_tokens("").build();
    assert!(invalid(app.invoke(Memo::default())).contains("empty"));
    assert_eq!(store.thread_count(), 0, "the run did not start");
}

#[test]
fn an_answer_that_does_not_serialize_is_a_bad_resume_value_and_the_token_still_works() {
    let app = app();
    let resume = pause(&app, "unserializable", Memo::default());
    // JSON object keys must be strings.
    let answer: HashMap<(u8, u8), u8> = HashMap::from([((1, 2), 3)]);
    match app.resume(resume.clone().answer(answer)) {
        Err(Error::BadResumeValue { node, reason, .. }) => {
            assert_eq!(node, "review");
            assert!(reason.contains("key must be a string"), "{reason}");
        }
        other => panic!("expected BadResumeValue, got {other:?}"),
    }
    assert!(app.resume(resume).unwrap().is_done());
}

#[test]
fn debug_shows_the_ids_not_the_signature() {
    let app = Review::builder().checkpointer(MemoryStore::new()).sign_tokens("k").build();
    let resume = pause(&app, "debug", Memo::default());
    let debug = format!("{resume:?}");
    assert!(debug.contains("\"debug\"") && debug.contains("before:review"), "{debug}");
    assert!(debug.contains("signed: true"), "{debug}");
}

#[test]
fn thread_ids_that_a_token_could_not_carry_are_refused() {
    let store = MemoryStore::new();
    let app = Review::builder().checkpointer(store.clone()).build();
    for id in [String::new(), "x".repeat(ThreadId::MAX_LEN + 1)] {
        match app.run(Call::start(Memo::default()).on(id.as_str())) {
            Err(Error::InvalidThreadId { thread, .. }) => assert_eq!(thread.as_str(), id),
            other => panic!("expected InvalidThreadId, got {other:?}"),
        }
    }
    assert_eq!(store.thread_count(), 0, "nothing was written");
    let longest = "y".repeat(ThreadId::MAX_LEN);
    let resume = app.run(Call::start(Memo::default()).on(longest.as_str())).unwrap().interrupted().unwrap().1;
    let parsed: Resume<Memo> = resume.to_string().parse().unwrap();
    assert_eq!(parsed.thread().as_str(), longest);
}
