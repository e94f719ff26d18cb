use std::collections::{BTreeMap, BTreeSet};
use tea::prelude::*;

fn keep_longer(current: &mut String, new: String) {
    if new.len() > current.len() {
        *current = new;
    }
}

mod reducers {
    pub fn concat(current: &mut Vec<u8>, new: Vec<u8>) {
        current.extend(new);
    }
}

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Review {
    pub draft: String,
    #[reducer(replace)]
    pub approved: bool,
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
    #[reducer(with = reducers::concat)]
    pub bytes: Vec<u8>,
    pub r#type: u8,
}

fn write(_: &Review) -> ReviewUpdate {
    Review::update()
        .draft("draft".into())
        .approved(true)
        .log(vec!["wrote".into()])
        .revisions(1)
        .best(3)
        .low(-3)
        .tags(["t".to_owned()].into())
        .meta([("k".to_owned(), "v".to_owned())].into())
        .summary("summary".into())
        .bytes(vec![1])
        .r#type(7)
}

fn reset(_: &Review) -> Result<ReviewUpdate, String> {
    Ok(Review::update()
        .overwrite_log(Vec::new())
        .overwrite_revisions(0)
        .overwrite_best(0)
        .overwrite_low(0)
        .overwrite_tags(BTreeSet::new())
        .overwrite_meta(BTreeMap::new())
        .overwrite_summary(String::new())
        .overwrite_bytes(Vec::new()))
}

fn returns<S: GraphState, R: tea::__private::NodeOutput<S>>(_: fn(&S) -> R) {}

fn main() {
    let mut state = Review::default();
    state.apply(write(&state));
    state.apply(reset(&state).unwrap());
    returns::<Review, ReviewUpdate>(write);
    returns::<Review, Result<ReviewUpdate, String>>(reset);
    let _: &[tea::__private::Field] = Review::FIELDS;
    let _: u64 = Review::SCHEMA_FINGERPRINT;
    println!("{:?}", Review::update().draft(String::new()));
}
