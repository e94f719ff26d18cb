//! `#[tool]`'s compile-time behaviour: the cases in `ui-tests/pass/tools/` must compile and run,
//! those in `ui-tests/fail/tools/` fail with the `.stderr` beside each.
//!
//! They run here rather than in `ui-tests`, whose cases are built with tea's default features:
//! `#[tool]` needs the feature `models`, and turning it on there would change what the other
//! snapshots show a user of the default features. trybuild builds these cases against this
//! package's dependencies (tea with `models`, serde, serde_json, schemars).

#[test]
fn tool_ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("../ui-tests/pass/tools/*.rs");
    cases.compile_fail("../ui-tests/fail/tools/*.rs");
}
