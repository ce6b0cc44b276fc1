//! Attribute macros of pgflow: `#[flow]` on an inline module of `async fn` step handlers, and
//! `#[step]` on each handler. Use them through the `pgflow` crate (`#[pgflow::flow(...)]`).
//!
//! The macro parses its arguments and the module (`parse`, `model`), checks the step graph
//! (`graph`), then appends thin generated items that call into `::pgflow::__private`
//! (`expand`). All errors of one invocation are reported together, each at the offending
//! tokens; the module is still emitted (with `#[step]` attributes removed) so that editors keep
//! working. See the `pgflow` crate's documentation for the DSL and what it expands to.

use proc_macro::TokenStream;
use quote::quote;
use syn::{Item, ItemMod};

mod errors;
mod expand;
mod graph;
mod model;
#[path = "../../pgflow-runtime/src/names/rules.rs"]
#[allow(dead_code)]
mod names;
mod parse;

use errors::{Errors, msg};

/// Turns an inline module of `#[step]` handlers into a typed concrete flow. See the `pgflow`
/// crate's documentation.
#[proc_macro_attribute]
pub fn flow(args: TokenStream, item: TokenStream) -> TokenStream {
    flow_impl(args.into(), item.into()).into()
}

/// Marks an `async fn` in a `#[flow]` module as a step. On its own (outside a `#[flow]`
/// module) it is an error: `#[flow]` reads and removes these attributes.
#[proc_macro_attribute]
pub fn step(_args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let error = syn::Error::new(proc_macro2::Span::call_site(), msg::step_outside_flow())
        .to_compile_error();
    quote!(#error #item).into()
}

fn flow_impl(args: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    let mut errors = Errors::default();
    let mut module = match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Mod(module)) => module,
        Ok(other) => {
            errors.at(&other, msg::flow_on_non_module());
            let compile_errors = errors.to_compile_errors();
            return quote!(#compile_errors #item);
        }
        Err(error) => return error.to_compile_error(),
    };
    if module.content.is_none() {
        errors.at(&module, msg::non_inline_module());
        let compile_errors = errors.to_compile_errors();
        return quote!(#compile_errors #module);
    }

    let args = parse::flow_args(args, &mut errors);
    let flow = model::read(args, &mut module, &mut errors);
    let order = graph::check(&flow.steps, &mut errors);

    match order {
        Some(order) if errors.is_empty() => {
            let expanded: ItemMod = expand::expand(&flow, &order, module, &mut errors);
            let compile_errors = errors.to_compile_errors();
            quote!(#compile_errors #expanded)
        }
        _ => {
            // Emit the user's module (attributes stripped) so editors keep resolving it.
            let compile_errors = errors.to_compile_errors();
            quote!(#compile_errors #module)
        }
    }
}
