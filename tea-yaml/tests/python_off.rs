//! Without the feature `python`: a Python block does not load, and the error says how to build
//! tea so that it does (the feature's own tests are in `python.rs`).
#![cfg(not(feature = "python"))]

use tea_yaml::Engine;

#[test]
fn a_python_block_asks_for_the_feature() {
    for yaml in [
        "nodes:\n  - name: p\n    language: python\n    run: |\n      return {\"a\": 1}\n",
        // No `language:`: not Lua, so perhaps Python.
        "nodes:\n  - name: p\n    run: |\n      return {\"a\": 1}\n",
    ] {
        let err = Engine::new().trust_code(true).load_str(yaml).expect_err("no Python here");
        let p = &err.problems()[0];
        assert!(p.line() >= 4 && p.message().contains("`--features python`"), "{}: {}", p.line(), p.message());
    }
    // Lua still loads.
    assert!(Engine::new().load_str("nodes:\n  - name: l\n    run: return { a = 1 }\n").is_ok());
}
