//! tea-yaml's modules import downward only, so a reader can go from the YAML text to the agent
//! without coming back to a file left: problems (`error`) → syntax and data (`yaml`, `files`, `state`, `items`) →
//! language (`lua`, `template`) → model (`net`, `actions`, `graph`) → load / drawing (`load`,
//! `draw`) → `agent`. A module that imports one of its own layer or above fails this test.

use std::collections::BTreeMap;

const LAYERS: &[(&str, u8)] = &[
    ("error", 0),
    ("files", 1),
    ("yaml", 1),
    ("state", 1),
    ("items", 1),
    ("lua", 2),
    ("template", 2),
    ("net", 3),
    ("actions", 4),
    ("graph", 5),
    ("draw", 6),
    ("load", 6),
    ("agent", 7),
];

/// The modules `source` names as `crate::module`.
fn imports(source: &str) -> Vec<String> {
    let mut out: Vec<String> = source
        .match_indices("crate::")
        .filter_map(|(at, _)| {
            let rest = &source[at + 7..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
            (!name.is_empty()).then_some(name)
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn modules_import_only_lower_layers() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rank: BTreeMap<&str, u8> = LAYERS.iter().copied().collect();
    let mut seen = 0;
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let module = path.file_stem().unwrap().to_str().unwrap().to_owned();
        if module == "lib" {
            continue;
        }
        // A module in a directory (`load/`): all its files.
        let source = if path.is_dir() {
            let mut all = String::new();
            for file in std::fs::read_dir(&path).unwrap() {
                all.push_str(&std::fs::read_to_string(file.unwrap().path()).unwrap());
            }
            all
        } else {
            std::fs::read_to_string(&path).unwrap()
        };
        assert!(!source.contains("crate::{"), "{module}: name each module as `crate::module`");
        let Some(&own) = rank.get(module.as_str()) else { panic!("module `{module}` has no layer in tests/layers.rs") };
        seen += 1;
        for import in imports(&source) {
            let Some(&theirs) = rank.get(import.as_str()) else { continue };
            assert!(
                import == module || theirs < own,
                "`{module}` (layer {own}) imports `{import}` (layer {theirs}): imports go to lower layers only"
            );
        }
    }
    assert_eq!(seen, LAYERS.len(), "every module of the list exists");
}
