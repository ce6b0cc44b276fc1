//! Parsing `#[flow(...)]` and `#[step(...)]` arguments. Every key is parsed the same way
//! (`parse_nested_meta` plus one set-once helper); problems are recorded, not returned, so all
//! of them are reported together.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitInt, LitStr, Token, Type};

use crate::errors::{Errors, msg};
use crate::pattern::{self, Pattern};

/// A value with the span it was written at.
#[derive(Clone, Debug)]
pub(crate) struct Located<T> {
    pub value: T,
    pub span: Span,
}

/// `#[flow(...)]` arguments.
#[derive(Default)]
pub(crate) struct FlowArgs {
    pub slug: Option<Located<String>>,
    pub alias: Option<Located<String>>,
    pub version: Option<Located<u32>>,
    pub input: Option<Type>,
    pub output: Option<Type>,
    pub state: Option<Type>,
    pub max_attempts: Option<Located<u32>>,
    pub base_delay: Option<Located<u64>>,
    pub max_delay: Option<Located<u64>>,
    pub jitter_percent: Option<Located<u8>>,
    pub timeout: Option<Located<u64>>,
    /// `check_input`: where it was written.
    pub check_input: Option<Span>,
}

/// How a map step gets its array.
#[derive(Clone, Debug)]
pub(crate) enum MapSource {
    /// `map`: the flow input.
    Input(Span),
    /// `map = dep`: one dependency's output.
    Dependency(Ident),
}

/// `#[step(...)]` arguments.
#[derive(Default)]
pub(crate) struct StepArgs {
    pub queue: Option<Located<String>>,
    pub depends_on: Option<Vec<Ident>>,
    pub map: Option<MapSource>,
    pub max_attempts: Option<Located<u32>>,
    pub base_delay: Option<Located<u64>>,
    pub max_delay: Option<Located<u64>>,
    pub jitter_percent: Option<Located<u8>>,
    pub timeout: Option<Located<u64>>,
    pub start_delay: Option<Located<u64>>,
    pub when: Option<Pattern>,
    pub unless: Option<Pattern>,
    pub when_unmet: Option<Located<SkipMode>>,
    pub when_exhausted: Option<Located<SkipMode>>,
    /// `signal = name`: the signal the step waits for.
    pub signal: Option<Ident>,
    /// `key = input.order_id`: where an event's key is read (the root, then fields).
    pub key: Option<Vec<Ident>>,
    pub wait_timeout: Option<Located<u64>>,
    pub when_timed_out: Option<Located<SkipMode>>,
    /// `sleep = "3d"`: how long the step sleeps once its dependencies are done.
    pub sleep: Option<Located<u64>>,
    /// `sleep_until = input.remind_at`: where the time it sleeps until is read.
    pub sleep_until: Option<Vec<Ident>>,
    /// `subflow = charge_v1` or `subflow = "charge"`: the flow the step runs.
    pub subflow: Option<Subflow>,
    /// `concurrency = 10`: the most tasks of the step running at once, across every worker.
    pub concurrency: Option<Located<u32>>,
    /// `concurrency_key = input.tenant_id`: where the key the cap applies per is read.
    pub concurrency_key: Option<Vec<Ident>>,
    /// `rate_limit = "10/s"`: the most starts per period, across every worker.
    pub rate_limit: Option<Located<Rate>>,
    /// `rate_key = input.account`: where the key the rate limit applies per is read.
    pub rate_key: Option<Vec<Ident>>,
}

/// A value of `rate_limit`: so many starts per period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rate {
    /// The most starts in any period; at least 1.
    pub limit: u32,
    /// The period in milliseconds; at least 1.
    pub period_ms: u64,
}

/// A value of `when_unmet` or `when_exhausted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SkipMode {
    /// `skip`: the step is skipped; its dependents run without its output.
    Skip,
    /// `skip_cascade`: the step and everything downstream are skipped.
    SkipCascade,
    /// `fail`: the step and its run fail.
    Fail,
}

impl SkipMode {
    /// The variant's name in `pgflow::definition::WhenUnmet` / `WhenExhausted`.
    pub(crate) fn variant(self) -> &'static str {
        match self {
            Self::Skip => "Skip",
            Self::SkipCascade => "SkipCascade",
            Self::Fail => "Fail",
        }
    }
}

const FLOW_KEYS: &[&str] = &[
    "slug",
    "alias",
    "version",
    "input",
    "output",
    "state",
    "max_attempts",
    "base_delay",
    "max_delay",
    "jitter_percent",
    "timeout",
    "check_input",
];

const STEP_KEYS: &[&str] = &[
    "queue",
    "depends_on",
    "map",
    "max_attempts",
    "base_delay",
    "max_delay",
    "jitter_percent",
    "timeout",
    "start_delay",
    "when",
    "unless",
    "when_unmet",
    "when_exhausted",
    "signal",
    "key",
    "wait_timeout",
    "when_timed_out",
    "sleep",
    "sleep_until",
    "subflow",
    "concurrency",
    "concurrency_key",
    "rate_limit",
    "rate_key",
];

/// Parses `#[flow(...)]` arguments, recording problems in `errors`.
pub(crate) fn flow_args(tokens: TokenStream, errors: &mut Errors) -> FlowArgs {
    let mut args = FlowArgs::default();
    let parser = syn::meta::parser(|meta| {
        let key = key_of(&meta);
        match key.as_str() {
            "slug" => set_once(&mut args.slug, &meta, &key, errors, string_value),
            "alias" => set_once(&mut args.alias, &meta, &key, errors, string_value),
            "version" => set_once(&mut args.version, &meta, &key, errors, |m, k, e| {
                integer_value(m, k, e, 1)
            }),
            "input" => set_once(&mut args.input, &meta, &key, errors, type_value),
            "output" => set_once(&mut args.output, &meta, &key, errors, type_value),
            "state" => set_once(&mut args.state, &meta, &key, errors, type_value),
            "max_attempts" => set_once(&mut args.max_attempts, &meta, &key, errors, |m, k, e| {
                integer_value(m, k, e, 1)
            }),
            "base_delay" => set_once(&mut args.base_delay, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 0)
            }),
            "max_delay" => set_once(&mut args.max_delay, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 1)
            }),
            "jitter_percent" => {
                set_once(&mut args.jitter_percent, &meta, &key, errors, percent_value)
            }
            "timeout" => set_once(&mut args.timeout, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 1)
            }),
            "check_input" => set_once(&mut args.check_input, &meta, &key, errors, flag_value),
            _ => unknown_key(&meta, &key, FLOW_KEYS, errors),
        }
    });
    if let Err(error) = parser.parse2(tokens) {
        errors.push(error);
    }
    args
}

/// Parses `#[step(...)]` arguments, recording problems in `errors`.
pub(crate) fn step_args(tokens: TokenStream, errors: &mut Errors) -> StepArgs {
    let mut args = StepArgs::default();
    let parser = syn::meta::parser(|meta| {
        let key = key_of(&meta);
        match key.as_str() {
            "queue" => set_once(&mut args.queue, &meta, &key, errors, string_value),
            "depends_on" => set_once(&mut args.depends_on, &meta, &key, errors, depends_on_value),
            "map" => set_once(&mut args.map, &meta, &key, errors, map_value),
            "max_attempts" => set_once(&mut args.max_attempts, &meta, &key, errors, |m, k, e| {
                integer_value(m, k, e, 1)
            }),
            "base_delay" => set_once(&mut args.base_delay, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 0)
            }),
            "max_delay" => set_once(&mut args.max_delay, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 1)
            }),
            "jitter_percent" => {
                set_once(&mut args.jitter_percent, &meta, &key, errors, percent_value)
            }
            "timeout" => set_once(&mut args.timeout, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 1)
            }),
            "start_delay" => set_once(&mut args.start_delay, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 0)
            }),
            "when" => set_once(&mut args.when, &meta, &key, errors, pattern_value),
            "unless" => set_once(&mut args.unless, &meta, &key, errors, pattern_value),
            "when_unmet" => set_once(&mut args.when_unmet, &meta, &key, errors, skip_mode_value),
            "when_exhausted" => set_once(
                &mut args.when_exhausted,
                &meta,
                &key,
                errors,
                skip_mode_value,
            ),
            "signal" => set_once(&mut args.signal, &meta, &key, errors, signal_value),
            "key" => set_once(&mut args.key, &meta, &key, errors, |m, _, e| {
                path_value(m, e, msg::key_path_value)
            }),
            "sleep" => set_once(&mut args.sleep, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 1)
            }),
            "sleep_until" => set_once(&mut args.sleep_until, &meta, &key, errors, |m, _, e| {
                path_value(m, e, msg::sleep_until_value)
            }),
            "subflow" => set_once(&mut args.subflow, &meta, &key, errors, subflow_value),
            "concurrency" => set_once(&mut args.concurrency, &meta, &key, errors, |m, k, e| {
                integer_value(m, k, e, 1)
            }),
            "concurrency_key" => {
                set_once(&mut args.concurrency_key, &meta, &key, errors, |m, _, e| {
                    path_value(m, e, msg::concurrency_key_value)
                })
            }
            "rate_limit" => set_once(&mut args.rate_limit, &meta, &key, errors, rate_value),
            "rate_key" => set_once(&mut args.rate_key, &meta, &key, errors, |m, _, e| {
                path_value(m, e, msg::rate_key_value)
            }),
            "wait_timeout" => set_once(&mut args.wait_timeout, &meta, &key, errors, |m, k, e| {
                duration_value(m, k, e, 1)
            }),
            "when_timed_out" => set_once(
                &mut args.when_timed_out,
                &meta,
                &key,
                errors,
                skip_mode_value,
            ),
            _ => unknown_key(&meta, &key, STEP_KEYS, errors),
        }
    });
    if let Err(error) = parser.parse2(tokens) {
        errors.push(error);
    }
    args
}

fn key_of(meta: &ParseNestedMeta<'_>) -> String {
    meta.path
        .get_ident()
        .map(Ident::to_string)
        .unwrap_or_else(|| {
            let path = &meta.path;
            quote::quote!(#path).to_string().replace(' ', "")
        })
}

/// Parses one key's value into `slot`, reporting a second occurrence.
fn set_once<T>(
    slot: &mut Option<T>,
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
    parse: impl FnOnce(&ParseNestedMeta<'_>, &str, &mut Errors) -> syn::Result<Option<T>>,
) -> syn::Result<()> {
    let duplicate = slot.is_some();
    let value = parse(meta, key, errors)?;
    if duplicate {
        errors.at(&meta.path, msg::duplicate_key(key));
    } else if let Some(value) = value {
        *slot = Some(value);
    }
    Ok(())
}

/// Consumes an unknown key's value and reports the key.
fn unknown_key(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    accepted: &[&str],
    errors: &mut Errors,
) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.parse_nested_meta(|nested| {
            if nested.input.peek(Token![=]) {
                nested.value()?.parse::<Expr>()?;
            }
            Ok(())
        })?;
    }
    errors.at(&meta.path, msg::unknown_key(key, accepted));
    Ok(())
}

fn expr_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Expr> {
    meta.value()?.parse::<Expr>()
}

fn string_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Located<String>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::expected_string(key));
        return Ok(None);
    }
    match expr_value(meta)? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(Some(Located {
            value: s.value(),
            span: s.span(),
        })),
        other => {
            errors.at(other, msg::expected_string(key));
            Ok(None)
        }
    }
}

fn integer_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
    min: u64,
) -> syn::Result<Option<Located<u32>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::expected_integer(key, min));
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let parsed = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i
            .base10_parse::<u32>()
            .ok()
            .filter(|v| u64::from(*v) >= min),
        _ => None,
    };
    match parsed {
        Some(value) => Ok(Some(Located {
            value,
            span: expr.span(),
        })),
        None => {
            errors.at(&expr, msg::expected_integer(key, min));
            Ok(None)
        }
    }
}

fn percent_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Located<u8>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::expected_percent(key));
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let parsed = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse::<u8>().ok().filter(|v| *v <= 100),
        _ => None,
    };
    match parsed {
        Some(value) => Ok(Some(Located {
            value,
            span: expr.span(),
        })),
        None => {
            errors.at(&expr, msg::expected_percent(key));
            Ok(None)
        }
    }
}

fn type_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Type>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::expected_type(key));
        return Ok(None);
    }
    Ok(Some(meta.value()?.parse::<Type>()?))
}

fn duration_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
    min: u64,
) -> syn::Result<Option<Located<u64>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::bad_duration(key));
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let seconds = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => seconds_of_int(i),
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => seconds_of_str(s),
        _ => None,
    };
    match seconds {
        Some(value) if value >= min => Ok(Some(Located {
            value,
            span: expr.span(),
        })),
        Some(_) => {
            errors.at(&expr, msg::duration_too_short(key, min));
            Ok(None)
        }
        None => {
            errors.at(&expr, msg::bad_duration(key));
            Ok(None)
        }
    }
}

fn pattern_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Pattern>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::expected_pattern(key));
        return Ok(None);
    }
    match pattern::read(&expr_value(meta)?, key) {
        Ok(pattern) => Ok(Some(pattern)),
        Err(error) => {
            errors.push(error);
            Ok(None)
        }
    }
}

/// `skip`, `skip_cascade` or `fail`.
fn skip_mode_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Located<SkipMode>>> {
    const ACCEPTED: &[&str] = &["skip", "skip_cascade", "fail"];
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::expected_skip_mode(key, ACCEPTED));
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let mode = match &expr {
        Expr::Path(path) if path.qself.is_none() => {
            path.path
                .get_ident()
                .and_then(|ident| match ident.to_string().as_str() {
                    "skip" => Some(SkipMode::Skip),
                    "skip_cascade" => Some(SkipMode::SkipCascade),
                    "fail" => Some(SkipMode::Fail),
                    _ => None,
                })
        }
        _ => None,
    };
    match mode {
        Some(value) => Ok(Some(Located {
            value,
            span: expr.span(),
        })),
        None => {
            errors.at(&expr, msg::expected_skip_mode(key, ACCEPTED));
            Ok(None)
        }
    }
}

fn seconds_of_int(lit: &LitInt) -> Option<u64> {
    lit.base10_parse::<u64>().ok()
}

/// `"30s"`, `"5m"`, `"1h"` or `"30"` as seconds.
pub(crate) fn seconds_of_text(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let number: u64 = number.parse().ok()?;
    let factor = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    number
        .checked_mul(factor)
        .filter(|s| *s <= u64::from(i32::MAX as u32))
}

/// `"10/s"`, `"100/m"`, `"5/500ms"` or `"1000/1h"` as a rate: a whole number of starts of at
/// least 1, a slash, then a period of at least a millisecond: a unit (`ms`, `s`, `m`, `h`,
/// `d`), optionally after a whole number of them.
pub(crate) fn rate_of_text(text: &str) -> Option<Rate> {
    let (limit, period) = text.trim().split_once('/')?;
    let limit: u32 = limit.trim().parse().ok().filter(|n| *n >= 1)?;
    let period = period.trim();
    let (count, unit) = match period.find(|c: char| !c.is_ascii_digit()) {
        Some(0) => ("1", period),
        Some(at) => period.split_at(at),
        None => return None,
    };
    let count: u64 = count.parse().ok()?;
    let factor: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    let period_ms = count
        .checked_mul(factor)
        .filter(|ms| (1..=u64::from(i32::MAX as u32)).contains(ms))?;
    Some(Rate { limit, period_ms })
}

/// `rate_limit = "10/s"`.
fn rate_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Located<Rate>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::bad_rate(key));
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let rate = match &expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => rate_of_text(&s.value()),
        _ => None,
    };
    match rate {
        Some(value) => Ok(Some(Located {
            value,
            span: expr.span(),
        })),
        None => {
            errors.at(&expr, msg::bad_rate(key));
            Ok(None)
        }
    }
}

fn seconds_of_str(lit: &LitStr) -> Option<u64> {
    seconds_of_text(&lit.value())
}

fn depends_on_value(
    meta: &ParseNestedMeta<'_>,
    _key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Vec<Ident>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::depends_on_list());
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let Expr::Array(array) = &expr else {
        errors.at(&expr, msg::depends_on_list());
        return Ok(None);
    };
    let mut deps = Vec::new();
    for element in &array.elems {
        match element {
            Expr::Path(path) if path.qself.is_none() && path.path.get_ident().is_some() => {
                if let Some(ident) = path.path.get_ident() {
                    deps.push(ident.clone());
                }
            }
            other => errors.at(other, msg::depends_on_list()),
        }
    }
    Ok(Some(deps))
}

/// A key that takes no value (`check_input`): where it was written.
fn flag_value(
    meta: &ParseNestedMeta<'_>,
    key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Span>> {
    if meta.input.peek(Token![=]) {
        let expr = expr_value(meta)?;
        errors.at(&expr, msg::flag_with_value(key));
        return Ok(None);
    }
    Ok(Some(meta.path.span()))
}

/// The flow a step runs.
#[derive(Clone)]
pub(crate) enum Subflow {
    /// `subflow = charge_v1`, `subflow = crate::billing::charge_v1`: a flow module in scope,
    /// whose input and output types the compiler checks.
    Module(syn::Path),
    /// `subflow = "charge"`: an alias (or concrete slug) by name, typed by the names the flows
    /// record when a child starts; its output reaches dependents as JSON.
    Named(LitStr),
}

/// `subflow = charge_v1`, `subflow = crate::billing::charge_v1` or `subflow = "charge"`.
fn subflow_value(
    meta: &ParseNestedMeta<'_>,
    _key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Subflow>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::subflow_value());
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    match expr {
        Expr::Path(path) if path.qself.is_none() => Ok(Some(Subflow::Module(path.path))),
        Expr::Lit(ExprLit {
            lit: Lit::Str(name),
            ..
        }) => Ok(Some(Subflow::Named(name))),
        other => {
            errors.at(&other, msg::subflow_value());
            Ok(None)
        }
    }
}

/// `signal = name`: an identifier.
fn signal_value(
    meta: &ParseNestedMeta<'_>,
    _key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<Ident>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, msg::signal_value());
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    match &expr {
        Expr::Path(path) if path.qself.is_none() && path.path.get_ident().is_some() => {
            Ok(path.path.get_ident().cloned())
        }
        other => {
            errors.at(other, msg::signal_value());
            Ok(None)
        }
    }
}

/// `key = input.order_id`, `sleep_until = order.remind_at`, `key = input`: a root and field
/// names. `usage` says how the key is written, for a value that is no such path.
fn path_value(
    meta: &ParseNestedMeta<'_>,
    errors: &mut Errors,
    usage: fn() -> String,
) -> syn::Result<Option<Vec<Ident>>> {
    if !meta.input.peek(Token![=]) {
        errors.at(&meta.path, usage());
        return Ok(None);
    }
    let expr = expr_value(meta)?;
    let mut fields = Vec::new();
    let mut at = &expr;
    loop {
        match at {
            Expr::Field(field) => match &field.member {
                syn::Member::Named(name) => {
                    fields.push(name.clone());
                    at = &field.base;
                }
                syn::Member::Unnamed(_) => break,
            },
            Expr::Path(path) if path.qself.is_none() => {
                if let Some(root) = path.path.get_ident() {
                    fields.push(root.clone());
                    fields.reverse();
                    return Ok(Some(fields));
                }
                break;
            }
            _ => break,
        }
    }
    errors.at(&expr, usage());
    Ok(None)
}

fn map_value(
    meta: &ParseNestedMeta<'_>,
    _key: &str,
    errors: &mut Errors,
) -> syn::Result<Option<MapSource>> {
    if !meta.input.peek(Token![=]) {
        return Ok(Some(MapSource::Input(meta.path.span())));
    }
    let expr = expr_value(meta)?;
    match &expr {
        Expr::Path(path) if path.qself.is_none() && path.path.get_ident().is_some() => Ok(path
            .path
            .get_ident()
            .map(|ident| MapSource::Dependency(ident.clone()))),
        other => {
            errors.at(other, msg::map_value());
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_seconds_minutes_hours_and_days() {
        assert_eq!(seconds_of_text("30s"), Some(30));
        assert_eq!(seconds_of_text("5m"), Some(300));
        assert_eq!(seconds_of_text("1h"), Some(3600));
        assert_eq!(seconds_of_text("45"), Some(45));
        assert_eq!(seconds_of_text("5 m"), Some(300));
        assert_eq!(seconds_of_text("3d"), Some(259_200));
        assert_eq!(seconds_of_text("1w"), None);
        assert_eq!(seconds_of_text("s"), None);
        assert_eq!(seconds_of_text("-5s"), None);
        assert_eq!(seconds_of_text("99999999999h"), None);
    }

    #[test]
    fn rates_take_a_count_per_unit_or_per_so_many_units() {
        let rate = |text| rate_of_text(text).map(|r| (r.limit, r.period_ms));
        assert_eq!(rate("10/s"), Some((10, 1_000)));
        assert_eq!(rate(" 100 / m "), Some((100, 60_000)));
        assert_eq!(rate("5/500ms"), Some((5, 500)));
        assert_eq!(rate("1000/2h"), Some((1000, 7_200_000)));
        assert_eq!(rate("1/d"), Some((1, 86_400_000)));
        for bad in [
            "0/s",
            "10",
            "10/",
            "10/2",
            "10/fortnight",
            "/s",
            "-1/s",
            "10/0s",
            "10/99999d",
        ] {
            assert_eq!(rate(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_problem_of_one_attribute_is_reported() {
        let mut errors = Errors::default();
        let args = step_args(
            quote::quote!(
                queue = "ok",
                colour = "red",
                queue = "again",
                timeout = "forever"
            ),
            &mut errors,
        );
        assert_eq!(args.queue.map(|q| q.value), Some("ok".to_owned()));
        let text = errors.to_compile_errors().to_string();
        assert!(text.contains("unknown key `colour`"), "{text}");
        assert!(text.contains("duplicate key `queue`"), "{text}");
        assert!(text.contains("`timeout` takes a duration"), "{text}");
    }

    #[test]
    fn map_alone_maps_over_the_input_and_map_eq_names_a_dependency() {
        let mut errors = Errors::default();
        let args = step_args(quote::quote!(map), &mut errors);
        assert!(matches!(args.map, Some(MapSource::Input(_))));
        let args = step_args(quote::quote!(map = split), &mut errors);
        assert!(matches!(args.map, Some(MapSource::Dependency(ref d)) if d == "split"));
        assert!(errors.is_empty());
    }
}
