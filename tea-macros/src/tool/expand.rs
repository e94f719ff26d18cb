//! Writes the function back and the unit struct that implements `Tool` for it.

use super::parse::Tool;
use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;

/// The struct's declaration (also emitted on errors, so that its uses still resolve).
fn declaration(function: &syn::ItemFn, tool: &Tool) -> TokenStream {
    let vis = &function.vis;
    let ty = &tool.type_name;
    let doc = format!(
        "The tool `{}` made by `#[tool]` from [`{}`]: give it to a `ToolNode` or `react_agent` as `{}`.",
        tool.name,
        function.sig.ident.unraw_name(),
        ty
    );
    quote! {
        #[doc = #doc]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug, ::core::default::Default)]
        #vis struct #ty;
    }
}

trait UnrawName {
    fn unraw_name(&self) -> String;
}

impl UnrawName for syn::Ident {
    fn unraw_name(&self) -> String {
        syn::ext::IdentExt::unraw(self).to_string()
    }
}

pub fn fallback(function: &syn::ItemFn, tool: &Tool) -> TokenStream {
    if function.sig.receiver().is_some() {
        // A method: the attribute sits in an `impl`, where no struct can be declared.
        return quote!(#function);
    }
    let declaration = declaration(function, tool);
    quote! {
        #function
        #declaration
    }
}

/// Whether the function's return type is written `Result<…>` (its `Err` becomes the tool's
/// error text).
fn returns_result(output: &syn::ReturnType) -> bool {
    match output {
        syn::ReturnType::Default => false,
        syn::ReturnType::Type(_, ty) => match &**ty {
            syn::Type::Path(path) => path.path.segments.last().is_some_and(|last| last.ident == "Result"),
            _ => false,
        },
    }
}

pub fn expand(function: &syn::ItemFn, tool: &Tool) -> TokenStream {
    let declaration = declaration(function, tool);
    let private = quote!(::tea::__private);
    let ty = &tool.type_name;
    let name = &tool.name;
    let description = &tool.description;
    let approval = tool.approval;
    let fn_ident = &function.sig.ident;
    let slots: Vec<_> = tool.params.iter().enumerate().map(|(i, _)| format_ident!("__TEA_PARAM_{}", i)).collect();
    let idents: Vec<_> = tool.params.iter().map(|p| &p.ident).collect();
    let keys: Vec<_> = tool.params.iter().map(|p| &p.key).collect();
    let docs: Vec<_> = tool.params.iter().map(|p| &p.doc).collect();
    let optional: Vec<_> = tool.params.iter().map(|p| p.optional).collect();
    // Each parameter's type is checked once, here, spanned on the type: a type that cannot be
    // decoded or described is one error on it.
    let params = tool.params.iter().zip(&slots).map(|(param, slot)| {
        let param_ty = &param.ty;
        quote_spanned! {param_ty.span()=>
            const #slot: #private::ToolParam<#param_ty> = #private::tool_param::<#param_ty>();
        }
    });
    let output = if returns_result(&function.sig.output) {
        quote_spanned!(function.sig.output.span()=> #private::tool_result)
    } else {
        quote_spanned!(function.sig.output.span()=> #private::tool_output)
    };
    // The function's arguments in its order: the `&Memory` one is the memory the call was
    // given (an owned clone, which an async tool's future keeps).
    let arguments: Vec<_> = tool
        .order
        .iter()
        .map(|ident| if tool.memory.as_ref() == Some(ident) { quote!(&__tea_memory) } else { quote!(#ident) })
        .collect();
    let body = if function.sig.asyncness.is_some() {
        quote! {
            #private::boxed_tool(async move { #output(#name, #fn_ident(#(#arguments),*).await) })
        }
    } else {
        quote! {
            #private::tool_ready(#output(#name, #fn_ident(#(#arguments),*)))
        }
    };
    let decode = if tool.params.is_empty() {
        quote! {
            if let ::core::result::Result::Err(error) = #private::ToolArgs::new(#name, __arguments, &[]) {
                return #private::tool_ready(::core::result::Result::Err(error));
            }
        }
    } else {
        quote! {
            let mut __args = match #private::ToolArgs::new(#name, __arguments, &[#(#keys),*]) {
                ::core::result::Result::Ok(args) => args,
                ::core::result::Result::Err(error) => return #private::tool_ready(::core::result::Result::Err(error)),
            };
            #(let #idents = __args.take(#keys, #optional, #slots.decode);)*
            let (#(#idents,)*) = match (#(#idents,)*) {
                (#(::core::option::Option::Some(#idents),)*) => (#(#idents,)*),
                _ => return #private::tool_ready(::core::result::Result::Err(__args.into_error())),
            };
        }
    };
    let calls = if tool.memory.is_some() {
        quote! {
            fn uses_memory(&self) -> bool {
                true
            }
            fn call(&self, __arguments: #private::serde_json::Value) -> #private::ToolFuture {
                ::core::mem::drop(__arguments);
                #private::tool_without_memory(#name)
            }
            fn call_with_memory(
                &self,
                __arguments: #private::serde_json::Value,
                __memory: &#private::Memory,
            ) -> #private::ToolFuture {
                let __tea_memory: #private::Memory = ::core::clone::Clone::clone(__memory);
                #decode
                #body
            }
        }
    } else {
        quote! {
            fn call(&self, __arguments: #private::serde_json::Value) -> #private::ToolFuture {
                #decode
                #body
            }
        }
    };
    let name_span = tool.name_span;
    let name_lit = quote_spanned!(name_span=> #name);
    quote! {
            #function
            #declaration
            #[allow(non_upper_case_globals, clippy::all)]
            const _: () = {
                #(#params)*
                #[automatically_derived]
                impl #private::Tool for #ty {
                    fn name(&self) -> &str {
                        #name_lit
                    }
                    fn description(&self) -> &str {
                        #description
                    }
                    fn parameters(&self) -> #private::serde_json::Value {
                        let mut __schema = #private::ToolSchema::new();
                        #(__schema.param(#keys, #docs, #optional, #slots.schema);)*
                        __schema.finish()
                    }
                    fn needs_approval(&self) -> bool {
                        #approval
                    }
    #calls
                }
            };
        }
}
