//! Reads the derive input into a [`State`]: the struct's fields in declaration order, each with
//! its reducer from `#[reducer(…)]`, keeping the user's tokens for spans.
//!
//! A field whose attribute is wrong is recorded with an error and read as `replace`, so the
//! remaining fields are still checked and the expansion does not fail a second time.

use super::Errors;
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Attribute, Data, DeriveInput, ExprPath, Fields, Ident, Meta, Token, Type, Visibility};

/// The reducers a user can name, as listed in error messages.
pub const KNOWN: &str =
    "`replace` (the default), `append`, `sum`, `max`, `min`, `union`, `merge`, `messages`, `with = path`";

/// A struct deriving `GraphState`.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub struct State<'a> {
    pub ident: &'a Ident,
    pub vis: &'a Visibility,
    pub fields: Vec<Field<'a>>,
}

/// One field of the state.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub struct Field<'a> {
    pub ident: &'a Ident,
    pub vis: &'a Visibility,
    pub ty: &'a Type,
    /// The field's doc comments, repeated on its setters.
    pub docs: Vec<&'a Attribute>,
    pub reducer: Reducer,
}

/// How a field merges updates, with the token that named the reducer (for spans).
#[cfg_attr(test, derive(Debug, PartialEq))]
pub enum Reducer {
    /// No attribute, or `#[reducer(replace)]`.
    Replace,
    /// `#[reducer(append)]`, …: `ident` is the reducer's name in the attribute.
    Builtin { kind: Builtin, ident: Ident },
    /// `#[reducer(with = path)]`.
    With { path: ExprPath },
}

/// The reducers implemented by a trait of the runtime.
#[derive(Clone, Copy)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub enum Builtin {
    Append,
    Sum,
    Max,
    Min,
    Union,
    Merge,
    Messages,
}

impl Builtin {
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Append => "append",
            Builtin::Sum => "sum",
            Builtin::Max => "max",
            Builtin::Min => "min",
            Builtin::Union => "union",
            Builtin::Merge => "merge",
            Builtin::Messages => "messages",
        }
    }
}

impl Reducer {
    pub fn is_replace(&self) -> bool {
        matches!(self, Reducer::Replace)
    }
}

/// Reads `input`; `None` when it is not a struct with named fields (the error is recorded).
pub fn parse<'a>(input: &'a DeriveInput, errors: &mut Errors) -> Option<State<'a>> {
    for attr in input.attrs.iter().filter(|attr| is_reducer(attr)) {
        errors.spanned(
            attr,
            "`#[reducer(…)]` goes on a field, not on the struct: \
             put it above the field it applies to",
        );
    }
    let named = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => named,
            Fields::Unnamed(unnamed) => {
                errors.spanned(
                    unnamed,
                    format_args!(
                        "`#[derive(GraphState)]` needs named fields, not a tuple struct: nodes \
                         update the state field by field, by name; write `struct {} {{ name: Type, … }}`",
                        input.ident
                    ),
                );
                return None;
            }
            Fields::Unit => {
                errors.spanned(
                    &input.ident,
                    format_args!(
                        "`#[derive(GraphState)]` needs a struct with named fields, not a unit \
                         struct; write `struct {} {{ name: Type, … }}`",
                        input.ident
                    ),
                );
                return None;
            }
        },
        Data::Enum(data) => {
            errors.spanned(
                data.enum_token,
                "`#[derive(GraphState)]` needs a struct with named fields, not an enum: nodes \
                 update the state field by field; put the enum in a field of a state struct",
            );
            return None;
        }
        Data::Union(data) => {
            errors.spanned(
                data.union_token,
                "`#[derive(GraphState)]` needs a struct with named fields, not a union; \
                 write `struct Name { field: Type, … }`",
            );
            return None;
        }
    };

    let fields = named
        .named
        .iter()
        .filter_map(|field| {
            // Named fields always have an ident; skipping instead of unwrapping keeps the
            // macro panic-free whatever syn hands over.
            let ident = field.ident.as_ref()?;
            Some(Field {
                ident,
                vis: &field.vis,
                ty: &field.ty,
                docs: field.attrs.iter().filter(|attr| attr.path().is_ident("doc")).collect(),
                reducer: field_reducer(ident, &field.attrs, errors),
            })
        })
        .collect();
    Some(State { ident: &input.ident, vis: &input.vis, fields })
}

/// Whether the struct says `#[graph_state(manual_serde)]`: it implements serde's traits by
/// hand, so their derives are not looked for. Anything else in `#[graph_state(…)]` is an error.
pub fn manual_serde(attrs: &[Attribute], errors: &mut Errors) -> bool {
    let mut manual = false;
    for attr in attrs.iter().filter(|attr| attr.path().is_ident("graph_state")) {
        let read = attr.parse_args_with(Punctuated::<Ident, Token![,]>::parse_terminated);
        match read {
            Ok(options) if !options.is_empty() => {
                for option in options {
                    if option == "manual_serde" {
                        manual = true;
                    } else {
                        errors.spanned(
                            &option,
                            format_args!("unknown option `{option}`; `#[graph_state(…)]` takes `manual_serde`"),
                        );
                    }
                }
            }
            _ => errors.spanned(
                attr,
                "write `#[graph_state(manual_serde)]` (the state implements `serde::Serialize` and \
                 `serde::Deserialize` by hand)",
            ),
        }
    }
    manual
}

fn is_reducer(attr: &Attribute) -> bool {
    attr.path().is_ident("reducer")
}

/// The reducer of one field: from its one `#[reducer(…)]` attribute, `replace` without one.
fn field_reducer(field: &Ident, attrs: &[Attribute], errors: &mut Errors) -> Reducer {
    let mut reducer = None;
    for attr in attrs.iter().filter(|attr| is_reducer(attr)) {
        if reducer.is_some() {
            errors.spanned(
                attr,
                format_args!(
                    "duplicate `#[reducer]` attribute: `{}` already has one; \
                     a field takes one reducer, remove this attribute",
                    field.unraw()
                ),
            );
            continue;
        }
        // An attribute with an error counts as present, so a second one is still reported.
        reducer = Some(attr_reducer(attr, errors).unwrap_or(Reducer::Replace));
    }
    reducer.unwrap_or(Reducer::Replace)
}

/// The reducer named by one `#[reducer(…)]` attribute; `None` after recording an error.
fn attr_reducer(attr: &Attribute, errors: &mut Errors) -> Option<Reducer> {
    let list = match &attr.meta {
        Meta::List(list) => list,
        Meta::Path(path) => {
            errors.spanned(
                path,
                format_args!(
                    "`#[reducer]` needs a reducer in parentheses, e.g. `#[reducer(append)]`; \
                     the reducers are {KNOWN}"
                ),
            );
            return None;
        }
        Meta::NameValue(meta) => {
            errors.spanned(
                meta,
                format_args!(
                    "write the reducer in parentheses, e.g. `#[reducer(append)]`; \
                     the reducers are {KNOWN}"
                ),
            );
            return None;
        }
    };
    let items = match list.parse_args_with(Punctuated::<Item, Token![,]>::parse_terminated) {
        Ok(items) => items,
        Err(error) => {
            errors.push(error);
            return None;
        }
    };
    let mut items = items.into_iter();
    let Some(first) = items.next() else {
        errors.at(
            list.delimiter.span().join(),
            format_args!(
                "`#[reducer()]` names no reducer; write one, e.g. `#[reducer(append)]`; \
                 the reducers are {KNOWN}"
            ),
        );
        return None;
    };
    let first_name = first.key.unraw();
    for extra in items {
        errors.spanned(
            &extra.key,
            format_args!(
                "a field takes one reducer, and this attribute already names `{first_name}`; \
                 remove `{}`",
                extra.key.unraw()
            ),
        );
    }
    resolve(first, errors)
}

/// One `name` or `name = path` inside `#[reducer(…)]`, before it is known to make sense.
struct Item {
    key: Ident,
    /// `=` and the path after it (`None` when nothing follows the `=`).
    value: Option<(Token![=], Option<ExprPath>)>,
}

impl Parse for Item {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if !input.peek(Ident::peek_any) {
            return Err(input.error(format_args!("expected a reducer: {KNOWN}")));
        }
        let key = input.call(Ident::parse_any)?;
        let value = if input.peek(Token![=]) {
            let eq: Token![=] = input.parse()?;
            let path = if input.is_empty() || input.peek(Token![,]) {
                None
            } else if input.peek(Ident::peek_any) || input.peek(Token![::]) || input.peek(Token![<]) {
                Some(input.parse()?)
            } else {
                return Err(input.error(
                    "expected the path of a reducer function, e.g. `with = keep_longer` \
                     for `fn keep_longer(current: &mut T, new: T)`",
                ));
            };
            Some((eq, path))
        } else {
            None
        };
        Ok(Item { key, value })
    }
}

fn resolve(item: Item, errors: &mut Errors) -> Option<Reducer> {
    let name = item.key.unraw().to_string();
    let kind = match name.as_str() {
        "with" => {
            return match item.value {
                Some((_, Some(path))) => Some(Reducer::With { path }),
                Some((eq, None)) => {
                    errors.spanned(
                        eq,
                        "expected the path of a reducer function after `=`, e.g. \
                         `with = keep_longer` for `fn keep_longer(current: &mut T, new: T)`",
                    );
                    None
                }
                None => {
                    errors.spanned(
                        &item.key,
                        "`with` needs the path of a reducer function: write \
                         `#[reducer(with = keep_longer)]` for `fn keep_longer(current: &mut T, new: T)`",
                    );
                    None
                }
            };
        }
        "replace" => None,
        "append" => Some(Builtin::Append),
        "sum" => Some(Builtin::Sum),
        "max" => Some(Builtin::Max),
        "min" => Some(Builtin::Min),
        "union" => Some(Builtin::Union),
        "merge" => Some(Builtin::Merge),
        "messages" => Some(Builtin::Messages),
        _ => {
            let hint = match suggest(&name) {
                Some(known) => format!("did you mean `{known}`? "),
                None => String::new(),
            };
            errors.spanned(&item.key, format_args!("unknown reducer `{name}`; {hint}the reducers are {KNOWN}"));
            return None;
        }
    };
    if let Some((eq, _)) = item.value {
        errors.spanned(
            eq,
            format_args!(
                "`{name}` takes no value; write `#[reducer({name})]`, or \
                 `#[reducer(with = path)]` for a reducer function"
            ),
        );
        return None;
    }
    Some(match kind {
        None => Reducer::Replace,
        Some(kind) => Reducer::Builtin { kind, ident: item.key },
    })
}

/// The known reducer closest to a misspelled `name`, if one is close.
fn suggest(name: &str) -> Option<&'static str> {
    tea_check::suggest(name, ["replace", "append", "sum", "max", "min", "union", "merge", "messages", "with"])
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn reducers(input: &DeriveInput) -> (Vec<Reducer>, Vec<String>) {
        let mut errors = Errors::default();
        let state = parse(input, &mut errors);
        let reducers = state.map(|s| s.fields.into_iter().map(|f| f.reducer).collect());
        (reducers.unwrap_or_default(), errors.messages())
    }

    fn builtin(kind: Builtin, name: &str) -> Reducer {
        Reducer::Builtin { kind, ident: Ident::new(name, proc_macro2::Span::call_site()) }
    }

    #[test]
    fn reads_every_reducer_in_declaration_order() {
        let input: DeriveInput = parse_quote! {
            pub struct Review {
                /// The text.
                pub draft: String,
                #[reducer(replace)] approved: bool,
                #[reducer(append)] log: Vec<String>,
                #[reducer(sum)] revisions: u32,
                #[reducer(max)] best: i64,
                #[reducer(min)] low: i64,
                #[reducer(union)] tags: BTreeSet<String>,
                #[reducer(merge)] meta: BTreeMap<String, String>,
                #[reducer(with = util::keep_longer)] summary: String,
                #[reducer(append,)] r#type: Vec<u8>,
            }
        };
        let (reducers, errors) = reducers(&input);
        assert_eq!(errors, Vec::<String>::new());
        assert_eq!(
            reducers,
            vec![
                Reducer::Replace,
                Reducer::Replace,
                builtin(Builtin::Append, "append"),
                builtin(Builtin::Sum, "sum"),
                builtin(Builtin::Max, "max"),
                builtin(Builtin::Min, "min"),
                builtin(Builtin::Union, "union"),
                builtin(Builtin::Merge, "merge"),
                Reducer::With { path: parse_quote!(util::keep_longer) },
                builtin(Builtin::Append, "append"),
            ]
        );
        let mut errors = Errors::default();
        let state = parse(&input, &mut errors).expect("a struct");
        assert_eq!(state.ident, "Review");
        assert_eq!(state.fields[0].docs.len(), 1);
        assert_eq!(state.fields[9].ident, "r#type");
    }

    #[test]
    fn refuses_what_is_not_a_struct_with_named_fields() {
        for input in [
            parse_quote!(
                enum Review {
                    A,
                    B,
                }
            ),
            parse_quote!(union Review { a: u32 }),
            parse_quote!(
                struct Review(String, u32);
            ),
            parse_quote!(
                struct Review;
            ),
        ] {
            let mut errors = Errors::default();
            assert!(parse(&input, &mut errors).is_none());
            let messages = errors.messages();
            assert_eq!(messages.len(), 1, "{messages:?}");
            assert!(messages[0].contains("needs"), "{messages:?}");
        }
    }

    #[test]
    fn collects_every_attribute_error() {
        let input: DeriveInput = parse_quote! {
            #[reducer(append)]
            struct Review {
                #[reducer(apend)] a: Vec<String>,
                #[reducer(frobnicate)] b: u32,
                #[reducer] c: u32,
                #[reducer()] d: u32,
                #[reducer(append, sum)] e: Vec<u32>,
                #[reducer(sum)] #[reducer(max)] f: u32,
                #[reducer(with)] g: String,
                #[reducer(with = )] h: String,
                #[reducer(sum = x)] i: u32,
                #[reducer = "sum"] j: u32,
                #[reducer(with = 3)] k: u32,
                ok: u32,
            }
        };
        let (reducers, errors) = reducers(&input);
        // Every broken attribute falls back to `replace`, except `e` (its first reducer stands)
        // and `f` (its first attribute stands).
        assert_eq!(reducers.len(), 12);
        assert_eq!(reducers[4], builtin(Builtin::Append, "append"));
        assert_eq!(reducers[5], builtin(Builtin::Sum, "sum"));
        assert!(reducers.iter().enumerate().all(|(i, r)| i == 4 || i == 5 || r.is_replace()));
        let expected = [
            "goes on a field, not on the struct",
            "unknown reducer `apend`; did you mean `append`?",
            "unknown reducer `frobnicate`; the reducers are",
            "`#[reducer]` needs a reducer in parentheses",
            "`#[reducer()]` names no reducer",
            "already names `append`; remove `sum`",
            "duplicate `#[reducer]` attribute: `f` already has one",
            "`with` needs the path of a reducer function",
            "expected the path of a reducer function after `=`",
            "`sum` takes no value",
            "write the reducer in parentheses",
            "expected the path of a reducer function, e.g.",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, expected) in errors.iter().zip(expected) {
            assert!(error.contains(expected), "{error:?} should contain {expected:?}");
        }
    }

    #[test]
    fn graph_state_takes_manual_serde_only() {
        let input: DeriveInput = parse_quote! {
            #[graph_state(manual_serde)]
            struct Review { a: u32 }
        };
        let mut errors = Errors::default();
        assert!(manual_serde(&input.attrs, &mut errors));
        assert_eq!(errors.messages(), Vec::<String>::new());

        let input: DeriveInput = parse_quote! {
            #[graph_state(manual_serd)]
            #[graph_state]
            struct Review { a: u32 }
        };
        let mut errors = Errors::default();
        assert!(!manual_serde(&input.attrs, &mut errors));
        let messages = errors.messages();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].contains("unknown option `manual_serd`"), "{messages:?}");
        assert!(messages[1].contains("write `#[graph_state(manual_serde)]`"), "{messages:?}");
    }

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(suggest("apend"), Some("append"));
        assert_eq!(suggest("Sum"), Some("sum"));
        assert_eq!(suggest("unoin"), Some("union"));
        assert_eq!(suggest("frobnicate"), None);
        assert_eq!(suggest("x"), None);
    }
}
