//! Whether the state forgot serde's derives — so that forgetting them is one error, not two
//! dozen.
//!
//! `GraphState` has `Serialize + DeserializeOwned` as supertraits (the engine writes the state
//! into checkpoints and tokens), so a state without them makes rustc repeat E0277 at the impl,
//! at every `graph!` over it and at every `State::update()`. The derive cannot ask the type
//! checker, and rustc hands it the struct without the `#[derive(…)]` it is listed in (the usual
//! place of `serde::Serialize`). So it reads the struct's own source file — the file rustc is
//! compiling, parsed with syn — finds the struct there, and looks at all its attributes.
//!
//! It reports serde's derives missing only when it is sure: the struct is found exactly once, every
//! attribute on it is one it knows (no attribute macro that might add derives), every derive is a
//! standard one, `GraphState` or serde's, the file holds no hand-written `impl Serialize for …` of
//! it and no item macro that could write one. Anything else — a file it cannot read or parse, a
//! struct written by a macro — and it says nothing: the build then fails as rustc reports it.
//! The one case it gets wrong, impls written by hand in another file, is what
//! `#[graph_state(manual_serde)]` is for (the error says so).

use syn::punctuated::Punctuated;
use syn::{Attribute, Item, Meta, Path, Stmt, Token, Type};

/// The serde traits missing from a state, as found in its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missing {
    pub serialize: bool,
    pub deserialize: bool,
}

impl Missing {
    /// The traits missing, as a user reads them.
    pub fn traits(self) -> &'static str {
        match (self.serialize, self.deserialize) {
            (true, true) => "`serde::Serialize` and `serde::Deserialize`",
            (true, false) => "`serde::Serialize`",
            _ => "`serde::Deserialize`",
        }
    }
}

/// The serde traits that the struct `name` deriving `GraphState` in `source` (a whole file)
/// surely lacks; `None` when it has both or when that cannot be told for sure.
pub fn missing(source: &str, name: &str) -> Option<Missing> {
    let file = syn::parse_file(source).ok()?;
    let mut found = Found::default();
    walk(&file.items, name, &mut found);
    if found.unsure || found.structs.len() != 1 {
        return None;
    }
    let mut seen = Seen { serialize: found.impl_serialize, deserialize: found.impl_deserialize };
    for attr in found.structs[0] {
        if !read_attr(&attr.meta, &mut seen) {
            return None;
        }
    }
    let missing = Missing { serialize: !seen.serialize, deserialize: !seen.deserialize };
    (missing.serialize || missing.deserialize).then_some(missing)
}

#[derive(Default)]
struct Found<'a> {
    /// The attributes of each struct named `name` that derives `GraphState`.
    structs: Vec<&'a [Attribute]>,
    impl_serialize: bool,
    impl_deserialize: bool,
    /// An item macro that might write an impl or the struct.
    unsure: bool,
}

/// Items of the file, of inline modules and of function bodies.
fn walk<'a>(items: &'a [Item], name: &str, found: &mut Found<'a>) {
    for item in items {
        match item {
            Item::Struct(item) if item.ident == name && derives_graph_state(&item.attrs) => {
                found.structs.push(&item.attrs);
            }
            Item::Impl(item) => {
                let (Some((_, path, _)), Type::Path(ty)) = (&item.trait_, &*item.self_ty) else { continue };
                if ty.path.segments.last().is_none_or(|s| s.ident != name) {
                    continue;
                }
                match last(path).as_deref() {
                    Some("Serialize") => found.impl_serialize = true,
                    Some("Deserialize") => found.impl_deserialize = true,
                    _ => {}
                }
            }
            Item::Mod(item) => {
                if let Some((_, items)) = &item.content {
                    walk(items, name, found);
                }
            }
            Item::Fn(item) => {
                let items: Vec<&Item> = item
                    .block
                    .stmts
                    .iter()
                    .filter_map(|stmt| match stmt {
                        Stmt::Item(item) => Some(item),
                        _ => None,
                    })
                    .collect();
                for item in items {
                    walk(std::slice::from_ref(item), name, found);
                }
                if item.block.stmts.iter().any(|stmt| matches!(stmt, Stmt::Macro(m) if !known_macro(&m.mac.path))) {
                    found.unsure = true;
                }
            }
            Item::Macro(item) if !known_macro(&item.mac.path) => found.unsure = true,
            _ => {}
        }
    }
}

/// Macros that write no struct and no serde impl: `graph!` and the standard library's that a
/// `main` calls as statements.
fn known_macro(path: &Path) -> bool {
    matches!(
        last(path).as_deref(),
        Some(
            "graph"
                | "macro_rules"
                | "println"
                | "print"
                | "eprintln"
                | "eprint"
                | "dbg"
                | "write"
                | "writeln"
                | "format"
                | "assert"
                | "assert_eq"
                | "assert_ne"
                | "debug_assert"
                | "debug_assert_eq"
                | "debug_assert_ne"
                | "panic"
                | "unreachable"
                | "vec"
        )
    )
}

fn derives_graph_state(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("derive")
            && attr
                .parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
                .is_ok_and(|paths| paths.iter().any(|path| last(path).as_deref() == Some("GraphState")))
    })
}

/// What the attributes seen so far derive or implement.
struct Seen {
    serialize: bool,
    deserialize: bool,
}

/// Reads one attribute (or one attribute inside a `cfg_attr`); `false` when it is one that
/// might give the struct serde's traits in a way not seen here (an attribute macro, a derive
/// macro other than the standard ones).
fn read_attr(meta: &Meta, seen: &mut Seen) -> bool {
    let Some(name) = meta.path().get_ident().map(ToString::to_string) else {
        // A path like `serde_with::serde_as`: an attribute macro.
        return false;
    };
    match name.as_str() {
        "derive" => {
            let Ok(list) = meta.require_list() else { return false };
            let Ok(paths) = list.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated) else {
                return false;
            };
            paths.iter().all(|path| match last(path).as_deref() {
                Some("Serialize") => {
                    seen.serialize = true;
                    true
                }
                Some("Deserialize") => {
                    seen.deserialize = true;
                    true
                }
                Some(
                    "GraphState" | "Clone" | "Copy" | "Debug" | "Default" | "PartialEq" | "Eq" | "PartialOrd" | "Ord"
                    | "Hash",
                ) => true,
                _ => false,
            })
        }
        "cfg_attr" => {
            let Ok(list) = meta.require_list() else { return false };
            let Ok(metas) = list.parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated) else {
                return false;
            };
            // The first is the condition; a derive under a condition counts as written.
            metas.iter().skip(1).all(|meta| read_attr(meta, seen))
        }
        "doc" | "serde" | "graph_state" | "cfg" | "allow" | "warn" | "deny" | "forbid" | "expect" | "repr"
        | "non_exhaustive" | "must_use" | "rustfmt" | "clippy" => true,
        _ => false,
    }
}

fn last(path: &Path) -> Option<String> {
    path.segments.last().map(|segment| segment.ident.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Missing = Missing { serialize: true, deserialize: true };

    #[test]
    fn missing_derives_are_found_in_every_place_they_could_be_written() {
        let plain = "#[derive(GraphState, Clone, Default)] struct Chat { a: u32 }";
        assert_eq!(missing(plain, "Chat"), Some(BOTH));
        let one = "#[derive(GraphState, Clone, serde::Serialize)] struct Chat { a: u32 }";
        assert_eq!(missing(one, "Chat"), Some(Missing { serialize: false, deserialize: true }));
        let nested = "mod m { fn f() { #[derive(Clone, GraphState)] struct Chat { a: u32 } } }";
        assert_eq!(missing(nested, "Chat"), Some(BOTH));
    }

    #[test]
    fn derives_under_any_path_or_attribute_count() {
        for source in [
            "#[derive(GraphState, Clone, serde::Serialize, serde::Deserialize)] struct Chat { a: u32 }",
            "use serde::*; #[derive(Serialize, Deserialize)] #[derive(GraphState)] struct Chat { a: u32 }",
            "#[derive(GraphState)] #[derive(::serde::Serialize)] #[cfg_attr(all(), derive(Deserialize))] struct Chat { a: u32 }",
            "#[derive(GraphState, Serialize)] struct Chat { a: u32 } impl<'de> serde::Deserialize<'de> for Chat {}",
        ] {
            assert_eq!(missing(source, "Chat"), None, "{source}");
        }
    }

    #[test]
    fn says_nothing_when_unsure() {
        for source in [
            // Not Rust, or no such struct, or two of them.
            "struct {",
            "#[derive(GraphState)] struct Other { a: u32 }",
            "#[derive(Clone)] struct Chat { a: u32 }",
            "mod a { #[derive(GraphState)] struct Chat {} } mod b { #[derive(GraphState)] struct Chat {} }",
            // An attribute macro or a derive macro might add the impls, an item macro write them.
            "#[serde_with::serde_as] #[derive(GraphState)] struct Chat { a: u32 }",
            "#[derive(GraphState, MySerde)] struct Chat { a: u32 }",
            "#[derive(GraphState)] struct Chat { a: u32 } impl_serde!(Chat);",
            "#[cfg_attr(test, my_attr)] #[derive(GraphState)] struct Chat { a: u32 }",
        ] {
            assert_eq!(missing(source, "Chat"), None, "{source}");
        }
    }
}
