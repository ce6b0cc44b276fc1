//! Every message the macros emit (lowercase, no trailing period, code in backticks, with a
//! hint on how to fix it), and the collector that reports all errors of one invocation.

use std::fmt::Display;

use proc_macro2::TokenStream;
use quote::ToTokens;

/// Collects errors so that one invocation reports all of them at once.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    /// Records `message` at the tokens of `at`.
    pub(crate) fn at(&mut self, at: impl ToTokens, message: impl Display) {
        self.errors.push(syn::Error::new_spanned(at, message));
    }

    /// Records an error built elsewhere.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// All errors as `compile_error!` invocations.
    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        self.errors
            .iter()
            .map(syn::Error::to_compile_error)
            .collect()
    }
}

/// The catalogue of messages.
pub(crate) mod msg {
    pub(crate) fn unknown_key(key: &str, accepted: &[&str]) -> String {
        let list = accepted
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        format!("unknown key `{key}`; accepted keys are {list}")
    }

    pub(crate) fn duplicate_key(key: &str) -> String {
        format!("duplicate key `{key}`; set it once")
    }

    pub(crate) fn flag_with_value(key: &str) -> String {
        format!("`{key}` takes no value; write `{key}` alone")
    }

    pub(crate) fn typed_input_without_declaration(ty: &str) -> String {
        format!(
            "this flow declares no `input` type, so its steps receive the flow input as \
             `serde_json::Value`; add `input = {ty}` to `#[flow(...)]`"
        )
    }

    pub(crate) fn check_input_without_input() -> String {
        "`check_input` checks every start's input against the flow's input type, and this flow \
         declares none: add `input = T` (with `#[derive(schemars::JsonSchema)]` on `T`)"
            .to_owned()
    }

    pub(crate) fn expected_string(key: &str) -> String {
        format!("`{key}` takes a string literal, e.g. `{key} = \"...\"`")
    }

    pub(crate) fn expected_integer(key: &str, min: u64) -> String {
        format!("`{key}` takes a whole number of at least {min}")
    }

    pub(crate) fn expected_percent(key: &str) -> String {
        format!("`{key}` takes a whole percentage from 0 to 100, e.g. `{key} = 20`")
    }

    pub(crate) fn expected_type(key: &str) -> String {
        format!("`{key}` takes a type, e.g. `{key} = MyInput`")
    }

    pub(crate) fn bad_duration(key: &str) -> String {
        format!(
            "`{key}` takes a duration: whole seconds (`{key} = 30`) or a string with a unit \
             (`{key} = \"30s\"`, `\"5m\"`, `\"1h\"`, `\"3d\"`)"
        )
    }

    pub(crate) fn duration_too_short(key: &str, min: u64) -> String {
        format!("`{key}` must be at least {min} s")
    }

    pub(crate) fn step_attribute_form() -> String {
        "write `#[step(key = value, ...)]` or `#[step]`".to_owned()
    }

    pub(crate) fn map_value() -> String {
        "`map = dep` takes the name of one step; write `map` alone to map over the flow input"
            .to_owned()
    }

    pub(crate) fn depends_on_list() -> String {
        "`depends_on` takes a list of step names, e.g. `depends_on = [fetch, split]`".to_owned()
    }

    pub(crate) fn invalid_name(error: impl std::fmt::Display) -> String {
        error.to_string()
    }

    pub(crate) fn invalid_step_name(name: &str, error: impl std::fmt::Display) -> String {
        format!("`{name}` cannot name a step: {error}; rename the fn")
    }

    pub(crate) fn non_inline_module() -> String {
        "`#[flow]` needs an inline module: `mod name { ... }`, not `mod name;`".to_owned()
    }

    pub(crate) fn flow_on_non_module() -> String {
        "`#[flow]` goes on an inline module of step handlers: `#[pgflow::flow(slug = \"...\")] mod name { ... }`".to_owned()
    }

    pub(crate) fn step_outside_flow() -> String {
        "`#[step]` only works on an `async fn` inside a module annotated with `#[pgflow::flow(...)]`"
            .to_owned()
    }

    pub(crate) fn step_on_non_fn() -> String {
        "`#[step]` goes on an `async fn` step handler".to_owned()
    }

    pub(crate) fn no_steps() -> String {
        "this flow has no steps; add `#[step] async fn name(..) -> Result<T, E>` to the module"
            .to_owned()
    }

    pub(crate) fn not_async(step: &str) -> String {
        format!("step handler `{step}` must be an `async fn`")
    }

    pub(crate) fn no_return(step: &str) -> String {
        format!("step handler `{step}` must return `Result<T, E>`; add `-> Result<T, E>`")
    }

    pub(crate) fn not_result(step: &str) -> String {
        format!(
            "step handler `{step}` must return `Result<T, E>` (written as a path ending in \
             `Result`, such as `Result<T, E>` or `anyhow::Result<T>`)"
        )
    }

    pub(crate) fn generic_handler(step: &str) -> String {
        format!("step handler `{step}` cannot be generic; use concrete types")
    }

    pub(crate) fn duplicate_step(step: &str) -> String {
        format!("step `{step}` is defined twice; step names must be unique within a flow")
    }

    pub(crate) fn unknown_dependency(step: &str, dep: &str, steps: &[&str]) -> String {
        let suggestion = super::did_you_mean(dep, steps.iter().copied());
        format!(
            "step `{step}` depends on `{dep}`, which is not a step of this flow{suggestion}; \
             name a `#[step]` fn of this module"
        )
    }

    pub(crate) fn self_dependency(step: &str) -> String {
        format!("step `{step}` depends on itself; remove `{step}` from its dependencies")
    }

    pub(crate) fn duplicate_dependency(step: &str, dep: &str) -> String {
        format!("step `{step}` lists dependency `{dep}` twice; list it once")
    }

    pub(crate) fn cycle(path: &[String]) -> String {
        let chain = path
            .iter()
            .map(|s| format!("`{s}`"))
            .collect::<Vec<_>>()
            .join(" -> ");
        format!("this dependency closes a cycle: {chain}; a flow must be acyclic")
    }

    pub(crate) fn map_with_other_deps(step: &str) -> String {
        format!(
            "map step `{step}` has more than one dependency; a map step maps over the flow \
             input (`map`) or over exactly one dependency (`map = dep`), with no other dependencies"
        )
    }

    pub(crate) fn param_pattern() -> String {
        "step handler parameters must be plain names, e.g. `fetch: Thread`".to_owned()
    }

    pub(crate) fn param_no_dependency(param: &str, step: &str, deps: &[String]) -> String {
        let hint = if deps.is_empty() {
            "this step has no dependencies".to_owned()
        } else {
            format!(
                "its dependencies are {}",
                deps.iter()
                    .map(|d| format!("`{d}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let suggestion = super::did_you_mean(param, deps.iter().map(String::as_str));
        format!(
            "parameter `{param}` of step `{step}` names no dependency ({hint}){suggestion}; name a \
             parameter after the dependency whose output it takes, call it `input` for the \
             flow input, or add the step to `depends_on`"
        )
    }

    pub(crate) fn second_context(step: &str) -> String {
        format!("step `{step}` takes `pgflow::Context` twice; take it once")
    }

    pub(crate) fn second_state(step: &str) -> String {
        format!("step `{step}` takes `pgflow::State` twice; take it once")
    }

    pub(crate) fn map_needs_element(step: &str) -> String {
        format!("map step `{step}` needs a parameter for the element it maps over, e.g. `item: T`")
    }

    pub(crate) fn second_element(step: &str) -> String {
        format!(
            "map step `{step}` takes one element parameter; other parameters can only be \
             `input` (the flow input) and `pgflow::Context`"
        )
    }

    pub(crate) fn reserved_name(name: &str) -> String {
        format!("`{name}` is generated by `#[flow]` in this module; rename this item")
    }

    pub(crate) fn expected_pattern(key: &str) -> String {
        format!(
            "`{key}` takes a constant JSON pattern: `{key} = json!({{\"plan\": \"pro\"}})` or a \
             string holding JSON, `{key} = r#\"{{\"plan\": \"pro\"}}\"#`"
        )
    }

    pub(crate) fn pattern_not_constant() -> String {
        "a condition pattern is constant JSON (strings, numbers, `true`, `false`, `null`, arrays \
         and objects): it is stored with the flow's definition, so it cannot use Rust values"
            .to_owned()
    }

    pub(crate) fn pattern_key() -> String {
        "a key of a condition pattern is a string literal, e.g. `\"plan\": \"pro\"`".to_owned()
    }

    pub(crate) fn pattern_trailing_tokens() -> String {
        "a condition pattern is one JSON value; remove what follows it".to_owned()
    }

    pub(crate) fn pattern_not_json(error: &dyn std::fmt::Display) -> String {
        format!("this condition pattern is not valid JSON: {error}")
    }

    pub(crate) fn pattern_not_object(step: &str, key: &str, deps: &[String]) -> String {
        format!(
            "step `{step}` has dependencies, so its `{key}` pattern is matched against the \
             object of their outputs: write an object keyed by dependency names ({}), e.g. \
             `{key} = json!({{\"{}\": ...}})`",
            super::list(deps),
            deps.first().map_or("dep", String::as_str)
        )
    }

    pub(crate) fn pattern_unknown_dependency(
        step: &str,
        key: &str,
        name: &str,
        deps: &[String],
    ) -> String {
        let suggestion = super::did_you_mean(name, deps.iter().map(String::as_str));
        format!(
            "the `{key}` pattern of step `{step}` names `{name}`, which is not one of its \
             dependencies ({}){suggestion}; a pattern on a step with dependencies is matched \
             against the object of their outputs",
            super::list(deps)
        )
    }

    pub(crate) fn expected_skip_mode(key: &str, accepted: &[&str]) -> String {
        format!("`{key}` takes one of {}", super::list(accepted))
    }

    pub(crate) fn signal_value() -> String {
        "`signal` takes the signal's name: `signal = approval` (the step's parameter of that \
         name receives its payload)"
            .to_owned()
    }

    pub(crate) fn key_path_value() -> String {
        "`key` takes where an event's key is read: `key = input.order_id` (the flow input's \
         field) or `key = charge.order_id` (a dependency's output's field)"
            .to_owned()
    }

    pub(crate) fn sleep_until_value() -> String {
        "`sleep_until` takes where the wake time is read: `sleep_until = input.remind_at` (the \
         flow input's field) or `sleep_until = signup.trial_ends_at` (a dependency's output's \
         field)"
            .to_owned()
    }

    pub(crate) fn concurrency_key_value() -> String {
        "`concurrency_key` takes where the key is read: `concurrency_key = input.tenant_id` (the \
         flow input's field) or `concurrency_key = account.id` (a dependency's output's field)"
            .to_owned()
    }

    pub(crate) fn rate_key_value() -> String {
        "`rate_key` takes where the key is read: `rate_key = input.account` (the flow input's \
         field) or `rate_key = lookup.account` (a dependency's output's field)"
            .to_owned()
    }

    pub(crate) fn bad_rate(key: &str) -> String {
        format!(
            "`{key}` takes so many starts per period as a string: `{key} = \"10/s\"`, \
             `\"100/m\"`, `\"5/500ms\"` or `\"1000/2h\"` (a whole number of at least 1, then a \
             period in ms, s, m, h or d)"
        )
    }

    pub(crate) fn rate_key_without_limit(step: &str) -> String {
        format!(
            "step `{step}` sets `rate_key` without `rate_limit`; add how many starts each key \
             gets per period, as `rate_limit = \"10/s\"`"
        )
    }

    pub(crate) fn concurrency_key_without_limit(step: &str) -> String {
        format!(
            "step `{step}` sets `concurrency_key` without `concurrency`; add the cap each key \
             gets, as `concurrency = 2`"
        )
    }

    pub(crate) fn subflow_value() -> String {
        "`subflow` takes the flow the step runs: its module, `subflow = charge_v1` or `subflow = \
         crate::billing::charge_v1` (a module `#[pgflow::flow]` made), or its alias by name, \
         `subflow = \"charge\"`"
            .to_owned()
    }

    pub(crate) fn subflow_and_wait(step: &str, key: &str) -> String {
        format!(
            "step `{step}` runs a flow and also sets `{key}`; a step runs a flow, waits for a \
             signal or sleeps, one of them (put the wait on a step before it)"
        )
    }

    pub(crate) fn sleeps_two_ways(step: &str) -> String {
        format!(
            "step `{step}` sets both `sleep` and `sleep_until`; keep one (a fixed time after its \
             dependencies, or a time read from the run)"
        )
    }

    pub(crate) fn sleeps_and_waits(step: &str, key: &str) -> String {
        format!(
            "step `{step}` sets `{key}` and waits for a signal; a step sleeps or waits, not both \
             (put the sleep on a step before it)"
        )
    }

    pub(crate) fn key_root(key: &str, step: &str, root: &str, deps: &[String]) -> String {
        let deps = if deps.is_empty() {
            String::new()
        } else {
            format!(
                " or one of its dependencies ({})",
                deps.iter()
                    .map(|d| format!("`{d}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        format!("the `{key}` of step `{step}` starts at `{root}`; start it at `input`{deps}")
    }

    pub(crate) fn wait_without_signal(step: &str, key: &str) -> String {
        // A timeout also bounds the wait of a step that runs a flow; a key is a signal's only.
        let or_subflow = if key == "key" {
            ""
        } else {
            " (or `subflow = child`)"
        };
        format!(
            "step `{step}` sets `{key}` but waits for no signal; add `signal = name`{or_subflow}, \
             or remove `{key}`"
        )
    }

    pub(crate) fn signal_without_parameter(step: &str, signal: &str) -> String {
        format!(
            "step `{step}` waits for signal `{signal}` but has no parameter `{signal}` to receive \
             its payload; add `{signal}: T` (T: the payload type, `()` for a signal that carries \
             nothing)"
        )
    }

    pub(crate) fn signal_names_dependency(step: &str, signal: &str) -> String {
        format!(
            "step `{step}` waits for signal `{signal}`, which is also the name of one of its \
             dependencies; a parameter can receive only one of them: rename the signal"
        )
    }

    pub(crate) fn signal_twice(signal: &str, other: &str) -> String {
        format!(
            "signal `{signal}` is already waited for by step `{other}`; a signal name belongs to \
             one step of a flow"
        )
    }

    pub(crate) fn signal_name_taken(name: &str) -> String {
        format!(
            "`#[flow]` generates `{name}` to send this flow's signal; rename this item or the \
             signal"
        )
    }

    pub(crate) fn when_unmet_without_condition(step: &str) -> String {
        format!(
            "step `{step}` sets `when_unmet` but has no condition; add `when = json!(...)` or \
             `unless = json!(...)`, or remove `when_unmet`"
        )
    }

    pub(crate) fn skippable_dependency(step: &str, param: &str, dep: &str, why: &str) -> String {
        format!(
            "step `{dep}` may be skipped ({why}), and then step `{step}` runs without its output: \
             take it as `Option<T>` (`{param}: Option<...>`), or make `{dep}` skip everything \
             downstream with `skip_cascade`"
        )
    }

    pub(crate) fn queue_variant_clash(a: &str, b: &str) -> String {
        format!("queues `{a}` and `{b}` would both become the same `Queue` variant; rename one")
    }
}

/// `a`, `b`, `c`: names in backticks, comma separated.
fn list(names: &[impl AsRef<str>]) -> String {
    names
        .iter()
        .map(|n| format!("`{}`", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` (did you mean `measure`?)` when one of `candidates` is a likely misspelling of `name` (at
/// most a third of its characters differ), else nothing.
fn did_you_mean<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    let allowed = (name.chars().count() / 3).max(1);
    candidates
        .map(|candidate| (strsim::damerau_levenshtein(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= allowed)
        .min()
        .map(|(_, candidate)| format!(" (did you mean `{candidate}`?)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod suggestion_tests {
    use super::did_you_mean;

    #[test]
    fn a_close_name_is_suggested_and_a_distant_one_is_not() {
        let steps = ["fetch", "measure", "split"];
        assert_eq!(
            did_you_mean("mesaure", steps.into_iter()),
            " (did you mean `measure`?)"
        );
        assert_eq!(
            did_you_mean("fecth", steps.into_iter()),
            " (did you mean `fetch`?)"
        );
        assert_eq!(did_you_mean("classify", steps.into_iter()), "");
    }
}
