//! Parsing `graph! { [pub] Name for State { statements } }` into the model below.
//!
//! The model keeps the user's identifiers (and so their spans) so that the checker and the
//! expansion can point every error at the token that caused it. A statement that does not parse
//! is recorded and skipped up to its `;`, so one typo does not hide the others; a statement that
//! only lacks its `;` is kept, and the error put where the `;` belongs.

use proc_macro2::{Span, TokenTree};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{bracketed, parenthesized, Attribute, Ident, LitInt, Path, Token, Type, Visibility};
use tea_check::suggest;

mod kw {
    syn::custom_keyword!(parallel);
    syn::custom_keyword!(interrupt_before);
    syn::custom_keyword!(interrupt_after);
    syn::custom_keyword!(interruptible);
    syn::custom_keyword!(interrupt);
    syn::custom_keyword!(timeout);
    syn::custom_keyword!(subgraph);
    syn::custom_keyword!(parent);
    syn::custom_keyword!(retry);
    syn::custom_keyword!(cache);
    syn::custom_keyword!(context);
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
    /// Syntax errors; the rest of the graph is still checked.
    pub errors: Vec<syn::Error>,
    /// Whether a statement was skipped because it did not parse: the graph's shape is then
    /// unknown, so the checks of its paths (reachability, ways to `end`) would only mislead.
    pub incomplete: bool,
}

#[cfg_attr(test, derive(Debug))]
pub enum Stmt {
    /// `a -> b;`, `a -> b if guard;`, `a -> b if !guard;`
    Edge(Edge),
    /// `a -> b | c | end;`
    Router { from: Ident, targets: Vec<Ident> },
    /// `parallel a => [x, y] -> join;`, or `parallel a => x* -> join;` (`each`: `a` sends `x`
    /// once per item, see `Command::send`)
    Parallel { source: Ident, heads: Vec<Ident>, bracket: proc_macro2::Span, join: Ident, each: bool },
    /// `interrupt_before a, b;` / `interrupt_after a;`
    Breakpoint { when: When, nodes: Vec<Ident> },
    /// `interruptible a, b;`
    Interruptible { nodes: Vec<Ident> },
    /// `async a, b;`
    Async { nodes: Vec<Ident> },
    /// `interrupt ask(question => answer, timeout = 3600);`
    Interrupt { node: Ident, payload: Ident, answer: Ident, timeout: Option<LitInt> },
    /// `subgraph research = Researcher;` or `subgraph research = Researcher(to_child => from_child);`,
    /// either with `, parent -> a | b` (where the child may route this graph)
    Subgraph(SubgraphDef),
    /// `retry fetch(attempts = 3, backoff = 200ms, …);`, `timeout fetch(5s);`,
    /// `cache fetch(ttl = 60s, reads = [query], store);`
    Policy(PolicyDef),
    /// `context Settings;`: the type of the run context the graph's nodes read.
    Context(Type),
}

/// A node's policy statement, its settings read and checked as they parse.
#[cfg_attr(test, derive(Debug))]
pub struct PolicyDef {
    pub node: Ident,
    /// The statement's keyword, for errors (`retry`, `timeout`, `cache`).
    pub keyword: &'static str,
    pub setting: Setting,
}

/// What a policy statement sets.
#[cfg_attr(test, derive(Debug))]
pub enum Setting {
    Retry {
        attempts: u32,
        backoff_ms: Option<u64>,
        max_backoff_ms: Option<u64>,
        factor: Option<f64>,
        jitter: Option<f64>,
        /// `failures` (default), `errors`, `timeouts`.
        on: Option<Ident>,
    },
    Timeout {
        ms: u64,
    },
    Cache {
        ttl_ms: Option<u64>,
        reads: Vec<Ident>,
        store: bool,
    },
}

/// A subgraph node: a node of the graph that runs a whole child graph.
#[cfg_attr(test, derive(Debug))]
pub struct SubgraphDef {
    pub node: Ident,
    /// The child graph's type (a `graph!` type).
    pub child: Path,
    /// `(input, output)`: `fn(&State) -> ChildState` and `fn(&State, ChildState) -> StateUpdate`;
    /// `None` when the child has the parent's state.
    pub mapping: Option<(Path, Path)>,
    /// `, parent -> a | b`: the nodes of this graph the child may route it to with
    /// `Command::parent` (empty: not declared).
    pub jumps: Vec<Ident>,
    /// The error of a `, …` clause that does not read as `parent -> a | b`: reported, and the
    /// rest of the statement (the node and its child) kept, so the node is still a subgraph node.
    pub bad_clause: Option<syn::Error>,
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
        let mut errors = Vec::new();
        let state: Type = if input.peek(Token![for]) {
            input.parse::<Token![for]>()?;
            input.parse()?
        } else {
            // Report and go on, so the statements are still checked and the graph's names
            // still declared.
            errors.push(syn::Error::new(
                input.span(),
                format!("expected `for` and the state type: `{name} for MyState {{ … }}`"),
            ));
            if input.peek(syn::token::Brace) {
                Type::Infer(syn::TypeInfer { underscore_token: Token![_](input.span()) })
            } else {
                input.parse()?
            }
        };
        let body;
        syn::braced!(body in input);
        let mut stmts = Vec::new();
        let mut incomplete = false;
        while !body.is_empty() {
            match body.call(parse_stmt) {
                Ok((mut stmt, last)) => {
                    if let Stmt::Subgraph(SubgraphDef { bad_clause: bad @ Some(_), .. }) = &mut stmt {
                        // The statement stands without its `parent ->` list: the paths are not
                        // the user's.
                        errors.extend(bad.take());
                        incomplete = true;
                    }
                    stmts.push(stmt);
                    if body.peek(Token![;]) {
                        body.parse::<Token![;]>()?;
                    } else if body.is_empty() || starts_statement(&body) {
                        // Only the `;` is missing: say so where it belongs and read on.
                        errors.push(syn::Error::new(last, "expected `;` at the end of this statement"));
                    } else {
                        errors.push(body.error("expected `;` at the end of the statement"));
                        skip_statement(&body);
                    }
                }
                Err(error) => {
                    errors.push(error);
                    incomplete = true;
                    skip_statement(&body);
                }
            }
        }
        Ok(GraphDef { attrs, vis, name, state, stmts, errors, incomplete })
    }
}

/// The statement keywords, in the order the errors list them.
/// The most runs `retry node(attempts = N)` may ask for: tea-runtime's
/// `RetryPolicy::MAX_ATTEMPTS` (1 000 retries), which the engine never exceeds.
const MAX_ATTEMPTS: u32 = 1_001;

const STATEMENT_KEYWORDS: &[&str] = &[
    "parallel",
    "interrupt_before",
    "interrupt_after",
    "interruptible",
    "interrupt",
    "subgraph",
    "async",
    "retry",
    "timeout",
    "cache",
    "context",
];

/// Whether the next tokens begin a statement: `node ->`, or a keyword followed by a name.
fn starts_statement(input: ParseStream) -> bool {
    if input.peek(Ident) && input.peek2(Token![->]) {
        return true;
    }
    (input.peek(kw::parallel)
        || input.peek(kw::interrupt_before)
        || input.peek(kw::interrupt_after)
        || input.peek(kw::interruptible)
        || input.peek(kw::interrupt)
        || input.peek(kw::subgraph)
        || input.peek(kw::retry)
        || input.peek(kw::timeout)
        || input.peek(kw::cache)
        || input.peek(kw::context)
        || input.peek(Token![async]))
        && input.peek2(Ident)
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

/// One statement without its `;`, and the span of its last token (where a missing `;` belongs).
fn parse_stmt(input: ParseStream) -> syn::Result<(Stmt, Span)> {
    // A keyword followed by `->` is a node of that name (refused later as reserved), so that the
    // error says so instead of failing to parse the keyword's statement.
    let keyword_stmt = !input.peek2(Token![->]);
    let lookahead = input.lookahead1();
    let stmt = if keyword_stmt && lookahead.peek(kw::parallel) {
        input.parse::<kw::parallel>()?;
        let source: Ident = input.call(node_name)?;
        input.parse::<Token![=>]>()?;
        let (heads, bracket, each) = if input.peek(Ident) {
            // `parallel plan => worker* -> join;`: one target, run once per send.
            let target = input.call(node_name)?;
            if !input.peek(Token![*]) {
                return Err(input.error(format!(
                    "expected `*` after `{target}` (the node sends `{target}` once per item: `{target}*`), or branches in brackets: `[{target}, …]`"
                )));
            }
            input.parse::<Token![*]>()?;
            let span = target.span();
            (vec![target], span, true)
        } else {
            let content;
            let bracket = bracketed!(content in input);
            let heads = Punctuated::<Ident, Token![,]>::parse_terminated_with(&content, node_name)?;
            (heads.into_iter().collect(), bracket.span.join(), false)
        };
        input.parse::<Token![->]>()?;
        let join = input.call(node_name)?;
        let last = join.span();
        (Stmt::Parallel { source, heads, bracket, join, each }, last)
    } else if keyword_stmt && lookahead.peek(kw::interrupt_before) {
        input.parse::<kw::interrupt_before>()?;
        let nodes = node_list(input)?;
        let last = last_span(&nodes);
        (Stmt::Breakpoint { when: When::Before, nodes }, last)
    } else if keyword_stmt && lookahead.peek(kw::interrupt_after) {
        input.parse::<kw::interrupt_after>()?;
        let nodes = node_list(input)?;
        let last = last_span(&nodes);
        (Stmt::Breakpoint { when: When::After, nodes }, last)
    } else if keyword_stmt && lookahead.peek(kw::interruptible) {
        input.parse::<kw::interruptible>()?;
        let nodes = node_list(input)?;
        let last = last_span(&nodes);
        (Stmt::Interruptible { nodes }, last)
    } else if lookahead.peek(Token![async]) {
        // `async` is a Rust keyword, never a node's name: no need to look for `->`.
        input.parse::<Token![async]>()?;
        let nodes = node_list(input)?;
        let last = last_span(&nodes);
        (Stmt::Async { nodes }, last)
    } else if keyword_stmt && lookahead.peek(kw::interrupt) {
        input.parse::<kw::interrupt>()?;
        let node = input.call(node_name)?;
        let args;
        let paren = parenthesized!(args in input);
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
        (Stmt::Interrupt { node, payload, answer, timeout }, paren.span.close())
    } else if keyword_stmt && lookahead.peek(kw::subgraph) {
        parse_subgraph(input)?
    } else if keyword_stmt && lookahead.peek(kw::retry) {
        input.parse::<kw::retry>()?;
        parse_policy(input, "retry")?
    } else if keyword_stmt && lookahead.peek(kw::timeout) {
        input.parse::<kw::timeout>()?;
        parse_policy(input, "timeout")?
    } else if keyword_stmt && lookahead.peek(kw::cache) {
        input.parse::<kw::cache>()?;
        parse_policy(input, "cache")?
    } else if keyword_stmt && lookahead.peek(kw::context) {
        let keyword = input.parse::<kw::context>()?;
        let ty: Type = input
            .parse()
            .map_err(|e| syn::Error::new(e.span(), "expected the run context's type: `context Settings;`"))?;
        let last = syn::spanned::Spanned::span(&ty);
        let _ = keyword;
        (Stmt::Context(ty), last)
    } else if lookahead.peek(Ident) {
        let from = input.call(node_name)?;
        if input.peek(Ident) {
            // `word name …`: a statement keyword that does not exist.
            let word = from.to_string();
            let hint = match suggest(&word, STATEMENT_KEYWORDS.iter().copied()) {
                Some(known) => format!("did you mean `{known}`? "),
                None => String::new(),
            };
            return Err(syn::Error::new(
                from.span(),
                format!(
                    "unknown statement `{word}`; {hint}a statement is an edge (`a -> b;`) or starts with one of \
                     `parallel`, `interrupt_before`, `interrupt_after`, `interruptible`, `interrupt`, `subgraph`, `async`, \
                     `retry`, `timeout`, `cache`, `context`"
                ),
            ));
        }
        if !input.peek(Token![->]) {
            return Err(input.error(format!(
                "expected `->` after node `{from}`, or a statement keyword: `parallel`, `interrupt_before`, `interrupt_after`, `interruptible`, `interrupt`, `subgraph`, `async`"
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
            let last = last_span(&targets);
            (Stmt::Router { from, targets }, last)
        } else if input.peek(Token![if]) {
            input.parse::<Token![if]>()?;
            let negated = input.parse::<Option<Token![!]>>()?.is_some();
            let path = input.call(Path::parse_mod_style)?;
            let last = path.segments.last().map_or_else(|| to.span(), |s| s.ident.span());
            (Stmt::Edge(Edge { from, to, guard: Some(GuardRef { negated, path }) }), last)
        } else {
            let last = to.span();
            (Stmt::Edge(Edge { from, to, guard: None }), last)
        }
    } else {
        return Err(lookahead.error());
    };
    Ok(stmt)
}

/// `subgraph node = Child;` / `subgraph node = Child(input => output);`, either followed by
/// `, parent -> a | b` (the nodes the child may route this graph to), after its keyword.
fn parse_subgraph(input: ParseStream) -> syn::Result<(Stmt, Span)> {
    input.parse::<kw::subgraph>()?;
    let node = input.call(node_name)?;
    if !input.peek(Token![=]) {
        return Err(input.error(format!(
            "expected `=` and the child graph: `subgraph {node} = ChildGraph;` or `subgraph {node} = ChildGraph(input => output);`"
        )));
    }
    input.parse::<Token![=]>()?;
    let child =
        input.call(Path::parse_mod_style).map_err(|e| syn::Error::new(e.span(), "expected the child graph's type"))?;
    let mut last = child.segments.last().map_or_else(|| node.span(), |s| s.ident.span());
    let mut mapping = None;
    if input.peek(syn::token::Paren) {
        let args;
        let paren = parenthesized!(args in input);
        let into = args.call(Path::parse_mod_style)?;
        args.parse::<Token![=>]>()?;
        let out = args.call(Path::parse_mod_style)?;
        if !args.is_empty() {
            return Err(args.error(
                "expected `)`: a subgraph with its own state takes `input => output`, two functions: \
                 `fn(&State) -> ChildState` and `fn(&State, ChildState) -> StateUpdate`",
            ));
        }
        mapping = Some((into, out));
        last = paren.span.close();
    }
    let mut jumps = Vec::new();
    let mut bad_clause = None;
    if input.peek(Token![,]) {
        input.parse::<Token![,]>()?;
        match parse_jumps(input, &node) {
            Ok(listed) => {
                last = last_span(&listed);
                jumps = listed;
            }
            Err(error) => {
                // Keep the subgraph node; skip the clause up to the statement's `;`.
                bad_clause = Some(error);
                while !input.is_empty() && !input.peek(Token![;]) {
                    input.parse::<TokenTree>()?;
                }
            }
        }
    }
    Ok((Stmt::Subgraph(SubgraphDef { node, child, mapping, jumps, bad_clause }), last))
}

/// `retry node(…)`, `timeout node(…)`, `cache node[(…)]`, after the keyword.
fn parse_policy(input: ParseStream, keyword: &'static str) -> syn::Result<(Stmt, Span)> {
    let node = input.call(node_name)?;
    let usage = match keyword {
        "retry" => "`retry node(attempts = 3, backoff = 200ms, max_backoff = 10s, factor = 2.0, jitter = 0.25, on = failures);` (all but `attempts` optional)",
        "timeout" => "`timeout node(30s);` (a duration: `500ms`, `30s`, `5m`, `1h`)",
        _ => "`cache node;` or `cache node(ttl = 10m, reads = [field, …], store);` (all optional)",
    };
    if !input.peek(syn::token::Paren) {
        if keyword == "cache" {
            let last = node.span();
            let setting = Setting::Cache { ttl_ms: None, reads: Vec::new(), store: false };
            return Ok((Stmt::Policy(PolicyDef { node, keyword, setting }), last));
        }
        return Err(input.error(format!("expected `(` after `{keyword} {node}`: {usage}")));
    }
    let args;
    let paren = parenthesized!(args in input);
    let setting = policy_setting(&args, keyword, &node, usage, paren.span.join());
    if setting.is_err() {
        // The settings' tokens are skipped, so that this error, not syn's "unexpected token"
        // for what is left inside the parentheses, is the one reported.
        while !args.is_empty() {
            args.parse::<TokenTree>()?;
        }
    }
    Ok((Stmt::Policy(PolicyDef { node, keyword, setting: setting? }), paren.span.close()))
}

/// The settings inside a policy statement's parentheses.
fn policy_setting(
    args: ParseStream,
    keyword: &'static str,
    node: &Ident,
    usage: &str,
    span: Span,
) -> syn::Result<Setting> {
    Ok(match keyword {
        "timeout" => {
            let ms = duration_ms(args, usage)?;
            if !args.is_empty() {
                return Err(args.error(format!("expected `)`: {usage}")));
            }
            if ms == 0 {
                return Err(syn::Error::new(span, "a timeout of zero would fail every run: give a positive duration"));
            }
            Setting::Timeout { ms }
        }
        "retry" => {
            let (mut attempts, mut backoff_ms, mut max_backoff_ms, mut factor, mut jitter, mut on) =
                (None, None, None, None, None, None);
            for_each_setting(args, usage, |name, args| {
                match name.to_string().as_str() {
                    "attempts" => {
                        let lit: LitInt = args.parse()?;
                        let n: u32 = lit.base10_parse()?;
                        if n == 0 {
                            return Err(syn::Error::new(lit.span(), "`attempts` counts the first run: at least 1"));
                        }
                        if n > MAX_ATTEMPTS {
                            return Err(syn::Error::new(
                                lit.span(),
                                format!("`attempts` is at most {MAX_ATTEMPTS} (1 000 retries; `RetryPolicy::MAX_ATTEMPTS`), not {n}"),
                            ));
                        }
                        attempts = Some(n);
                    }
                    "backoff" => backoff_ms = Some(duration_ms(args, usage)?),
                    "max_backoff" => max_backoff_ms = Some(duration_ms(args, usage)?),
                    "factor" => factor = Some(number(args, &name)?),
                    "jitter" => {
                        let value = number(args, &name)?;
                        if !(0.0..=1.0).contains(&value) {
                            return Err(syn::Error::new(
                                name.span(),
                                "`jitter` is a share of each wait: from 0.0 to 1.0",
                            ));
                        }
                        jitter = Some(value);
                    }
                    "on" => {
                        let which: Ident = args.parse()?;
                        if !["failures", "errors", "timeouts"].contains(&which.to_string().as_str()) {
                            return Err(syn::Error::new(
                                which.span(),
                                format!("unknown `on = {which}`: `failures` (errors, panics and timeouts; the default), `errors` (errors and timeouts), or `timeouts`"),
                            ));
                        }
                        on = Some(which);
                    }
                    other => {
                        return Err(unknown_setting(
                            &name,
                            other,
                            &["attempts", "backoff", "max_backoff", "factor", "jitter", "on"],
                            usage,
                        ))
                    }
                }
                Ok(())
            })?;
            let Some(attempts) = attempts else {
                return Err(syn::Error::new(span, format!("`retry {node}` needs `attempts = N`: {usage}")));
            };
            Setting::Retry { attempts, backoff_ms, max_backoff_ms, factor, jitter, on }
        }
        _ => {
            let (mut ttl_ms, mut reads, mut store) = (None, Vec::new(), false);
            for_each_setting(args, usage, |name, args| {
                match name.to_string().as_str() {
                    "ttl" => ttl_ms = Some(duration_ms(args, usage)?),
                    "reads" => {
                        let content;
                        bracketed!(content in args);
                        reads = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?.into_iter().collect();
                    }
                    "store" => store = true,
                    other => return Err(unknown_setting(&name, other, &["ttl", "reads", "store"], usage)),
                }
                Ok(())
            })?;
            Setting::Cache { ttl_ms, reads, store }
        }
    })
}

/// Reads `name = value, …` (or a bare `name`, for flags), handing each to `each` positioned
/// after its `=`.
fn for_each_setting(
    args: ParseStream,
    usage: &str,
    mut each: impl FnMut(Ident, ParseStream) -> syn::Result<()>,
) -> syn::Result<()> {
    while !args.is_empty() {
        let name: Ident =
            args.parse().map_err(|e| syn::Error::new(e.span(), format!("expected a setting: {usage}")))?;
        if args.peek(Token![=]) {
            args.parse::<Token![=]>()?;
        } else if name != "store" {
            return Err(syn::Error::new(name.span(), format!("expected `{name} = …`: {usage}")));
        }
        each(name, args)?;
        if args.is_empty() {
            break;
        }
        args.parse::<Token![,]>()?;
    }
    Ok(())
}

fn unknown_setting(name: &Ident, word: &str, known: &[&str], usage: &str) -> syn::Error {
    let hint = match suggest(word, known.iter().copied()) {
        Some(known) => format!("did you mean `{known}`? "),
        None => String::new(),
    };
    syn::Error::new(name.span(), format!("unknown setting `{word}`; {hint}{usage}"))
}

/// A number (`2`, `0.5`).
fn number(args: ParseStream, name: &Ident) -> syn::Result<f64> {
    let lit: syn::Lit = args.parse()?;
    match &lit {
        syn::Lit::Int(i) if i.suffix().is_empty() => i.base10_parse(),
        syn::Lit::Float(f) if f.suffix().is_empty() => f.base10_parse(),
        _ => Err(syn::Error::new(lit.span(), format!("`{name}` is a plain number, e.g. `2.0`"))),
    }
}

/// A duration literal (`500ms`, `30s`, `1.5s`, `5m`, `1h`) in milliseconds.
fn duration_ms(args: ParseStream, usage: &str) -> syn::Result<u64> {
    let lit: syn::Lit = args.parse().map_err(|e| syn::Error::new(e.span(), format!("expected a duration: {usage}")))?;
    let (value, suffix) = match &lit {
        syn::Lit::Int(i) => (i.base10_digits().parse::<f64>().unwrap_or(f64::NAN), i.suffix().to_owned()),
        syn::Lit::Float(f) => (f.base10_digits().parse::<f64>().unwrap_or(f64::NAN), f.suffix().to_owned()),
        _ => return Err(syn::Error::new(lit.span(), format!("expected a duration: {usage}"))),
    };
    let scale = match suffix.as_str() {
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        "" => {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`{}` needs a unit: `{}ms`, `{}s`, `{}m` or `{}h`",
                    lit_text(&lit),
                    lit_text(&lit),
                    lit_text(&lit),
                    lit_text(&lit),
                    lit_text(&lit)
                ),
            ))
        }
        other => return Err(syn::Error::new(lit.span(), format!("unknown unit `{other}`: use `ms`, `s`, `m` or `h`"))),
    };
    let ms = value * scale;
    if !ms.is_finite() || ms < 0.0 || ms > u64::MAX as f64 {
        return Err(syn::Error::new(lit.span(), "this duration does not fit"));
    }
    Ok(ms.round() as u64)
}

fn lit_text(lit: &syn::Lit) -> String {
    match lit {
        syn::Lit::Int(i) => i.base10_digits().to_owned(),
        syn::Lit::Float(f) => f.base10_digits().to_owned(),
        _ => String::new(),
    }
}

/// `parent -> a | b`, after a subgraph statement's `,`.
fn parse_jumps(input: ParseStream, node: &Ident) -> syn::Result<Vec<Ident>> {
    if !input.peek(kw::parent) || !input.peek2(Token![->]) {
        return Err(input.error(format!(
            "expected `parent -> node`: the nodes of this graph `{node}`'s child may route it to with \
             `Command::parent`, e.g. `subgraph {node} = Child, parent -> a | b;`"
        )));
    }
    input.parse::<kw::parent>()?;
    input.parse::<Token![->]>()?;
    let mut jumps = vec![input.call(node_name)?];
    while input.peek(Token![|]) {
        input.parse::<Token![|]>()?;
        jumps.push(input.call(node_name)?);
    }
    Ok(jumps)
}

fn last_span(idents: &[Ident]) -> Span {
    idents.last().map_or_else(Span::call_site, Ident::span)
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
                async a, x;
            }
        };
        assert!(def.errors.is_empty());
        assert_eq!(def.name, "Flow");
        assert_eq!(def.stmts.len(), 11);
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
        match &def.stmts[10] {
            Stmt::Async { nodes } => assert_eq!(nodes.len(), 2),
            other => panic!("expected an async statement, got {other:?}"),
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
        assert!(def.incomplete);
    }

    #[test]
    fn a_missing_semicolon_loses_no_statement() {
        let def: GraphDef = parse_quote! {
            Flow for State {
                start -> a
                a -> b if ok
                parallel b => [x] -> j
                j -> end
            }
        };
        assert_eq!(def.stmts.len(), 4);
        assert_eq!(def.errors.len(), 4);
        assert!(!def.incomplete);
        assert_eq!(def.errors[0].to_string(), "expected `;` at the end of this statement");
    }

    #[test]
    fn an_unknown_statement_is_named_with_a_suggestion() {
        let def: GraphDef = parse_quote! {
            Flow for State {
                interupt_before a;
                frobnicate a;
                asyn a;
                start -> a;
            }
        };
        let messages: Vec<String> = def.errors.iter().map(ToString::to_string).collect();
        assert!(messages[0].starts_with("unknown statement `interupt_before`; did you mean `interrupt_before`?"));
        assert!(messages[1].starts_with("unknown statement `frobnicate`; a statement is"));
        assert!(messages[2].starts_with("unknown statement `asyn`; did you mean `async`?"));
        assert_eq!(def.stmts.len(), 1);
    }

    #[test]
    fn policy_statements_read_and_each_mistake_is_reported_on_its_token() {
        let def: GraphDef = parse_quote! {
            Flow for State {
                start -> fetch;
                fetch -> end;
                retry fetch(attempts = 3, backoff = 1.5s, max_backoff = 1m, factor = 2, jitter = 0.1, on = errors);
                timeout fetch(250ms);
                cache fetch(ttl = 2h, reads = [a, b], store);
                context Settings;
                retry fetch(attempts = 0);
                retry fetch(backof = 1s);
                timeout fetch(30);
                timeout fetch(3 days);
                cache fetch(ttl = 5w);
                retry fetch(jitter = 0.5);
                retry fetch(attempts = 4294967295);
            }
        };
        match &def.stmts[2] {
            Stmt::Policy(PolicyDef {
                setting: Setting::Retry { attempts: 3, backoff_ms: Some(1500), max_backoff_ms: Some(60_000), .. },
                ..
            }) => {}
            other => panic!("expected a retry, got {other:?}"),
        }
        assert!(matches!(&def.stmts[3], Stmt::Policy(PolicyDef { setting: Setting::Timeout { ms: 250 }, .. })));
        match &def.stmts[4] {
            Stmt::Policy(PolicyDef {
                setting: Setting::Cache { ttl_ms: Some(7_200_000), reads, store: true }, ..
            }) => {
                assert_eq!(reads.len(), 2)
            }
            other => panic!("expected a cache, got {other:?}"),
        }
        assert!(matches!(&def.stmts[5], Stmt::Context(_)));
        let messages: Vec<String> = def.errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 7, "{messages:?}");
        assert!(messages[6].starts_with("`attempts` is at most 1001"), "{messages:?}");
        assert!(messages[0].starts_with("`attempts` counts the first run"), "{messages:?}");
        assert!(messages[1].starts_with("unknown setting `backof`; did you mean `backoff`?"), "{messages:?}");
        assert!(messages[2].starts_with("`30` needs a unit: `30ms`, `30s`"), "{messages:?}");
        assert!(messages[3].starts_with("`3` needs a unit"), "{messages:?}");
        assert!(messages[4].starts_with("unknown unit `w`"), "{messages:?}");
        assert!(messages[5].starts_with("`retry fetch` needs `attempts = N`"), "{messages:?}");
    }

    #[test]
    fn a_missing_for_is_reported_and_the_statements_still_read() {
        let def: GraphDef = parse_quote! {
            Flow State { start -> a; a -> end; }
        };
        assert_eq!(def.errors.len(), 1);
        assert_eq!(def.stmts.len(), 2);
        let def: GraphDef = parse_quote! {
            Flow { start -> a; }
        };
        assert_eq!(def.errors.len(), 1);
        assert_eq!(def.stmts.len(), 1);
    }
}
