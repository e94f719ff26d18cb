//! Checks on the state as a whole, once its fields are read: no generic parameters, no `Self`
//! in a field type, no two generated methods with one name.

use super::parse::State;
use super::Errors;
use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::Generics;

/// Refuses generic parameters and where clauses. Returns true if it found any: an expansion
/// would only add errors about parameters that are not in scope.
pub fn generics(generics: &Generics, errors: &mut Errors) -> bool {
    let mut found = false;
    if !generics.params.is_empty() {
        found = true;
        errors.spanned(
            generics,
            "`#[derive(GraphState)]` does not support generic parameters; a graph's state is \
             one concrete type that checkpoints store: use concrete field types \
             (e.g. `Vec<String>`), or wrap them in a non-generic struct",
        );
    }
    if let Some(clause) = &generics.where_clause {
        found = true;
        errors.spanned(
            clause,
            "`#[derive(GraphState)]` does not support where clauses; a graph's state is one \
             concrete type: remove the where clause",
        );
    }
    found
}

/// Checks the fields together. Returns true if an error makes the expansion pointless.
pub fn check(state: &State, errors: &mut Errors) -> bool {
    let mut fatal = false;
    for field in &state.fields {
        // In the generated update type `Self` would name the update, not the state.
        if let Some(token) = find_self(field.ty.to_token_stream()) {
            fatal = true;
            errors.spanned(
                token,
                format_args!(
                    "`#[derive(GraphState)]` does not support `Self` in a field type; \
                     write `{}` instead",
                    state.ident
                ),
            );
        }
    }
    method_names(state, errors);
    fatal
}

/// `overwrite_<field>` is generated for each reducer field, beside a setter named like each
/// field: a field called `overwrite_log` next to a reducer field `log` would get two methods of
/// one name. (The expansion skips the second, so this error is not fatal.)
fn method_names(state: &State, errors: &mut Errors) {
    for field in &state.fields {
        let name = field.ident.unraw().to_string();
        let Some(target) = name.strip_prefix("overwrite_") else {
            continue;
        };
        let collides = state.fields.iter().any(|other| !other.reducer.is_replace() && other.ident.unraw() == target);
        if !collides {
            continue;
        }
        errors.spanned(
            field.ident,
            format_args!(
                "field `{name}` clashes with the method `{name}` that `#[derive(GraphState)]` \
                 generates for the reducer field `{target}` (it overwrites `{target}`, bypassing \
                 its reducer); rename this field, e.g. `{target}_reset`",
            ),
        );
    }
}

/// The first `Self` token in `tokens`, looking inside groups.
fn find_self(tokens: TokenStream) -> Option<TokenTree> {
    tokens.into_iter().find_map(|token| match &token {
        TokenTree::Ident(ident) if ident == "Self" => Some(token),
        TokenTree::Group(group) => find_self(group.stream()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::parse::parse;
    use super::*;
    use syn::{parse_quote, DeriveInput};

    fn errors_of(input: DeriveInput) -> (bool, Vec<String>) {
        let mut errors = Errors::default();
        let fatal = generics(&input.generics, &mut errors);
        let state = parse(&input, &mut errors).expect("a struct with named fields");
        let fatal = check(&state, &mut errors) || fatal;
        (fatal, errors.messages())
    }

    #[test]
    fn accepts_a_plain_state() {
        let (fatal, errors) = errors_of(parse_quote! {
            struct Review {
                draft: String,
                #[reducer(append)] log: Vec<String>,
                overwrite_draft: String,
                #[reducer(sum)] r#type: u32,
            }
        });
        assert!(!fatal);
        assert_eq!(errors, Vec::<String>::new());
    }

    #[test]
    fn refuses_generics_and_where_clauses() {
        let (fatal, errors) = errors_of(parse_quote! {
            struct Review<T> where T: Clone { draft: T }
        });
        assert!(fatal);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("does not support generic parameters"));
        assert!(errors[1].contains("does not support where clauses"));

        let (fatal, errors) = errors_of(parse_quote!(
            struct Review<'a> {
                draft: &'a str,
            }
        ));
        assert!(fatal);
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn refuses_self_in_a_field_type() {
        let (fatal, errors) = errors_of(parse_quote! {
            struct Tree { children: Vec<Box<Self>> }
        });
        assert!(fatal);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("write `Tree` instead"), "{errors:?}");
    }

    #[test]
    fn finds_method_name_collisions() {
        let (fatal, errors) = errors_of(parse_quote! {
            struct Review {
                overwrite_log: Vec<String>,
                #[reducer(append)] log: Vec<String>,
                #[reducer(sum)] r#type: u32,
                overwrite_type: u32,
                overwrite_draft: String,
                draft: String,
            }
        });
        assert!(!fatal);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("field `overwrite_log` clashes with the method"), "{errors:?}");
        assert!(errors[1].contains("reducer field `type`"), "{errors:?}");
    }
}
