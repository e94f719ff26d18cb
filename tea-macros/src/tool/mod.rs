//! `#[tool]` on a function: parse → check → expand.
//!
//! `parse` reads the attribute's options (`name = "…"`, `approval`) and the function into a
//! model that keeps the user's tokens; `check` refuses what cannot be a tool (a receiver, a
//! generic, a parameter that is not a plain name or whose type is borrowed — but `&Memory` — or
//! `impl Trait`), each problem spanned on its token and all reported together; `expand` writes
//! the function back (its parameters' doc comments taken off) and a unit struct implementing
//! `Tool`. A `&Memory` parameter is no argument of the model's: the struct's `call_with_memory`
//! passes it the memory the `ToolNode` gives (the node's `ctx.store()`), and its `call` fails
//! without one. When there are errors, the function and the struct are still emitted (the
//! struct without its `Tool` impl), so that one mistake gives one error and not one at every
//! use.

mod check;
mod expand;
mod parse;

use proc_macro2::TokenStream;

pub fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = crate::state::Errors::default();
    let options = parse::options(attr, &mut errors);
    let mut function = match syn::parse2::<syn::ItemFn>(item.clone()) {
        Ok(function) => function,
        Err(error) => {
            let error = syn::Error::new(
                error.span(),
                "`#[tool]` goes on a function: `#[tool] fn name(argument: Type) -> Output { … }`",
            );
            let mut tokens = item;
            tokens.extend(error.into_compile_error());
            return tokens;
        }
    };
    let tool = parse::tool(&mut function, options, &mut errors);
    check::check(&function, &tool, &mut errors);
    match errors.into_error() {
        None => expand::expand(&function, &tool),
        Some(error) => {
            let mut tokens = expand::fallback(&function, &tool);
            tokens.extend(error.into_compile_error());
            tokens
        }
    }
}
