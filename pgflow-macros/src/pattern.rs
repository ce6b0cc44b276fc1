//! Condition patterns (`when`, `unless`): constant JSON read at compile time, from
//! `json!({...})` or from a string literal holding JSON.
//!
//! A pattern is part of the flow's definition (the SQL core stores it with the step and
//! compares it when a worker verifies the flow), so it must be a constant: serde_json's
//! `json!` would accept Rust expressions and build the value at run time, which a `const`
//! declaration cannot hold and which could differ between workers. The `json!` form is read
//! here token by token instead; anything that is not JSON (a variable, a call) is reported at
//! its tokens. Reading the tokens also keeps the span of each top-level key, so a key that
//! names no dependency is reported where it is written.

use proc_macro2::Span;
use serde_json::{Map, Number, Value};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Lit, LitStr, Token};

use crate::errors::msg;

/// A condition pattern with where it was written.
#[derive(Clone, Debug)]
pub(crate) struct Pattern {
    /// The pattern.
    pub value: Value,
    /// The pattern's tokens.
    pub span: Span,
    /// The keys of a top-level object, with where each is written.
    pub keys: Vec<(String, Span)>,
}

impl Pattern {
    /// The pattern as compact JSON text.
    pub(crate) fn json_text(&self) -> String {
        self.value.to_string()
    }
}

/// Reads the value of `key = ...`: `json!(...)` or a string literal holding JSON.
pub(crate) fn read(expr: &Expr, key: &str) -> syn::Result<Pattern> {
    match expr {
        Expr::Macro(mac)
            if mac
                .mac
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "json") =>
        {
            let mut keys = Vec::new();
            let value = (|input: ParseStream<'_>| {
                let value = value(input, Some(&mut keys))?;
                if !input.is_empty() {
                    return Err(input.error(msg::pattern_trailing_tokens()));
                }
                Ok(value)
            })
            .parse2(mac.mac.tokens.clone())?;
            Ok(Pattern {
                value,
                span: expr.span(),
                keys,
            })
        }
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => from_text(text),
        other => Err(syn::Error::new_spanned(other, msg::expected_pattern(key))),
    }
}

fn from_text(text: &LitStr) -> syn::Result<Pattern> {
    let value: Value = serde_json::from_str(&text.value())
        .map_err(|error| syn::Error::new(text.span(), msg::pattern_not_json(&error)))?;
    let keys = match &value {
        Value::Object(map) => map.keys().map(|k| (k.clone(), text.span())).collect(),
        _ => Vec::new(),
    };
    Ok(Pattern {
        value,
        span: text.span(),
        keys,
    })
}

/// One JSON value; `keys` collects the keys of this value when it is an object.
fn value(input: ParseStream<'_>, keys: Option<&mut Vec<(String, Span)>>) -> syn::Result<Value> {
    if input.peek(syn::token::Brace) {
        let content;
        syn::braced!(content in input);
        object(&content, keys)
    } else if input.peek(syn::token::Bracket) {
        let content;
        syn::bracketed!(content in input);
        let mut items = Vec::new();
        while !content.is_empty() {
            items.push(value(&content, None)?);
            if !content.is_empty() {
                content.parse::<Token![,]>()?;
            }
        }
        Ok(Value::Array(items))
    } else if input.peek(Token![-]) {
        input.parse::<Token![-]>()?;
        let lit: Lit = input.parse()?;
        number(&lit, true)
    } else if input.peek(syn::Ident) && input.fork().parse::<syn::Ident>()? == "null" {
        input.parse::<syn::Ident>()?;
        Ok(Value::Null)
    } else if input.peek(Lit) {
        match input.parse::<Lit>()? {
            Lit::Str(s) => Ok(Value::String(s.value())),
            Lit::Bool(b) => Ok(Value::Bool(b.value)),
            lit @ (Lit::Int(_) | Lit::Float(_)) => number(&lit, false),
            other => Err(syn::Error::new(other.span(), msg::pattern_not_constant())),
        }
    } else {
        let token: proc_macro2::TokenTree = input.parse()?;
        Err(syn::Error::new(token.span(), msg::pattern_not_constant()))
    }
}

fn object(
    content: ParseStream<'_>,
    mut keys: Option<&mut Vec<(String, Span)>>,
) -> syn::Result<Value> {
    let mut map = Map::new();
    while !content.is_empty() {
        let key: LitStr = content
            .parse()
            .map_err(|e| syn::Error::new(e.span(), msg::pattern_key()))?;
        content.parse::<Token![:]>()?;
        let item = value(content, None)?;
        if let Some(keys) = keys.as_deref_mut() {
            keys.push((key.value(), key.span()));
        }
        map.insert(key.value(), item);
        if !content.is_empty() {
            content.parse::<Token![,]>()?;
        }
    }
    Ok(Value::Object(map))
}

fn number(lit: &Lit, negative: bool) -> syn::Result<Value> {
    let sign = if negative { "-" } else { "" };
    let parsed = match lit {
        Lit::Int(int) => format!("{sign}{}", int.base10_digits())
            .parse::<i64>()
            .map(Number::from)
            .ok()
            .or_else(|| {
                int.base10_parse::<u64>()
                    .ok()
                    .filter(|_| !negative)
                    .map(Number::from)
            }),
        Lit::Float(float) => format!("{sign}{}", float.base10_digits())
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64),
        _ => None,
    };
    parsed
        .map(Value::Number)
        .ok_or_else(|| syn::Error::new(lit.span(), msg::pattern_not_constant()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_tokens(tokens: proc_macro2::TokenStream) -> syn::Result<Pattern> {
        read(&syn::parse2(tokens).expect("an expression"), "when")
    }

    #[test]
    fn json_macro_tokens_become_the_same_value_serde_would_build() {
        let pattern = read_tokens(quote::quote!(json!({
            "kind": "urgent",
            "scores": [1, -2, 3.5],
            "flags": { "beta": true, "gone": null }
        })))
        .unwrap();
        assert_eq!(
            pattern.value,
            serde_json::json!({
                "kind": "urgent",
                "scores": [1, -2, 3.5],
                "flags": { "beta": true, "gone": null }
            })
        );
        let keys: Vec<&str> = pattern.keys.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["kind", "scores", "flags"]);
    }

    #[test]
    fn a_string_literal_holds_json_and_scalars_and_arrays_are_patterns_too() {
        let pattern = read_tokens(quote::quote!(r#"{"plan": "pro"}"#)).unwrap();
        assert_eq!(pattern.value, serde_json::json!({"plan": "pro"}));
        assert_eq!(
            read_tokens(quote::quote!(serde_json::json!(["a"])))
                .unwrap()
                .value,
            serde_json::json!(["a"])
        );
        assert_eq!(
            read_tokens(quote::quote!(json!(42))).unwrap().value,
            serde_json::json!(42)
        );
    }

    #[test]
    fn rust_expressions_and_bad_json_are_refused() {
        let error = read_tokens(quote::quote!(json!({ "kind": kind }))).unwrap_err();
        assert!(error.to_string().contains("constant JSON"), "{error}");
        let error = read_tokens(quote::quote!(json!({ kind: "x" }))).unwrap_err();
        assert!(error.to_string().contains("string literal"), "{error}");
        let error = read_tokens(quote::quote!("{not json")).unwrap_err();
        assert!(error.to_string().contains("not valid JSON"), "{error}");
        let error = read_tokens(quote::quote!(pattern())).unwrap_err();
        assert!(
            error.to_string().contains("takes a constant JSON pattern"),
            "{error}"
        );
    }
}
