//! Checkpoints, breakpoints and resumes on a `DirStore` in a temporary directory: the shared
//! scenarios (`tests/store_scenarios`), then what only files can show: a pause's file found by
//! its node, damaged files on disk, and processes that share one directory.

#[macro_use]
mod store_scenarios;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use store_scenarios::{done, paused, thread, Doc, StopBefore};
use tea::prelude::*;
use tea::Graph as _;

/// A temporary directory, removed when dropped; each `store()` opens a new store in it.
struct Dir {
    dir: PathBuf,
    opened: AtomicUsize,
}

impl Dir {
    fn new(test: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("tea-checkpoints-dir-{}-{test}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Dir { dir, opened: AtomicUsize::new(0) }
    }

    fn store(&self) -> DirStore {
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        DirStore::open(self.dir.join(format!("store{n}"))).unwrap()
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

store_tests!(Dir);

#[test]
fn a_pause_file_is_found_by_its_node_and_holds_the_head() {
    let tmp = Dir::new("pause-file");
    let store = tmp.store();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("pause-file");
    let (_, resume) = paused(app.run(Call::start(Doc { note: "on disk".into(), ..Doc::default() }).on(t.clone())));
    let graph = app.graph().name();

    let head = app.state(&t).unwrap().unwrap().checkpoint;
    assert_eq!(resume.checkpoint(), head);
    let file = store.checkpoint_path(graph, &t, resume.checkpoint());
    let pause = store.link_pause(graph, &t, resume.checkpoint(), resume.node().as_str()).unwrap();
    let name = pause.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("b_") && name.ends_with(&format!("_{head:06}.ckpt")), "{name}");
    assert_eq!(pause.parent(), file.parent());
    assert_eq!(std::fs::read(&pause).unwrap(), std::fs::read(&file).unwrap());
    assert_eq!(
        store.head(graph, &t).unwrap().unwrap().1,
        std::fs::read(&pause).unwrap(),
        "the store's bytes, unchanged"
    );

    // Another handle on the directory (another process, say) resumes it.
    let other = StopBefore::builder().checkpointer(DirStore::open(store.dir()).unwrap()).build();
    assert_eq!(done(other.resume(resume)).note, "on disk");
}

#[test]
fn damaged_files_on_disk_are_errors_never_panics() {
    let tmp = Dir::new("damaged");
    let store = tmp.store();
    let app = StopBefore::builder().checkpointer(store.clone()).build();
    let t = thread("damaged");
    let (_, resume) = paused(app.run(Call::start(Doc::default()).on(t.clone())));
    let file = store.checkpoint_path(app.graph().name(), &t, resume.checkpoint());
    let good = std::fs::read(&file).unwrap();

    // Cut short, or a byte changed: the envelope's checks name the thread and checkpoint.
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x40;
    for bad in [good[..good.len() / 2].to_vec(), Vec::new(), flipped, b"not a checkpoint".to_vec()] {
        std::fs::write(&file, &bad).unwrap();
        for error in [app.state(&t).err(), app.run(Call::recover(&t)).err(), app.resume(resume.clone()).err()] {
            match error {
                Some(Error::CorruptCheckpoint { thread, checkpoint, .. }) => {
                    assert_eq!(thread, t);
                    assert_eq!(checkpoint, resume.checkpoint());
                }
                other => panic!("expected CorruptCheckpoint, got {other:?}"),
            }
        }
    }
    // The checkpoint file gone: the store names the head file and the missing file.
    std::fs::remove_file(&file).unwrap();
    let error = app.state(&t).unwrap_err();
    assert!(matches!(error, Error::Store { .. }), "{error:?}");
    assert!(error.to_string().contains(&file.display().to_string()), "{error}");

    // Put back, the thread resumes with the same token.
    std::fs::write(&file, &good).unwrap();
    assert_eq!(done(app.resume(resume)).trail, ["a", "b", "c"]);
}

/// Set in a child process: the directory it appends to, and its name.
const WRITER_ENV: &str = "TEA_CHECKPOINTS_DIR_WRITER";
const WRITER_TEST: &str = "processes_sharing_a_directory_agree_on_every_head";
const ROUNDS: u64 = 40;

/// The child: for each round, tries to append checkpoint `round` once, and reports wins.
fn race_as_child(spec: &str) {
    let (dir, name) = spec.split_once('|').unwrap();
    let store = DirStore::open(dir).unwrap();
    let t = ThreadId::from("shared");
    let mut wins = Vec::new();
    for id in 1..=ROUNDS {
        // Wait until the previous round has a winner, then race for this one.
        while store.head("race", &t).unwrap().map_or(0, |(head, _)| head) < id - 1 {
            std::thread::yield_now();
        }
        let expected = Some(id - 1).filter(|&head| head > 0);
        if store.append("race", &t, expected, id, name.as_bytes(), id % 4 == 0).unwrap() == tea::AppendOutcome::Written
        {
            wins.push(id.to_string());
        }
    }
    println!("wins {}", wins.join(","));
}

#[cfg(unix)]
#[test]
fn processes_sharing_a_directory_agree_on_every_head() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        race_as_child(&spec);
        return;
    }
    let tmp = Dir::new("processes");
    let dir = tmp.path().join("shared");
    let children: Vec<_> = (0..4)
        .map(|n| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args([WRITER_TEST, "--exact", "--nocapture", "--test-threads=1"])
                .env(WRITER_ENV, format!("{}|writer {n}", dir.display()))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut winners = std::collections::BTreeMap::new();
    for (n, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "writer {n} failed");
        let text = String::from_utf8(out.stdout).unwrap();
        // The test harness prints the test's name on the same line.
        let wins =
            text.split_once("wins ").and_then(|(_, rest)| rest.lines().next()).unwrap_or_else(|| panic!("{text}"));
        for id in wins.split(',').filter(|s| !s.is_empty()) {
            let id: u64 = id.parse().unwrap();
            assert!(winners.insert(id, format!("writer {n}")).is_none(), "checkpoint {id} won twice");
        }
    }
    assert_eq!(winners.keys().copied().collect::<Vec<_>>(), (1..=ROUNDS).collect::<Vec<_>>(), "one winner per round");
    let store = DirStore::open(&dir).unwrap();
    let history = store.history("race", &ThreadId::from("shared")).unwrap();
    assert_eq!(history.len() as u64, ROUNDS);
    for (id, bytes) in history {
        assert_eq!(String::from_utf8(bytes).unwrap(), winners[&id], "checkpoint {id} holds its winner's bytes");
    }
}
