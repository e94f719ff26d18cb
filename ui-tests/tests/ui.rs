//! Compile-time behaviour: what must compile (`ui-tests/pass`) and the errors users see
//! (`ui-tests/fail`, each with its `.stderr` snapshot).
//!
//! trybuild builds the cases against this package's own dependencies, tea with its default
//! features and serde, whatever features the rest of the workspace is built with: the snapshots
//! are what a user of tea's default features sees.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("pass/*.rs");
    cases.compile_fail("fail/*.rs");
}

/// The README's complete example is `pass/readme.rs`, character for character: `ui` builds and
/// runs it as the `src/main.rs` of a crate whose dependencies are the README's (tea and serde),
/// so the README shows a program that compiles as pasted, with no hidden lines.
#[test]
fn the_readmes_complete_example_is_a_whole_main_rs() {
    let readme = include_str!("../../README.md");
    let section = readme.split_once("## A complete example").expect("the README has `## A complete example`").1;
    let block = section
        .split_once("```rust\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .map(|(code, _)| format!("{code}\n"))
        .expect("`## A complete example` has a ```rust block");
    let case = include_str!("../pass/readme.rs");
    assert!(
        block == case,
        "the README's complete example and ui-tests/pass/readme.rs differ: copy the README's block into the file"
    );
    for (number, line) in block.lines().enumerate() {
        let hidden = line == "#" || line.starts_with("# ");
        assert!(!hidden, "line {} of the README's complete example is hidden from readers: {line:?}", number + 1);
    }
    assert!(block.contains("\nfn main()"), "the README's complete example has no `fn main`");
}
