//! Parsing `graph! { [pub] Name for State { statements } }` into the model below.
//!
//! The model keeps the user's identifiers (and so their spans) so that the checker and the
//! expansion can point every error at the token that caused it. A statement that does not parse
//! is recorded and skipped up to its `;`, so one typo does not hide the others.

use proc_macro2::TokenTree;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{bracketed, parenthesized, Attribute, Ident, LitInt, Path, Token, Type, Visibility};

mod kw {
    syn::custom_keyword!(parallel);
    syn::custom_keyword!(interrupt_before);
    syn::custom_keyword!(interrupt_after);
    syn::custom_keyword!(interruptible);
    syn::custom_keyword!(interrupt);
    syn::custom_keyword!(timeout);
}

/// A whole `graph!` invocation.
#[cfg_attr(test, derive(Debug))]
pub struct GraphDef {
    /// Attributes and doc comments, put on the generated graph type.
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub name: Ident,
    pub state: Type,
    pub stmts: Vec<Stmt>,
    /// Statements that did not parse; the rest of the graph is still checked.
    pub errors: Vec<syn::Error>,
}

#[cfg_attr(test, derive(Debug))]
pub enum Stmt {
    /// `a -> b;`, `a -> b if guard;`, `a -> b if !guard;`
    Edge(Edge),
    /// `a -> b | c | end;`
    Router { from: Ident, targets: Vec<Ident> },
    /// `parallel a => [x, y] -> join;`
    Parallel { source: Ident, heads: Vec<Ident>, bracket: proc_macro2::Span, join: Ident },
    /// `interrupt_before a, b;` / `interrupt_after a;`
    Breakpoint { when: When, nodes: Vec<Ident> },
    /// `interruptible a, b;`
    Interruptible { nodes: Vec<Ident> },
    /// `interrupt ask(question => answer, timeout = 3600);`
    Interrupt { node: Ident, payload: Ident, answer: Ident, timeout: Option<LitInt> },
}

#[cfg_attr(test, derive(Debug, PartialEq))]
pub struct Edge {
    pub from: Ident,
    pub to: Ident,
    pub guard: Option<GuardRef>,
}

/// The guard of an edge: a path to a `fn(&S) -> bool`, possibly negated.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub struct GuardRef {
    pub negated: bool,
    pub path: Path,
}

impl GuardRef {
    /// The guard as written, for diagnostics and drawings (`approved`, `!approved`).
    pub fn label(&self) -> String {
        let path = path_string(&self.path);
        if self.negated {
            format!("!{path}")
        } else {
            path
        }
    }
}

pub fn path_string(path: &Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let joined = segments.join("::");
    if path.leading_colon.is_some() {
        format!("::{joined}")
    } else {
        joined
    }
}

#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub enum When {
    Before,
    After,
}

impl Parse for GraphDef {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let name: Ident = input.parse()?;
        input.parse::<Token![for]>().map_err(|e| {
            syn::Error::new(e.span(), format!("expected `for` and the state type: `{name} for MyState {{ … }}`"))
        })?;
        let state: Type = input.parse()?;
        let body;
        syn::braced!(body in input);
        let mut stmts = Vec::new();
        let mut errors = Vec::new();
        while !body.is_empty() {
            match body.call(parse_stmt) {
                Ok(stmt) => stmts.push(stmt),
                Err(error) => {
                    errors.push(error);
                    skip_statement(&body);
                }
            }
        }
        Ok(GraphDef { attrs, vis, name, state, stmts, errors })
    }
}

/// Skips tokens up to and including the next `;` (or to the end of the body).
fn skip_statement(input: ParseStream) {
    while !input.is_empty() {
        if input.peek(Token![;]) {
            let _ = input.parse::<Token![;]>();
            return;
        }
        if input.parse::<TokenTree>().is_err() {
            return;
        }
    }
}

fn parse_stmt(input: ParseStream) -> syn::Result<Stmt> {
    // A keyword followed by `->` is a node of that name (refused later as reserved), so that the
    // error says so instead of failing to parse the keyword's statement.
    let keyword_stmt = !input.peek2(Token![->]);
    let lookahead = input.lookahead1();
    let stmt = if keyword_stmt && lookahead.peek(kw::parallel) {
        input.parse::<kw::parallel>()?;
        let source: Ident = input.call(node_name)?;
        input.parse::<Token![=>]>()?;
        let content;
        let bracket = bracketed!(content in input);
        let heads = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, node_name)?;
        input.parse::<Token![->]>()?;
        let join = input.call(node_name)?;
        Stmt::Parallel { source, heads: heads.into_iter().collect(), bracket: bracket.span.join(), join }
    } else if keyword_stmt && lookahead.peek(kw::interrupt_before) {
        input.parse::<kw::interrupt_before>()?;
        Stmt::Breakpoint { when: When::Before, nodes: node_list(input)? }
    } else if keyword_stmt && lookahead.peek(kw::interrupt_after) {
        input.parse::<kw::interrupt_after>()?;
        Stmt::Breakpoint { when: When::After, nodes: node_list(input)? }
    } else if keyword_stmt && lookahead.peek(kw::interruptible) {
        input.parse::<kw::interruptible>()?;
        Stmt::Interruptible { nodes: node_list(input)? }
    } else if keyword_stmt && lookahead.peek(kw::interrupt) {
        input.parse::<kw::interrupt>()?;
        let node = input.call(node_name)?;
        let args;
        parenthesized!(args in input);
        let payload = args.call(node_name)?;
        args.parse::<Token![=>]>()?;
        let answer = args.call(node_name)?;
        let mut timeout = None;
        if args.peek(Token![,]) {
            args.parse::<Token![,]>()?;
            if !args.is_empty() {
                args.parse::<kw::timeout>()?;
                args.parse::<Token![=]>()?;
                timeout = Some(args.parse::<LitInt>()?);
                if args.peek(Token![,]) {
                    args.parse::<Token![,]>()?;
                }
            }
        }
        if !args.is_empty() {
            return Err(args.error("expected `)`: an interrupt node takes `payload_field => answer_field` and optionally `, timeout = SECONDS`"));
        }
        Stmt::Interrupt { node, payload, answer, timeout }
    } else if lookahead.peek(Ident) {
        let from = input.call(node_name)?;
        if !input.peek(Token![->]) {
            return Err(input.error(format!(
                "expected `->` after node `{from}`, or a statement keyword: `parallel`, `interrupt_before`, `interrupt_after`, `interruptible`, `interrupt`"
            )));
        }
        input.parse::<Token![->]>()?;
        let to = input.call(node_name)?;
        if input.peek(Token![|]) {
            let mut targets = vec![to];
            while input.peek(Token![|]) {
                input.parse::<Token![|]>()?;
                targets.push(input.call(node_name)?);
            }
            Stmt::Router { from, targets }
        } else if input.peek(Token![if]) {
            input.parse::<Token![if]>()?;
            let negated = input.parse::<Option<Token![!]>>()?.is_some();
            let path = input.call(Path::parse_mod_style)?;
            Stmt::Edge(Edge { from, to, guard: Some(GuardRef { negated, path }) })
        } else {
            Stmt::Edge(Edge { from, to, guard: None })
        }
    } else {
        return Err(lookahead.error());
    };
    if !input.peek(Token![;]) {
        return Err(input.error("expected `;` at the end of the statement"));
    }
    input.parse::<Token![;]>()?;
    Ok(stmt)
}

fn node_list(input: ParseStream) -> syn::Result<Vec<Ident>> {
    let mut nodes = vec![input.call(node_name)?];
    while input.peek(Token![,]) {
        input.parse::<Token![,]>()?;
        nodes.push(input.call(node_name)?);
    }
    Ok(nodes)
}

/// A node name.
fn node_name(input: ParseStream) -> syn::Result<Ident> {
    input.parse::<Ident>().map_err(|e| syn::Error::new(e.span(), "expected a node name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    #[test]
    fn parses_every_statement_form() {
        let def: GraphDef = parse_quote! {
            /// Docs.
            pub Flow for State {
                start -> a;
                a -> b if ok;
                a -> c if !ok;
                b -> c | end;
                parallel c => [x, y] -> j;
                j -> end;
                interrupt_before a, b;
                interrupt_after c;
                interruptible x;
                interrupt ask(q => ans, timeout = 5);
            }
        };
        assert!(def.errors.is_empty());
        assert_eq!(def.name, "Flow");
        assert_eq!(def.stmts.len(), 10);
        match &def.stmts[2] {
            Stmt::Edge(Edge { guard: Some(g), .. }) => assert_eq!(g.label(), "!ok"),
            other => panic!("expected a guarded edge, got {other:?}"),
        }
        match &def.stmts[3] {
            Stmt::Router { targets, .. } => assert_eq!(targets.len(), 2),
            other => panic!("expected a router, got {other:?}"),
        }
        match &def.stmts[9] {
            Stmt::Interrupt { timeout: Some(t), .. } => assert_eq!(t.base10_digits(), "5"),
            other => panic!("expected an interrupt node, got {other:?}"),
        }
    }

    #[test]
    fn a_bad_statement_is_recorded_and_the_rest_still_parses() {
        let def: GraphDef = parse_quote! {
            Flow for State {
                start -> a;
                a => b;
                frobnicate x;
                a -> end;
            }
        };
        assert_eq!(def.errors.len(), 2);
        assert_eq!(def.stmts.len(), 2);
    }
}
