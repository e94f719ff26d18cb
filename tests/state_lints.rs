//! Generated code is clean under strict lints in the user's crate: no warning, no unused
//! qualification, every public item documented and debuggable.
#![deny(
    warnings,
    unused,
    unused_qualifications,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]
#![allow(clippy::unreadable_literal)]

use std::collections::{BTreeMap, BTreeSet};
use tea::prelude::*;

fn keep_first(current: &mut u8, new: u8) {
    if *current == 0 {
        *current = new;
    }
}

/// A state with every kind of field.
#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Linted {
    /// A replace field.
    pub draft: String,
    /// An append field.
    #[reducer(append)]
    pub log: Vec<String>,
    /// A sum field.
    #[reducer(sum)]
    pub n: u32,
    /// A max field.
    #[reducer(max)]
    pub hi: i8,
    /// A min field.
    #[reducer(min)]
    pub lo: i8,
    /// A union field.
    #[reducer(union)]
    pub tags: BTreeSet<String>,
    /// A merge field.
    #[reducer(merge)]
    pub meta: BTreeMap<String, u8>,
    /// A custom field.
    #[reducer(with = keep_first)]
    pub first: u8,
    /// A raw identifier.
    pub r#type: u8,
}

/// A state without reducers.
#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Plain {
    /// The only field.
    pub only: bool,
}

/// A state without fields.
#[derive(GraphState, Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Empty {}

#[test]
fn generated_code_passes_strict_lints() {
    let mut state = Linted::default();
    state.apply(
        Linted::update()
            .draft("d".into())
            .log(vec!["l".into()])
            .n(1)
            .hi(1)
            .lo(-1)
            .tags(BTreeSet::new())
            .meta(BTreeMap::new())
            .first(3)
            .r#type(2)
            .overwrite_n(4),
    );
    assert_eq!(state.n, 4);
    assert_eq!(state.first, 3);

    let mut plain = Plain { only: false };
    plain.apply(Plain::update().only(true));
    assert!(plain.only);

    let mut empty = Empty {};
    empty.apply(Empty::update());
    assert!(Empty::update().is_empty());
    assert!(Empty::FIELDS.is_empty());
    assert_eq!(format!("{:?}", Empty::update()), "EmptyUpdate");
}
