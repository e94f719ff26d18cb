//! Compile-time behaviour: what must compile (`ui-tests/pass`) and the errors users see
//! (`ui-tests/fail`, each with its `.stderr` snapshot).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui-tests/pass/*.rs");
    cases.compile_fail("ui-tests/fail/*.rs");
}
