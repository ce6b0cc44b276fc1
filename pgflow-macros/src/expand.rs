//! Code generation: thin data and shims that call `::pgflow::__private`.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Ident, ItemMod, Type};

use crate::errors::{Errors, msg};
use crate::model::{Flow, ParamKind, Step};
use crate::parse::{MapSource, SkipMode, Subflow};

/// The module with the generated items appended.
pub(crate) fn expand(
    flow: &Flow,
    order: &[usize],
    mut module: ItemMod,
    errors: &mut Errors,
) -> ItemMod {
    let queues = queue_variants(flow, errors);
    let flow_vis = flow_type_visibility(&module.vis);
    let generated = generated_items(flow, order, &queues, &flow_vis);
    if let Some((_, items)) = &mut module.content {
        items.push(syn::Item::Verbatim(generated));
    }
    module
}

/// How visible the generated `Flow` and `Queue` types are: as visible as the module itself.
/// `FlowSpec::Input` names the user's input type (and `FlowQueue::Flow` names `Flow`), and Rust
/// requires an associated type to be at least as visible as the implementing type; a `pub` `Flow` in a private module would refuse a private input type
/// declared next to the module (E0446), although nothing outside could reach it.
fn flow_type_visibility(module_vis: &syn::Visibility) -> TokenStream {
    match module_vis {
        syn::Visibility::Public(_) => quote!(pub),
        // Private to the module's parent: visible in the parent, one level up from inside.
        syn::Visibility::Inherited => quote!(pub(super)),
        syn::Visibility::Restricted(restricted) => {
            // `crate` and `crate::..` mean the same inside; `self` and `super` shift one level.
            let path = &restricted.path;
            match path
                .segments
                .first()
                .map(|s| s.ident.to_string())
                .as_deref()
            {
                Some("self") => {
                    let rest = path.segments.iter().skip(1);
                    quote!(pub(in super #(:: #rest)*))
                }
                Some("super") => quote!(pub(in super::#path)),
                _ => quote!(pub(in #path)),
            }
        }
    }
}

/// `(queue name, variant)` for every queue routed to, in topological step order.
fn queue_variants(flow: &Flow, errors: &mut Errors) -> Vec<(String, Ident)> {
    let default_queue = flow.slug.to_ascii_lowercase();
    let mut queues: Vec<(String, Ident)> = Vec::new();
    for step in &flow.steps {
        let (name, span) = match &step.queue {
            Some(q) => (q.value.clone(), q.span),
            None => (default_queue.clone(), step.ident.span()),
        };
        if queues.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let variant = Ident::new(&variant_name(&name), span);
        if let Some((other, _)) = queues.iter().find(|(_, v)| *v == variant) {
            errors.push(syn::Error::new(
                span,
                msg::queue_variant_clash(other, &name),
            ));
            continue;
        }
        queues.push((name, variant));
    }
    queues
}

/// `classify_threads` -> `ClassifyThreads`; a leading digit gets a `Q` prefix.
pub(crate) fn variant_name(queue: &str) -> String {
    let mut name: String = queue
        .split('_')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, 'Q');
    }
    name
}

fn option_tokens<T: quote::ToTokens>(value: Option<T>) -> TokenStream {
    match value {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    }
}

fn generated_items(
    flow: &Flow,
    order: &[usize],
    queues: &[(String, Ident)],
    flow_vis: &TokenStream,
) -> TokenStream {
    let steps: Vec<&Step> = order.iter().map(|&i| &flow.steps[i]).collect();
    let input_ty: Type = flow
        .input
        .clone()
        .unwrap_or_else(|| syn::parse_quote!(::pgflow::__private::serde_json::Value));

    let state_ty: Type = flow.state.clone().unwrap_or_else(|| syn::parse_quote!(()));
    let deployment_fn = if flow.state.is_some() {
        quote! {
            /// This flow's deployment, carrying the application state its handlers take: what a
            /// worker carries.
            #[allow(dead_code)]
            pub fn deployment(state: #state_ty) -> ::pgflow::__private::Deployment<Flow> {
                ::pgflow::__private::Deployment::with_state(state)
            }
        }
    } else {
        quote! {
            /// This flow's deployment: what a worker carries and a client starts.
            #[allow(dead_code)]
            pub fn deployment() -> ::pgflow::__private::Deployment<Flow> {
                ::pgflow::__private::Deployment::new()
            }
        }
    };

    let queue_enum = queue_enum(queues, flow_vis);
    let decl = flow_decl(flow, &steps);
    let output = output_struct(flow, &steps);
    let adapters: Vec<TokenStream> = steps.iter().map(|s| adapter(s)).collect();
    let signal_senders: Vec<TokenStream> = steps.iter().filter_map(|s| signal_senders(s)).collect();
    let checks: Vec<TokenStream> = steps
        .iter()
        .map(|s| static_checks(flow, s, &input_ty))
        .collect();
    let handler_arms = steps.iter().map(|s| {
        let slug = &s.slug;
        let adapter = adapter_ident(s);
        quote!(#slug => ::core::option::Option::Some(#adapter as ::pgflow::__private::StepHandler))
    });
    let slug = &flow.slug;
    let alias = &flow.alias;
    let doc_flow = format!("The concrete flow `{slug}` as a type.");
    let doc_start_alias = format!(
        "Starts a run of the alias `{alias}`, typed: its active version, which must take and \
         produce this flow's types (every version declaring the same `input` and `output`); \
         see `Start::alias_of`."
    );

    quote! {
        #queue_enum

        #[doc = #doc_flow]
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        #[allow(dead_code)]
        #flow_vis struct Flow;

        /// The concrete slug of this flow.
        #[allow(dead_code)]
        pub const SLUG: &str = #slug;

        #output

        impl ::pgflow::__private::FlowSpec for Flow {
            type Input = #input_ty;
            type Output = Output;
            type Queue = Queue;
            type State = #state_ty;
            const SLUG: &'static str = #slug;
            const ALIAS: &'static str = #alias;

            // `..DEFAULT` lets the runtime add fields without breaking generated code.
            #[allow(clippy::needless_update)]
            fn definition() -> ::pgflow::__private::FlowDefinition {
                #decl
                ::pgflow::__private::definition(&DECL)
            }

            fn handler(step_slug: &str) -> ::core::option::Option<::pgflow::__private::StepHandler> {
                match step_slug {
                    #(#handler_arms,)*
                    _ => ::core::option::Option::None,
                }
            }
        }

        #deployment_fn

        /// Starts a run of this flow.
        #[allow(dead_code)]
        pub async fn start(
            client: &::pgflow::__private::Client,
            input: &#input_ty,
        ) -> ::core::result::Result<
            ::pgflow::__private::RunHandle<Output>,
            ::pgflow::__private::EngineError,
        > {
            ::pgflow::__private::start::<Flow>(client, input).await
        }

        #[doc = #doc_start_alias]
        #[allow(dead_code)]
        pub async fn start_alias(
            client: &::pgflow::__private::Client,
            input: &#input_ty,
        ) -> ::core::result::Result<
            ::pgflow::__private::RunHandle<Output>,
            ::pgflow::__private::EngineError,
        > {
            ::pgflow::__private::start_alias::<Flow>(client, input).await
        }

        #(#signal_senders)*

        #(#adapters)*

        #(#checks)*
    }
}

/// A step reached by key reads its key, a capped step its cap's key, and a step that sleeps
/// until a time reads that time, at a field path of the flow input or of a dependency's output:
/// a function that reads those fields compiles only when they exist, and a misspelt field is
/// reported at its name in `key = ...`, `concurrency_key = ...`, `rate_key = ...` or
/// `sleep_until = ...`; the
/// time must also be a `pgflow::rules::WakeTime`. (Nothing to check for a key without fields,
/// or a root whose type is `serde_json::Value`.)
fn path_checks(
    flow: &Flow,
    step: &Step,
    output_of: &dyn Fn(&Ident) -> Option<TokenStream>,
) -> Vec<TokenStream> {
    let keys = [&step.signal_key, &step.concurrency_key, &step.rate_key]
        .into_iter()
        .filter_map(|path| path.as_ref().filter(|path| path.len() > 1))
        .filter_map(|path| path_check(flow, path, output_of, None));
    let wake = step.sleep_until.as_ref().and_then(|path| {
        let span = path.last()?.span();
        path_check(flow, path, output_of, Some(span))
    });
    keys.chain(wake).collect()
}

/// A function that reads `path` from the type of its root; with `wake_time_at`, it also checks
/// the value is a time to wake at, and a value that is not is reported there.
fn path_check(
    flow: &Flow,
    path: &[Ident],
    output_of: &dyn Fn(&Ident) -> Option<TokenStream>,
    wake_time_at: Option<Span>,
) -> Option<TokenStream> {
    let (root, fields) = path.split_first()?;
    let root_ty = if root == "input" {
        let ty = flow
            .input
            .as_ref()
            .filter(|ty| !crate::model::is_json_value(ty))?;
        quote!(#ty)
    } else {
        let dep = flow.step_named(root)?;
        if ok_type(dep).is_none_or(crate::model::is_json_value) {
            return None;
        }
        output_of(root)?
    };
    let read = match wake_time_at {
        Some(span) => quote_spanned! {span=>
            ::pgflow::__private::WakeTime::holds(&root #(.#fields)*);
        },
        None => quote!(let _ = &root #(.#fields)*;),
    };
    Some(quote! {
        const _: () = {
            #[allow(dead_code)]
            fn path_fields(root: &#root_ty) {
                #read
            }
        };
    })
}

/// The `T` of a step's declared `Result<T, E>`, as written.
fn ok_type(step: &Step) -> Option<&Type> {
    let Some(Type::Path(path)) = &step.output else {
        return None;
    };
    let syn::PathArguments::AngleBracketed(args) = &path.path.segments.last()?.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(ty) => Some(ty),
        _ => None,
    }
}

/// The typed functions that send a step's signal: `signal_<name>` through a client and
/// `signal_<name>_in` through any executor (the caller's transaction), and for a step reached
/// by key `emit_<name>` and `emit_<name>_in`. The payload parameter has the type the step's
/// handler takes, so a wrong payload does not compile.
fn signal_senders(step: &Step) -> Option<TokenStream> {
    let signal = step.signal.as_ref()?;
    let payload_ty = &step.signal_param()?.ty;
    let names = step.signal_senders();
    let (send, send_in) = (&names[0], &names[1]);
    let name = signal.to_string();
    let name = name.trim_start_matches("r#");
    let step_slug = &step.slug;
    // Spanned at the payload type, so that a type that is not JSON is reported there.
    let encode = quote_spanned! {payload_ty.span()=>
        <#payload_ty as ::pgflow::__private::SignalPayload>::to_json(payload)
    };
    let doc = format!(
        "Sends signal `{name}` to run `run_id`: step `{step_slug}` waits for it and receives \
         `payload`. Returns what the send did (delivered, kept for later, or a duplicate); a \
         refusal changes nothing (see `Client::signal`)."
    );
    let doc_in = format!(
        "Sends signal `{name}` through `executor` (for example the caller's transaction: sent \
         when it commits, never when it rolls back); otherwise as `{send}`."
    );
    let emitters = match names.get(2..4) {
        Some([emit, emit_in]) => {
            let doc = format!(
                "Delivers event `{name}` with `payload` to every run waiting for it by `key` \
                 (step `{step_slug}` of this flow, and any other flow's step that waits for \
                 `{name}` by key); returns the runs it reached (see `Client::emit_event`)."
            );
            let doc_in = format!(
                "Delivers event `{name}` through `executor` (for example the caller's \
                 transaction); otherwise as `{emit}`."
            );
            quote! {
                #[doc = #doc]
                #[allow(dead_code)]
                pub async fn #emit<K: ::pgflow::__private::serde::Serialize + ?::core::marker::Sized>(
                    client: &::pgflow::__private::Client,
                    key: &K,
                    payload: &#payload_ty,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::pgflow::__private::EventDelivery>,
                    ::pgflow::__private::EngineError,
                > {
                    ::pgflow::__private::emit_event(client.db(), #name, key, #encode).await
                }

                #[doc = #doc_in]
                #[allow(dead_code)]
                pub async fn #emit_in<'c, K: ::pgflow::__private::serde::Serialize + ?::core::marker::Sized>(
                    executor: impl ::pgflow::__private::PgExecutor<'c>,
                    key: &K,
                    payload: &#payload_ty,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::pgflow::__private::EventDelivery>,
                    ::pgflow::__private::EngineError,
                > {
                    ::pgflow::__private::emit_event(executor, #name, key, #encode).await
                }
            }
        }
        _ => TokenStream::new(),
    };
    Some(quote! {
        #emitters

        #[doc = #doc]
        #[allow(dead_code)]
        pub async fn #send(
            client: &::pgflow::__private::Client,
            run_id: ::pgflow::__private::Uuid,
            payload: &#payload_ty,
        ) -> ::core::result::Result<
            ::pgflow::__private::SignalOutcome,
            ::pgflow::__private::EngineError,
        > {
            ::pgflow::__private::send_signal(client.db(), run_id, #name, #encode).await
        }

        #[doc = #doc_in]
        #[allow(dead_code)]
        pub async fn #send_in<'c>(
            executor: impl ::pgflow::__private::PgExecutor<'c>,
            run_id: ::pgflow::__private::Uuid,
            payload: &#payload_ty,
        ) -> ::core::result::Result<
            ::pgflow::__private::SignalOutcome,
            ::pgflow::__private::EngineError,
        > {
            ::pgflow::__private::send_signal(executor, run_id, #name, #encode).await
        }
    })
}

fn queue_enum(queues: &[(String, Ident)], flow_vis: &TokenStream) -> TokenStream {
    let variants: Vec<&Ident> = queues.iter().map(|(_, v)| v).collect();
    let names: Vec<&String> = queues.iter().map(|(n, _)| n).collect();
    let docs = names.iter().map(|n| format!("The queue `{n}`."));
    let count = queues.len();
    quote! {
        /// The queues this flow routes steps to.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(dead_code)]
        #flow_vis enum Queue {
            #(#[doc = #docs] #variants,)*
        }

        #[allow(dead_code)]
        impl Queue {
            /// Every queue of this flow.
            pub const ALL: [Queue; #count] = [#(Queue::#variants),*];

            /// The queue's name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    #(Queue::#variants => #names,)*
                }
            }
        }

        impl ::core::fmt::Display for Queue {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::pgflow::__private::FlowQueue for Queue {
            type Flow = Flow;
            fn name(self) -> &'static str {
                self.as_str()
            }
        }
    }
}

fn flow_decl(flow: &Flow, steps: &[&Step]) -> TokenStream {
    let slug = &flow.slug;
    let alias = &flow.alias;
    let version = flow.version;
    let max_attempts = option_tokens(flow.max_attempts);
    let base_delay = option_tokens(flow.base_delay);
    let max_delay = option_tokens(flow.max_delay);
    let jitter_percent = option_tokens(flow.jitter_percent);
    let timeout = option_tokens(flow.timeout);
    // Spanned at the input type, so that a type without `JsonSchema` is reported there.
    let input_schema = match (&flow.input, flow.check_input) {
        (Some(ty), true) => quote_spanned! {ty.span()=>
            input_schema: ::core::option::Option::Some(
                <#ty as ::pgflow::__private::InputSchema>::input_schema
                    as fn() -> ::pgflow::__private::serde_json::Value
            ),
        },
        _ => TokenStream::new(),
    };
    let step_decls = steps.iter().map(|step| {
        let slug = &step.slug;
        let map = step.map.is_some();
        let deps = step.dep_names();
        let queue = option_tokens(step.queue.as_ref().map(|q| q.value.clone()));
        let max_attempts = option_tokens(step.max_attempts);
        let base_delay = option_tokens(step.base_delay);
        let max_delay = option_tokens(step.max_delay);
        let jitter_percent = option_tokens(step.jitter_percent);
        let timeout = option_tokens(step.timeout);
        let start_delay = option_tokens(step.start_delay);
        let conditions = condition_fields(step);
        let signal = signal_field(flow, step);
        let sleep = sleep_fields(step);
        let subflow = subflow_field(step);
        let concurrency = concurrency_fields(step);
        let rate = rate_fields(step);
        quote! {
            ::pgflow::__private::StepDecl {
                slug: #slug,
                map: #map,
                depends_on: &[#(#deps),*],
                queue: #queue,
                max_attempts: #max_attempts,
                base_delay: #base_delay,
                max_delay: #max_delay,
                jitter_percent: #jitter_percent,
                timeout: #timeout,
                start_delay: #start_delay,
                #conditions
                #signal
                #sleep
                #subflow
                #concurrency
                #rate
                ..::pgflow::__private::StepDecl::DEFAULT
            }
        }
    });
    quote! {
        const DECL: ::pgflow::__private::FlowDecl = ::pgflow::__private::FlowDecl {
            slug: #slug,
            alias: #alias,
            version: #version,
            max_attempts: #max_attempts,
            base_delay: #base_delay,
            max_delay: #max_delay,
            jitter_percent: #jitter_percent,
            timeout: #timeout,
            steps: &[#(#step_decls),*],
            #input_schema
            ..::pgflow::__private::FlowDecl::DEFAULT
        };
    }
}

/// The `StepDecl` fields of a step's sleep, if it sleeps.
fn sleep_fields(step: &Step) -> TokenStream {
    match (step.sleep, &step.sleep_until) {
        (Some(seconds), _) => quote!(sleep: ::core::option::Option::Some(#seconds),),
        (None, Some(path)) => {
            let parts = path_strings(path);
            quote!(sleep_until: ::core::option::Option::Some(&[#(#parts),*]),)
        }
        (None, None) => TokenStream::new(),
    }
}

/// The `StepDecl` fields of a step's concurrency cap, if it has one.
fn concurrency_fields(step: &Step) -> TokenStream {
    let Some(limit) = step.concurrency else {
        return TokenStream::new();
    };
    let key = step.concurrency_key.as_ref().map(|path| {
        let parts = path_strings(path);
        quote!(concurrency_key: ::core::option::Option::Some(&[#(#parts),*]),)
    });
    quote!(concurrency: ::core::option::Option::Some(#limit), #key)
}

/// The `StepDecl` fields of a step's rate limit, if it has one.
fn rate_fields(step: &Step) -> TokenStream {
    let Some(rate) = step.rate_limit else {
        return TokenStream::new();
    };
    let (limit, period_ms) = (rate.limit, rate.period_ms);
    let key = step.rate_key.as_ref().map(|path| {
        let parts = path_strings(path);
        quote!(rate_key: ::core::option::Option::Some(&[#(#parts),*]),)
    });
    quote!(rate_limit: ::core::option::Option::Some((#limit, #period_ms)), #key)
}

/// The `StepDecl` field of the flow a step runs, if it runs one.
fn subflow_field(step: &Step) -> TokenStream {
    let (Some(subflow), Some(ret)) = (&step.subflow, &step.output) else {
        return TokenStream::new();
    };
    let alias = match subflow {
        Subflow::Module(path) => quote!(<#path::Flow as ::pgflow::__private::FlowSpec>::ALIAS),
        Subflow::Named(name) => quote!(#name),
    };
    let timeout = option_tokens(step.wait_timeout);
    let mode = Ident::new(step.when_timed_out.variant(), Span::call_site());
    quote! {
        subflow: ::core::option::Option::Some(::pgflow::__private::SubflowDecl {
            alias: #alias,
            input_type: ::std::any::type_name::<
                <#ret as ::pgflow::__private::StepResult>::Output
            > as fn() -> &'static str,
            timeout: #timeout,
            when_timed_out: ::pgflow::__private::WhenTimedOut::#mode,
        }),
    }
}

/// A field path's parts as the SQL core reads them (raw identifiers without `r#`).
fn path_strings(path: &[Ident]) -> impl Iterator<Item = String> + '_ {
    path.iter()
        .map(|part| part.to_string().trim_start_matches("r#").to_owned())
}

/// The `StepDecl` field of the signal a step waits for, if it waits for one.
fn signal_field(flow: &Flow, step: &Step) -> TokenStream {
    let (Some(signal), Some(param)) = (&step.signal, step.signal_param()) else {
        return TokenStream::new();
    };
    let name = signal.to_string();
    let name = name.trim_start_matches("r#");
    let ty = &param.ty;
    let timeout = option_tokens(step.wait_timeout);
    let mode = Ident::new(step.when_timed_out.variant(), Span::call_site());
    let key = match &step.signal_key {
        Some(path) => {
            let parts = path_strings(path);
            quote!(::core::option::Option::Some(&[#(#parts),*]))
        }
        None => quote!(::core::option::Option::None),
    };
    // Spanned at the payload type, so that a type without `JsonSchema` is reported there.
    let schema = if flow.check_input {
        quote_spanned! {ty.span()=>
            ::core::option::Option::Some(
                <#ty as ::pgflow::__private::SignalSchema>::signal_schema
                    as fn() -> ::pgflow::__private::serde_json::Value
            )
        }
    } else {
        quote!(::core::option::Option::None)
    };
    quote! {
        signal: ::core::option::Option::Some(::pgflow::__private::SignalDecl {
            name: #name,
            type_name: ::std::any::type_name::<#ty> as fn() -> &'static str,
            schema: #schema,
            timeout: #timeout,
            when_timed_out: ::pgflow::__private::WhenTimedOut::#mode,
            key: #key,
        }),
    }
}

/// The `StepDecl` fields of a step's condition and skip modes, only those it sets (the
/// defaults come from `StepDecl::DEFAULT`).
fn condition_fields(step: &Step) -> TokenStream {
    let mut fields = TokenStream::new();
    for (name, pattern) in [("when", &step.when), ("unless", &step.unless)] {
        if let Some(pattern) = pattern {
            let field = Ident::new(name, Span::call_site());
            let text = pattern.json_text();
            fields.extend(quote!(#field: ::core::option::Option::Some(#text),));
        }
    }
    if step.has_condition() && step.when_unmet != SkipMode::Skip {
        let variant = Ident::new(step.when_unmet.variant(), Span::call_site());
        fields.extend(quote!(when_unmet: ::pgflow::__private::WhenUnmet::#variant,));
    }
    if step.when_exhausted != SkipMode::Fail {
        let variant = Ident::new(step.when_exhausted.variant(), Span::call_site());
        fields.extend(quote!(when_exhausted: ::pgflow::__private::WhenExhausted::#variant,));
    }
    fields
}

/// The run output's fields: one per leaf step (a step nothing depends on), as the run output
/// holds them, with its type and doc.
fn output_fields<'a>(
    flow: &'a Flow,
    steps: &'a [&'a Step],
) -> impl Iterator<Item = (&'a Ident, TokenStream, String)> + 'a {
    let leaves = steps.iter().filter(|step| {
        !flow
            .steps
            .iter()
            .any(|other| other.deps.contains(&step.ident))
    });
    leaves.filter_map(|step| {
        let output = step_output_type(step)?;
        Some(if flow.may_end_skipped(step) {
            (
                &step.ident,
                quote!(::core::option::Option<#output>),
                format!(
                    "The output of step `{}`; `None` when the run skipped it.",
                    step.slug
                ),
            )
        } else {
            (
                &step.ident,
                output,
                format!("The output of step `{}`.", step.slug),
            )
        })
    })
}

/// `Output`: the generated struct of the leaf steps' outputs, or the user's `output = T`,
/// checked at compile time to have exactly those fields with those types.
fn output_struct(flow: &Flow, steps: &[&Step]) -> TokenStream {
    if let Some(declared) = &flow.output {
        let span = declared.span();
        let (names, types): (Vec<Ident>, Vec<TokenStream>) = output_fields(flow, steps)
            .map(|(ident, ty, _)| (Ident::new(&ident.to_string(), span), ty))
            .unzip();
        return quote_spanned! {span=>
            /// The output of a completed run: the type this flow declares with `output`, whose
            /// fields are the outputs of the steps nothing depends on.
            #[allow(dead_code)]
            pub type Output = #declared;

            // `output = T` must have exactly one field per step nothing depends on (the struct
            // expression names them all), named after the step and of its output type (each
            // field is checked against the step). Never called.
            #[doc(hidden)]
            #[allow(dead_code)]
            fn __pgflow_output_fields(output: Output) -> Output {
                #(::pgflow::__private::assert_output_field::<#types, _>(&output.#names);)*
                Output { #(#names: ::pgflow::__private::type_checked_only()),* }
            }
        };
    }
    let fields = output_fields(flow, steps).map(|(ident, ty, doc)| {
        quote! {
            #[doc = #doc]
            pub #ident: #ty
        }
    });
    quote! {
        /// The output of a completed run: the outputs of the steps nothing depends on (`Debug`, so
        /// those step output types must be `Debug`; nothing else is asked of them).
        #[derive(Debug, ::pgflow::__private::serde::Deserialize)]
        #[allow(dead_code)]
        #[serde(crate = "::pgflow::__private::serde")]
        pub struct Output {
            #(#fields,)*
        }
    }
}

/// The type of a step's output as its dependents and the run output see it: the handler's
/// `T`, or `Vec<T>` for a map step.
fn step_output_type(step: &Step) -> Option<TokenStream> {
    let ret = step.output.as_ref()?;
    // A step that runs a flow outputs that flow's output (as JSON for a flow named by its
    // alias, whose output type the compiler cannot see); any other, what its handler returns.
    let output = match &step.subflow {
        Some(Subflow::Module(path)) => {
            quote!(<#path::Flow as ::pgflow::__private::FlowSpec>::Output)
        }
        Some(Subflow::Named(_)) => quote!(::pgflow::__private::serde_json::Value),
        None => quote!(<#ret as ::pgflow::__private::StepResult>::Output),
    };
    Some(if step.map.is_some() {
        quote!(::std::vec::Vec<#output>)
    } else {
        output
    })
}

fn adapter_ident(step: &Step) -> Ident {
    format_ident!("__pgflow_step_{}", step.slug)
}

/// One adapter per step: decode parameters, call the handler, encode its result.
fn adapter(step: &Step) -> TokenStream {
    let name = adapter_ident(step);
    let handler = &step.ident;
    let slug = &step.slug;
    let bindings = step.params.iter().map(|param| {
        let ident = &param.ident;
        let ty = &param.ty;
        let param_name = ident.to_string();
        match &param.kind {
            ParamKind::Context => quote!(let #ident = task.context();),
            ParamKind::State => quote!(let #ident: #ty = task.state()?;),
            ParamKind::Element => quote!(let #ident: #ty = task.whole(#param_name)?;),
            ParamKind::Signal => quote_spanned! {ty.span()=>
                let #ident: #ty =
                    <#ty as ::pgflow::__private::SignalPayload>::read(&task, #param_name).await?;
            },
            ParamKind::FlowInput if step.is_root() && step.map.is_none() => {
                quote!(let #ident: #ty = task.whole(#param_name)?;)
            }
            ParamKind::FlowInput => quote!(let #ident: #ty = task.flow_input().await?;),
            ParamKind::Dependency(dep) => {
                let dep_name = dep.to_string();
                quote!(let #ident: #ty = task.dependency(#dep_name)?;)
            }
        }
    });
    let args = step.params.iter().map(|p| &p.ident);
    // Parameters taken from the task input move their values out of it.
    let moves_input = step.params.iter().any(|param| match param.kind {
        ParamKind::Context | ParamKind::State | ParamKind::Signal => false,
        ParamKind::FlowInput => step.is_root() && step.map.is_none(),
        ParamKind::Element | ParamKind::Dependency(_) => true,
    });
    let task = if moves_input {
        quote!(mut task)
    } else {
        quote!(task)
    };
    quote! {
        #[doc(hidden)]
        fn #name(#task: ::pgflow::__private::TaskInput) -> ::pgflow::__private::HandlerFuture {
            ::std::boxed::Box::pin(async move {
                #(#bindings)*
                ::pgflow::__private::output(#slug, #handler(#(#args),*).await)
            })
        }
    }
}

/// Compile-time checks, each spanned at the user's tokens so rustc points there.
fn static_checks(flow: &Flow, step: &Step, input_ty: &Type) -> TokenStream {
    let output_of = |name: &Ident| -> Option<TokenStream> {
        flow.steps
            .iter()
            .find(|s| s.ident == *name)
            .and_then(step_output_type)
    };
    let mut checks = Vec::new();
    checks.extend(path_checks(flow, step, &output_of));
    if let Some(ret) = &step.output {
        checks.push(quote_spanned! {ret.span()=>
            const _: () = <#ret as ::pgflow::__private::StepResult>::HOLDS;
        });
        if let Some(Subflow::Module(path)) = &step.subflow {
            checks.push(quote_spanned! {ret.span()=>
                const _: () = <<#ret as ::pgflow::__private::StepResult>::Output
                    as ::pgflow::__private::SubflowInput<
                        <#path::Flow as ::pgflow::__private::FlowSpec>::Input
                    >>::HOLDS;
            });
        }
    }
    for param in &step.params {
        let ty = &param.ty;
        let span: Span = ty.span();
        match &param.kind {
            ParamKind::Dependency(dep) => {
                let skippable = flow
                    .step_named(dep)
                    .is_some_and(|d| d.plain_skip_reason().is_some());
                if let Some(dep_output) = output_of(dep) {
                    // A dependency that may be skipped reaches its dependents as `None`.
                    let dep_output = if skippable {
                        quote!(::core::option::Option<#dep_output>)
                    } else {
                        dep_output
                    };
                    checks.push(quote_spanned! {span=>
                        const _: () =
                            <#ty as ::pgflow::__private::DependencyType<#dep_output>>::HOLDS;
                    });
                }
            }
            ParamKind::FlowInput => checks.push(quote_spanned! {span=>
                const _: () = <#ty as ::pgflow::__private::FlowInputType<#input_ty>>::HOLDS;
            }),
            ParamKind::Element => match &step.map {
                Some(MapSource::Dependency(dep)) => {
                    if let Some(dep_output) = output_of(dep) {
                        let source_span = dep.span();
                        checks.push(quote_spanned! {source_span=>
                            const _: () =
                                <#ty as ::pgflow::__private::MapElement<#dep_output>>::HOLDS;
                        });
                    }
                }
                Some(MapSource::Input(source_span)) => checks.push(quote_spanned! {*source_span=>
                    const _: () = <#ty as ::pgflow::__private::MapElement<#input_ty>>::HOLDS;
                }),
                None => {}
            },
            ParamKind::State => checks.push(quote_spanned! {span=>
                const _: () = <#ty as ::pgflow::__private::StateType<
                    <Flow as ::pgflow::__private::FlowSpec>::State,
                >>::HOLDS;
            }),
            ParamKind::Signal => checks.push(quote_spanned! {span=>
                const _: () = <#ty as ::pgflow::__private::SignalPayload>::HOLDS;
            }),
            ParamKind::Context => {}
        }
    }
    quote!(#(#checks)*)
}

#[cfg(test)]
mod tests {
    use super::variant_name;

    #[test]
    fn queue_names_become_pascal_case_variants() {
        assert_eq!(variant_name("classify_threads"), "ClassifyThreads");
        assert_eq!(variant_name("triage_v2"), "TriageV2");
        assert_eq!(variant_name("q"), "Q");
        assert_eq!(variant_name("2fast"), "Q2fast");
        assert_eq!(variant_name("_x_"), "X");
        assert_eq!(variant_name("_"), "Q");
    }
}
