//! Reads `#[tool(…)]`'s options and the function's description and parameters.

use crate::state::Errors;
use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::Parser;

/// What the attribute says.
#[derive(Default)]
pub struct Options {
    /// `name = "…"`: the tool's name as the model sees it (default: the function's name).
    pub name: Option<syn::LitStr>,
    /// `approval`: each call waits for a person's answer before it runs.
    pub approval: bool,
}

/// One parameter of the function.
pub struct Param {
    /// Its name, as the function binds it.
    pub ident: syn::Ident,
    /// The argument's key in the model's JSON: the name without `r#`.
    pub key: String,
    /// Its type, as written.
    pub ty: syn::Type,
    /// Its doc comment (the property's description), if any.
    pub doc: String,
    /// Whether the type is written `Option<…>`: the argument may be left out.
    pub optional: bool,
}

/// The tool the function makes.
pub struct Tool {
    pub name: String,
    pub name_span: Span,
    pub description: String,
    pub approval: bool,
    pub params: Vec<Param>,
    /// The `&Memory` parameter, if any: not an argument of the model's, but the app's
    /// long-term memory, given by the `ToolNode` that runs the call.
    pub memory: Option<syn::Ident>,
    /// Every parameter's name, in the function's order (the call passes them so).
    pub order: Vec<syn::Ident>,
    /// The generated struct's name (`get_weather` → `GetWeather`).
    pub type_name: syn::Ident,
}

pub fn options(attr: TokenStream, errors: &mut Errors) -> Options {
    let mut options = Options::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            let name: syn::LitStr = meta.value()?.parse()?;
            if name.value().is_empty() {
                return Err(meta.error("a tool's name cannot be empty"));
            }
            if options.name.replace(name).is_some() {
                return Err(meta.error("`name` is given twice"));
            }
            Ok(())
        } else if meta.path.is_ident("approval") {
            if options.approval {
                return Err(meta.error("`approval` is given twice"));
            }
            options.approval = true;
            Ok(())
        } else {
            let written = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
            let hint = match tea_check::suggest(&written, ["name", "approval"]) {
                Some(known) => format!("; did you mean `{known}`?"),
                None => String::new(),
            };
            Err(meta.error(format_args!("unknown `#[tool]` option: expected `name = \"…\"` or `approval`{hint}")))
        }
    });
    if let Err(error) = parser.parse2(attr) {
        errors.push(error);
    }
    options
}

/// The text of the `#[doc = "…"]` attributes among `attrs`, one line each, trimmed of the one
/// space `///` leaves.
fn doc_text(attrs: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(syn::MetaNameValue {
            value: syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }),
            ..
        }) = &attr.meta
        {
            let text = text.value();
            lines.push(text.strip_prefix(' ').unwrap_or(&text).trim_end().to_owned());
        }
    }
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines.join("\n").trim_start_matches('\n').to_owned()
}

/// `snake_case` → `CamelCase`.
fn camel(name: &str) -> String {
    let mut out = String::new();
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    // A name that cannot start a type's name (`_1st` → `1st`), or a keyword (`self_` → `Self`),
    // gets a `Tool` prefix, so that the struct's name is always an identifier.
    if !out.starts_with(|c: char| c.is_alphabetic()) || syn::parse_str::<syn::Ident>(&out).is_err() {
        out.insert_str(0, "Tool");
    }
    out
}

/// Whether `ty` is written `Option<…>` (also `std::option::Option<…>`, `core::option::Option<…>`).
pub fn is_option(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(path) if path.qself.is_none() => path.path.segments.last().is_some_and(|last| {
            last.ident == "Option" && matches!(last.arguments, syn::PathArguments::AngleBracketed(_))
        }),
        syn::Type::Group(group) => is_option(&group.elem),
        syn::Type::Paren(paren) => is_option(&paren.elem),
        _ => false,
    }
}

/// Whether `ty` is written `&Memory` (also `&tea::Memory`): the parameter that receives the
/// app's memory. A type of another name `Memory` is refused by the compiler where the generated
/// code passes `&tea::Memory` to it.
pub fn is_memory(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Reference(reference) if reference.mutability.is_none() => match &*reference.elem {
            syn::Type::Path(path) if path.qself.is_none() => path
                .path
                .segments
                .last()
                .is_some_and(|last| last.ident == "Memory" && matches!(last.arguments, syn::PathArguments::None)),
            _ => false,
        },
        syn::Type::Group(group) => is_memory(&group.elem),
        syn::Type::Paren(paren) => is_memory(&paren.elem),
        _ => false,
    }
}

/// Reads the function into a [`Tool`], taking the doc comments off its parameters (rustc
/// accepts no doc comment there once the attribute has run). Parameters that are not `name:
/// Type` are left to `check`.
pub fn tool(function: &mut syn::ItemFn, options: Options, errors: &mut Errors) -> Tool {
    let description = doc_text(&function.attrs);
    let mut params = Vec::new();
    let mut memory = None;
    let mut order = Vec::new();
    for input in &mut function.sig.inputs {
        let syn::FnArg::Typed(typed) = input else { continue };
        let doc = doc_text(&typed.attrs);
        typed.attrs.retain(|attr| !attr.path().is_ident("doc"));
        let syn::Pat::Ident(pat) = &*typed.pat else { continue };
        if pat.by_ref.is_some() || pat.subpat.is_some() {
            continue;
        }
        order.push(pat.ident.clone());
        if is_memory(&typed.ty) {
            if memory.is_some() {
                errors.spanned(&typed.ty, "a tool takes the app's memory once: remove this second `&Memory` parameter");
            }
            memory = Some(pat.ident.clone());
            continue;
        }
        let key = pat.ident.unraw().to_string();
        params.push(Param {
            ident: pat.ident.clone(),
            key,
            ty: (*typed.ty).clone(),
            doc,
            optional: is_option(&typed.ty),
        });
    }
    let fn_name = function.sig.ident.unraw().to_string();
    let (name, name_span) = match &options.name {
        Some(name) => (name.value(), name.span()),
        None => (fn_name.clone(), function.sig.ident.span()),
    };
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') || name.len() > 64 {
        errors.at(
            name_span,
            format_args!("tool name `{name}` is not one models accept: use 1 to 64 ASCII letters, digits, `_` or `-`"),
        );
    }
    let span = function.sig.ident.span();
    let type_name = syn::parse_str::<syn::Ident>(&camel(&fn_name)).map_or_else(
        |_| syn::Ident::new("Tool", span),
        |mut ident| {
            ident.set_span(span);
            ident
        },
    );
    Tool { name, name_span, description, approval: options.approval, params, memory, order, type_name }
}

#[cfg(test)]
mod tests {
    use super::camel;

    #[test]
    fn a_tools_struct_is_named_in_camel_case_and_always_an_identifier() {
        assert_eq!(camel("get_weather"), "GetWeather");
        assert_eq!(camel("add"), "Add");
        assert_eq!(camel("_1st_try"), "Tool1stTry");
        assert_eq!(camel("self_"), "ToolSelf");
        assert_eq!(camel("__"), "Tool");
    }
}
