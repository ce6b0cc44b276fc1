//! The flow as the macro understands it: steps with their dependencies, parameters, queues
//! and options, read from the module and checked for everything that needs no type
//! information.

use syn::{FnArg, Ident, Item, ItemFn, ItemMod, Pat, ReturnType, Type};

use crate::errors::{Errors, msg};
use crate::parse::{self, FlowArgs, Located, MapSource, Rate, SkipMode, StepArgs, Subflow};
use crate::pattern::Pattern;
use pgflow_names::{validate_queue_name, validate_slug};

/// Items `#[flow]` generates inside the module; user items may not take these names.
pub(crate) const RESERVED: &[&str] = &[
    "Queue",
    "Flow",
    "Output",
    "deployment",
    "start",
    "start_alias",
    "SLUG",
];

/// One flow.
pub(crate) struct Flow {
    pub slug: String,
    pub alias: String,
    pub version: u32,
    pub input: Option<Type>,
    /// The run output type the user declares (shared by an alias's versions) instead of the
    /// generated `Output` struct.
    pub output: Option<Type>,
    /// The application state type its handlers may take as `State<T>`.
    pub state: Option<Type>,
    pub max_attempts: Option<u32>,
    pub base_delay: Option<u64>,
    pub max_delay: Option<u64>,
    pub jitter_percent: Option<u8>,
    pub timeout: Option<u64>,
    /// `check_input`: starts are checked against the input type's JSON Schema.
    pub check_input: bool,
    /// Steps in declaration order.
    pub steps: Vec<Step>,
}

/// One step.
pub(crate) struct Step {
    pub ident: Ident,
    pub slug: String,
    pub queue: Option<Located<String>>,
    /// Dependencies as written (`depends_on` entries, then the map source if not listed).
    pub deps: Vec<Ident>,
    pub map: Option<MapSource>,
    pub params: Vec<Param>,
    pub output: Option<Type>,
    pub max_attempts: Option<u32>,
    pub base_delay: Option<u64>,
    pub max_delay: Option<u64>,
    pub jitter_percent: Option<u8>,
    pub timeout: Option<u64>,
    pub start_delay: Option<u64>,
    /// Run only when the step's input contains this pattern.
    pub when: Option<Pattern>,
    /// Run only when the step's input does not contain this pattern.
    pub unless: Option<Pattern>,
    /// What an unmet condition does (default `skip`).
    pub when_unmet: SkipMode,
    /// What a task out of attempts does (default `fail`).
    pub when_exhausted: SkipMode,
    /// The signal the step waits for, with its timeout (seconds) and what passing it does
    /// (default `fail`).
    pub signal: Option<Ident>,
    /// Where an event's key is read when the step begins to wait: `input` or a dependency,
    /// then field names.
    pub signal_key: Option<Vec<Ident>>,
    pub wait_timeout: Option<u64>,
    pub when_timed_out: SkipMode,
    /// How long the step sleeps once its dependencies are done, in seconds.
    pub sleep: Option<u64>,
    /// Where the time the step sleeps until is read: `input` or a dependency, then fields.
    pub sleep_until: Option<Vec<Ident>>,
    /// The most tasks of the step running at once, across every worker.
    pub concurrency: Option<u32>,
    /// Where the key the cap applies per is read: `input` or a dependency, then fields.
    pub concurrency_key: Option<Vec<Ident>>,
    /// The most starts of the step's tasks per period, across every worker.
    pub rate_limit: Option<Rate>,
    /// Where the key the rate limit applies per is read: `input` or a dependency, then fields.
    pub rate_key: Option<Vec<Ident>>,
    /// The module of the flow the step runs: its handler returns that flow's input, and the
    /// step's output is that flow's output.
    pub subflow: Option<Subflow>,
    /// Parameters that name no dependency: reported only when every dependency of the step
    /// exists (a misspelt dependency is the error to show, not its consequences).
    pub unmatched_params: Vec<syn::Error>,
}

/// What a handler parameter receives.
#[derive(Clone, Debug)]
pub(crate) enum ParamKind {
    /// `pgflow::Context`.
    Context,
    /// `pgflow::State<T>`: the flow's application state.
    State,
    /// The flow input.
    FlowInput,
    /// The output of the named dependency.
    Dependency(Ident),
    /// The element of a map step.
    Element,
    /// The payload of the signal the step waits for.
    Signal,
}

/// One handler parameter.
pub(crate) struct Param {
    pub ident: Ident,
    pub ty: Type,
    pub kind: ParamKind,
}

impl Step {
    pub(crate) fn is_root(&self) -> bool {
        self.deps.is_empty()
    }

    pub(crate) fn dep_names(&self) -> Vec<String> {
        self.deps.iter().map(Ident::to_string).collect()
    }

    pub(crate) fn has_condition(&self) -> bool {
        self.when.is_some() || self.unless.is_some()
    }

    /// Why the step may end skipped with its dependents still running (they then get no
    /// output from it), if it may.
    pub(crate) fn plain_skip_reason(&self) -> Option<&'static str> {
        if self.has_condition() && self.when_unmet == SkipMode::Skip {
            Some("its condition may not hold, and `when_unmet` is `skip`")
        } else if self.when_exhausted == SkipMode::Skip {
            Some("`when_exhausted = skip`")
        } else if self.times_out() && self.when_timed_out == SkipMode::Skip {
            Some("its wait may time out, and `when_timed_out` is `skip`")
        } else {
            None
        }
    }

    /// Whether the step waits (for a signal or its child runs) with a deadline.
    pub(crate) fn times_out(&self) -> bool {
        (self.signal.is_some() || self.subflow.is_some()) && self.wait_timeout.is_some()
    }

    /// The generated functions that send the step's signal, if it waits for one: by run id,
    /// and for a step reached by key, by key.
    pub(crate) fn signal_senders(&self) -> Vec<Ident> {
        let Some(signal) = &self.signal else {
            return Vec::new();
        };
        let name = signal.to_string();
        let name = name.trim_start_matches("r#");
        let mut names = vec![
            quote::format_ident!("signal_{}", name),
            quote::format_ident!("signal_{}_in", name),
        ];
        if self.signal_key.is_some() {
            names.push(quote::format_ident!("emit_{}", name));
            names.push(quote::format_ident!("emit_{}_in", name));
        }
        names
    }

    /// The parameter that receives the signal's payload.
    pub(crate) fn signal_param(&self) -> Option<&Param> {
        self.params
            .iter()
            .find(|p| matches!(p.kind, ParamKind::Signal))
    }

    /// Whether the step may be skipped together with everything downstream of it.
    pub(crate) fn skips_cascading(&self) -> bool {
        (self.has_condition() && self.when_unmet == SkipMode::SkipCascade)
            || self.when_exhausted == SkipMode::SkipCascade
            || (self.times_out() && self.when_timed_out == SkipMode::SkipCascade)
    }
}

impl Flow {
    pub(crate) fn step_named(&self, name: &Ident) -> Option<&Step> {
        self.steps.iter().find(|s| s.ident == *name)
    }

    /// Whether a run may end with `step` skipped: it may skip itself, or a step upstream of it
    /// may skip everything downstream.
    pub(crate) fn may_end_skipped(&self, step: &Step) -> bool {
        if step.plain_skip_reason().is_some() || step.skips_cascading() {
            return true;
        }
        // Walk the steps upstream; `seen` also stops at a cycle, which the graph check reports.
        let mut seen: Vec<&str> = vec![&step.slug];
        let mut pending: Vec<&Ident> = step.deps.iter().collect();
        while let Some(dep) = pending.pop() {
            let Some(upstream) = self.step_named(dep) else {
                continue;
            };
            if seen.contains(&upstream.slug.as_str()) {
                continue;
            }
            if upstream.skips_cascading() {
                return true;
            }
            seen.push(&upstream.slug);
            pending.extend(upstream.deps.iter());
        }
        false
    }
}

/// Reads the flow from its arguments and module; strips `#[step]` attributes from the module.
pub(crate) fn read(args: FlowArgs, module: &mut ItemMod, errors: &mut Errors) -> Flow {
    let default_slug = Located {
        value: module.ident.to_string(),
        span: module.ident.span(),
    };
    let slug = args.slug.unwrap_or(default_slug);
    if let Err(error) = validate_slug("flow slug", &slug.value) {
        errors.push(syn::Error::new(slug.span, msg::invalid_name(error)));
    }
    let alias = match args.alias {
        Some(alias) => {
            if let Err(error) = validate_slug("alias", &alias.value) {
                errors.push(syn::Error::new(alias.span, msg::invalid_name(error)));
            }
            alias
        }
        None => slug.clone(),
    };
    if let (Some(span), None) = (args.check_input, &args.input) {
        errors.push(syn::Error::new(span, msg::check_input_without_input()));
    }

    let mut steps = Vec::new();
    if let Some((_, items)) = &mut module.content {
        for item in items.iter_mut() {
            check_reserved(item, errors);
            match item {
                Item::Fn(function) => {
                    if let Some(step_args) = take_step_attr(&mut function.attrs, errors) {
                        steps.push(read_step(function, step_args, errors));
                    }
                }
                other => {
                    if let Some(attrs) = attrs_of(other)
                        && let Some(attr) = attrs.iter().find(|a| is_step_attr(a))
                    {
                        errors.at(attr, msg::step_on_non_fn());
                        attrs.retain(|a| !is_step_attr(a));
                    }
                }
            }
        }
    }
    if steps.is_empty() {
        errors.at(&module.ident, msg::no_steps());
    }
    check_skippable_dependencies(&steps, errors);
    check_signals(&steps, module, errors);
    let names: Vec<String> = steps.iter().map(|s: &Step| s.slug.clone()).collect();
    for step in &mut steps {
        if step.deps.iter().all(|d| names.contains(&d.to_string())) {
            for error in step.unmatched_params.drain(..) {
                errors.push(error);
            }
        }
    }

    let input = args
        .input
        .or_else(|| typed_input_without_declaration(&steps, errors));
    Flow {
        slug: slug.value,
        alias: alias.value,
        version: args.version.map_or(1, |v| v.value),
        input,
        output: args.output,
        state: args.state,
        max_attempts: args.max_attempts.map(|v| v.value),
        base_delay: args.base_delay.map(|v| v.value),
        max_delay: args.max_delay.map(|v| v.value),
        jitter_percent: args.jitter_percent.map(|v| v.value),
        timeout: args.timeout.map(|v| v.value),
        check_input: args.check_input.is_some(),
        steps,
    }
}

/// Each signal name belongs to one step, and the functions generated to send it must not
/// collide with the module's own items.
fn check_signals(steps: &[Step], module: &ItemMod, errors: &mut Errors) {
    for (index, step) in steps.iter().enumerate() {
        let Some(signal) = &step.signal else { continue };
        if let Some(other) = steps[..index]
            .iter()
            .find(|other| other.signal.as_ref() == Some(signal))
        {
            errors.at(signal, msg::signal_twice(&signal.to_string(), &other.slug));
        }
        let senders = step.signal_senders();
        let Some((_, items)) = &module.content else {
            continue;
        };
        for item in items {
            if let Some(ident) = item_ident(item)
                && senders.contains(ident)
            {
                errors.at(ident, msg::signal_name_taken(&ident.to_string()));
            }
        }
    }
}

/// A flow without `input = T` hands its steps the flow input as `serde_json::Value`. A step
/// whose input parameter has another type is one mistake, reported once at that type with the
/// fix; the expansion then goes on as if `input = T` were written, so that the compiler does not
/// add its own errors for every place the two types meet.
fn typed_input_without_declaration(steps: &[Step], errors: &mut Errors) -> Option<Type> {
    let typed = steps
        .iter()
        .flat_map(|step| step.params.iter())
        .find(|param| matches!(param.kind, ParamKind::FlowInput) && !is_json_value(&param.ty))?;
    let ty = &typed.ty;
    let written = quote::quote!(#ty).to_string().replace(' ', "");
    errors.at(ty, msg::typed_input_without_declaration(&written));
    Some(typed.ty.clone())
}

/// Whether `ty` reads as `serde_json::Value` (`Value`, `serde_json::Value`,
/// `pgflow::serde_json::Value`).
pub(crate) fn is_json_value(ty: &Type) -> bool {
    let Type::Path(path) = ty else {
        return false;
    };
    path.qself.is_none()
        && path
            .path
            .segments
            .last()
            .is_some_and(|segment| segment.ident == "Value" && segment.arguments.is_empty())
}

fn check_reserved(item: &Item, errors: &mut Errors) {
    if let Some(ident) = item_ident(item)
        && RESERVED.contains(&ident.to_string().as_str())
    {
        errors.at(ident, msg::reserved_name(&ident.to_string()));
    }
}

/// The name an item declares in the module, if it declares one.
fn item_ident(item: &Item) -> Option<&Ident> {
    match item {
        Item::Fn(f) => Some(&f.sig.ident),
        Item::Struct(s) => Some(&s.ident),
        Item::Enum(e) => Some(&e.ident),
        Item::Type(t) => Some(&t.ident),
        Item::Const(c) => Some(&c.ident),
        Item::Static(s) => Some(&s.ident),
        Item::Mod(m) => Some(&m.ident),
        Item::Trait(t) => Some(&t.ident),
        Item::Union(u) => Some(&u.ident),
        _ => None,
    }
}

fn attrs_of(item: &mut Item) -> Option<&mut Vec<syn::Attribute>> {
    match item {
        Item::Struct(i) => Some(&mut i.attrs),
        Item::Enum(i) => Some(&mut i.attrs),
        Item::Const(i) => Some(&mut i.attrs),
        Item::Static(i) => Some(&mut i.attrs),
        Item::Mod(i) => Some(&mut i.attrs),
        Item::Impl(i) => Some(&mut i.attrs),
        Item::Trait(i) => Some(&mut i.attrs),
        Item::Type(i) => Some(&mut i.attrs),
        Item::Use(i) => Some(&mut i.attrs),
        _ => None,
    }
}

/// `#[step]`, `#[step(...)]`, `#[pgflow::step(...)]`.
fn is_step_attr(attr: &syn::Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "step")
}

/// Removes the `#[step]` attribute of a fn and parses its arguments.
fn take_step_attr(attrs: &mut Vec<syn::Attribute>, errors: &mut Errors) -> Option<StepArgs> {
    let position = attrs.iter().position(is_step_attr)?;
    let attr = attrs.remove(position);
    let tokens = match &attr.meta {
        syn::Meta::Path(_) => proc_macro2::TokenStream::new(),
        syn::Meta::List(list) => list.tokens.clone(),
        syn::Meta::NameValue(nv) => {
            errors.at(nv, msg::step_attribute_form());
            proc_macro2::TokenStream::new()
        }
    };
    if let Some(second) = attrs.iter().position(is_step_attr) {
        errors.at(&attrs[second], msg::duplicate_key("#[step]"));
        attrs.remove(second);
    }
    Some(parse::step_args(tokens, errors))
}

fn read_step(function: &ItemFn, args: StepArgs, errors: &mut Errors) -> Step {
    let ident = function.sig.ident.clone();
    let slug = ident.to_string().trim_start_matches("r#").to_owned();
    if let Err(error) = validate_slug("step slug", &slug) {
        errors.at(&ident, msg::invalid_step_name(&slug, error));
    }
    if function.sig.asyncness.is_none() {
        errors.at(function.sig.fn_token, msg::not_async(&slug));
    }
    if !function.sig.generics.params.is_empty() {
        errors.at(&function.sig.generics, msg::generic_handler(&slug));
    }
    let output = match &function.sig.output {
        ReturnType::Default => {
            errors.at(&function.sig, msg::no_return(&slug));
            None
        }
        ReturnType::Type(_, ty) if is_result_type(ty) => Some((**ty).clone()),
        ReturnType::Type(_, ty) => {
            errors.at(ty, msg::not_result(&slug));
            None
        }
    };
    if let Some(queue) = &args.queue
        && let Err(error) = validate_queue_name(&queue.value)
    {
        errors.push(syn::Error::new(queue.span, msg::invalid_name(error)));
    }

    // Dependencies: `depends_on`, plus the map source.
    let mut deps = args.depends_on.clone().unwrap_or_default();
    if let Some(MapSource::Dependency(source)) = &args.map {
        let others = deps.iter().filter(|d| *d != source).count();
        if others > 0 {
            errors.at(source, msg::map_with_other_deps(&slug));
        }
        if !deps.contains(source) {
            deps.push(source.clone());
        }
    }
    if let Some(MapSource::Input(span)) = &args.map
        && !deps.is_empty()
    {
        errors.push(syn::Error::new(*span, msg::map_with_other_deps(&slug)));
    }

    check_patterns(
        &slug,
        &deps,
        [("when", &args.when), ("unless", &args.unless)],
        errors,
    );
    if let Some(when_unmet) = &args.when_unmet
        && args.when.is_none()
        && args.unless.is_none()
    {
        errors.push(syn::Error::new(
            when_unmet.span,
            msg::when_unmet_without_condition(&slug),
        ));
    }

    check_signal_args(&slug, &args, &deps, errors);
    check_sleep_args(&slug, &args, &deps, errors);
    check_concurrency_args(&slug, &args, &deps, errors);
    check_rate_args(&slug, &args, &deps, errors);
    check_subflow_args(&slug, &args, errors);

    let mut unmatched_params = Vec::new();
    let params = read_params(
        function,
        &slug,
        &deps,
        args.map.is_some(),
        args.signal.as_ref(),
        errors,
        &mut unmatched_params,
    );
    if let Some(signal) = &args.signal
        && !params.iter().any(|p| matches!(p.kind, ParamKind::Signal))
    {
        errors.at(
            signal,
            msg::signal_without_parameter(&slug, &signal.to_string()),
        );
    }

    Step {
        ident,
        slug,
        queue: args.queue,
        deps,
        map: args.map,
        params,
        output,
        max_attempts: args.max_attempts.map(|v| v.value),
        base_delay: args.base_delay.map(|v| v.value),
        max_delay: args.max_delay.map(|v| v.value),
        jitter_percent: args.jitter_percent.map(|v| v.value),
        timeout: args.timeout.map(|v| v.value),
        start_delay: args.start_delay.map(|v| v.value),
        when: args.when,
        unless: args.unless,
        when_unmet: args.when_unmet.map_or(SkipMode::Skip, |m| m.value),
        when_exhausted: args.when_exhausted.map_or(SkipMode::Fail, |m| m.value),
        wait_timeout: args.wait_timeout.map(|v| v.value),
        when_timed_out: args.when_timed_out.map_or(SkipMode::Fail, |m| m.value),
        signal: args.signal,
        signal_key: args.key,
        sleep: args.sleep.map(|v| v.value),
        sleep_until: args.sleep_until,
        concurrency: args.concurrency.map(|v| v.value),
        concurrency_key: args.concurrency_key,
        rate_limit: args.rate_limit.map(|v| v.value),
        rate_key: args.rate_key,
        subflow: args.subflow,
        unmatched_params,
    }
}

/// `signal` names a valid signal that is not one of the step's dependencies; `wait_timeout`
/// and `when_timed_out` need it.
fn check_signal_args(slug: &str, args: &StepArgs, deps: &[Ident], errors: &mut Errors) {
    match &args.signal {
        Some(signal) => {
            let name = signal.to_string();
            if let Err(error) = validate_slug("signal name", name.trim_start_matches("r#")) {
                errors.at(signal, msg::invalid_name(error));
            }
            if deps.contains(signal) {
                errors.at(signal, msg::signal_names_dependency(slug, &name));
            }
            check_path_root("key", slug, args.key.as_ref(), deps, errors);
            if let Some(sleep) = &args.sleep {
                errors.push(syn::Error::new(
                    sleep.span,
                    msg::sleeps_and_waits(slug, "sleep"),
                ));
            }
            if let Some(root) = args.sleep_until.as_ref().and_then(|path| path.first()) {
                errors.at(root, msg::sleeps_and_waits(slug, "sleep_until"));
            }
        }
        None => {
            if let Some(root) = args.key.as_ref().and_then(|path| path.first()) {
                errors.at(root, msg::wait_without_signal(slug, "key"));
            }
            // A step that runs a flow may time out waiting for its children.
            if args.subflow.is_some() {
                return;
            }
            if let Some(timeout) = &args.wait_timeout {
                errors.push(syn::Error::new(
                    timeout.span,
                    msg::wait_without_signal(slug, "wait_timeout"),
                ));
            }
            if let Some(mode) = &args.when_timed_out {
                errors.push(syn::Error::new(
                    mode.span,
                    msg::wait_without_signal(slug, "when_timed_out"),
                ));
            }
        }
    }
}

/// A step that runs a flow neither waits for a signal nor sleeps; a flow named by its alias
/// has a valid name.
fn check_subflow_args(slug: &str, args: &StepArgs, errors: &mut Errors) {
    let Some(subflow) = &args.subflow else {
        return;
    };
    if let Subflow::Named(name) = subflow
        && let Err(error) = validate_slug("flow name", &name.value())
    {
        errors.at(name, msg::invalid_name(error));
    }
    let other = if args.signal.is_some() {
        Some("signal")
    } else if args.sleep.is_some() {
        Some("sleep")
    } else if args.sleep_until.is_some() {
        Some("sleep_until")
    } else {
        None
    };
    if let Some(key) = other {
        let message = msg::subflow_and_wait(slug, key);
        match subflow {
            Subflow::Module(path) => errors.at(path, message),
            Subflow::Named(name) => errors.at(name, message),
        }
    }
}

/// `sleep` and `sleep_until` exclude each other; the path of `sleep_until` starts at the input
/// or a dependency. (Sleeping and waiting for a signal is reported by `check_signal_args`.)
fn check_sleep_args(slug: &str, args: &StepArgs, deps: &[Ident], errors: &mut Errors) {
    if let (Some(sleep), Some(_)) = (&args.sleep, &args.sleep_until) {
        errors.push(syn::Error::new(sleep.span, msg::sleeps_two_ways(slug)));
    }
    check_path_root("sleep_until", slug, args.sleep_until.as_ref(), deps, errors);
}

/// `concurrency_key` needs `concurrency` (the cap each key gets), and its path starts at the
/// input or a dependency.
fn check_concurrency_args(slug: &str, args: &StepArgs, deps: &[Ident], errors: &mut Errors) {
    if let Some(root) = args.concurrency_key.as_ref().and_then(|path| path.first())
        && args.concurrency.is_none()
    {
        errors.at(root, msg::concurrency_key_without_limit(slug));
    }
    check_path_root(
        "concurrency_key",
        slug,
        args.concurrency_key.as_ref(),
        deps,
        errors,
    );
}

/// `rate_key` needs `rate_limit` (the starts each key gets per period), and its path starts at
/// the input or a dependency.
fn check_rate_args(slug: &str, args: &StepArgs, deps: &[Ident], errors: &mut Errors) {
    if let Some(root) = args.rate_key.as_ref().and_then(|path| path.first())
        && args.rate_limit.is_none()
    {
        errors.at(root, msg::rate_key_without_limit(slug));
    }
    check_path_root("rate_key", slug, args.rate_key.as_ref(), deps, errors);
}

/// A path (`key`, `sleep_until`, `concurrency_key`, `rate_key`) starts at `input` or one of the step's
/// dependencies.
fn check_path_root(
    key: &str,
    slug: &str,
    path: Option<&Vec<Ident>>,
    deps: &[Ident],
    errors: &mut Errors,
) {
    if let Some(root) = path.and_then(|path| path.first())
        && root != "input"
        && !deps.contains(root)
    {
        let dep_names: Vec<String> = deps.iter().map(Ident::to_string).collect();
        errors.at(
            root,
            msg::key_root(key, slug, &root.to_string(), &dep_names),
        );
    }
}

/// A step with dependencies matches its patterns against the object of their outputs: each
/// pattern must be an object keyed by dependency names.
fn check_patterns<'a>(
    slug: &str,
    deps: &[Ident],
    patterns: impl IntoIterator<Item = (&'static str, &'a Option<Pattern>)>,
    errors: &mut Errors,
) {
    if deps.is_empty() {
        return;
    }
    let dep_names: Vec<String> = deps.iter().map(Ident::to_string).collect();
    for (key, pattern) in patterns {
        let Some(pattern) = pattern else { continue };
        if !pattern.value.is_object() {
            errors.push(syn::Error::new(
                pattern.span,
                msg::pattern_not_object(slug, key, &dep_names),
            ));
            continue;
        }
        for (name, span) in &pattern.keys {
            if !dep_names.contains(name) {
                errors.push(syn::Error::new(
                    *span,
                    msg::pattern_unknown_dependency(slug, key, name, &dep_names),
                ));
            }
        }
    }
}

/// A dependency that may be skipped while its dependents still run reaches them as `None`:
/// their parameter for it must be written `Option<T>`.
fn check_skippable_dependencies(steps: &[Step], errors: &mut Errors) {
    for step in steps {
        for param in &step.params {
            let ParamKind::Dependency(dep) = &param.kind else {
                continue;
            };
            let Some(reason) = steps
                .iter()
                .find(|s| s.ident == *dep)
                .and_then(Step::plain_skip_reason)
            else {
                continue;
            };
            if !is_option_type(&param.ty) {
                errors.at(
                    &param.ty,
                    msg::skippable_dependency(
                        &step.slug,
                        &param.ident.to_string(),
                        &dep.to_string(),
                        reason,
                    ),
                );
            }
        }
    }
}

/// Whether `ty` is written as an `Option<..>` (a path whose last segment is `Option`).
fn is_option_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none()
        && path.path.segments.last().is_some_and(|s| s.ident == "Option"))
}

/// Whether `ty` is written as a `Result` (a path whose last segment is `Result`).
fn is_result_type(ty: &Type) -> bool {
    matches!(ty, Type::Path(path) if path.qself.is_none()
        && path.path.segments.last().is_some_and(|s| s.ident == "Result"))
}

/// Whether `ty` is written as pgflow's context: `Context`, `pgflow::Context` or
/// `::pgflow::Context`.
fn is_context_type(ty: &Type) -> bool {
    is_pgflow_type(ty, "Context")
}

/// Whether `ty` is written as pgflow's application state: `State<T>` or `pgflow::State<T>`.
fn is_state_type(ty: &Type) -> bool {
    is_pgflow_type(ty, "State")
}

/// Whether `ty` is a path naming `name` bare or as `pgflow::name` (generic arguments aside).
fn is_pgflow_type(ty: &Type, name: &str) -> bool {
    let Type::Path(path) = ty else { return false };
    if path.qself.is_some() {
        return false;
    }
    let segments: Vec<String> = path
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    matches!(
        segments
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .as_slice(),
        [last] | ["pgflow", last] if *last == name
    )
}

fn read_params(
    function: &ItemFn,
    slug: &str,
    deps: &[Ident],
    is_map: bool,
    signal: Option<&Ident>,
    errors: &mut Errors,
    unmatched: &mut Vec<syn::Error>,
) -> Vec<Param> {
    let mut params = Vec::new();
    let mut seen_context = false;
    let mut seen_state = false;
    let mut seen_element = false;
    let mut seen_root_input = false;
    for input in &function.sig.inputs {
        let FnArg::Typed(typed) = input else {
            errors.at(input, msg::param_pattern());
            continue;
        };
        let Pat::Ident(pat) = &*typed.pat else {
            errors.at(&typed.pat, msg::param_pattern());
            continue;
        };
        if pat.by_ref.is_some() || pat.subpat.is_some() {
            errors.at(&typed.pat, msg::param_pattern());
            continue;
        }
        let ident = pat.ident.clone();
        let name = ident.to_string();
        let ty = (*typed.ty).clone();
        let kind = if is_context_type(&ty) {
            if seen_context {
                errors.at(&typed.ty, msg::second_context(slug));
            }
            seen_context = true;
            ParamKind::Context
        } else if is_state_type(&ty) {
            if seen_state {
                errors.at(&typed.ty, msg::second_state(slug));
            }
            seen_state = true;
            ParamKind::State
        } else if signal.is_some_and(|signal| *signal == name) {
            ParamKind::Signal
        } else if is_map {
            if name == "input" {
                ParamKind::FlowInput
            } else {
                if seen_element {
                    errors.at(&ident, msg::second_element(slug));
                }
                seen_element = true;
                ParamKind::Element
            }
        } else if let Some(dep) = deps.iter().find(|d| **d == name) {
            ParamKind::Dependency(dep.clone())
        } else if name == "input" || (deps.is_empty() && !seen_root_input) {
            seen_root_input = true;
            ParamKind::FlowInput
        } else {
            let dep_names: Vec<String> = deps.iter().map(Ident::to_string).collect();
            unmatched.push(syn::Error::new_spanned(
                &ident,
                msg::param_no_dependency(&name, slug, &dep_names),
            ));
            continue;
        };
        params.push(Param { ident, ty, kind });
    }
    if is_map && !seen_element {
        errors.at(&function.sig.ident, msg::map_needs_element(slug));
    }
    params
}
