//! The layering rule of ARCHITECTURE.md ("The layers of tea-runtime"), held by the code, and
//! that document's layer table held to the code's ([`RUNTIME_LAYERS`]).
//!
//! Scans the `src/` tree of every crate of the workspace, reads the imports between a crate's
//! own modules (`use crate::…`, `crate::x::…` paths in code, `super::…` resolved against the
//! module it is written in, `pub use`, and names the crate root re-exports resolved to the
//! module that defines them), and fails, naming the modules and the import, when
//!
//! - a crate of [`CYCLE_CHECKED`] has an import circle between its top-level modules, or
//! - a module of tea-runtime imports from a layer above its own ([`RUNTIME_LAYERS`]), or
//! - ARCHITECTURE.md's layer table, or the list of layers in `tea-runtime/src/lib.rs`, differs
//!   from [`RUNTIME_LAYERS`].
//!
//! The scanner reads Rust text with a small lexer (comments, strings and character literals
//! skipped), not a parser: it sees every path that starts with `crate`, `$crate` or `super`,
//! which is how a module names another module of its crate. Its self-tests run it on small
//! module sets written here, so that it cannot pass for want of seeing anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose top-level modules must not import each other in a circle, by directory
/// (`.` is the root package `tea`).
///
const CYCLE_CHECKED: &[&str] = &[".", "tea-runtime", "tea-check", "tea-macros", "tea-yaml", "tea-cli", "tea-serve"];

/// The crates whose layers are directories of files that must not import each other in a
/// circle either (`machine/run.rs` ↔ `machine/fork.rs`): each top-level module's children —
/// its files and subdirectories, and its own `mod.rs` — are checked as the crate's top-level
/// modules are.
const WITHIN_LAYERS_CHECKED: &[&str] = &["tea-runtime", "tea-yaml"];

/// The circles inside a layer that are deliberate, each as (crate, layer, the files that reach
/// each other, why it is harmless). ARCHITECTURE.md ("The layers of tea-runtime") states the
/// same rule. An entry that no longer matches a circle fails too, so that the list cannot
/// outlive what it excuses.
const ALLOWED_WITHIN: &[(&str, &str, &[&str], &str)] = &[];

/// tea-yaml's layers, bottom to top, under the same rule: problems → syntax and data → languages
/// (Lua, templates, Python, Prolog) → actions → the graph (its IR) → the interpreter → loading →
/// the agent. Each is a folder by concern (`syntax/`, `lang/`, `actions/`, …) but `error`.
const YAML_LAYERS: &[(&str, &[&str])] = &[
    ("problems", &["error"]),
    ("syntax and data", &["syntax", "grants", "state"]),
    ("languages", &["lang"]),
    ("actions", &["actions"]),
    ("graph", &["ir"]),
    ("interpreter", &["run"]),
    ("loading", &["load"]),
    ("agent", &["agent"]),
];

/// tea-runtime's layers, bottom to top: the modules of a layer may import from their own layer
/// and from the layers below it, never from one above. Every top-level module of tea-runtime
/// must be in one. ARCHITECTURE.md ("The layers of tea-runtime") and `tea-runtime/src/lib.rs`
/// write the same table out; `documented_layers_match_the_code` holds them to this one.
const RUNTIME_LAYERS: &[(&str, &[&str])] = &[
    ("vocabulary", &["vocab"]),
    ("format", &["format"]),
    ("store", &["store"]),
    ("tenure", &["tenure"]),
    ("model", &["model"]),
    ("machine", &["machine"]),
    ("drivers", &["drive"]),
    ("API", &["api"]),
    ("subgraphs", &["subgraph"]),
];

// ---------------------------------------------------------------------------------------------
// Lexing: the tokens of Rust text that matter for paths, with their line numbers.

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// An identifier or keyword (`crate`, `super`, `use`, `mod`, names).
    Ident(String),
    /// `::`
    PathSep,
    /// Any other punctuation character (`{`, `}`, `;`, `,`, `$`, `*`, …).
    Punct(char),
}

/// The tokens of `text`, each with its line; comments, string, byte-string, raw-string and
/// character literals are skipped, lifetimes read as identifiers.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let n = chars.len();
    let skip_to = |from: usize, end: usize, line: &mut usize| {
        *line += chars[from..end.min(n)].iter().filter(|&&c| c == '\n').count();
        end
    };
    while i < n {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < n && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let (mut depth, mut j) = (1, i + 2);
            while j < n && depth > 0 {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            i = skip_to(i, j, &mut line);
        } else if (c == 'r' || (c == 'b' && chars.get(i + 1) == Some(&'r')))
            && matches!(chars.get(i + 1 + usize::from(c == 'b')), Some('#') | Some('"'))
            && raw_string_end(&chars, i + 1 + usize::from(c == 'b')).is_some()
        {
            let end = raw_string_end(&chars, i + 1 + usize::from(c == 'b')).unwrap_or(n);
            i = skip_to(i, end, &mut line);
        } else if c == '"' || (c == 'b' && chars.get(i + 1) == Some(&'"')) {
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            while j < n && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            i = skip_to(i, j + 1, &mut line);
        } else if c == '\'' || (c == 'b' && chars.get(i + 1) == Some(&'\'')) {
            let start = if c == 'b' { i + 1 } else { i };
            if chars.get(start + 1) == Some(&'\\') {
                // An escaped character literal: up to its closing quote.
                let mut j = start + 2;
                while j < n && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if chars.get(start + 2) == Some(&'\'') {
                i = start + 3;
            } else {
                // A lifetime or a loop label.
                let mut j = start + 1;
                while j < n && (chars[j].is_alphanumeric() || chars[j] == '_') {
                    j += 1;
                }
                out.push((Tok::Ident(chars[start..j].iter().collect()), line));
                i = j;
            }
        } else if c.is_alphabetic() || c == '_' {
            let mut j = i;
            if c == 'r' && chars.get(i + 1) == Some(&'#') {
                j += 2; // a raw identifier
            }
            while j < n && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            out.push((Tok::Ident(chars[i..j].iter().collect::<String>().trim_start_matches("r#").to_owned()), line));
            i = j;
        } else if c.is_ascii_digit() {
            while i < n && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '.') {
                if chars[i] == '.' && !chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// Where the raw string whose `#`s or quote start at `at` ends (just past its closing quote
/// and hashes), if a raw string starts there.
fn raw_string_end(chars: &[char], at: usize) -> Option<usize> {
    let mut hashes = 0;
    let mut j = at;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

// ---------------------------------------------------------------------------------------------
// Reading a crate: its module files, and the paths in them.

/// One source file of a crate and the module it is.
struct File {
    /// The module path from the crate root (empty for the root file).
    module: Vec<String>,
    /// Where it is, as reported.
    shown: String,
    tokens: Vec<(Tok, usize)>,
}

/// A crate's module files, read from its root file down through `mod name;` declarations.
struct Crate {
    name: String,
    files: Vec<File>,
}

/// Reads the crate whose root file is `root` (`src/lib.rs`, `src/main.rs`); `read` gives a
/// file's text (`None`: no such file).
fn load_crate(name: &str, root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
    let mut files = Vec::new();
    let mut queue = vec![(root.to_path_buf(), Vec::<String>::new())];
    while let Some((path, module)) = queue.pop() {
        let Some(text) = read(&path) else { continue };
        let tokens = lex(&text);
        // Where this file's own `mod x;` children live.
        let dir = {
            let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            if module.is_empty() || stem == "mod" {
                parent
            } else {
                parent.join(stem)
            }
        };
        for w in tokens.windows(3) {
            if let [(Tok::Ident(kw), _), (Tok::Ident(child), _), (Tok::Punct(';'), _)] = w {
                if kw == "mod" {
                    let mut child_module = module.clone();
                    child_module.push(child.clone());
                    let flat = dir.join(format!("{child}.rs"));
                    let nested = dir.join(child).join("mod.rs");
                    let file = if read(&flat).is_some() { flat } else { nested };
                    queue.push((file, child_module));
                }
            }
        }
        files.push(File { module, shown: path.display().to_string(), tokens });
    }
    files.sort_by(|a, b| a.module.cmp(&b.module));
    Crate { name: name.to_owned(), files }
}

/// An import of one top-level module by another.
#[derive(Clone, Debug)]
struct Edge {
    from: String,
    to: String,
    /// Where, and what was written.
    at: String,
}

/// The leaves of the use tree or path starting at `tokens[i]`: each the segments written
/// after the starting point, e.g. `a::{b::C, d}` gives `[a, b, C]` and `[a, d]`. Returns them
/// and the index past the path.
fn path_leaves(tokens: &[(Tok, usize)], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix = Vec::new();
    loop {
        match tokens.get(i) {
            Some((Tok::Ident(name), _)) => {
                prefix.push(name.clone());
                i += 1;
                if tokens.get(i).map(|t| &t.0) == Some(&Tok::PathSep) {
                    i += 1;
                    continue;
                }
                return (vec![prefix], i);
            }
            Some((Tok::Punct('{'), _)) => {
                let mut leaves = Vec::new();
                i += 1;
                loop {
                    match tokens.get(i).map(|t| &t.0) {
                        Some(Tok::Punct('}')) | None => return (leaves, i + 1),
                        Some(Tok::Punct(',')) => i += 1,
                        Some(Tok::Ident(word)) if word == "self" => {
                            leaves.push(prefix.clone());
                            i += 1;
                        }
                        Some(Tok::Ident(word)) if word == "as" => i += 2,
                        Some(Tok::Ident(_)) | Some(Tok::Punct('{')) => {
                            let (inner, next) = path_leaves(tokens, i);
                            for leaf in inner {
                                let mut full = prefix.clone();
                                full.extend(leaf);
                                leaves.push(full);
                            }
                            i = next;
                        }
                        Some(_) => i += 1,
                    }
                }
            }
            _ => return (vec![prefix], i),
        }
    }
}

/// The path from the crate root that `segments` (a path from the crate root as written) names,
/// given the crate's top-level modules and the names its root brings in (name → the path it
/// stands for); `None` for the root itself and items defined there.
fn resolve(
    segments: &[String],
    tops: &BTreeSet<String>,
    root_names: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = segments.first()?;
    if tops.contains(first) {
        return Some(segments.to_vec());
    }
    let alias = root_names.get(first)?;
    Some(alias.iter().chain(&segments[1..]).cloned().collect())
}

/// The names the crate root brings in from its own modules with `use` (`pub use x::Name;`,
/// `use x::{a, b};`, `pub use crate::x::Name`): name → the path it stands for.
fn root_names(root: &File, tops: &BTreeSet<String>) -> BTreeMap<String, Vec<String>> {
    let mut names = BTreeMap::new();
    let tokens = &root.tokens;
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].0 {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => depth = depth.saturating_sub(1),
            Tok::Ident(kw) if kw == "use" && depth == 0 => {
                let (leaves, next) = path_leaves(tokens, i + 1);
                for mut leaf in leaves {
                    if matches!(leaf.first().map(String::as_str), Some("crate" | "self")) {
                        leaf.remove(0);
                    }
                    if let (Some(first), Some(last)) = (leaf.first(), leaf.last()) {
                        if tops.contains(first) && leaf.len() > 1 {
                            names.insert(last.clone(), leaf.clone());
                        }
                    }
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// Every import between two different top-level modules of `krate`.
fn edges(krate: &Crate) -> Vec<Edge> {
    edges_within(krate, &[])
}

/// A feature folder's loading: tea-yaml keeps each action family's `with:` loading next to its
/// running (`actions/crew/load.rs` beside `actions/crew/mod.rs`), and such a `load` module two
/// levels down belongs to the crate's top-level `load` module, the loading layer, for the
/// layers and the circles between top-level modules (it is the loader's methods, written
/// where the feature lives). `Some("load")` for such a path when the crate has a `load` module.
fn loading_part(path: &[String], tops: &BTreeSet<String>) -> Option<String> {
    (path.len() >= 3 && path[2] == LOADING && path[0] != LOADING && tops.contains(LOADING)).then(|| LOADING.to_owned())
}

/// The name of the loading layer's module, and of a feature folder's part of it.
const LOADING: &str = "load";

/// What a module's own file (`mod.rs`) is called among its submodules, as an import circle
/// names it.
const OWN_FILE: &str = "mod";

/// Every import between two different children of module `scope` of `krate` (its top-level
/// modules for the root, `[]`): the modules directly inside it, each with what is inside it,
/// and the scope's own file ([`OWN_FILE`]) for items defined there.
fn edges_within(krate: &Crate, scope: &[String]) -> Vec<Edge> {
    let tops: BTreeSet<String> =
        krate.files.iter().filter(|f| f.module.len() == 1).map(|f| f.module[0].clone()).collect();
    let children: BTreeSet<String> = krate
        .files
        .iter()
        .filter(|f| f.module.len() == scope.len() + 1 && f.module.starts_with(scope))
        .map(|f| f.module[scope.len()].clone())
        .collect();
    // The child of `scope` a module path from the crate root is in, if it is inside `scope`.
    let child_of = |path: &[String]| -> Option<String> {
        if let Some(top) = loading_part(path, &tops) {
            // Inside the folder it is written in, it is not part of the folder's layer.
            return scope.is_empty().then_some(top);
        }
        if !path.starts_with(scope) {
            return None;
        }
        match path.get(scope.len()) {
            Some(child) if children.contains(child) => Some(child.clone()),
            _ if scope.is_empty() => None,
            _ => Some(OWN_FILE.to_owned()),
        }
    };
    let Some(root) = krate.files.iter().find(|f| f.module.is_empty()) else { return Vec::new() };
    let names = root_names(root, &tops);
    let mut out = Vec::new();
    for file in &krate.files {
        let Some(from) = child_of(&file.module) else { continue };
        let from = &from;
        let tokens = &file.tokens;
        // The modules this file declares (`mod name;`): a path may start with one of them.
        let declared: BTreeSet<&str> = tokens
            .windows(3)
            .filter_map(|w| match w {
                [(Tok::Ident(kw), _), (Tok::Ident(child), _), (Tok::Punct(';'), _)] if kw == "mod" => {
                    Some(child.as_str())
                }
                _ => None,
            })
            .collect();
        // Inline modules (`mod tests { … }`) shift what `super` means: (name, brace depth).
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0usize;
        // Inside a `pub use`: in a directory's own file, re-exporting one of its files is how
        // the directory presents it, not a use of it (the file's own imports are its edges).
        let mut reexport = false;
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i].0 {
                Tok::Punct('{') => {
                    depth += 1;
                    i += 1;
                    continue;
                }
                Tok::Punct('}') => {
                    depth = depth.saturating_sub(1);
                    if inline.last().is_some_and(|(_, d)| *d == depth) {
                        inline.pop();
                    }
                    i += 1;
                    continue;
                }
                Tok::Ident(kw) if kw == "mod" => {
                    if let (Some((Tok::Ident(name), _)), Some((Tok::Punct('{'), _))) =
                        (tokens.get(i + 1), tokens.get(i + 2))
                    {
                        inline.push((name.clone(), depth));
                    }
                }
                Tok::Ident(kw) if kw == "use" => {
                    // `pub use`, `pub(crate) use`: a re-export, up to its `;`.
                    let public = match i.checked_sub(1).map(|j| &tokens[j].0) {
                        Some(Tok::Ident(word)) => word == "pub",
                        Some(Tok::Punct(')')) => {
                            tokens[..i].iter().rev().take(6).any(|t| t.0 == Tok::Ident("pub".into()))
                        }
                        _ => false,
                    };
                    reexport = public;
                }
                Tok::Punct(';') => reexport = false,
                _ => {}
            }
            let after_sep = i > 0 && tokens[i - 1].0 == Tok::PathSep;
            let start = match &tokens[i].0 {
                Tok::Ident(word)
                    if !after_sep
                        && (matches!(word.as_str(), "crate" | "super" | "self")
                            || declared.contains(word.as_str())) =>
                {
                    word.clone()
                }
                _ => {
                    i += 1;
                    continue;
                }
            };
            if tokens.get(i + 1).map(|t| &t.0) != Some(&Tok::PathSep) {
                i += 1;
                continue;
            }
            let line = tokens[i].1;
            let (leaves, next) = path_leaves(tokens, i);
            for leaf in leaves {
                // `leaf` starts with `crate`, `self`, a run of `super`s, or a module this file
                // declares.
                let mut here: Vec<String> = file.module.clone();
                here.extend(inline.iter().map(|(name, _)| name.clone()));
                let mut rest = leaf.as_slice();
                let absolute: Vec<String> = if start == "crate" {
                    rest[1..].to_vec()
                } else {
                    if rest.first().map(String::as_str) == Some("self") {
                        rest = &rest[1..];
                    }
                    while rest.first().map(String::as_str) == Some("super") {
                        here.pop();
                        rest = &rest[1..];
                    }
                    here.into_iter().chain(rest.iter().cloned()).collect()
                };
                if let Some(to) = resolve(&absolute, &tops, &names).as_deref().and_then(child_of) {
                    let presents = reexport && !scope.is_empty() && from == OWN_FILE;
                    if &to != from && !presents {
                        out.push(Edge {
                            from: from.clone(),
                            to,
                            at: format!("{}:{line}: `{}`", file.shown, leaf.join("::")),
                        });
                    }
                }
            }
            i = next.max(i + 1);
        }
    }
    out
}

/// An import circle: the modules that reach each other (a strongly connected component of two
/// or more), and one circle through them, each step with the import that makes it.
#[derive(Debug)]
struct Circle {
    modules: Vec<String>,
    steps: Vec<Edge>,
}

/// The import circles among a crate's top-level modules.
fn cycles(edges: &[Edge]) -> Vec<Circle> {
    let mut graph: BTreeMap<&str, BTreeMap<&str, &Edge>> = BTreeMap::new();
    for edge in edges {
        graph.entry(edge.from.as_str()).or_default().entry(edge.to.as_str()).or_insert(edge);
        graph.entry(edge.to.as_str()).or_default();
    }
    // Strongly connected components (Tarjan); a component of two or more modules is a circle.
    struct Tarjan<'a> {
        graph: &'a BTreeMap<&'a str, BTreeMap<&'a str, &'a Edge>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in self.graph[v].keys() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut tarjan = Tarjan {
        graph: &graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &v in graph.keys() {
        if !tarjan.index.contains_key(v) {
            tarjan.visit(v);
        }
    }
    let mut found = Vec::new();
    for component in tarjan.components.into_iter().filter(|c| c.len() > 1) {
        let members: BTreeSet<&str> = component.iter().copied().collect();
        // One circle through the component, found by a walk back to its first module.
        let first = *members.iter().next().unwrap_or(&"");
        let mut path = vec![first];
        let mut seen = BTreeSet::from([first]);
        let mut circle = Vec::new();
        fn walk<'a>(
            graph: &BTreeMap<&'a str, BTreeMap<&'a str, &'a Edge>>,
            members: &BTreeSet<&'a str>,
            first: &'a str,
            path: &mut Vec<&'a str>,
            seen: &mut BTreeSet<&'a str>,
            circle: &mut Vec<Edge>,
        ) -> bool {
            let at = *path.last().unwrap_or(&first);
            for (&next, &edge) in &graph[at] {
                if !members.contains(next) {
                    continue;
                }
                if next == first {
                    circle.push(edge.clone());
                    return true;
                }
                if seen.insert(next) {
                    path.push(next);
                    circle.push(edge.clone());
                    if walk(graph, members, first, path, seen, circle) {
                        return true;
                    }
                    circle.pop();
                    path.pop();
                }
            }
            false
        }
        walk(&graph, &members, first, &mut path, &mut seen, &mut circle);
        found.push(Circle { modules: members.iter().map(|m| (*m).to_owned()).collect(), steps: circle });
    }
    found
}

/// The imports of a crate that go up its layers, and its top-level modules in no layer.
fn layer_violations(krate: &Crate, edges: &[Edge], layers: &[(&str, &[&str])]) -> Vec<String> {
    let rank = |module: &str| layers.iter().position(|(_, modules)| modules.contains(&module));
    let mut problems = Vec::new();
    for file in krate.files.iter().filter(|f| f.module.len() == 1) {
        if rank(&file.module[0]).is_none() {
            problems.push(format!(
                "module `{}` of {} ({}) is in no layer: add it to its crate's table (RUNTIME_LAYERS, YAML_LAYERS) in tests/layers.rs (for tea-runtime, to ARCHITECTURE.md's layer table and tea-runtime/src/lib.rs's list too)",
                file.module[0], krate.name, file.shown
            ));
        }
    }
    for edge in edges {
        if let (Some(from), Some(to)) = (rank(&edge.from), rank(&edge.to)) {
            if to > from {
                problems.push(format!(
                    "module `{}` (layer {}) imports `{}` (layer {}, above it) at {}",
                    edge.from, layers[from].0, edge.to, layers[to].0, edge.at
                ));
            }
        }
    }
    problems
}

/// A circle as the failure names it: its modules in order, then the import of each step.
fn describe(krate: &str, circle: &Circle) -> String {
    let order: Vec<&str> =
        circle.steps.iter().map(|e| e.from.as_str()).chain(circle.steps.first().map(|e| e.from.as_str())).collect();
    let steps: Vec<String> = circle.steps.iter().map(|e| format!("  {} -> {} at {}", e.from, e.to, e.at)).collect();
    format!(
        "{krate}: import circle among {} modules ({}), e.g. {}\n{}",
        circle.modules.len(),
        circle.modules.join(", "),
        order.join(" -> "),
        steps.join("\n")
    )
}

// ---------------------------------------------------------------------------------------------
// The workspace.

/// The workspace's crates: (directory, root file), the root package first.
fn workspace() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace's Cargo.toml reads");
    let members = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('[').and_then(|(_, list)| list.split_once(']')))
        .map(|(list, _)| {
            list.split(',').map(|m| m.trim().trim_matches('"').to_owned()).filter(|m| !m.is_empty()).collect::<Vec<_>>()
        })
        .expect("the workspace lists its members");
    let mut crates = Vec::new();
    for dir in std::iter::once(".".to_owned()).chain(members) {
        for file in ["src/lib.rs", "src/main.rs"] {
            let path = root.join(&dir).join(file);
            if path.is_file() {
                crates.push((dir.clone(), path));
            }
        }
    }
    crates
}

fn read_disk(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn no_import_circles_and_runtime_layers_hold() {
    let crates = workspace();
    for dir in CYCLE_CHECKED {
        assert!(crates.iter().any(|(d, _)| d == dir), "crate `{dir}` of CYCLE_CHECKED is not in the workspace");
    }
    let mut problems = Vec::new();
    let mut runtime_modules = 0;
    for (dir, root) in &crates {
        let name = if dir == "." { "tea".to_owned() } else { dir.clone() };
        let krate = load_crate(&name, root, &read_disk);
        let edges = edges(&krate);
        let circles = cycles(&edges);
        if CYCLE_CHECKED.contains(&dir.as_str()) {
            problems.extend(circles.iter().map(|c| describe(&name, c)));
        } else {
            for circle in &circles {
                // Not held yet (see CYCLE_CHECKED): reported, not failed.
                eprintln!("not checked yet: {}", describe(&name, circle));
            }
        }
        if dir == "tea-runtime" && root.ends_with("lib.rs") {
            runtime_modules = krate.files.iter().filter(|f| f.module.len() == 1).count();
            assert!(!edges.is_empty(), "tea-runtime's modules import nothing from each other: the scan read nothing");
            problems.extend(layer_violations(&krate, &edges, RUNTIME_LAYERS));
        }
        if dir == "tea-yaml" && root.ends_with("lib.rs") {
            problems.extend(layer_violations(&krate, &edges, YAML_LAYERS));
        }
    }
    assert!(
        runtime_modules >= RUNTIME_LAYERS.len(),
        "tea-runtime was not scanned ({runtime_modules} top-level modules)"
    );
    assert!(
        problems.is_empty(),
        "the layering rule of ARCHITECTURE.md (\"The layers of tea-runtime\") is broken:\n{}",
        problems.join("\n")
    );
}

/// The import circles between the files of one layer of `krate` (each top-level module that
/// is a directory), as failures; `allowed` lists the deliberate ones, and each entry of it
/// that matched is marked in `used`.
fn circles_within(krate: &Crate, allowed: &[(&str, &str, &[&str], &str)], used: &mut [bool]) -> Vec<String> {
    let layers: BTreeSet<String> =
        krate.files.iter().filter(|f| f.module.len() == 2).map(|f| f.module[0].clone()).collect();
    let mut problems = Vec::new();
    for layer in &layers {
        let edges = edges_within(krate, std::slice::from_ref(layer));
        for circle in cycles(&edges) {
            let excused = allowed.iter().position(|(krate_name, within, files, _)| {
                *krate_name == krate.name
                    && within == layer
                    && files.iter().copied().collect::<BTreeSet<_>>()
                        == circle.modules.iter().map(String::as_str).collect::<BTreeSet<_>>()
            });
            match excused {
                Some(index) => used[index] = true,
                None => problems.push(describe(&format!("{} layer `{layer}`", krate.name), &circle)),
            }
        }
    }
    problems
}

#[test]
fn no_import_circles_inside_a_layer() {
    let crates = workspace();
    let mut problems = Vec::new();
    let mut used = vec![false; ALLOWED_WITHIN.len()];
    let mut scanned = 0;
    for (dir, root) in &crates {
        if !WITHIN_LAYERS_CHECKED.contains(&dir.as_str()) || !root.ends_with("lib.rs") {
            continue;
        }
        let krate = load_crate(dir, root, &read_disk);
        scanned += 1;
        problems.extend(circles_within(&krate, ALLOWED_WITHIN, &mut used));
    }
    assert_eq!(scanned, WITHIN_LAYERS_CHECKED.len(), "a crate of WITHIN_LAYERS_CHECKED was not scanned");
    for (entry, used) in ALLOWED_WITHIN.iter().zip(&used) {
        if !used {
            problems.push(format!(
                "ALLOWED_WITHIN excuses a circle among {:?} in layer `{}` of {}, which is no longer there: remove the entry (and its line in ARCHITECTURE.md)",
                entry.2, entry.1, entry.0
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the layering rule of ARCHITECTURE.md (\"The layers of tea-runtime\": no circle inside a layer) is broken:\n{}",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The checker, checked on module sets written here.

fn synthetic(files: &[(&str, &str)]) -> Crate {
    let map: BTreeMap<PathBuf, String> = files.iter().map(|(p, t)| (PathBuf::from(p), (*t).to_owned())).collect();
    load_crate("synthetic", Path::new("src/lib.rs"), &|p: &Path| map.get(p).cloned())
}

#[test]
fn checker_finds_a_circle_and_names_it() {
    let krate = synthetic(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Thing;\n"),
        ("src/a.rs", "use crate::b::Other;\npub struct Thing;\n"),
        ("src/b/mod.rs", "mod inner;\npub struct Other;\n"),
        // `super::super` from `b::inner` is the root: `Thing` is re-exported there from `a`.
        ("src/b/inner.rs", "fn f() -> super::super::Thing { todo!() }\n"),
        ("src/c.rs", "// crate::a::Thing in a comment\nconst S: &str = \"crate::a::Thing\";\nfn g<'a>(x: &'a str) -> char { 'x' }\n"),
    ]);
    let edges = edges(&krate);
    let pairs: BTreeSet<(String, String)> = edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
    assert_eq!(pairs, BTreeSet::from([("a".into(), "b".into()), ("b".into(), "a".into())]), "{edges:?}");
    let circles = cycles(&edges);
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert_eq!(circles[0].modules, ["a", "b"]);
    let text = describe("synthetic", &circles[0]);
    assert!(text.contains("a -> b -> a"), "{text}");
    assert!(text.contains("src/b/inner.rs:1"), "{text}");
}

#[test]
fn checker_reads_use_trees_and_finds_upward_imports() {
    let krate = synthetic(&[
        ("src/lib.rs", "mod vocab;\nmod model;\nmod api;\nuse vocab::names;\n"),
        ("src/vocab/mod.rs", "pub(crate) mod names;\nuse crate::{api::App, vocab::names::X};\n"),
        ("src/vocab/names.rs", "pub struct X;\n#[cfg(test)]\nmod tests {\n    use super::X;\n}\n"),
        ("src/model.rs", "use crate::names::X;\n"),
        ("src/api.rs", "use crate::{model, vocab::names::{self, X as Y}};\npub struct App;\n"),
    ]);
    let edges = edges(&krate);
    let pairs: BTreeSet<(String, String)> = edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
    let expected = [("vocab", "api"), ("model", "vocab"), ("api", "model"), ("api", "vocab")];
    assert_eq!(pairs, expected.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect(), "{edges:?}");
    let layers: &[(&str, &[&str])] = &[("vocabulary", &["vocab"]), ("model", &["model"]), ("API", &["api"])];
    let problems = layer_violations(&krate, &edges, layers);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("module `vocab` (layer vocabulary) imports `api` (layer API, above it)"),
        "{problems:?}"
    );
    let unlayered = layer_violations(&krate, &edges, &layers[..2]);
    assert!(
        unlayered.iter().any(|p| p.contains("module `api` of synthetic") && p.contains("in no layer")),
        "{unlayered:?}"
    );
    let circles = cycles(&edges);
    assert_eq!(circles.len(), 1);
    assert_eq!(circles[0].modules, ["api", "model", "vocab"]);
}

#[test]
fn a_feature_folders_loading_is_in_the_loading_layer() {
    // `actions/crew/load.rs` is the loader's, written beside the family it loads: its import of
    // the loader is within the loading layer; the family's running part may not import it.
    let krate = synthetic(&[
        ("src/lib.rs", "mod actions;\nmod load;\n"),
        ("src/actions/mod.rs", "pub(crate) mod crew;\n"),
        ("src/actions/crew/mod.rs", "pub(crate) mod load;\npub(crate) struct Crew;\nuse crate::load::Loader;\n"),
        ("src/actions/crew/load.rs", "use crate::load::*;\nuse crate::actions::crew::Crew;\n"),
        ("src/load/mod.rs", "pub(crate) struct Loader;\nuse crate::actions::crew::Crew;\n"),
    ]);
    let edges = edges(&krate);
    let pairs: BTreeSet<(&str, &str)> = edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
    assert_eq!(pairs, BTreeSet::from([("actions", "load"), ("load", "actions")]));
    let layers: &[(&str, &[&str])] = &[("actions", &["actions"]), ("loading", &["load"])];
    let problems = layer_violations(&krate, &edges, layers);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("src/actions/crew/mod.rs:3"), "{problems:?}");
    // Nor is it one of the folder's modules when circles inside the `actions` layer are sought.
    let within = edges_within(&krate, &["actions".to_owned()]);
    assert!(within.iter().all(|e| !e.at.contains("crew/load.rs")), "{within:?}");
}

#[test]
fn checker_finds_a_circle_inside_a_layer() {
    let krate = synthetic(&[
        ("src/lib.rs", "mod machine;\nmod vocab;\nuse vocab::names;\n"),
        ("src/vocab/mod.rs", "pub(crate) mod names;\n"),
        ("src/vocab/names.rs", "pub struct N;\n"),
        ("src/machine/mod.rs", "mod fork;\nmod run;\nmod step;\npub(crate) struct Env;\n"),
        ("src/machine/run.rs", "use crate::machine::fork::Branch;\nuse crate::names::N;\n"),
        ("src/machine/fork.rs", "use super::{run::Run, Env};\n"),
        ("src/machine/step.rs", "use crate::machine::run::Run;\n"),
    ]);
    let edges = edges_within(&krate, &["machine".to_owned()]);
    let pairs: BTreeSet<(&str, &str)> = edges.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
    assert_eq!(pairs, BTreeSet::from([("fork", "run"), ("fork", OWN_FILE), ("run", "fork"), ("step", "run")]));
    // A name the root brings in resolves to the file that defines it.
    let vocab: BTreeSet<(String, String)> = edges_within(&krate, &[]).into_iter().map(|e| (e.from, e.to)).collect();
    assert_eq!(vocab, BTreeSet::from([("machine".to_owned(), "vocab".to_owned())]));
    let problems = circles_within(&krate, &[], &mut []);
    assert_eq!(problems.len(), 1, "{problems:?}");
    // A file's own submodules, named without `crate` or `super` (`node::read`, `self::node`),
    // are imports too: a `mod.rs` that calls into a file that takes from it is a circle.
    let split = synthetic(&[
        ("src/lib.rs", "mod load;\n"),
        ("src/load/mod.rs", "mod node;\nmod routing;\nmod store;\nfn f() { node::read(); }\nuse self::routing::Rule;\npub(crate) use store::Store;\npub(crate) fn helper() {}\n"),
        ("src/load/node.rs", "use super::*;\npub(crate) fn read() { helper() }\n"),
        ("src/load/routing.rs", "pub(crate) struct Rule;\n"),
        // Re-exported by the directory's own file, which that does not make a use of it.
        ("src/load/store.rs", "use super::helper;\npub(crate) struct Store;\n"),
    ]);
    let pairs: BTreeSet<(String, String)> =
        edges_within(&split, &["load".to_owned()]).into_iter().map(|e| (e.from, e.to)).collect();
    let expected = [(OWN_FILE, "node"), (OWN_FILE, "routing"), ("node", OWN_FILE), ("store", OWN_FILE)];
    assert_eq!(pairs, expected.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect());
    assert!(problems[0].contains("synthetic layer `machine`"), "{problems:?}");
    assert!(problems[0].contains("fork -> run -> fork"), "{problems:?}");
    assert!(problems[0].contains("src/machine/fork.rs:1"), "{problems:?}");
    let allowed: &[(&str, &str, &[&str], &str)] = &[("synthetic", "machine", &["run", "fork"], "a test")];
    let mut used = [false];
    assert!(circles_within(&krate, allowed, &mut used).is_empty());
    assert!(used[0], "the allowance was not marked used");
}

/// Prints every crate's module graph and circles (`cargo test --test layers -- --ignored
/// --nocapture`): what ARCHITECTURE.md's layer picture is read from.
#[test]
#[ignore = "prints the module graph; run by hand"]
fn print_module_graph() {
    for (dir, root) in workspace() {
        let krate = load_crate(&dir, &root, &read_disk);
        let edges = edges(&krate);
        let pairs: BTreeSet<(String, String)> = edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
        println!("{dir} ({}): {} imports between top-level modules", root.display(), pairs.len());
        for (from, to) in &pairs {
            println!("  {from} -> {to}");
        }
        for circle in cycles(&edges) {
            println!("{}", describe(&dir, &circle));
        }
        let layers: BTreeSet<String> =
            krate.files.iter().filter(|f| f.module.len() == 2).map(|f| f.module[0].clone()).collect();
        for layer in &layers {
            let edges = edges_within(&krate, std::slice::from_ref(layer));
            let pairs: BTreeSet<(String, String)> = edges.iter().map(|e| (e.from.clone(), e.to.clone())).collect();
            println!(
                "  inside {layer}: {}",
                pairs.iter().map(|(a, b)| format!("{a} -> {b}")).collect::<Vec<_>>().join(", ")
            );
            for circle in cycles(&edges) {
                println!("  {}", describe(&format!("{dir} layer `{layer}`"), &circle));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The layer table as ARCHITECTURE.md and tea-runtime/src/lib.rs write it, held to RUNTIME_LAYERS.

/// The heading of ARCHITECTURE.md's section whose first table is tea-runtime's layers.
const LAYERS_HEADING: &str = "## The layers of tea-runtime";

/// A layer as a document writes it: its number, its name and its modules.
#[derive(Debug, PartialEq)]
struct DocLayer {
    number: String,
    name: String,
    modules: Vec<String>,
}

/// The layers of the first table after the line `heading` of markdown `text`: each row's first
/// cell is the number, the second the name, the third the modules, each in backticks and
/// written as a path under `tea-runtime/src/` (`vocab/`, `lease.rs`). `Err` says what is missing.
fn doc_layer_table(text: &str, heading: &str) -> Result<Vec<DocLayer>, String> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != heading);
    if lines.next().is_none() {
        return Err(format!("it has no section `{heading}`"));
    }
    let rows: Vec<&str> = lines
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and the `|---|` line
        .collect();
    if rows.is_empty() {
        return Err(format!("its section `{heading}` has no table with rows"));
    }
    rows.iter()
        .map(|row| {
            let cells: Vec<&str> = row.trim().trim_matches('|').split('|').map(str::trim).collect();
            let [number, name, modules, ..] = cells[..] else {
                return Err(format!("the row `{row}` has fewer than three cells (number, layer, module)"));
            };
            let modules: Vec<String> = modules
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|path| {
                    let path = path.strip_prefix("tea-runtime/src/").unwrap_or(path);
                    path.trim_end_matches('/').trim_end_matches(".rs").to_owned()
                })
                .collect();
            if modules.is_empty() {
                return Err(format!("the row `{row}` names no module in backticks"));
            }
            Ok(DocLayer { number: number.to_owned(), name: name.to_owned(), modules })
        })
        .collect()
}

/// The modules of the layer list in the comment above the `mod` items of a crate root (`text`):
/// its lines `//   N module  what it holds`, in order, as (number, module).
fn lib_layer_list(text: &str) -> Vec<(String, String)> {
    text.lines()
        .take_while(|l| !l.starts_with("mod "))
        .filter_map(|l| {
            let mut words = l.strip_prefix("//").filter(|rest| !rest.starts_with(['!', '/']))?.split_whitespace();
            let number = words.next().filter(|n| n.chars().all(|c| c.is_ascii_digit()))?;
            Some((number.to_owned(), words.next()?.to_owned()))
        })
        .collect()
}

/// What differs between the layers `written` in `doc` and `layers`, each problem saying how to
/// fix it.
fn table_mismatches(doc: &str, written: &[DocLayer], layers: &[(&str, &[&str])]) -> Vec<String> {
    let mut problems = Vec::new();
    for index in 0..written.len().max(layers.len()) {
        let code = layers.get(index).map(|(name, modules)| (*name, modules.to_vec()));
        match (written.get(index), code) {
            (Some(row), Some((name, modules))) => {
                if row.number != index.to_string() || row.name != name || row.modules != modules {
                    problems.push(format!(
                        "{doc}, layer {index}: the document says #{} `{}` {:?}, RUNTIME_LAYERS in tests/layers.rs says `{name}` {modules:?}: make the two tables list the same layers, numbered from 0, in the same order",
                        row.number, row.name, row.modules
                    ));
                }
            }
            (Some(row), None) => problems.push(format!(
                "{doc}: the document has layer #{} `{}` {:?}, which RUNTIME_LAYERS in tests/layers.rs lacks: add it there or remove its row",
                row.number, row.name, row.modules
            )),
            (None, Some((name, modules))) => problems.push(format!(
                "{doc}: RUNTIME_LAYERS in tests/layers.rs has layer {index} `{name}` {modules:?}, which the document lacks: add its row"
            )),
            (None, None) => {}
        }
    }
    problems
}

#[test]
fn documented_layers_match_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md reads");
    let mut problems = match doc_layer_table(&architecture, LAYERS_HEADING) {
        Ok(written) => table_mismatches("ARCHITECTURE.md", &written, RUNTIME_LAYERS),
        Err(missing) => vec![format!(
            "ARCHITECTURE.md: {missing}; it must hold tea-runtime's layer table (| # | layer | module | holds |) under that heading, as RUNTIME_LAYERS in tests/layers.rs lists it"
        )],
    };
    let lib = std::fs::read_to_string(root.join("tea-runtime/src/lib.rs")).expect("tea-runtime/src/lib.rs reads");
    let listed: Vec<DocLayer> = lib_layer_list(&lib)
        .into_iter()
        .map(|(number, module)| {
            // The list names modules only: a layer is named as RUNTIME_LAYERS names it.
            let name = RUNTIME_LAYERS.iter().find(|(_, m)| m.contains(&module.as_str())).map_or("?", |(n, _)| n);
            DocLayer { number, name: name.to_owned(), modules: vec![module] }
        })
        .collect();
    problems.extend(table_mismatches(
        "tea-runtime/src/lib.rs (the `//   N module …` lines above the `mod` items)",
        &listed,
        RUNTIME_LAYERS,
    ));
    assert!(
        problems.is_empty(),
        "the documented layers of tea-runtime differ from the code's:\n{}",
        problems.join("\n")
    );
}

#[test]
fn layer_table_reader_reads_rows_and_reports_differences() {
    let doc = "# A\n\n## The layers of tea-runtime\n\ntext\n\n| # | layer | module | holds |\n|---|---|---|---|\n\
               | 0 | vocabulary | `vocab/` | names |\n| 1 | lease | `tea-runtime/src/lease.rs` | the hold |\n\n## Next\n";
    let written = doc_layer_table(doc, LAYERS_HEADING).expect("the table reads");
    assert_eq!(
        written,
        [
            DocLayer { number: "0".into(), name: "vocabulary".into(), modules: vec!["vocab".into()] },
            DocLayer { number: "1".into(), name: "lease".into(), modules: vec!["lease".into()] },
        ]
    );
    let layers: &[(&str, &[&str])] = &[("vocabulary", &["vocab"]), ("lease", &["lease"])];
    assert!(table_mismatches("doc", &written, layers).is_empty());
    let moved: &[(&str, &[&str])] = &[("vocabulary", &["vocab"]), ("model", &["model"]), ("lease", &["lease"])];
    let problems = table_mismatches("doc", &written, moved);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("layer 1: the document says #1 `lease`"), "{problems:?}");
    assert!(problems[1].contains("has layer 2 `lease`"), "{problems:?}");
    assert!(doc_layer_table("## Other\n", LAYERS_HEADING).is_err());
    let lib = "//! Docs.\n// The layers:\n//\n//   0 vocab     names\n//   1 lease     the hold\nmod lease;\nmod vocab;\n// 2 after\n";
    assert_eq!(lib_layer_list(lib), [("0".to_owned(), "vocab".to_owned()), ("1".to_owned(), "lease".to_owned())]);
}
