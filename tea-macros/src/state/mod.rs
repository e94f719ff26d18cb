//! `#[derive(GraphState)]`: parse → check → expand.
//!
//! `parse` reads the struct and its `#[reducer(…)]` attributes into a model that keeps the
//! user's tokens, `check` looks at the model as a whole (generics, colliding method names), and
//! `expand` writes the `…Update` type and the trait impls. Every problem is collected in one
//! [`Errors`] and reported together, each spanned on the offending token.

mod check;
mod expand;
mod parse;

use proc_macro2::TokenStream;
use std::fmt::Display;

pub fn expand(input: syn::DeriveInput) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let state = parse::parse(&input, &mut errors);
    let generic = check::generics(&input.generics, &mut errors);
    let Some(state) = state else {
        // Not a struct with named fields: there is nothing sensible to generate.
        return Err(errors.into_error().unwrap_or_else(|| {
            syn::Error::new_spanned(&input.ident, "`#[derive(GraphState)]` could not read this item")
        }));
    };
    let fatal = check::check(&state, &mut errors) || generic;
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
            tokens.extend(error.into_compile_error());
            Ok(tokens)
        }
    }
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
