//! The procedural macros of tea: `#[derive(GraphState)]` and `graph! { }`.
//!
//! Each macro is parse → check → expand, one module each; entry points only hand over, and every
//! problem becomes a `syn::Error` spanned on the offending token (never a panic).

mod graph;
mod state;
mod suggest;

use proc_macro::TokenStream;

/// Derives `GraphState` for a struct with named fields, and generates its `…Update` type.
///
/// See the `tea` crate documentation for the reducers (`#[reducer(append)]`, …).
#[proc_macro_derive(GraphState, attributes(reducer))]
pub fn derive_graph_state(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    state::expand(input).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Declares a graph: `graph! { pub Name for State { start -> a; a -> end; } }`.
///
/// See the `tea` crate documentation for the language.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    graph::expand(input.into()).into()
}
