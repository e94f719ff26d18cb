//! `graph! { [pub] Name for State { … } }`: parse → check → expand, or on errors the fallback
//! expansion (the errors, and every name the graph declares).

mod check;
mod expand;
mod fallback;
mod parse;

use proc_macro2::TokenStream;

pub fn expand(input: TokenStream) -> TokenStream {
    let mut def = match syn::parse2::<parse::GraphDef>(input) {
        Ok(def) => def,
        Err(error) => return error.into_compile_error(),
    };
    let parse_errors = std::mem::take(&mut def.errors);
    let mut errors = check::Errors::default();
    errors.extend(parse_errors);
    let (model, unknown) = match check::check(&def) {
        Ok(model) => (Some(model), Vec::new()),
        Err(rejected) => {
            errors.extend([rejected.error]);
            (None, rejected.unknown)
        }
    };
    match (errors.into_error(), model) {
        (None, Some(model)) => expand::graph(&def, &model),
        (error, _) => fallback::fallback(&def, error, &unknown),
    }
}
