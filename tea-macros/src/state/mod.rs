//! `#[derive(GraphState)]`: parse → check → expand.
//!
//! `parse` reads the struct and its `#[reducer(…)]` attributes into a model that keeps the
//! user's tokens, `check` looks at the model as a whole (generics, colliding method names), and
//! `expand` writes the `…Update` type and the trait impls. Every problem is collected in one
//! [`Errors`] and reported together, each spanned on the offending token. When `storable` is
//! sure serde's derives are missing, the expansion adds stand-in serde impls beside that one
//! error, so that nothing cascades.

mod check;
mod expand;
mod parse;
mod storable;

use proc_macro2::TokenStream;
use quote::quote_spanned;
use std::fmt::Display;

/// Expands the derive on `input`; `source` is the text of the file that declares it, when it
/// could be read (to tell whether serde's derives are missing: see [`storable`]).
pub fn expand(input: syn::DeriveInput, source: Option<&str>) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let manual_serde = parse::manual_serde(&input.attrs, &mut errors);
    let unstorable = match source {
        Some(source) if !manual_serde => storable::missing(source, &input.ident.to_string()),
        _ => None,
    };
    let state = parse::parse(&input, &mut errors);
    let generic = check::generics(&input.generics, &mut errors);
    let Some(state) = state else {
        // Not a struct with named fields: there is nothing sensible to generate.
        return Err(errors.into_error().unwrap_or_else(|| {
            syn::Error::new_spanned(&input.ident, "`#[derive(GraphState)]` could not read this item")
        }));
    };
    let fatal = check::check(&state, &mut errors) || generic;
    if let Some(missing) = unstorable {
        errors.spanned(
            state.ident,
            format_args!(
                "`{name}` needs {traits}: tea stores the state in checkpoints and resume \
                 tokens; add them to its derive, e.g. \
                 `#[derive(GraphState, Clone, serde::Serialize, serde::Deserialize)]` (with \
                 serde's feature `derive` in Cargo.toml); if `{name}` implements them by hand in \
                 another file, write `#[graph_state(manual_serde)]` on it",
                name = state.ident,
                traits = missing.traits(),
            ),
        );
    }
    let fallback = unstorable.map(|missing| stand_ins(state.ident, missing)).unwrap_or_default();
    match errors.into_error() {
        None => Ok(expand::expand(&state)),
        // Errors the expansion cannot work around (generic parameters, `Self` in a field type):
        // report them alone.
        Some(error) if fatal => Err(error),
        // Errors confined to one attribute or method name: the model already fell back to
        // something that compiles (`replace`, a skipped method), so generate the rest too and the
        // user's code that names `…Update` or its setters does not fail a second time.
        Some(error) => {
            let mut tokens = expand::expand(&state);
            tokens.extend(fallback);
            tokens.extend(error.into_compile_error());
            Ok(tokens)
        }
    }
}

/// Stand-ins for the serde impls a state lacks (the build fails on the error that says so):
/// with them, `impl GraphState`, every `graph!` over the state and every `State::update()`
/// compile, so the missing derives are one error and not one at each use.
fn stand_ins(name: &syn::Ident, missing: storable::Missing) -> TokenStream {
    let span = name.span();
    let serde = quote_spanned!(span=> ::tea::__private::serde);
    let mut tokens = TokenStream::new();
    if missing.serialize {
        tokens.extend(quote_spanned! {span=>
            impl #serde::Serialize for #name {
                fn serialize<__S: #serde::Serializer>(&self, _: __S) -> ::core::result::Result<__S::Ok, __S::Error> {
                    ::core::result::Result::Err(<__S::Error as #serde::ser::Error>::custom("no serde derive"))
                }
            }
        });
    }
    if missing.deserialize {
        tokens.extend(quote_spanned! {span=>
            impl<'de> #serde::Deserialize<'de> for #name {
                fn deserialize<__D: #serde::Deserializer<'de>>(_: __D) -> ::core::result::Result<Self, __D::Error> {
                    ::core::result::Result::Err(<__D::Error as #serde::de::Error>::custom("no serde derive"))
                }
            }
        });
    }
    tokens
}

/// The errors found so far, reported together (like serde's `Ctxt`).
#[derive(Default)]
pub struct Errors(Vec<syn::Error>);

impl Errors {
    /// Records an error spanned on `tokens`.
    pub fn spanned(&mut self, tokens: impl quote::ToTokens, message: impl Display) {
        self.0.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub fn at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.0.push(syn::Error::new(span, message));
    }

    /// Records an error built elsewhere (e.g. by a syn parser).
    pub fn push(&mut self, error: syn::Error) {
        self.0.push(error);
    }

    /// All errors combined into one, or `None` if there were none.
    pub fn into_error(self) -> Option<syn::Error> {
        self.0.into_iter().reduce(|mut all, next| {
            all.combine(next);
            all
        })
    }

    #[cfg(test)]
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}
