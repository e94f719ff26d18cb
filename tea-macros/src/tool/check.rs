//! What cannot be a tool, each problem spanned on its token.

use super::parse::Tool;
use crate::state::Errors;

pub fn check(function: &syn::ItemFn, tool: &Tool, errors: &mut Errors) {
    let sig = &function.sig;
    if tool.description.trim().is_empty() {
        errors.spanned(
            &sig.ident,
            format_args!(
                "tool `{}` has no doc comment: the model reads it to decide when to call the tool; \
                 write one above the function (`/// Looks up …`)",
                tool.name
            ),
        );
    }
    if let Some(unsafety) = &sig.unsafety {
        errors.spanned(unsafety, "a tool cannot be an `unsafe fn`: the model calls it with any arguments");
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(abi, "a tool is a Rust function: remove the `extern` ABI");
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(variadic, "a tool cannot be variadic");
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            "a tool cannot be generic: its parameters' JSON Schema is made from their concrete types",
        );
    }
    for input in &sig.inputs {
        match input {
            syn::FnArg::Receiver(receiver) => errors.spanned(
                receiver,
                "a tool is a free function: the model gives it its arguments as JSON, and cannot give it `self`",
            ),
            syn::FnArg::Typed(typed) => {
                match &*typed.pat {
                    syn::Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {}
                    pat => errors.spanned(
                        pat,
                        "a tool's parameter must be a plain name (`city: String`): the name is the argument's key in the model's JSON",
                    ),
                }
                if let Some(attr) = typed.attrs.first() {
                    errors.spanned(attr, "a tool's parameter takes no attribute but its doc comment");
                }
                if let syn::Type::Reference(reference @ syn::TypeReference { mutability: Some(_), .. }) = &*typed.ty {
                    if super::parse::is_memory(&syn::Type::Reference(syn::TypeReference {
                        mutability: None,
                        ..reference.clone()
                    })) {
                        errors.spanned(
                            &typed.ty,
                            "a tool takes the app's memory as `&Memory`: its methods take `&self`, and calls share it",
                        );
                        continue;
                    }
                }
                if !super::parse::is_memory(&typed.ty) {
                    owned(&typed.ty, errors);
                }
            }
        }
    }
}

/// Reports the first part of `ty` that cannot be decoded from JSON as an owned value: a
/// reference, `impl Trait`, a `dyn Trait`, a pointer, a function pointer, `!`, `_`, a slice.
fn owned(ty: &syn::Type, errors: &mut Errors) -> bool {
    let why = match ty {
        syn::Type::Reference(_) => "a reference: the arguments are decoded from the model's JSON into owned values; take `String` for `&str`, `Vec<T>` for `&[T]`",
        syn::Type::ImplTrait(_) => "`impl Trait`: the arguments are decoded from the model's JSON into one concrete type",
        syn::Type::TraitObject(_) => "a trait object: the arguments are decoded from the model's JSON into one concrete type",
        syn::Type::Ptr(_) => "a raw pointer: the arguments are decoded from the model's JSON into owned values",
        syn::Type::BareFn(_) => "a function pointer: the model's arguments are JSON data, not code",
        syn::Type::Never(_) => "`!`: no argument has that type",
        syn::Type::Infer(_) => "`_`: write the type out, the JSON Schema is made from it",
        syn::Type::Slice(_) => "a slice: take a `Vec<T>`",
        syn::Type::Macro(_) => "a type written by a macro: write the type out",
        syn::Type::Group(group) => return owned(&group.elem, errors),
        syn::Type::Paren(paren) => return owned(&paren.elem, errors),
        syn::Type::Array(array) => return owned(&array.elem, errors),
        syn::Type::Tuple(tuple) => return tuple.elems.iter().all(|elem| owned(elem, errors)),
        syn::Type::Path(path) => {
            if let Some(qself) = &path.qself {
                return owned(&qself.ty, errors);
            }
            for segment in &path.path.segments {
                if let syn::PathArguments::AngleBracketed(args) = &segment.arguments {
                    for arg in &args.args {
                        match arg {
                            syn::GenericArgument::Type(inner) if !owned(inner, errors) => return false,
                            syn::GenericArgument::Lifetime(lifetime) => {
                                errors.spanned(
                                    lifetime,
                                    "a tool's parameter cannot borrow: the arguments are decoded from the model's JSON into owned values",
                                );
                                return false;
                            }
                            _ => {}
                        }
                    }
                }
            }
            return true;
        }
        _ => return true,
    };
    errors.spanned(ty, format_args!("a tool's parameter cannot be {why}"));
    false
}
