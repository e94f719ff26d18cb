//! Prolog blocks written by an attacker (feature `prolog`): every way out of the sandbox tried
//! in issue 36 — library meta-predicates over stored goals, `call/N` past 8, goals hidden in
//! assocs, pairs and lists, DCG bodies, `catch` recoveries, asserted clauses, modules, the
//! machine's internals, global variables, flags, operators, the environment, files and the
//! process — ends in a clear error naming the node and line, with the goal never run (no file
//! written) and the process still running the next block. Also: no block or agent sees what
//! another left, limits end huge terms cleanly, and `prolog.query` binds its input as data.
#![cfg(feature = "prolog")]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tea::Error;
use tea_yaml::{Engine, State};

/// A path no test has written: the goal an attack hides writes it, so it must not exist after.
fn marker() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("tea-hostile-prolog-{}-{n}", std::process::id()))
}

/// A file with one Prolog node `evil` whose block is `body` (its first line is line 5 of the file).
fn agent(body: &str) -> String {
    let indented: String = body.lines().map(|l| format!("      {l}\n")).collect();
    format!("nodes:\n  - name: evil\n    language: prolog\n    run: |\n{indented}")
}

fn run(yaml: &str, input: Value) -> Result<State, Error> {
    let agent = Engine::new().load_str(yaml).unwrap_or_else(|e| panic!("load failed:\n{e}"));
    agent.invoke(input).map(|out| out.done().expect("the agent finished"))
}

/// The machine still runs blocks (the process and its Prolog thread are alive).
fn still_alive() {
    let out = run(&agent("X is 6 * 7, return(answer, X)."), json!({})).unwrap();
    assert_eq!(out["answer"], 42);
}

/// `body` (which writes `file` if its goal runs) does not load: the problem names the node,
/// `needle` and line `line`.
fn refused_at_load(body: &str, needle: &str, line: usize) {
    let file = marker();
    let body = body.replace("FILE", &file.display().to_string());
    let err = Engine::new().load_str(&agent(&body)).expect_err(&format!("loaded:\n{body}"));
    let found = err
        .problems()
        .iter()
        .any(|p| p.message().contains("node `evil`") && p.message().contains(needle) && p.line() == line);
    assert!(found, "{body}\n=> {err}");
    assert!(!file.exists(), "{body} wrote {}", file.display());
}

/// `body` loads, and its run fails the node with an error naming `needle` and the line.
fn refused_at_run(body: &str, needle: &str, line: usize) {
    let file = marker();
    let body = body.replace("FILE", &file.display().to_string());
    match run(&agent(&body), json!({})) {
        Err(Error::NodeFailed { node, source }) => {
            let message = source.to_string();
            assert_eq!(node.to_string(), "evil");
            assert!(message.contains(needle), "{body}\n=> {message}");
            assert!(message.contains(&format!(":{line}")), "{body}\n=> {message}");
        }
        other => panic!("{body}\n=> expected the node to fail, got {other:?}"),
    }
    assert!(!file.exists(), "{body} wrote {}", file.display());
}

#[test]
fn library_meta_predicates_over_stored_goals_are_refused() {
    refused_at_load(
        "list_to_assoc([k-shell('touch FILE')], A),\nmap_assoc(call, A).",
        "map_assoc/2 is not among the predicates a tea block may call",
        5,
    );
    // Built at run time: refused when called.
    refused_at_run(
        "list_to_assoc([k-shell('touch FILE')], A),\nG =.. [map_assoc, call, A],\ncall(G).",
        "map_assoc/2",
        5,
    );
    refused_at_load("list_to_assoc([k-v], A), map_assoc(call, A, _).", "map_assoc/3", 5);
    still_alive();
}

#[test]
fn call_n_of_any_arity_is_checked() {
    for n in 9..=12 {
        let extra: Vec<String> = (1..n).map(|i| format!("a{i}")).collect();
        // shell/N with the extra arguments: no such predicate; each is checked, none runs.
        refused_at_run(
            &format!("G =.. [shell, 'touch FILE'],\ncall(G, {}).", extra.join(", ")),
            &format!("shell/{n}"),
            5,
        );
    }
    // A goal of arity 1 reached by call/9 through a closure of arity 0… as in the issue.
    refused_at_run(
        "G =.. [call, call, call, call, call, call, call, call],\nX =.. [shell, 'touch FILE'],\ncall(G, X).",
        "shell/1",
        5,
    );
    still_alive();
}

#[test]
fn goals_hidden_in_data_are_checked_when_called() {
    for (body, needle) in [
        ("list_to_assoc([k-shell('touch FILE')], A),\nget_assoc(k, A, G), call(G).", "shell/1"),
        ("pairs_keys_values(Ps, [k], [shell('touch FILE')]),\npairs_values(Ps, Gs), maplist(call, Gs).", "shell/1"),
        ("Gs = [true, shell('touch FILE')],\nmaplist(call, Gs).", "shell/1"),
        ("Gs = [getenv('HOME', _)],\nfoldl([G, A, A]>>call(G), Gs, 0, _).", "(>>)/5"),
        ("Gs = [shell('touch FILE')],\nfoldl(call, Gs, 0, _).", "shell/3"),
        ("G = shell('touch FILE'),\nfindall(x, G, _).", "shell/1"),
        ("G = bb_put(k, v),\nforall(true, G).", "bb_put/2"),
        ("G = halt,\n\\+ \\+ G.", "halt/0"),
        ("G = halt,\nignore(G).", "halt/0"),
        ("G = open('FILE', write, _),\nonce(G).", "open/3"),
        ("G = shell('touch FILE'),\ninclude(call, [G], _).", "shell/1"),
        ("G = shell('touch FILE'),\nsetof(X, X^G, _).", "shell/1"),
        ("G = shell('touch FILE'),\naggregate_all(count, G, _).", "shell/1"),
    ] {
        refused_at_run(body, needle, 5);
    }
    still_alive();
}

#[test]
fn dcgs_catch_recoveries_and_asserted_clauses_are_refused() {
    refused_at_load("phrase(({ shell('touch FILE') }, [a]), [a]).", "phrase/2", 5);
    refused_at_load("catch(throw(x), _, shell('touch FILE')).", "shell/1", 5);
    refused_at_run("R = shell('touch FILE'),\ncatch(throw(x), _, R).", "shell/1", 5);
    refused_at_load("assertz((p :- shell('touch FILE'))), p.", "shell/1", 5);
    refused_at_load("p :- shell('touch FILE').\np.", "shell/1", 5);
    refused_at_run("B =.. [shell, 'touch FILE'],\nassertz((p :- B)), p.", "shell/1", 5);
    refused_at_run("assertz((p(G) :- call(G))),\np(shell('touch FILE')).", "shell/1", 5);
    // Nor may a block define tea's predicates, the machine's, or its hooks.
    refused_at_run("H = '$tea_return'(k, v),\nassertz(H).", "$tea_return'/2", 5);
    refused_at_load("assertz(term_expansion(_, _)).", "term_expansion/2", 5);
    still_alive();
}

#[test]
fn modules_environment_files_process_flags_and_internals_are_refused() {
    for (body, needle) in [
        (":- use_module(library(os)).", "library(os)"),
        ("use_module(library(os)).", "use_module/1"),
        ("getenv('HOME', H), return(home, H).", "getenv/2"),
        ("open('FILE', write, S), close(S).", "open/3"),
        ("shell('touch FILE').", "shell/1"),
        ("bb_put(secret, 1).", "bb_put/2"),
        ("op(700, xfx, ===>).", "op/3"),
        ("set_prolog_flag(double_quotes, atom).", "set_prolog_flag/2"),
        ("os:shell('touch FILE').", "os:shell"),
        ("lists:append([], [], _).", "lists:append"),
        ("'$skip_max_list'(_, _, [a], _).", "$skip_max_list'/4"),
        ("halt.", "halt/0"),
        ("halt(0).", "halt/1"),
        ("consult('FILE').", "consult/1"),
        ("X = 1, call_cleanup(true, shell('touch FILE')).", "call_cleanup/2"),
    ] {
        refused_at_load(body, needle, 5);
    }
    for (body, needle) in [
        ("G = os:shell('touch FILE'),\ncall(G).", "os:shell"),
        ("G =.. ['$skip_max_list', _, _, [a], _],\ncall(G).", "$skip_max_list'/4"),
        ("G =.. [halt],\ncall(G).", "halt/0"),
        ("G =.. [getenv, 'HOME', H],\ncall(G), return(home, H).", "getenv/2"),
        ("G =.. [set_prolog_flag, double_quotes, atom],\ncall(G).", "set_prolog_flag/2"),
        ("G =.. [op, 700, xfx, ===>],\ncall(G).", "op/3"),
        ("G =.. [bb_put, k, v],\ncall(G).", "bb_put/2"),
        ("G =.. [open, 'FILE', write, _],\ncall(G).", "open/3"),
        ("G =.. [use_module, library(os)],\ncall(G).", "use_module/1"),
    ] {
        refused_at_run(body, needle, 5);
    }
    still_alive();
}

#[test]
fn no_block_or_agent_sees_what_another_left() {
    let writer = "nodes:\n  - name: write\n    language: prolog\n    run: |\n      nb_setval(k, secret), assertz(kept(42)),\n      return(wrote, true).\n  - name: read\n    language: prolog\n    run: |\n      ( catch(nb_getval(k, V), _, fail) -> return(saw, V) ; return(saw, none) ),\n      ( catch(kept(X), _, fail) -> return(fact, X) ; return(fact, none) ).\n";
    let out = run(writer, json!({})).unwrap();
    assert_eq!(
        (out["wrote"].clone(), out["saw"].clone(), out["fact"].clone()),
        (json!(true), json!("none"), json!("none"))
    );
    // Another agent of the process, after it.
    let reader = agent("( catch(nb_getval(k, V), _, fail) -> return(saw, V) ; return(saw, none) ),\n( catch(kept(X), _, fail) -> return(fact, X) ; return(fact, none) ).");
    let out = run(&reader, json!({})).unwrap();
    assert_eq!((out["saw"].clone(), out["fact"].clone()), (json!("none"), json!("none")));
    // Global variables of Scryer itself are not reachable at all.
    refused_at_load("bb_put(k, v).", "bb_put/2", 5);
    refused_at_load("bb_get(k, V), return(v, V).", "bb_get/2", 5);
}

#[test]
fn huge_terms_end_cleanly_and_the_next_block_runs() {
    // The issue's two lines: a million fresh variables, computed fine (block mode keeps no
    // bindings), within seconds.
    let started = Instant::now();
    let out = run(&agent("length(L, 1000000), return(out, ok)."), json!({})).unwrap();
    assert_eq!(out["out"], "ok");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    // Ten million: refused before it is built.
    let started = Instant::now();
    refused_at_run("length(L, 10000000), return(out, ok).", "length/2 of size 10000000 is beyond tea's limit", 5);
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    // Other single-step builders, and what crosses to JSON or into the clause store.
    refused_at_run("functor(T, f, 100000000).", "functor/3 of size 100000000", 5);
    refused_at_run(
        "d(0, A, A) :- !.\nd(N, A, B) :- atom_concat(A, A, A1), N1 is N - 1, d(N1, A1, B).\n?- d(40, x, _).",
        "atom_concat/3 of size",
        7,
    );
    refused_at_run("numlist(1, 300000, L),\nreturn(out, L).", "a returned value of size", 5);
    refused_at_run("numlist(1, 200000, L),\nassertz(big(L)).", "an asserted clause of size", 5);
    refused_at_run(
        "deep(0, x) :- !.\ndeep(N, f(T)) :- N1 is N - 1, deep(N1, T).\ndeep(5000, T), return(t, T).",
        "nested deeper than tea's limit",
        7,
    );
    refused_at_run("numlist(1, 200000, L),\nnb_setval(k, L).", "a global variable's value of size", 5);
    // A cyclic term is measured in bounded time too.
    refused_at_run("X = f(X),\nreturn(x, X).", "a returned value", 5);
    refused_at_run("X = f(X),\nassertz(p(X)).", "an asserted clause", 5);
    // Built-ins that would never end on a cyclic list are refused one; those written in Prolog
    // are stopped by the inference limit.
    refused_at_run("X = [a|X],\natom_chars(_, X).", "atom_chars/2 was given a cyclic term", 5);
    refused_at_run("X = [a|X],\nsort(X, _).", "sort/2 was given a cyclic term", 5);
    refused_at_run("X = [a|X],\nG =.. [f|X].", "(=..)/2 was given a cyclic term", 5);
    refused_at_run("X = [a|X],\nmemberchk(b, X).", "ran away", 5);
    still_alive();
}

#[test]
fn prolog_query_binds_its_input_as_data() {
    let attack = "x'), shell('touch FILE'), ('";
    for code in [
        "classify(Q, geography) :- sub_string(Q, _, _, _, \"capital\"), !.\n        classify(_, general).\n        ?- classify(\"{{ state.q }}\", Category).",
        "classify(Q, geography) :- sub_atom(Q, _, _, _, capital), !.\n        classify(_, general).\n        ?- classify('{{ state.q }}', Category).",
        "classify(Q, geography) :- Q == capital, !.\n        classify(_, general).\n        ?- classify({{ state.q }}, Category).",
        "?- ( sub_string(\"prefix {{ state.q }} suffix\", _, _, _, \"capital\") -> Category = geography ; Category = general ).",
    ] {
        let file = marker();
        let q = attack.replace("FILE", &file.display().to_string());
        let yaml = format!(
            "nodes:\n  - name: classify\n    action: prolog.query\n    with:\n      code: |\n        {code}\n    output: r\n"
        );
        let out = run(&yaml, json!({ "q": q })).unwrap_or_else(|e| panic!("{code}\n=> {e}"));
        assert_eq!(out["r"], json!({ "bindings": [{ "Category": "general" }], "success": true }), "{code}");
        assert!(!file.exists(), "{code} ran the input");
        // The same node answers a harmless input as before.
        let out = run(&yaml, json!({ "q": "What is the capital of France?" })).unwrap();
        let category = &out["r"]["bindings"][0]["Category"];
        assert!(category == "geography" || code.contains("Q == capital"), "{code}: {category}");
    }
    // `bindings:` binds a query's variables to values (a string is an atom), never as text.
    let file = marker();
    let yaml = "nodes:\n  - name: q\n    action: prolog.query\n    with:\n      code: \"atom_length(Q, N)\"\n      bindings:\n        Q: \"{{ state.q }}\"\n    output: r\n";
    let out = run(yaml, json!({ "q": attack.replace("FILE", &file.display().to_string()) })).unwrap();
    assert_eq!(out["r"]["success"], true);
    assert!(!file.exists());
    // A `{% %}` block would write the input into the code: refused at load.
    let err = Engine::new()
        .load_str("nodes:\n  - name: q\n    action: prolog.query\n    with:\n      code: \"{% if state.q %}x(1).{% endif %} x(X).\"\n    output: r\n")
        .expect_err("a {% %} block in prolog.query's code loaded");
    assert!(err.to_string().contains("is Prolog text, not a template"), "{err}");
}
