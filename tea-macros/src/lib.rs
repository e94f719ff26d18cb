//! The procedural macros of [tea](https://docs.rs/tea): `#[derive(GraphState)]`, `graph! { }` and `#[tool]`.
//!
//! Depend on the `tea` facade, which re-exports both macros: the code they generate names only
//! `::tea::__private::…` and `::core::…`, so this crate is not used on its own. It has no cargo
//! features (the `tea` facade's — `sled`, `postgres`, `yaml`, `tracing` — concern the engine).
//!
//! ```
//! use tea::prelude::*;
//!
//! #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
//! pub struct Count {
//!     #[reducer(sum)]
//!     total: u32,
//!     #[reducer(append)]
//!     seen: Vec<String>,
//! }
//!
//! fn one(_: &Count) -> CountUpdate {
//!     Count::update().total(1).seen(vec!["one".into()])
//! }
//! fn two(_: &Count) -> CountUpdate {
//!     Count::update().total(2).seen(vec!["two".into()])
//! }
//!
//! graph! {
//!     pub Steps for Count {
//!         start -> one;
//!         one -> two;
//!         two -> end;
//!     }
//! }
//!
//! let out = Steps::builder().build().invoke(Count::default())?;
//! assert_eq!((out.total, out.seen.len()), (3, 2));
//! assert!(Steps::MERMAID.contains("one --> two"));
//! # Ok::<(), tea::Error>(())
//! ```
//!
//! Each macro is parse → check → expand, one module each; entry points only hand over, and every
//! problem becomes a `syn::Error` spanned on the offending token (never a panic).

mod graph;
mod state;
mod tool;

use proc_macro::TokenStream;

/// Derives `GraphState` for a struct with named fields, and generates its `…Update` type.
///
/// See the `tea` crate documentation for the reducers (`#[reducer(append)]`, …).
#[proc_macro_derive(GraphState, attributes(reducer, graph_state))]
pub fn derive_graph_state(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    // The file that declares the struct, read to tell whether it forgot serde's derives (rustc
    // does not hand a derive the `#[derive(…)]` list it is in); `None` when there is no such file.
    let source = input.ident.span().unwrap().local_file().and_then(|file| std::fs::read_to_string(file).ok());
    state::expand(input, source.as_deref()).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Declares a graph: `graph! { pub Name for State { start -> a; a -> end; } }`.
///
/// See the `tea` crate documentation for the language.
#[proc_macro]
pub fn graph(input: TokenStream) -> TokenStream {
    graph::expand(input.into()).into()
}

/// Makes a function a tool a model can call: `#[tool] fn get_weather(city: String) -> String`.
///
/// The doc comment is the tool's description, each parameter a property of its JSON Schema
/// (its doc comment the property's description; an `Option<T>` may be left out), and a unit
/// struct named after the function (`GetWeather`) implements `Tool`, decoding a call's JSON
/// arguments into the parameters' types. Options: `#[tool(name = "weather")]` names the tool
/// for the model, `#[tool(approval)]` makes each call wait for a person. A parameter of type
/// `&Memory` is not the model's: it is the app's long-term memory (`tea::Memory`), given by the
/// `ToolNode` that runs the call. See the `tea` crate's `models` module.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    tool::expand(attr.into(), item.into()).into()
}
