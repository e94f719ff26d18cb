//! Compile-time behaviour: what must compile (`ui-tests/pass`) and the errors users see
//! (`ui-tests/fail`, each with its `.stderr` snapshot).
//!
//! The snapshots are what a user of tea's default features sees: optional features add types
//! (a YAML graph, more stores) that rustc lists in its help notes, so under other feature sets
//! (`--all-features`) the test says it skipped; `cargo test` runs it.

#[test]
fn ui() {
    if cfg!(any(feature = "yaml", feature = "postgres", not(feature = "sled"))) {
        eprintln!("skipped: the ui snapshots are taken with tea's default features only; run `cargo test --test ui`");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.pass("ui-tests/pass/*.rs");
    cases.compile_fail("ui-tests/fail/*.rs");
}
