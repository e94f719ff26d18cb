//! A hostile agent at run time: Lua that tries to outrun its limits, template bombs, secrets
//! copied into the state by any transformation, and tampered or copied checkpoint files. Each
//! ends in a clear error within its limit, with nothing leaked or run twice.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tea::{Error, MemoryStore};
use tea_yaml::{Engine, LoadError, State};

const QUICK: Duration = Duration::from_secs(5);

fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tea-yaml-hostile-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn echo() -> Engine {
    Engine::new().action("test.echo", |_: &State, args: &Value| Ok(args.clone()))
}

#[test]
fn a_lua_block_cannot_catch_its_limits_or_outrun_them_in_library_functions() {
    let engine = Engine::new().lua_instruction_limit(5_000_000).lua_memory_limit(8 << 20);
    for (code, says) in [
        ("while true do pcall(function() while true do end end) end", "instruction limit"),
        ("while true do xpcall(function() while true do end end, print) end", "instruction limit"),
        ("while true do pcall(function() local t = {} for i = 1, 1e9 do t[i] = {} end end) end", "out of memory"),
        ("return { s = string.rep('', math.maxinteger) .. string.rep('x', math.maxinteger) }", "memory limit"),
        ("table.move({}, 1, math.maxinteger, 2)", "instruction limit"),
        ("return { r = string.rep('a', 60):find(string.rep('.-', 12) .. 'b') }", "backtracks"),
        ("local t = {} for i = 1, 60 do t = { t, t } end return { t = t }", "larger than the Lua memory limit"),
    ] {
        let agent = engine.load_str(&format!("nodes:\n  - name: evil\n    run: |\n      {code}\n")).unwrap();
        let began = Instant::now();
        let error = agent.invoke(json!({})).unwrap_err();
        let text = chain(&error);
        assert!(matches!(&error, Error::NodeFailed { node, .. } if *node == "evil"), "{code}: {error:?}");
        assert!(text.contains(says), "{code}: {text}");
        assert!(began.elapsed() < QUICK, "{code}: {:?}", began.elapsed());
    }
    // A block starting with ESC (a bytecode header) is refused at load.
    let err = engine.load_str("nodes:\n  - { name: evil, run: \"\\eLuaT\\0return {}\" }\n").unwrap_err();
    assert!(err.to_string().contains("evil"), "{err}");
    // And Lua never sees the secrets.
    let agent = Engine::new()
        .secret("token", "s3cret-token")
        .load_str("nodes:\n  - { name: a, run: 'return { t = type(secrets) }' }\n")
        .unwrap();
    assert_eq!(agent.invoke(json!({})).unwrap().done().unwrap()["t"], "nil");
}

#[cfg(feature = "tokio")]
#[test]
fn a_dropped_async_run_stops_its_lua_block() {
    // One blocking thread: a block that kept running would hold it, and the second run would
    // never start.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_time()
        .build()
        .unwrap();
    let engine = Engine::new().lua_instruction_limit(u64::MAX).lua_time_limit(Duration::from_secs(600));
    let spin = engine.load_str("nodes:\n  - { name: spin, run: 'while true do end' }\n").unwrap();
    let quick = engine.load_str("nodes:\n  - { name: quick, run: 'return { ok = true }' }\n").unwrap();
    runtime.block_on(async {
        let dropped = tokio::time::timeout(Duration::from_millis(300), spin.invoke_async(json!({}))).await;
        assert!(dropped.is_err(), "the spinning run was dropped");
        let next = tokio::time::timeout(QUICK, quick.invoke_async(json!({}))).await;
        let out = next.expect("the dropped block gave its thread back").unwrap().done().unwrap();
        assert_eq!(out["ok"], true);
    });
}

#[test]
fn template_loops_and_huge_strings_run_out_of_fuel() {
    for template in [
        "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
        "{% for i in range(1000) %}{{ 'x' * 100000000 }}{% endfor %}",
        "{{ 'x' * 100000000 }}",
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    ] {
        let agent = echo()
            .load_str(&format!("nodes:\n  - name: bomb\n    uses: test.echo\n    with: {{ text: \"{template}\" }}\n"))
            .unwrap();
        let began = Instant::now();
        let error = chain(&agent.invoke(json!({})).unwrap_err());
        assert!(error.contains("limit of 1000000 steps"), "{template}: {error}");
        assert!(began.elapsed() < QUICK, "{template}: {:?}", began.elapsed());
    }
    let agent = Engine::new()
        .load_str("nodes:\n  - { name: bomb, run: { type: expression, value: \"'x' * 100000000\" } }\n")
        .unwrap();
    assert!(chain(&agent.invoke(json!({})).unwrap_err()).contains("limit of 1000000 steps"));
}

fn secret_load(text: &str) -> LoadError {
    echo()
        .secret("token", "s3cret-token<>&'")
        .checkpointer(MemoryStore::new())
        .load_str(text)
        .err()
        .unwrap_or_else(|| panic!("must not load: {text}"))
}

#[test]
fn a_template_that_reads_secrets_outside_what_sends_them_is_a_load_error() {
    for (text, line) in [
        ("nodes:\n  - { name: a, run: { type: expression, value: 'secrets.token | reverse' } }\n", 2),
        ("nodes:\n  - name: a\n    uses: test.echo\n    with: { t: '{{ secrets.token | upper }}' }\n", 4),
        ("nodes:\n  - name: a\n    uses: test.echo\n    output: { t: '{{ secrets.token | list }}' }\n", 4),
        ("nodes:\n  - name: a\n    uses: test.echo\n    output: { t: '{{ secrets.token[1:] }}' }\n", 4),
        ("nodes:\n  - name: a\n    uses: test.echo\n    output: { t: 'x {{ secrets.token | tojson }}' }\n", 4),
        ("nodes:\n  - name: ask\n    type: interrupt\n    message: '{{ secrets.token | reverse }}'\n", 4),
        ("nodes:\n  - { name: a, run: 'return {}' }\nedges:\n  - { from: a, to: __end__, when: \"secrets.token == 'x'\" }\n", 4),
        ("nodes:\n  - name: a\n    uses: test.echo\n    with: { t: '{% set s = secrets %}{{ s.token }}' }\n", 4),
    ] {
        let err = secret_load(text);
        let p = err.problems().iter().find(|p| p.message().contains("reads `secrets`")).unwrap_or_else(|| panic!("{text}: {err}"));
        assert_eq!(p.line(), line, "{text}: {err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }
}

#[test]
fn parallel_saves_to_paths_of_one_stem_never_share_a_temporary_file() {
    let dir = dir("saves");
    let agent = Arc::new(
        Engine::new()
            .allow_write(&dir)
            .load_str(&format!(
                "nodes:\n  - name: save\n    uses: checkpoint.save\n    with: {{ path: \"{}/ck.{{{{ state.n }}}}\" }}\n    output: saved\n",
                dir.display()
            ))
            .unwrap(),
    );
    let handles: Vec<_> = (0..64)
        .map(|n| {
            let agent = agent.clone();
            std::thread::spawn(move || {
                agent.invoke(json!({ "n": n, "tag": format!("state {n}") })).unwrap().done().unwrap()
            })
        })
        .collect();
    for h in handles {
        let out = h.join().unwrap();
        assert_eq!(out["saved"]["saved"], true, "{out:?}");
    }
    let reader = Engine::new()
        .allow_write(&dir)
        .load_str(&format!(
            "nodes:\n  - name: save\n    uses: checkpoint.save\n    with: {{ path: \"{}/ck.{{{{ state.n }}}}\" }}\n    output: saved\n",
            dir.display()
        ))
        .unwrap();
    for n in 0..64 {
        // A file `checkpoint.save` wrote continues in a new run, without a store too: each file
        // holds its own run's state, whole.
        let resumed = reader.checkpoint_call(dir.join(format!("ck.{n}")), None).and_then(|call| reader.run(call));
        let out = resumed.unwrap_or_else(|e| panic!("{n}: {}", chain(&e))).done().unwrap();
        assert_eq!(out["tag"], format!("state {n}"), "{n}: {out:?}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    std::fs::remove_dir_all(&dir).ok();
}

const COUNTED: &str = r#"
config: { checkpoint_dir: ./ckpt, interrupt_before: [work] }
nodes:
  - { name: start, run: 'return { began = true }' }
  - { name: work, uses: test.count, output: counted }
"#;

#[test]
fn a_pause_file_resumes_once_wherever_its_copies_sit_and_no_temporary_file_is_left() {
    let dir = dir("copies");
    std::fs::write(dir.join("counted.yaml"), COUNTED).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let seen = runs.clone();
    let agent = Engine::new()
        .action("test.count", move |_: &State, _: &Value| Ok(json!(seen.fetch_add(1, Ordering::SeqCst) + 1)))
        .load_file(dir.join("counted.yaml"))
        .unwrap();
    let (_, resume) = agent.invoke(json!({})).unwrap().interrupted().unwrap();
    let original = agent.checkpoint_path(&resume).unwrap();
    // Asked twice for the same pause's file: no orphan temporary file.
    assert_eq!(agent.checkpoint_path(&resume).unwrap(), original);
    let thread_dir = original.parent().unwrap().to_path_buf();
    let tmp: Vec<_> = std::fs::read_dir(&thread_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
    let copies: Vec<PathBuf> = (0..3).map(|i| dir.join(format!("copy-{i}.ckpt"))).collect();
    for copy in &copies {
        std::fs::copy(&original, copy).unwrap();
    }
    // A copy resumes the pause (once).
    let done = agent.checkpoint_call(&copies[0], None).and_then(|call| agent.run(call)).unwrap().done().unwrap();
    assert_eq!(done["counted"], 1);
    for path in copies.iter().skip(1).chain([&original]) {
        let error = agent.checkpoint_call(path, None).and_then(|call| agent.run(call)).unwrap_err();
        assert!(matches!(error, Error::StaleResume { .. }), "{}: {error:?}", path.display());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the node behind the pause ran once in all");

    // A checkpoint file that is a FIFO or /dev/zero is refused without reading.
    #[cfg(unix)]
    {
        let zero = dir.join("zero.ckpt");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let began = Instant::now();
        let error = chain(&agent.checkpoint_call(&zero, None).and_then(|call| agent.run(call)).unwrap_err());
        assert!(error.contains("not a regular file"), "{error}");
        // `file.read` of it is refused whatever is granted (grants: hostile_grants.rs).
        let reader = Engine::new()
            .allow_read(&dir)
            .load_str("nodes:\n  - { name: r, uses: file.read, with: { path: \"{{ state.p }}\" } }\n")
            .unwrap();
        let error = chain(&reader.invoke(json!({ "p": zero.display().to_string() })).unwrap_err());
        assert!(error.contains("it is under `/dev`"), "{error}");
        assert!(began.elapsed() < QUICK);
    }
    std::fs::remove_dir_all(&dir).ok();
}
