//! Writes the code for a checked [`State`]: the `…Update` type (the one name added to the
//! caller's scope) and, inside `const _: () = { … };`, its setters, `Debug`, `StateUpdate`,
//! `GraphState` and `NodeOutput` impls.
//!
//! `apply` calls each field's reducer spanned on the reducer's token, so a reducer that does not
//! fit its field is reported there; `FIELDS` lists the fields and their reducers, and the schema
//! fingerprint hashes the struct's name and each field's name, type and reducer.
//!
//! Generated code names only `::tea::__private::…` and `::core::…`. Local bindings are
//! prefixed `__tea_` so a user's item of the same name cannot turn them into patterns.

use super::parse::{Builtin, Field, Reducer, State};
use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::{Ident, LitByteStr, LitStr};

pub fn expand(state: &State) -> TokenStream {
    let name = state.ident;
    let vis = state.vis;
    let update = update_ident(state);
    // The setters' argument is named plainly: it shows in their documentation.
    let argument = Ident::new("value", Span::call_site());
    let update_arg = local("update");
    let index = local("index");
    let error = local("error");

    let update_doc = LitStr::new(
        &format!(
            " A partial update of [`{name}`], written by `#[derive(GraphState)]`: what a node \
             returns.\n\n Start from `{name}::update()` (no change) and chain one setter per field \
             to write: a setter named like the field merges the value through the field's \
             reducer, `overwrite_…` replaces a reducer field outright. A later call for the \
             same field replaces the earlier value.\n\n `Debug` prints only the fields the update \
             writes: `field: value` for a replace field, `field: append(value)` (the reducer's \
             name) for a value merged through a reducer, `field: overwrite(value)` for an \
             `overwrite_…`. Serialized, an update holds only the fields it writes."
        ),
        Span::call_site(),
    );
    let update_fields = state.fields.iter().map(|field| {
        let ident = field.ident;
        let ty = field.ty;
        if field.reducer.is_replace() {
            quote! {
                #[serde(
                    default,
                    skip_serializing_if = "::core::option::Option::is_none",
                    deserialize_with = "::tea::__private::deserialize_some"
                )]
                #ident: ::core::option::Option<#ty>
            }
        } else {
            quote! {
                #[serde(default, skip_serializing_if = "::tea::__private::Slot::is_unset")]
                #ident: ::tea::__private::Slot<#ty>
            }
        }
    });

    let setters = setters(state, &argument);
    let debug = debug(state, &update);
    let writes = writes(state);
    let fields = state.fields.iter().map(field_const);
    let fingerprint = LitByteStr::new(schema(state).as_bytes(), Span::call_site());
    let apply = apply(state, &local("value"));

    quote! {
        #[doc = #update_doc]
        #[derive(
            ::core::clone::Clone,
            ::core::default::Default,
            ::tea::__private::serde::Serialize,
            ::tea::__private::serde::Deserialize,
        )]
        #[serde(crate = "::tea::__private::serde", deny_unknown_fields)]
        #vis struct #update {
            #(#update_fields,)*
        }

        #[allow(
            non_upper_case_globals,
            non_camel_case_types,
            unused_qualifications,
            clippy::needless_update,
            clippy::use_self,
        )]
        const _: () = {
            #[automatically_derived]
            impl #update {
                #(#setters)*
            }

            #debug

            #[automatically_derived]
            impl ::tea::__private::StateUpdate for #update {
                type State = #name;

                fn writes(
                    &self,
                    #index: ::core::primitive::usize,
                ) -> ::core::option::Option<::tea::__private::Write> {
                    #writes
                }
            }

            #[automatically_derived]
            impl ::tea::__private::GraphState for #name {
                type Update = #update;

                const FIELDS: &'static [::tea::__private::Field] = &[#(#fields),*];

                const SCHEMA_FINGERPRINT: ::core::primitive::u64 =
                    ::tea::__private::fingerprint(#fingerprint);

                fn apply(&mut self, #update_arg: #update) {
                    #apply
                }
            }

            #[automatically_derived]
            impl ::tea::__private::NodeOutput<#name> for #update {
                fn into_update(
                    self,
                ) -> ::core::result::Result<
                    ::core::option::Option<#update>,
                    ::tea::__private::BoxError,
                > {
                    ::core::result::Result::Ok(::core::option::Option::Some(self))
                }
            }

            #[automatically_derived]
            impl<E> ::tea::__private::NodeOutput<#name> for ::core::result::Result<#update, E>
            where
                E: ::core::convert::Into<::tea::__private::BoxError>,
            {
                fn into_update(
                    self,
                ) -> ::core::result::Result<
                    ::core::option::Option<#update>,
                    ::tea::__private::BoxError,
                > {
                    match self {
                        ::core::result::Result::Ok(#update_arg) => {
                            ::core::result::Result::Ok(::core::option::Option::Some(#update_arg))
                        }
                        ::core::result::Result::Err(#error) => {
                            ::core::result::Result::Err(::core::convert::Into::into(#error))
                        }
                    }
                }
            }
        };
    }
}

/// A local binding of generated code. `Span::mixed_site()` hides it from the user's local
/// variables, but a pattern still resolves item names at the call site (a `const update` in
/// scope would turn `update` into a constant pattern), hence the prefix.
fn local(name: &str) -> Ident {
    format_ident!("__tea_{}", name, span = Span::mixed_site())
}

/// `Review` → `ReviewUpdate`, spanned on the state's name (a clash is reported there).
fn update_ident(state: &State) -> Ident {
    format_ident!("{}Update", state.ident.unraw(), span = state.ident.span())
}

fn overwrite_ident(field: &Field) -> Ident {
    format_ident!("overwrite_{}", field.ident.unraw(), span = field.ident.span())
}

/// The setter of each field, then `overwrite_…` for each reducer field. A name generated twice
/// (already reported by `check`) is skipped, so the rest still compiles.
fn setters(state: &State, value: &Ident) -> Vec<TokenStream> {
    let mut taken = std::collections::HashSet::new();
    let mut methods = Vec::new();
    for field in &state.fields {
        let ident = field.ident;
        let ty = field.ty;
        let vis = field.vis;
        let docs = &field.docs;
        let name = ident.unraw().to_string();
        taken.insert(name.clone());
        let separator = (!docs.is_empty()).then(|| quote!(#[doc = ""]));
        let (doc, slot) = match &field.reducer {
            Reducer::Replace => (
                format!(" Sets `{name}`: `value` replaces the current value."),
                quote!(::core::option::Option::Some(#value)),
            ),
            reducer => (
                format!(
                    " Writes `{name}`: `value` is merged into the current value through the \
                     `{}` reducer. `overwrite_{name}` replaces it instead.",
                    reducer_label(reducer)
                ),
                quote!(::tea::__private::Slot::Reduce(#value)),
            ),
        };
        methods.push(quote! {
            #(#docs)*
            #separator
            #[doc = #doc]
            #[must_use]
            #[inline]
            #vis fn #ident(mut self, #value: #ty) -> Self {
                self.#ident = #slot;
                self
            }
        });
    }
    for field in state.fields.iter().filter(|field| !field.reducer.is_replace()) {
        let ident = field.ident;
        let ty = field.ty;
        let vis = field.vis;
        let method = overwrite_ident(field);
        if !taken.insert(method.to_string()) {
            continue;
        }
        let doc = format!(
            " Overwrites `{}` with `value`, bypassing its `{}` reducer (e.g. to reset it).",
            ident.unraw(),
            reducer_label(&field.reducer)
        );
        methods.push(quote! {
            #[doc = #doc]
            #[must_use]
            #[inline]
            #vis fn #method(mut self, #value: #ty) -> Self {
                self.#ident = ::tea::__private::Slot::Overwrite(#value);
                self
            }
        });
    }
    methods
}

/// How a reducer is named in docs, `Debug` output and `FIELDS`: `append`, or the `with` path.
fn reducer_label(reducer: &Reducer) -> String {
    match reducer {
        Reducer::Replace => "replace".to_owned(),
        Reducer::Builtin { kind, .. } => kind.name().to_owned(),
        Reducer::With { path } => canonical(path.to_token_stream()),
    }
}

/// `Debug` for the update: only the written fields, with the notation documented on the type
/// (`draft: "x"`, `log: append(["a"])`, `log: overwrite([])`).
fn debug(state: &State, update: &Ident) -> TokenStream {
    let out = local("out");
    let value = local("value");
    let f = local("f");
    let title = LitStr::new(&update.unraw().to_string(), Span::call_site());
    let fields = state.fields.iter().map(|field| {
        let ident = field.ident;
        let name = LitStr::new(&ident.unraw().to_string(), Span::call_site());
        if field.reducer.is_replace() {
            quote! {
                if let ::core::option::Option::Some(#value) = &self.#ident {
                    #out.field(#name, #value);
                }
            }
        } else {
            let reducer = LitStr::new(&reducer_label(&field.reducer), Span::call_site());
            quote! {
                match &self.#ident {
                    ::tea::__private::Slot::Unset => {}
                    ::tea::__private::Slot::Reduce(#value) => {
                        #out.field(#name, &__TeaWritten(#reducer, #value));
                    }
                    ::tea::__private::Slot::Overwrite(#value) => {
                        #out.field(#name, &__TeaWritten("overwrite", #value));
                    }
                }
            }
        }
    });
    let helper = state.fields.iter().any(|field| !field.reducer.is_replace()).then(|| {
        quote! {
        /// Prints a slot as `how(value)`, keeping `{:#?}` pretty-printing of the value.
        struct __TeaWritten<'a, T: ?::core::marker::Sized>(&'static ::core::primitive::str, &'a T);

        impl<T: ?::core::marker::Sized + ::core::fmt::Debug> ::core::fmt::Debug for __TeaWritten<'_, T> {
            fn fmt(&self, #f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                #f.debug_tuple(self.0).field(&self.1).finish()
            }
        }
        }
    });
    quote! {
        #helper

        #[automatically_derived]
        impl ::core::fmt::Debug for #update {
            fn fmt(&self, #f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                let mut #out = #f.debug_struct(#title);
                #(#fields)*
                #out.finish()
            }
        }
    }
}

/// The body of `StateUpdate::writes`: the field's position in declaration order is its index.
fn writes(state: &State) -> TokenStream {
    let index = local("index");
    if state.fields.is_empty() {
        return quote! {
            let _ = #index;
            ::core::option::Option::None
        };
    }
    let arms = state.fields.iter().enumerate().map(|(position, field)| {
        let position = proc_macro2::Literal::usize_unsuffixed(position);
        let ident = field.ident;
        let write = if field.reducer.is_replace() {
            quote! {
                match &self.#ident {
                    ::core::option::Option::Some(_) => {
                        ::core::option::Option::Some(::tea::__private::Write::Replace)
                    }
                    ::core::option::Option::None => ::core::option::Option::None,
                }
            }
        } else {
            quote!(::tea::__private::Slot::write(&self.#ident))
        };
        quote!(#position => #write,)
    });
    quote! {
        match #index {
            #(#arms)*
            _ => ::core::option::Option::None,
        }
    }
}

/// One entry of `GraphState::FIELDS`.
fn field_const(field: &Field) -> TokenStream {
    let name = field.ident.unraw().to_string();
    let ty = canonical(field.ty.to_token_stream());
    let reducer = match &field.reducer {
        Reducer::Replace => quote!(Replace),
        Reducer::Builtin { kind, .. } => match kind {
            Builtin::Append => quote!(Append),
            Builtin::Sum => quote!(Sum),
            Builtin::Max => quote!(Max),
            Builtin::Min => quote!(Min),
            Builtin::Union => quote!(Union),
            Builtin::Merge => quote!(Merge),
            Builtin::Messages => quote!(Messages),
        },
        Reducer::With { .. } => {
            let path = reducer_label(&field.reducer);
            quote!(With(#path))
        }
    };
    quote! {
        ::tea::__private::Field {
            name: #name,
            ty: #ty,
            reducer: ::tea::__private::Reducer::#reducer,
        }
    }
}

/// The canonical text the schema fingerprint hashes: the struct's name, then each field's name,
/// type and reducer, e.g. `Review{draft:String=replace;log:Vec<String>=append;}`.
pub fn schema(state: &State) -> String {
    let mut text = format!("{}{{", state.ident.unraw());
    for field in &state.fields {
        let reducer = match &field.reducer {
            Reducer::With { .. } => format!("with={}", reducer_label(&field.reducer)),
            reducer => reducer_label(reducer),
        };
        text.push_str(&format!("{}:{}={};", field.ident.unraw(), canonical(field.ty.to_token_stream()), reducer));
    }
    text.push('}');
    text
}

/// Tokens as text, spaced by a fixed rule rather than by the compiler's printer (whose spacing
/// may change between compiler versions, and with it every fingerprint): a space only between
/// two words and after `,` / `;`. `std :: vec :: Vec < & 'static str >` → `std::vec::Vec<&'static str>`.
pub fn canonical(tokens: TokenStream) -> String {
    let mut text = String::new();
    write_canonical(tokens, &mut text);
    text
}

fn write_canonical(tokens: TokenStream, text: &mut String) {
    for token in tokens {
        match token {
            TokenTree::Group(group) => {
                let (open, close) = match group.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{", "}"),
                    // An invisible group (a type passed through `macro_rules!`): its contents.
                    Delimiter::None => ("", ""),
                };
                text.push_str(open);
                write_canonical(group.stream(), text);
                text.push_str(close);
            }
            TokenTree::Punct(punct) => {
                text.push(punct.as_char());
                if matches!(punct.as_char(), ',' | ';') {
                    text.push(' ');
                }
            }
            TokenTree::Ident(_) | TokenTree::Literal(_) => {
                let word = token.to_string();
                let after_word = text.ends_with(|c: char| c.is_alphanumeric() || c == '_');
                if after_word {
                    text.push(' ');
                }
                text.push_str(&word);
            }
        }
    }
    // `(u32, )` is not how anyone writes it.
    while text.ends_with(' ') {
        text.pop();
    }
}

/// The body of `GraphState::apply`: each written field through its reducer.
fn apply(state: &State, value: &Ident) -> TokenStream {
    let update = local("update");
    if state.fields.is_empty() {
        return quote!(let _ = #update;);
    }
    let fields = state.fields.iter().map(|field| {
        let ident = field.ident;
        let ty = field.ty;
        let reduce = match &field.reducer {
            Reducer::Replace => {
                return quote! {
                    if let ::core::option::Option::Some(#value) = #update.#ident {
                        self.#ident = #value;
                    }
                };
            }
            // Spanned on the reducer's name in the attribute: a reducer that does not fit the
            // field's type is reported there, with the reducer trait's message.
            Reducer::Builtin { kind, ident: token } => {
                let span = token.span();
                let (trait_, method) = match kind {
                    Builtin::Append => (quote_spanned!(span=> Append), quote_spanned!(span=> append)),
                    Builtin::Sum => (quote_spanned!(span=> Sum), quote_spanned!(span=> sum)),
                    Builtin::Max => (quote_spanned!(span=> Extremum), quote_spanned!(span=> max)),
                    Builtin::Min => (quote_spanned!(span=> Extremum), quote_spanned!(span=> min)),
                    Builtin::Union => (quote_spanned!(span=> Union), quote_spanned!(span=> union)),
                    Builtin::Merge => (quote_spanned!(span=> Merge), quote_spanned!(span=> merge)),
                    Builtin::Messages => (quote_spanned!(span=> AddMessages), quote_spanned!(span=> add_messages)),
                };
                quote_spanned! {span=>
                    ::tea::__private::#trait_::#method(&mut self.#ident, #value)
                }
            }
            Reducer::With { path } => {
                let span = path.path.segments.first().map_or_else(Span::call_site, |s| s.ident.span());
                quote_spanned! {span=>
                    ::tea::__private::CustomReducer::<#ty>::reduce(&#path, &mut self.#ident, #value)
                }
            }
        };
        quote! {
            match #update.#ident {
                ::tea::__private::Slot::Unset => {}
                ::tea::__private::Slot::Reduce(#value) => {
                    #reduce;
                }
                ::tea::__private::Slot::Overwrite(#value) => {
                    self.#ident = #value;
                }
            }
        }
    });
    quote!(#(#fields)*)
}

#[cfg(test)]
mod tests {
    use super::super::{parse::parse, Errors};
    use super::*;
    use syn::{parse_quote, DeriveInput};

    #[test]
    fn canonical_text_spaces_only_between_words() {
        let cases: [(TokenStream, &str); 7] = [
            (quote!(String), "String"),
            (quote!(std::collections::BTreeMap<String, Vec<u8>>), "std::collections::BTreeMap<String, Vec<u8>>"),
            (quote!(&'static str), "&'static str"),
            (quote!([u8; 4]), "[u8; 4]"),
            (quote!((u32, String,)), "(u32, String,)"),
            (quote!(Option<Box<dyn Fn(u32) -> u32 + Send>>), "Option<Box<dyn Fn(u32)->u32+Send>>"),
            (quote!(<T as Trait>::f), "<T as Trait>::f"),
        ];
        for (tokens, expected) in cases {
            assert_eq!(canonical(tokens), expected);
        }
    }

    #[test]
    fn canonical_text_sees_through_invisible_groups() {
        let inner = quote!(Vec<u8>);
        let wrapped: TokenStream = TokenTree::Group(proc_macro2::Group::new(Delimiter::None, inner)).into();
        assert_eq!(canonical(wrapped), "Vec<u8>");
    }

    #[test]
    fn schema_names_struct_fields_types_and_reducers() {
        let input: DeriveInput = parse_quote! {
            struct Review {
                draft: String,
                #[reducer(append)] log: Vec<String>,
                #[reducer(with = util::keep_longer)] summary: String,
                r#type: u8,
            }
        };
        let mut errors = Errors::default();
        let state = parse(&input, &mut errors).expect("a struct");
        assert_eq!(
            schema(&state),
            "Review{draft:String=replace;log:Vec<String>=append;\
             summary:String=with=util::keep_longer;type:u8=replace;}"
        );
    }

    #[test]
    fn expansion_adds_one_name_outside_the_const_block() {
        let input: DeriveInput = parse_quote! {
            pub struct Review { #[reducer(sum)] pub n: u32 }
        };
        let mut errors = Errors::default();
        let state = parse(&input, &mut errors).expect("a struct");
        let file: syn::File = syn::parse2(expand(&state)).expect("the expansion parses");
        assert_eq!(file.items.len(), 2, "the update struct and one `const _`");
        let syn::Item::Struct(update) = &file.items[0] else { panic!("a struct first") };
        assert_eq!(update.ident, "ReviewUpdate");
        assert!(matches!(update.vis, syn::Visibility::Public(_)));
        assert!(update.fields.iter().all(|f| matches!(f.vis, syn::Visibility::Inherited)));
        let syn::Item::Const(block) = &file.items[1] else { panic!("then a const") };
        assert_eq!(block.ident, "_");
    }
}
