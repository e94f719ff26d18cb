//! Generating the graph type, its node enum and its `Graph` implementation.
//!
//! Routing and dispatch become `match` arms over the node enum: no table, no string, no
//! allocation per step. Calls to user functions are spanned on the user's identifiers so that a
//! missing or ill-typed node or guard is reported there. Execution logic stays in the runtime.
//!
//! Besides the `Graph` impl: `MERMAID`/`DOT`, computed at compile time by `tea_check::draw`
//! (literals, or for a graph with subgraph nodes `Piece`s that `__private::draw` splices its
//! children's templates into, since the macro cannot see a child's nodes); the typed gotos (per
//! router a constant such as `Flow::TRIAGE`, whose type, declared inside the expansion's
//! `const _`, has one method per declared target); and the fingerprint of the graph's shape.
//! Nodes listed in an `async` statement get `is_async` and `run_async` arms, which call
//! `run_node_async` and its kin (the node's future boxed as a `NodeFuture`); their sync `run`
//! arm returns an error the sync driver never reaches, and a graph with any gets no
//! `impl SyncGraph`, so the blocking API on it does not compile. Async-ness is not part of the
//! fingerprint: making a node async does not orphan its checkpoints.

use super::check::{lower, Model, Node, NodeKind, Route, Routing, Target};
use super::parse::{path_string, GraphDef, Setting, Stmt};
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::Ident;
use tea_check::draw::{self, Format, Ids, Look, Part, Shape};

pub fn graph(def: &GraphDef, model: &Model) -> TokenStream {
    let GraphDef { attrs, vis, name, state, .. } = def;
    let node_enum = node_enum_ident(name);
    let name_str = name.to_string();
    let variants: Vec<&Ident> = model.nodes.iter().map(|n| &n.variant).collect();
    let node_names: Vec<&str> = model.nodes.iter().map(|n| n.name.as_str()).collect();
    let variant_docs = node_names.iter().map(|n| format!("Node `{n}`."));
    let enum_doc = format!("The nodes of [`{name_str}`], for `Command::goto` and for matching on events.");

    // Declarations naming the state carry its span, so that visibility errors (a `pub` graph over
    // a private state) point at the state type.
    let state_span = at(syn::spanned::Spanned::span(state));
    let state_assoc = quote_spanned!(state_span=> type State = #state;);
    let run_arms = model.nodes.iter().map(|node| run_arm(node, state, &node_enum));
    let route_arms = model.nodes.iter().map(|node| {
        let variant = &node.variant;
        let body = match &node.routing {
            Routing::Edges { routes, .. } => routes_code(routes, model, state, &node_enum),
            Routing::Router(_) | Routing::Fork { .. } => quote!(::core::option::Option::None),
        };
        quote!(#node_enum::#variant => { #body })
    });
    let goto_arms = model.nodes.iter().filter_map(|node| {
        if let NodeKind::Subgraph(_) = node.kind {
            // Its child may route it (`Command::parent`, typed by this graph's node enum) to the
            // nodes its `parent -> …` lists, or to any of its nodes when it lists none.
            let variant = &node.variant;
            if node.jumps.is_empty() {
                return Some(
                    quote!(#node_enum::#variant => ::core::matches!(__tea_to, ::tea::__private::Goto::Node(_)),),
                );
            }
            let patterns = node.jumps.iter().map(|&t| goto_pattern(Target::Node(t), model, &node_enum));
            return Some(quote!(#node_enum::#variant => ::core::matches!(__tea_to, #(#patterns)|*),));
        }
        let Routing::Router(targets) = &node.routing else {
            return None;
        };
        let variant = &node.variant;
        let patterns = targets.iter().map(|t| goto_pattern(*t, model, &node_enum));
        Some(quote!(#node_enum::#variant => ::core::matches!(__tea_to, #(#patterns)|*),))
    });
    let fork_arms = model.nodes.iter().filter_map(|node| {
        let Routing::Fork { heads, join, .. } = &node.routing else {
            return None;
        };
        let variant = &node.variant;
        let heads = heads.iter().map(|&h| &model.nodes[h].variant);
        let join = &model.nodes[*join].variant;
        Some(quote! {
            #node_enum::#variant => ::core::option::Option::Some(::tea::__private::Fork {
                heads: &[#(#node_enum::#heads),*],
                join: #node_enum::#join,
            }),
        })
    });
    let start_code = routes_code(&model.start, model, state, &node_enum);
    let senders: Vec<&Ident> = model
        .nodes
        .iter()
        .filter(|n| matches!(n.routing, Routing::Fork { each: true, .. }))
        .map(|n| &n.variant)
        .collect();
    let sends = (!senders.is_empty()).then(|| {
        quote! {
            fn sends(&self, node: #node_enum) -> bool {
                ::core::matches!(node, #(#node_enum::#senders)|*)
            }
        }
    });
    let before: Vec<&Ident> = model.nodes.iter().filter(|n| n.interrupt_before).map(|n| &n.variant).collect();
    let after: Vec<&Ident> = model.nodes.iter().filter(|n| n.interrupt_after).map(|n| &n.variant).collect();
    let timeouts: Vec<(&Ident, &syn::LitInt)> = model
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Interrupt { timeout: Some(timeout), .. } => Some((&n.variant, *timeout)),
            _ => None,
        })
        .collect();
    let answer_checks: Vec<TokenStream> = model
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Interrupt { answer, .. } => {
                let variant = &n.variant;
                // The setter's parameter tells the answer's type; the closure is never called.
                let field = quote_spanned! {at(answer.span())=>
                    |__tea_answer| { let _ = <#state as ::tea::__private::GraphState>::update().#answer(__tea_answer); }
                };
                Some(quote!(#node_enum::#variant => ::tea::__private::check_field_answer(__tea_answer, #field),))
            }
            NodeKind::Function | NodeKind::Subgraph(_) => None,
        })
        .collect();
    // Nodes whose next node does not depend on the state: one unguarded edge (or a branch head's
    // silent edge to its join).
    let fixed_arms: Vec<TokenStream> = model
        .nodes
        .iter()
        .filter_map(|n| match &n.routing {
            Routing::Edges { routes, .. } => match routes.first() {
                Some(Route { guard: None, to }) => {
                    let variant = &n.variant;
                    let to = goto_value(*to, model, &node_enum);
                    Some(quote!(#node_enum::#variant => ::core::option::Option::Some(#to),))
                }
                _ => None,
            },
            Routing::Router(_) | Routing::Fork { .. } => None,
        })
        .collect();
    let fixed_route = (!fixed_arms.is_empty()).then(|| {
        quote! {
            #[allow(unreachable_patterns)]
            fn fixed_route(&self, node: #node_enum) -> ::core::option::Option<::tea::__private::Goto<#node_enum>> {
                match node {
                    #(#fixed_arms)*
                    _ => ::core::option::Option::None,
                }
            }
        }
    });
    // Whether each join's function takes `&Ctx` (and so can read the branches' own states).
    let mut join_arms: Vec<TokenStream> = Vec::new();
    for n in &model.nodes {
        let Routing::Fork { join, .. } = &n.routing else { continue };
        let join = &model.nodes[*join];
        let variant = &join.variant;
        let function = join.ident;
        let reads = match (&join.kind, join.interruptible, join.is_async) {
            (NodeKind::Interrupt { .. } | NodeKind::Subgraph(_), _, _) => quote!(false),
            (NodeKind::Function, true, false) => quote_spanned! {at(function.span())=>
                ::tea::__private::interruptible_takes_ctx::<#state, _, _>(&#function)
            },
            (NodeKind::Function, false, false) => quote_spanned! {at(function.span())=>
                ::tea::__private::takes_ctx::<#state, _, _>(&#function)
            },
            (NodeKind::Function, true, true) => quote_spanned! {at(function.span())=>
                ::tea::__private::async_interruptible_takes_ctx::<#state, _, _>(&#function)
            },
            (NodeKind::Function, false, true) => quote_spanned! {at(function.span())=>
                ::tea::__private::async_takes_ctx::<#state, _, _>(&#function)
            },
        };
        join_arms.push(quote!(#node_enum::#variant => #reads,));
    }
    let reads_branches = (!join_arms.is_empty()).then(|| {
        quote! {
            #[allow(unreachable_patterns)]
            fn reads_branches(&self, __tea_join: #node_enum) -> bool {
                match __tea_join {
                    #(#join_arms)*
                    _ => true,
                }
            }
        }
    });
    let check_answer = (!answer_checks.is_empty()).then(|| {
        quote! {
            #[allow(unreachable_patterns)]
            fn check_answer(
                &self,
                __tea_node: #node_enum,
                __tea_answer: &::tea::__private::serde_json::Value,
            ) -> ::core::result::Result<(), (&'static str, ::tea::__private::String)> {
                match __tea_node {
                    #(#answer_checks)*
                    _ => ::core::result::Result::Ok(()),
                }
            }
        }
    });
    // Interrupt nodes have no function: the engine writes a pause at one with the step before
    // it, and its answer with the resume's claim (`Graph::asks_only`).
    let asking: Vec<&Ident> =
        model.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Interrupt { .. })).map(|n| &n.variant).collect();
    let asks_only = (!asking.is_empty()).then(|| {
        quote! {
            fn asks_only(&self, __tea_node: #node_enum) -> bool {
                ::core::matches!(__tea_node, #(#node_enum::#asking)|*)
            }
        }
    });
    let pause_timeout = (!timeouts.is_empty()).then(|| {
        let arms =
            timeouts.iter().map(|(variant, secs)| quote!(#node_enum::#variant => ::core::option::Option::Some(#secs),));
        quote! {
            #[allow(unreachable_patterns)]
            fn pause_timeout(&self, node: #node_enum) -> ::core::option::Option<u64> {
                match node {
                    #(#arms)*
                    _ => ::core::option::Option::None,
                }
            }
        }
    });
    let policy_arms: Vec<TokenStream> = model.nodes.iter().filter_map(|n| policy_arm(n, &node_enum, state)).collect();
    let policies = (!policy_arms.is_empty()).then(|| {
        quote! {
            #[inline]
            #[allow(unreachable_patterns)]
            fn policy(&self, node: #node_enum) -> ::core::option::Option<&::tea::__private::NodePolicy> {
                match node {
                    #(#policy_arms)*
                    _ => ::core::option::Option::None,
                }
            }
        }
    });
    let context_type = model.context.map(|ty| {
        quote! {
            fn context_type(&self) -> ::core::option::Option<(::core::any::TypeId, &'static str)> {
                ::core::option::Option::Some((::core::any::TypeId::of::<#ty>(), ::core::any::type_name::<#ty>()))
            }
        }
    });
    let interrupt_before = (!before.is_empty()).then(|| {
        quote! {
            fn interrupt_before(&self, node: #node_enum) -> bool {
                ::core::matches!(node, #(#node_enum::#before)|*)
            }
        }
    });
    let interrupt_after = (!after.is_empty()).then(|| {
        quote! {
            fn interrupt_after(&self, node: #node_enum) -> bool {
                ::core::matches!(node, #(#node_enum::#after)|*)
            }
        }
    });
    let fingerprint = fingerprint_text(def, model);
    let mermaid = drawing(def, model, Format::Mermaid);
    let dot = drawing(def, model, Format::Dot);
    // A graph with subgraph nodes can pause if a child can: the bounds on its children decide
    // (`for<'a>` keeps a bound on a concrete type from being checked where it is written, so
    // the impl simply does not apply when a child can pause).
    let children: Vec<&syn::Path> = model
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Subgraph(sub) => Some(&sub.child),
            _ => None,
        })
        .collect();
    // Async nodes: `is_async` names them, `run_async` awaits their functions, and only a graph
    // without any gets `SyncGraph` (so the blocking API on it does not compile). Subgraph nodes
    // have both forms: the async driver awaits their `run_async` (`awaits`), which runs the child
    // on the async driver too, and the blocking API their `run`.
    let async_nodes: Vec<&Node> = model.nodes.iter().filter(|n| n.is_async).collect();
    let subgraph_nodes: Vec<&Node> = model.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Subgraph(_))).collect();
    let async_hooks = (!async_nodes.is_empty() || !subgraph_nodes.is_empty()).then(|| {
        let variants: Vec<&Ident> = async_nodes.iter().map(|n| &n.variant).collect();
        let arms = async_nodes
            .iter()
            .map(|node| run_async_arm(node, state, &node_enum))
            .chain(subgraph_nodes.iter().map(|node| subgraph_arm(node, state, &node_enum, true)));
        let is_async = (!variants.is_empty()).then(|| {
            quote! {
                fn is_async(&self, __tea_node: #node_enum) -> bool {
                    ::core::matches!(__tea_node, #(#node_enum::#variants)|*)
                }
            }
        });
        let awaits = (!subgraph_nodes.is_empty()).then(|| {
            let both = variants.iter().copied().chain(subgraph_nodes.iter().map(|n| &n.variant));
            quote! {
                fn awaits(&self, __tea_node: #node_enum) -> bool {
                    ::core::matches!(__tea_node, #(#node_enum::#both)|*)
                }
            }
        });
        quote! {
            #is_async
            #awaits

            #[allow(unreachable_patterns, unused_variables)]
            fn run_async<'__tea>(
                &'__tea self,
                __tea_node: #node_enum,
                __tea_state: &'__tea #state,
                __tea_ctx: &'__tea ::tea::__private::Ctx<#state>,
                __tea_hitl: &'__tea mut ::tea::__private::Hitl,
            ) -> ::tea::__private::NodeFuture<'__tea, #state, #node_enum> {
                match __tea_node {
                    #(#arms)*
                    _ => ::tea::__private::ready_step(
                        <Self as ::tea::__private::Graph>::run(self, __tea_node, __tea_state, __tea_ctx, __tea_hitl),
                    ),
                }
            }
        }
    });
    let typed_routes = typed_routes(def, &node_enum);
    let pause_free = (!model.can_pause).then(|| {
        let bounds = children
            .iter()
            .map(|child| quote_spanned!(at(span_of_path(child))=> for<'__tea> #child: ::tea::__private::PauseFree));
        quote! {
            #[automatically_derived]
            impl ::tea::__private::PauseFree for #name where #(#bounds,)* {}
        }
    });
    let sync_bounds = children
        .iter()
        .map(|child| quote_spanned!(at(span_of_path(child))=> for<'__tea> #child: ::tea::__private::SyncGraph));
    // Only a graph without async nodes (and whose children are sync) runs with the blocking API.
    let sync_graph = async_nodes.is_empty().then(|| {
        quote! {
            // Every node is sync (the `async` statement is what makes a graph async).
            #[automatically_derived]
            impl ::tea::__private::SyncGraph for #name where #(#sync_bounds,)* {}
        }
    });

    // The enum carries the graph name's span, so "no variant `Missing`" points at the graph.
    let enum_item = quote_spanned! {name.span()=>
        #[doc = #enum_doc]
        #[derive(
            ::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::cmp::PartialEq,
            ::core::cmp::Eq, ::core::hash::Hash, ::core::cmp::PartialOrd, ::core::cmp::Ord
        )]
        #vis enum #node_enum {
            #( #[doc = #variant_docs] #variants, )*
        }
    };
    quote! {
        #(#attrs)*
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #name;

        #enum_item

        #[allow(clippy::all, clippy::pedantic, unused_qualifications, non_local_definitions)]
        const _: () = {
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

            #[automatically_derived]
            impl ::tea::__private::NodeId for #node_enum {
                #state_assoc

                fn node_str(self) -> ::core::option::Option<&'static str> {
                    ::core::option::Option::Some(self.name())
                }

                fn from_node_str(name: &str) -> ::core::option::Option<Self> {
                    match name {
                        #(#node_names => ::core::option::Option::Some(#node_enum::#variants),)*
                        _ => ::core::option::Option::None,
                    }
                }
            }

            #[automatically_derived]
            impl #name {
                /// The graph's name.
                pub const NAME: &'static str = #name_str;
                #mermaid
                #dot

                /// Starts building an app that runs this graph.
                pub fn builder() -> ::tea::__private::Builder<#name> {
                    ::tea::__private::Builder::new(#name)
                }
            }

            #typed_routes

            #pause_free
            #sync_graph

            #[automatically_derived]
            impl ::tea::__private::Graph for #name {
                #state_assoc
                type Node = #node_enum;

                fn name(&self) -> &str {
                    #name_str
                }

                fn fingerprint(&self) -> u64 {
                    const FINGERPRINT: u64 = ::tea::__private::fingerprint(#fingerprint.as_bytes());
                    FINGERPRINT
                }

                #[inline]
                fn node_name(&self, node: #node_enum) -> ::tea::__private::NodeName {
                    ::tea::__private::NodeName::from_static(node.name())
                }

                fn node_named(&self, name: &str) -> ::core::option::Option<#node_enum> {
                    match name {
                        #(#node_names => ::core::option::Option::Some(#node_enum::#variants),)*
                        _ => ::core::option::Option::None,
                    }
                }

                #interrupt_before
                #interrupt_after
                #sends
                #pause_timeout
                #policies
                #context_type
                #check_answer
                #asks_only
                #fixed_route
                #reads_branches
                #async_hooks

                #[allow(unreachable_code)]
                fn start(&self, __tea_state: &#state) -> ::core::option::Option<::tea::__private::Goto<#node_enum>> {
                    #start_code
                }

                #[allow(unused_variables)]
                fn run(
                    &self,
                    __tea_node: #node_enum,
                    __tea_state: &#state,
                    __tea_ctx: &::tea::__private::Ctx<#state>,
                    __tea_hitl: &mut ::tea::__private::Hitl,
                ) -> ::core::result::Result<::tea::__private::NodeStep<#state, #node_enum>, ::tea::__private::BoxError> {
                    match __tea_node {
                        #(#run_arms)*
                    }
                }

                #[allow(unreachable_code, unused_variables)]
                fn route(&self, __tea_node: #node_enum, __tea_state: &#state) -> ::core::option::Option<::tea::__private::Goto<#node_enum>> {
                    match __tea_node {
                        #(#route_arms)*
                    }
                }

                #[allow(unreachable_patterns, unused_variables)]
                fn can_goto(&self, __tea_from: #node_enum, __tea_to: ::tea::__private::Goto<#node_enum>) -> bool {
                    match __tea_from {
                        #(#goto_arms)*
                        _ => false,
                    }
                }

                #[allow(unreachable_patterns, unused_variables)]
                fn fork(&self, node: #node_enum) -> ::core::option::Option<::tea::__private::Fork<'_, #node_enum>> {
                    match node {
                        #(#fork_arms)*
                        _ => ::core::option::Option::None,
                    }
                }
            }
        };
    }
}

/// Typed gotos: for each router (`triage -> publish | end;`) a constant on the graph type,
/// `Flow::TRIAGE`, whose methods are its declared targets — `Flow::TRIAGE.publish()` is
/// `Command::goto(FlowNode::Publish)`, `Flow::TRIAGE.end()` is `Command::end()` — so a goto to
/// a node the router does not declare does not compile: the method does not exist, and rustc
/// points at the router's statement ("method not found for this struct"). Each constant's type
/// is declared inside the expansion's `const _`, so the graph still adds two names only. A
/// router whose constant would collide with the graph type's own (`NAME`, `MERMAID`, `DOT`) or
/// with another router's gets none; `Command::goto` works for every router, checked at run time.
///
/// Made from the statements alone, so that the fallback expansion of a graph with errors
/// declares the same constants (code using them does not cascade into more errors).
pub(super) fn typed_routes(def: &GraphDef, node_enum: &Ident) -> TokenStream {
    const TAKEN: &[&str] = &["NAME", "MERMAID", "DOT"];
    const RESERVED: &[&str] =
        &["start", "parallel", "interrupt", "interrupt_before", "interrupt_after", "interruptible", "subgraph"];
    let GraphDef { vis, name, .. } = def;
    let mut consts: Vec<String> = Vec::new();
    let mut out = TokenStream::new();
    for stmt in &def.stmts {
        let Stmt::Router { from, targets } = stmt else { continue };
        let router = syn::ext::IdentExt::unraw(from).to_string();
        let constant = router.to_uppercase();
        if RESERVED.contains(&router.as_str())
            || router == "end"
            || TAKEN.contains(&constant.as_str())
            || constant.starts_with("__")
            || consts.contains(&constant)
        {
            continue;
        }
        consts.push(constant.clone());
        // Spanned on the router's name in its statement: `triage -> publish | end;`.
        let span = from.span();
        let constant = Ident::new(&constant, span);
        let ty = format_ident!("{}{}Targets", name, super::check::upper_camel(&from.to_string()), span = span);
        let mut listed: Vec<String> = Vec::new();
        let mut methods = Vec::new();
        for target in targets {
            let target_name = syn::ext::IdentExt::unraw(target).to_string();
            if RESERVED.contains(&target_name.as_str()) || listed.contains(&target_name) {
                continue;
            }
            let (doc, body) = if target_name == "end" {
                (String::from("Finish the run: `Command::end()`."), quote!(::tea::__private::Command::end()))
            } else {
                let variant = Ident::new(&super::check::upper_camel(&target.to_string()), target.span());
                (
                    format!("Go to `{target_name}` next: `Command::goto({node_enum}::{variant})`."),
                    quote!(::tea::__private::Command::goto(#node_enum::#variant)),
                )
            };
            listed.push(target_name);
            methods.push(quote! {
                #[doc = #doc]
                #[must_use]
                #vis fn #target(self) -> ::tea::__private::Command<#node_enum> {
                    #body
                }
            });
        }
        let declared = format!("{router} -> {};", listed.join(" | "));
        let type_doc = format!("The targets router `{router}` declares (`{declared}`), as methods.");
        let const_doc = format!(
            "Typed gotos of router `{router}` (`{declared}`): `{name}::{constant}.{}()` is a `Command` to that \
             target, and a node `{router}` does not declare has no method, so a goto to it does not compile.",
            listed.first().map_or("end", String::as_str)
        );
        // As visible as the graph: a private graph's typed gotos are private too (and may go
        // unused without a warning).
        out.extend(quote_spanned! {span=>
            #[doc = #type_doc]
            #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug)]
            #[allow(non_camel_case_types, dead_code)]
            #vis struct #ty;
        });
        out.extend(quote! {
            // The methods are named as the nodes are, whatever their case.
            #[automatically_derived]
            #[allow(non_snake_case, dead_code)]
            impl #ty {
                #(#methods)*
            }

            #[automatically_derived]
            #[allow(dead_code)]
            impl #name {
                #[doc = #const_doc]
                #vis const #constant: #ty = #ty;
            }
        });
    }
    out
}

pub(super) fn node_enum_ident(name: &Ident) -> Ident {
    format_ident!("{}Node", name, span = name.span())
}

/// The span of generated code that stands for a user's token: located at the token, resolved at
/// the macro's call site like the rest of the expansion.
pub(super) fn at(span: Span) -> Span {
    Span::call_site().located_at(span)
}

fn run_arm(node: &Node, state: &syn::Type, node_enum: &Ident) -> TokenStream {
    let variant = &node.variant;
    let function = node.ident;
    // A node that sends returns a `Command`, like a router.
    let router = matches!(node.routing, Routing::Router(_) | Routing::Fork { each: true, .. });
    if node.is_async {
        // The sync driver asks `is_async` first and never runs this arm; `run_async` calls the
        // function (and so type-checks it).
        let name = &node.name;
        return quote! {
            #node_enum::#variant => ::tea::__private::async_node_run_sync::<#state, #node_enum>(#name),
        };
    }
    let call = match (&node.kind, router, node.interruptible) {
        (NodeKind::Subgraph(_), _, _) => return subgraph_arm(node, state, node_enum, false),
        (NodeKind::Interrupt { payload, answer, .. }, _, _) => {
            // The payload is read and the answer written through the state's own field and
            // setter, spanned on the user's field names so a typo is reported there.
            let read = quote_spanned!(at(payload.span())=> &__tea_state.#payload);
            let write = quote_spanned! {at(answer.span())=>
                |__tea_answer| <#state as ::tea::__private::GraphState>::update().#answer(__tea_answer)
            };
            quote_spanned! {at(function.span())=>
                ::tea::__private::run_interrupt_node::<#state, #node_enum, _, _>(__tea_hitl, #read, #write)
            }
        }
        (NodeKind::Function, true, true) => quote_spanned! {at(function.span())=>
            ::tea::__private::run_interruptible_router::<#state, #node_enum, _, _>(&#function, __tea_state, __tea_ctx, __tea_hitl)
        },
        (NodeKind::Function, false, true) => quote_spanned! {at(function.span())=>
            ::tea::__private::run_interruptible::<#state, #node_enum, _, _>(&#function, __tea_state, __tea_ctx, __tea_hitl)
        },
        (NodeKind::Function, true, false) => quote_spanned! {at(function.span())=>
            ::tea::__private::run_router::<#state, #node_enum, _, _>(&#function, __tea_state, __tea_ctx)
        },
        (NodeKind::Function, false, false) => quote_spanned! {at(function.span())=>
            ::tea::__private::run_node::<#state, #node_enum, _, _>(&#function, __tea_state, __tea_ctx)
        },
    };
    quote!(#node_enum::#variant => #call,)
}

/// The `run` arm (`asynchronous`: the `run_async` arm) of a subgraph node: the runtime runs its
/// child on the blocking API (on the async driver).
fn subgraph_arm(node: &Node, state: &syn::Type, node_enum: &Ident, asynchronous: bool) -> TokenStream {
    let variant = &node.variant;
    let NodeKind::Subgraph(sub) = &node.kind else {
        return TokenStream::new();
    };
    let child = &sub.child;
    let child_span = at(span_of_path(child));
    let value = quote_spanned!(child_span=> <#child as ::core::default::Default>::default());
    let call = match &sub.mapping {
        // The child's state must be the parent's: a mismatch is reported on the child.
        None => {
            let runner = if asynchronous { quote!(run_subgraph_shared_async) } else { quote!(run_subgraph_shared) };
            quote_spanned! {child_span=>
                ::tea::__private::#runner::<#state, #node_enum, #child>(#value, __tea_state, __tea_ctx, __tea_hitl)
            }
        }
        // Each mapping function is checked against the two states where it is named.
        Some((input, output)) => {
            let input = quote_spanned! {at(span_of_path(input))=>
                ::tea::__private::subgraph_input::<#state, #child, _>(&#input)
            };
            let output = quote_spanned! {at(span_of_path(output))=>
                ::tea::__private::subgraph_output::<#state, #child, _>(&#output)
            };
            let runner = if asynchronous { quote!(run_subgraph_mapped_async) } else { quote!(run_subgraph_mapped) };
            quote_spanned! {child_span=>
                ::tea::__private::#runner::<#state, #node_enum, #child, _, _>(#value, #input, #output, __tea_state, __tea_ctx, __tea_hitl)
            }
        }
    };
    quote!(#node_enum::#variant => #call,)
}

/// The `run_async` arm of an async node: its function's future, awaited by a runtime helper.
fn run_async_arm(node: &Node, state: &syn::Type, node_enum: &Ident) -> TokenStream {
    let variant = &node.variant;
    let function = node.ident;
    let router = matches!(node.routing, Routing::Router(_) | Routing::Fork { each: true, .. });
    let (runner, args) = async_runner(router, node.interruptible);
    let call = quote_spanned! {at(function.span())=>
        ::tea::__private::#runner::<#state, #node_enum, _, _, _>(&#function, #args)
    };
    quote!(#node_enum::#variant => #call,)
}

/// The runtime helper that awaits an async node of this kind, and the arguments it takes.
pub(super) fn async_runner(router: bool, interruptible: bool) -> (Ident, TokenStream) {
    let name = match (router, interruptible) {
        (true, true) => "run_interruptible_router_async",
        (false, true) => "run_interruptible_async",
        (true, false) => "run_router_async",
        (false, false) => "run_node_async",
    };
    let args = if interruptible { quote!(__tea_state, __tea_ctx, __tea_hitl) } else { quote!(__tea_state, __tea_ctx) };
    (Ident::new(name, Span::call_site()), args)
}

/// Edges in order: the first whose guard holds wins; without an unguarded fallback, `None`.
fn routes_code(routes: &[Route], model: &Model, state: &syn::Type, node_enum: &Ident) -> TokenStream {
    let mut code = TokenStream::new();
    for route in routes {
        let to = goto_value(route.to, model, node_enum);
        match route.guard {
            Some(guard) => {
                let path = &guard.path;
                let call = quote_spanned! {at(span_of_path(path))=>
                    ::tea::__private::guard::<#state, _>(&#path, __tea_state)
                };
                let condition = if guard.negated { quote!(!#call) } else { call };
                code.extend(quote! {
                    if #condition {
                        return ::core::option::Option::Some(#to);
                    }
                });
            }
            None => {
                code.extend(quote!(return ::core::option::Option::Some(#to);));
                return code;
            }
        }
    }
    code.extend(quote!(::core::option::Option::None));
    code
}

pub(super) fn span_of_path(path: &syn::Path) -> Span {
    path.segments.last().map(|s| s.ident.span()).unwrap_or_else(Span::call_site)
}

fn goto_value(target: Target, model: &Model, node_enum: &Ident) -> TokenStream {
    match target {
        Target::End => quote!(::tea::__private::Goto::End),
        Target::Node(i) => {
            let variant = &model.nodes[i].variant;
            quote!(::tea::__private::Goto::Node(#node_enum::#variant))
        }
    }
}

fn goto_pattern(target: Target, model: &Model, node_enum: &Ident) -> TokenStream {
    goto_value(target, model, node_enum)
}

/// The canonical text of the graph's shape, hashed into its fingerprint.
fn fingerprint_text(def: &GraphDef, model: &Model) -> String {
    let mut text = format!("tea-graph-v1 {};", def.name);
    let route_text = |routes: &[Route]| -> String {
        routes
            .iter()
            .map(|r| {
                format!(
                    "{}{}",
                    target_name(r.to, model),
                    r.guard.map(|g| format!(" if {}", g.label())).unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    text.push_str(&format!("start->[{}];", route_text(&model.start)));
    for node in &model.nodes {
        text.push_str(&format!("node {}", node.name));
        if let NodeKind::Subgraph(sub) = &node.kind {
            text.push_str(&format!(" subgraph({}", path_string(&sub.child)));
            if let Some((input, output)) = &sub.mapping {
                text.push_str(&format!(":{}=>{}", path_string(input), path_string(output)));
            }
            text.push(')');
        }
        if let NodeKind::Interrupt { payload, answer, timeout } = &node.kind {
            text.push_str(&format!(" interrupt({payload}=>{answer}"));
            if let Some(timeout) = timeout {
                text.push_str(&format!(",timeout={}", timeout.base10_digits()));
            }
            text.push(')');
        }
        for (flag, word) in [
            (node.interruptible, " interruptible"),
            (node.interrupt_before, " before"),
            (node.interrupt_after, " after"),
        ] {
            if flag {
                text.push_str(word);
            }
        }
        match &node.routing {
            Routing::Edges { routes, .. } => text.push_str(&format!("->[{}];", route_text(routes))),
            Routing::Router(targets) => {
                let names: Vec<&str> = targets.iter().map(|t| target_name(*t, model)).collect();
                text.push_str(&format!("->|{}|;", names.join("|")));
            }
            Routing::Fork { heads, join, each } => {
                let names: Vec<&str> = heads.iter().map(|&h| model.nodes[h].name.as_str()).collect();
                let names: Vec<String> =
                    names.into_iter().map(|n| if *each { format!("{n}*") } else { n.to_owned() }).collect();
                text.push_str(&format!("=>[{}]->{};", names.join(","), model.nodes[*join].name));
            }
        }
    }
    text
}

fn target_name<'m>(target: Target, model: &'m Model) -> &'m str {
    match target {
        Target::End => "end",
        Target::Node(i) => &model.nodes[i].name,
    }
}

/// What `tea_check::draw` needs besides the graph's shape: names as ids, each node's shape,
/// the fan-outs that send, the breakpoints.
fn look(model: &Model) -> Look {
    let shapes = model
        .nodes
        .iter()
        .map(|node| match &node.kind {
            NodeKind::Interrupt { .. } => Shape::Interrupt,
            NodeKind::Subgraph(sub) => Shape::Subgraph { child: path_string(&sub.child) },
            // An async node is drawn as a parallelogram: it awaits I/O.
            NodeKind::Function if node.is_async => Shape::Async,
            NodeKind::Function => Shape::Step,
        })
        .collect();
    let indices = |keep: fn(&Node) -> bool| -> Vec<usize> {
        model.nodes.iter().enumerate().filter(|(_, n)| keep(n)).map(|(i, _)| i).collect()
    };
    let mut look = Look::new(Ids::Names, shapes);
    look.sends = indices(|n| matches!(n.routing, Routing::Fork { each: true, .. }));
    look.interrupt_before = indices(|n| n.interrupt_before);
    look.interrupt_after = indices(|n| n.interrupt_after);
    look
}

/// The constants of one drawing, computed here by `tea_check::draw`: the template
/// `__TEA_{KIND}` (what a parent inserts) and `{KIND}` (the drawing: head, the template
/// without its marks, tail), with its rustdoc (children shown by name). A graph without
/// subgraph nodes gets literals; one with them gets its children's templates spliced in by
/// `::tea::__private::draw` at compile time, as the macro cannot see a child's nodes.
fn drawing(def: &GraphDef, model: &Model, format: Format) -> TokenStream {
    let name = &def.name;
    let (kind, doc_title) = match format {
        Format::Mermaid => ("MERMAID", "The graph drawn as a Mermaid flowchart:"),
        Format::Dot => ("DOT", "The graph in Graphviz DOT:"),
    };
    let parts = draw::template(&lower(&model.nodes, &model.start), &look(model), format);
    let head = draw::head(format, Ids::Names, &name.to_string());
    let tail = draw::tail(format);
    let child_of = |node: usize| match &model.nodes[node].kind {
        NodeKind::Subgraph(sub) => Some(&sub.child),
        _ => None,
    };
    let public = format_ident!("{kind}");
    let template = format_ident!("__TEA_{kind}");
    let pieces = format_ident!("__TEA_{kind}_PIECES");
    let len = format_ident!("__TEA_{kind}_LEN");
    let buf = format_ident!("__TEA_{kind}_BUF");
    let out = format_ident!("__TEA_{kind}_OUT");
    let shown = draw::splice(&parts, |node| {
        child_of(node).map(|child| format!("    %% the nodes of {}\n", path_string(child))).unwrap_or_default()
    });
    let doc = format!("{doc_title}\n\n```text\n{head}{}{tail}```", draw::unmark(&shown));
    if let [Part::Text(text)] = parts.as_slice() {
        let plain = format!("{head}{}{tail}", draw::unmark(text));
        return quote! {
            #[doc(hidden)]
            pub const #template: &'static str = #text;
            #[doc = #doc]
            pub const #public: &'static str = #plain;
        };
    }
    let pieces_tokens = parts.iter().map(|part| match part {
        Part::Text(text) => quote!(::tea::__private::draw::Piece::Text(#text)),
        Part::Child { node, prefix } => {
            let child = child_of(*node);
            quote!(::tea::__private::draw::Piece::Child(<#child>::#template, #prefix))
        }
    });
    quote! {
        #[doc(hidden)]
        pub const #pieces: &'static [::tea::__private::draw::Piece] = &[#(#pieces_tokens),*];
        #[doc(hidden)]
        pub const #len: usize = ::tea::__private::draw::len(#name::#pieces);
        #[doc(hidden)]
        pub const #buf: [u8; #name::#len] = ::tea::__private::draw::build(#name::#pieces);
        #[doc(hidden)]
        pub const #template: &'static str = ::tea::__private::draw::as_str(&#name::#buf);
        #[doc(hidden)]
        pub const #out: [u8; ::tea::__private::draw::unmarked_len(#head, #name::#template, #tail)] =
            ::tea::__private::draw::unmark(#head, #name::#template, #tail);
        #[doc = #doc]
        pub const #public: &'static str = ::tea::__private::draw::as_str(&#name::#out);
    }
}

/// The `policy` arm of a node with a `retry`, `timeout` or `cache` statement: a constant
/// `NodePolicy` (a `cache` with `reads` also checks, at compile time, that the state has those
/// fields).
fn policy_arm(node: &Node<'_>, node_enum: &Ident, state: &syn::Type) -> Option<TokenStream> {
    if node.retry.is_none() && node.timeout.is_none() && node.cache.is_none() {
        return None;
    }
    let p = quote!(::tea::__private);
    let millis = |ms: u64| quote!(::core::time::Duration::from_millis(#ms));
    let mut policy = quote!(#p::NodePolicy::NONE);
    if let Some(Setting::Retry { attempts, backoff_ms, max_backoff_ms, factor, jitter, on }) = node.retry {
        let mut retry = quote!(#p::RetryPolicy::attempts(#attempts));
        if let Some(ms) = backoff_ms {
            let d = millis(*ms);
            retry = quote!(#retry.backoff(#d));
        }
        if let Some(ms) = max_backoff_ms {
            let d = millis(*ms);
            retry = quote!(#retry.max_backoff(#d));
        }
        if let Some(f) = factor {
            retry = quote!(#retry.factor(#f));
        }
        if let Some(j) = jitter {
            retry = quote!(#retry.jitter(#j));
        }
        if let Some(on) = on {
            let which = match on.to_string().as_str() {
                "errors" => quote!(ErrorsAndTimeouts),
                "timeouts" => quote!(Timeouts),
                _ => quote!(Failures),
            };
            retry = quote!(#retry.retry_on(#p::RetryOn::#which));
        }
        policy = quote!(#policy.retry(#retry));
    }
    if let Some(Setting::Timeout { ms }) = node.timeout {
        let d = millis(*ms);
        policy = quote!(#policy.timeout(#d));
    }
    let mut field_checks = Vec::new();
    if let Some(Setting::Cache { ttl_ms, reads, store }) = node.cache {
        let mut cache = if *store { quote!(#p::CachePolicy::store()) } else { quote!(#p::CachePolicy::memory()) };
        if let Some(ms) = ttl_ms {
            let d = millis(*ms);
            cache = quote!(#cache.ttl(#d));
        }
        if !reads.is_empty() {
            let names: Vec<String> = reads.iter().map(|r| syn::ext::IdentExt::unraw(r).to_string()).collect();
            cache = quote!(#cache.reads(&[#(#names),*]));
            for (read, name) in reads.iter().zip(&names) {
                let message = format!("`cache {}(reads = [… {name} …])`: the state has no field `{name}`", node.name);
                field_checks.push(quote_spanned! {read.span()=>
                    const _: () = ::core::assert!(
                        #p::has_field(<#state as #p::GraphState>::FIELDS, #name),
                        #message
                    );
                });
            }
        }
        policy = quote!(#policy.cache(#cache));
    }
    let variant = &node.variant;
    Some(quote! {
        #node_enum::#variant => {
            #(#field_checks)*
            const POLICY: #p::NodePolicy = #policy;
            ::core::option::Option::Some(&POLICY)
        }
    })
}
