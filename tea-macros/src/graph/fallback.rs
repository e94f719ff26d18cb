//! What a graph that failed its checks expands to (thiserror's `fallback.rs`): the errors, and
//! everything the graph would have declared, so that the user's code using it reports nothing
//! more.
//!
//! That is the graph type with `NAME`, `MERMAID`/`DOT`, `builder()` and its typed gotos, the node
//! enum with `ALL` and `name()`, and a `Graph` impl that compiles whatever the problems (never
//! run: the build fails). The node functions and guards are still type-checked, except names
//! already reported as unknown nodes.

use super::expand::{async_runner, at, node_enum_ident, span_of_path, typed_routes};
use super::parse::{path_string, GraphDef, Stmt};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::Ident;

/// What a graph that failed its checks expands to: the errors, and everything the graph would
/// have declared, so that code using it does not cascade into more errors — the graph type with
/// `NAME`, `MERMAID`, `DOT` and `builder()`, the node enum with its names, and a `Graph`
/// implementation that compiles whatever the graph's problems (it never runs: the build fails).
/// Calls to the node functions and guards are type-checked like the real expansion's, so that a
/// missing or ill-typed one is reported in the same build as the graph's own problems — except
/// for the names already reported as unknown nodes (`unknown`), whose missing function would
/// only say the same thing again.
pub fn fallback(def: &GraphDef, error: Option<syn::Error>, unknown: &[String]) -> TokenStream {
    const RESERVED: &[&str] =
        &["start", "end", "parallel", "interrupt", "interrupt_before", "interrupt_after", "interruptible", "subgraph"];
    let GraphDef { attrs, vis, name, state, .. } = def;
    let node_enum = node_enum_ident(name);
    let name_str = name.to_string();
    // Inside a `const` item, `compile_error!` does not stop rustc from resolving the rest.
    let error = error.map(|e| {
        let error = e.into_compile_error();
        quote!(const _: () = { #error };)
    });

    let mut nodes: Vec<&Ident> = Vec::new();
    let mut without_function: Vec<&Ident> = Vec::new();
    let mut routers: Vec<&Ident> = Vec::new();
    let mut interruptible: Vec<&Ident> = Vec::new();
    let mut asynchronous: Vec<&Ident> = Vec::new();
    let mut guards: Vec<&syn::Path> = Vec::new();
    let mut can_pause = false;
    for stmt in &def.stmts {
        match stmt {
            Stmt::Edge(edge) => {
                nodes.extend([&edge.from, &edge.to]);
                guards.extend(edge.guard.as_ref().map(|g| &g.path));
            }
            Stmt::Router { from, targets } => {
                routers.push(from);
                nodes.extend(std::iter::once(from).chain(targets));
            }
            Stmt::Parallel { source, heads, join, each, .. } => {
                if *each {
                    routers.push(source);
                }
                nodes.extend(std::iter::once(source).chain(heads).chain([join]))
            }
            Stmt::Interrupt { node, .. } => {
                nodes.push(node);
                without_function.push(node);
                can_pause = true;
            }
            Stmt::Subgraph(sub) => {
                nodes.push(&sub.node);
                without_function.push(&sub.node);
                nodes.extend(&sub.jumps);
            }
            Stmt::Interruptible { nodes: listed } => {
                interruptible.extend(listed);
                can_pause = true;
            }
            Stmt::Async { nodes: listed } => asynchronous.extend(listed),
            Stmt::Breakpoint { .. } => can_pause = true,
            // Policies and the context change nothing the fallback declares.
            Stmt::Policy(_) | Stmt::Context(_) => {}
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    nodes.retain(|n| !RESERVED.contains(&n.to_string().as_str()) && seen.insert(n.to_string()));
    let mut variant_names = std::collections::BTreeSet::new();
    let (nodes, variants): (Vec<&Ident>, Vec<Ident>) = nodes
        .iter()
        .map(|n| (*n, Ident::new(&super::check::upper_camel(&n.to_string()), n.span())))
        .filter(|(_, v)| variant_names.insert(v.to_string()))
        .unzip();
    let node_names: Vec<String> = nodes.iter().map(|n| syn::ext::IdentExt::unraw(*n).to_string()).collect();
    let mut seen_guards = std::collections::BTreeSet::new();
    let guards: Vec<&syn::Path> = guards.into_iter().filter(|g| seen_guards.insert(path_string(g))).collect();
    let checked: Vec<&&Ident> =
        nodes.iter().filter(|n| !without_function.contains(n) && !unknown.contains(&n.to_string())).collect();

    let enum_item = quote_spanned! {name.span()=>
        #[allow(dead_code)]
        #[derive(
            ::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::cmp::PartialEq,
            ::core::cmp::Eq, ::core::hash::Hash, ::core::cmp::PartialOrd, ::core::cmp::Ord
        )]
        #vis enum #node_enum { #(#variants,)* }
    };
    let names = quote! {
        #[automatically_derived]
        impl #node_enum {
            /// Every node, in order of first appearance in the graph.
            pub const ALL: &'static [#node_enum] = &[#(#node_enum::#variants),*];

            /// The node's name as written in the graph.
            pub const fn name(self) -> &'static str {
                match self {
                    #(#node_enum::#variants => #node_names,)*
                }
            }
        }

        #[automatically_derived]
        impl ::core::fmt::Display for #node_enum {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
    let drawings = quote! {
        #[doc(hidden)]
        pub const __TEA_MERMAID: &'static str = "";
        #[doc(hidden)]
        pub const __TEA_DOT: &'static str = "";
        /// Not drawn: the graph does not compile.
        pub const MERMAID: &'static str = "flowchart TD\n";
        /// Not drawn: the graph does not compile.
        pub const DOT: &'static str = ::core::concat!("digraph ", #name_str, " {\n}\n");
    };

    // Without a state type (`Flow { … }` with no `for`), only the names and the functions.
    if matches!(state, syn::Type::Infer(_)) {
        return quote! {
            #error
            #(#attrs)*
            #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
            #vis struct #name;
            #enum_item
            #[allow(dead_code, clippy::all)]
            const _: () = {
                #names
                #[automatically_derived]
                impl #name {
                    /// The graph's name.
                    pub const NAME: &'static str = #name_str;
                    #drawings
                }
                fn __tea_referenced_functions() {
                    #( let _ = &#checked; )*
                    #( let _ = &#guards; )*
                }
            };
        };
    }

    let calls = checked.iter().map(|f| {
        if asynchronous.contains(f) {
            let (runner, args) = async_runner(routers.contains(f), interruptible.contains(f));
            return quote_spanned! {at(f.span())=>
                let _ = ::tea::__private::#runner::<#state, #node_enum, _, _, _>(&#f, #args);
            };
        }
        let runner = match (routers.contains(f), interruptible.contains(f)) {
            (true, true) => quote!(run_interruptible_router),
            (false, true) => quote!(run_interruptible),
            (true, false) => quote!(run_router),
            (false, false) => quote!(run_node),
        };
        let args = if interruptible.contains(f) {
            quote!(__tea_state, __tea_ctx, __tea_hitl)
        } else {
            quote!(__tea_state, __tea_ctx)
        };
        quote_spanned! {at(f.span())=>
            let _ = ::tea::__private::#runner::<#state, #node_enum, _, _>(&#f, #args);
        }
    });
    let guard_calls = guards.iter().map(|g| {
        quote_spanned! {at(span_of_path(g))=>
            let _ = ::tea::__private::guard::<#state, _>(&#g, __tea_state);
        }
    });
    let pause_free = (!can_pause).then(|| {
        quote! {
            #[automatically_derived]
            impl ::tea::__private::PauseFree for #name {}
        }
    });
    let sync_graph = asynchronous.is_empty().then(|| {
        quote! {
            #[automatically_derived]
            impl ::tea::__private::SyncGraph for #name {}
        }
    });
    let failed = format!("graph `{name_str}` did not compile");
    let typed_routes = typed_routes(def, &node_enum);
    quote! {
        #error
        #(#attrs)*
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #name;
        #enum_item
        #[allow(dead_code, unreachable_code, unused_variables, clippy::all, unused_qualifications)]
        const _: () = {
            #names

            #[automatically_derived]
            impl ::tea::__private::NodeId for #node_enum {
                type State = #state;

                fn node_str(self) -> ::core::option::Option<&'static str> {
                    ::core::option::Option::Some(self.name())
                }
            }

            #[automatically_derived]
            impl #name {
                /// The graph's name.
                pub const NAME: &'static str = #name_str;
                #drawings

                /// Starts building an app that runs this graph.
                pub fn builder() -> ::tea::__private::Builder<#name> {
                    ::tea::__private::Builder::new(#name)
                }
            }

            #pause_free
            #sync_graph
            #typed_routes

            #[automatically_derived]
            impl ::tea::__private::Graph for #name {
                type State = #state;
                type Node = #node_enum;

                fn name(&self) -> &str {
                    #name_str
                }

                fn fingerprint(&self) -> u64 {
                    0
                }

                fn node_name(&self, node: #node_enum) -> ::tea::__private::NodeName {
                    ::tea::__private::NodeName::from_static(node.name())
                }

                fn node_named(&self, name: &str) -> ::core::option::Option<#node_enum> {
                    #node_enum::ALL.iter().copied().find(|node| node.name() == name)
                }

                fn start(&self, __tea_state: &#state) -> ::core::option::Option<::tea::__private::Goto<#node_enum>> {
                    ::core::option::Option::None
                }

                fn run(
                    &self,
                    __tea_node: #node_enum,
                    __tea_state: &#state,
                    __tea_ctx: &::tea::__private::Ctx<#state>,
                    __tea_hitl: &mut ::tea::__private::Hitl,
                ) -> ::core::result::Result<::tea::__private::NodeStep<#state, #node_enum>, ::tea::__private::BoxError> {
                    ::core::result::Result::Err(::core::convert::From::from(#failed))
                }

                fn route(&self, __tea_node: #node_enum, __tea_state: &#state) -> ::core::option::Option<::tea::__private::Goto<#node_enum>> {
                    ::core::option::Option::None
                }

                fn can_goto(&self, __tea_from: #node_enum, __tea_to: ::tea::__private::Goto<#node_enum>) -> bool {
                    false
                }
            }

            fn __tea_checked_functions(
                __tea_state: &#state,
                __tea_ctx: &::tea::__private::Ctx<#state>,
                __tea_hitl: &mut ::tea::__private::Hitl,
            ) {
                #(#calls)*
                #(#guard_calls)*
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse::GraphDef;
    use syn::parse_quote;

    /// The fallback expansion of `def`, as text with single spaces.
    fn expanded(def: &GraphDef, unknown: &[&str]) -> String {
        let error = syn::Error::new(def.name.span(), "the graph's problem");
        let unknown: Vec<String> = unknown.iter().map(|u| (*u).to_owned()).collect();
        super::fallback(def, Some(error), &unknown).to_string()
    }

    #[test]
    fn a_graph_with_errors_still_declares_what_it_would() {
        let def: GraphDef = parse_quote! {
            pub Flow for Review { start -> triage; triage -> publish | end; publish -> end; publish -> end; }
        };
        let out = expanded(&def, &[]);
        assert_eq!(out.matches("compile_error").count(), 1, "{out}");
        for declared in [
            "pub struct Flow",
            "pub enum FlowNode { Triage , Publish , }",
            "pub const ALL",
            "pub const fn name (self)",
            "pub const NAME",
            "pub const MERMAID",
            "pub const DOT",
            "pub fn builder ()",
            "impl :: tea :: __private :: Graph for Flow",
            "impl :: tea :: __private :: PauseFree for Flow",
            "pub const TRIAGE : FlowTriageTargets",
            "pub fn publish (self)",
        ] {
            assert!(out.contains(declared), "{declared:?} missing from {out}");
        }
        // The node functions are still type-checked.
        assert!(out.contains("run_router :: < Review , FlowNode , _ , _ > (& triage"), "{out}");
        assert!(out.contains("run_node :: < Review , FlowNode , _ , _ > (& publish"), "{out}");
    }

    #[test]
    fn an_unknown_node_s_function_is_not_looked_for() {
        let def: GraphDef = parse_quote! {
            Flow for S { start -> search; search -> bok; book -> end; interrupt_before search; }
        };
        let out = expanded(&def, &["bok"]);
        assert!(!out.contains("(& bok"), "{out}");
        assert!(out.contains("(& book"), "{out}");
        assert!(out.contains("Bok"), "the variant stays, for code that names it: {out}");
        assert!(!out.contains("PauseFree"), "a graph that pauses needs a checkpointer, as the real one: {out}");
    }
}
