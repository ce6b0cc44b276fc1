//! Who may change runs: the action token, and protection of the action forms against
//! cross-site requests.
//!
//! A cancel or retry is a same-origin form POST carrying three things: the operator's action
//! token, typed into the confirmation form (never stored by the dashboard in the browser), and a
//! CSRF token that must equal the `pgflow_csrf` cookie (`SameSite=Strict`, `HttpOnly`) the
//! confirmation page set. A browser also says where a request comes from (`Sec-Fetch-Site`,
//! `Origin`); a request from another site is refused before anything else is looked at.

use axum::http::{HeaderMap, HeaderValue, header};
use subtle::ConstantTimeEq;

use crate::config::{Access, ActionToken};
use crate::random::random_hex;

/// The cookie the double-submitted CSRF token rides in.
pub(crate) const CSRF_COOKIE: &str = "pgflow_csrf";

/// Why an action was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The dashboard was started read-only.
    #[error(
        "this dashboard is read-only (started with --read-only): it cancels and retries nothing"
    )]
    ReadOnly,
    /// The request came from another site.
    #[error(
        "refused a request from another site ({0}): actions are accepted only from the \
         dashboard's own pages"
    )]
    CrossSite(String),
    /// The form's CSRF token is missing or does not match the cookie.
    #[error(
        "the form is stale or did not come from this dashboard (its CSRF token does not match); \
         open the page again and resubmit"
    )]
    Csrf,
    /// The action token is wrong or missing.
    #[error(
        "wrong action token: give the token the dashboard was started with (--token or \
         PGFLOW_DASHBOARD_TOKEN)"
    )]
    Token,
}

/// The value of the cookie `name` in the request, if it has one.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
}

/// The CSRF token to put in a form: the request's cookie when it has a well-formed one,
/// otherwise a fresh one with the `Set-Cookie` header that stores it.
pub(crate) fn csrf_for_form(headers: &HeaderMap) -> (String, Option<HeaderValue>) {
    if let Some(existing) = cookie(headers, CSRF_COOKIE)
        .filter(|value| value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return (existing, None);
    }
    let fresh = random_hex();
    let set_cookie = HeaderValue::from_str(&format!(
        "{CSRF_COOKIE}={fresh}; Path=/; HttpOnly; SameSite=Strict"
    ))
    .ok();
    (fresh, set_cookie)
}

/// Checks an action's request: same site, CSRF token equal to the cookie, and the right action
/// token, in that order.
pub(crate) fn check_action(
    access: &Access,
    headers: &HeaderMap,
    form_csrf: &str,
    form_token: &str,
) -> Result<(), Refusal> {
    let Access::Token(expected) = access else {
        return Err(Refusal::ReadOnly);
    };
    check_same_site(headers)?;
    let cookie = cookie(headers, CSRF_COOKIE).unwrap_or_default();
    if cookie.is_empty() || !equal_in_constant_time(&cookie, form_csrf) {
        return Err(Refusal::Csrf);
    }
    if !token_matches(expected, form_token) {
        return Err(Refusal::Token);
    }
    Ok(())
}

fn check_same_site(headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(Refusal::CrossSite(format!("Sec-Fetch-Site: {site}")));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let same = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|authority| !host.is_empty() && authority == host);
        if !same {
            return Err(Refusal::CrossSite(format!("Origin: {origin}")));
        }
    }
    Ok(())
}

fn token_matches(expected: &ActionToken, given: &str) -> bool {
    equal_in_constant_time(expected.expose(), given.trim())
}

fn equal_in_constant_time(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> Access {
        Access::Token(ActionToken::new("0123456789abcdef0123").unwrap())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn an_action_passes_with_same_site_matching_csrf_and_the_token() {
        let h = headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
            ("cookie", "other=1; pgflow_csrf=abc"),
        ]);
        assert_eq!(
            check_action(&token(), &h, "abc", "0123456789abcdef0123"),
            Ok(())
        );
    }

    #[test]
    fn each_missing_piece_is_refused_by_name() {
        let good = [("host", "127.0.0.1:8080"), ("cookie", "pgflow_csrf=abc")];
        assert_eq!(
            check_action(&Access::ReadOnly, &headers(&good), "abc", "x"),
            Err(Refusal::ReadOnly)
        );
        assert_eq!(
            check_action(&token(), &headers(&good), "abc", "0123456789abcdef012"),
            Err(Refusal::Token)
        );
        assert_eq!(
            check_action(&token(), &headers(&good), "abd", "0123456789abcdef0123"),
            Err(Refusal::Csrf)
        );
        assert_eq!(
            check_action(
                &token(),
                &headers(&[("host", "127.0.0.1:8080")]),
                "",
                "0123456789abcdef0123"
            ),
            Err(Refusal::Csrf)
        );
        let cross = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example"),
            ("cookie", "pgflow_csrf=abc"),
        ];
        assert!(matches!(
            check_action(&token(), &headers(&cross), "abc", "0123456789abcdef0123"),
            Err(Refusal::CrossSite(_))
        ));
        let cross_site = [
            ("host", "127.0.0.1:8080"),
            ("sec-fetch-site", "cross-site"),
            ("cookie", "pgflow_csrf=abc"),
        ];
        assert!(matches!(
            check_action(
                &token(),
                &headers(&cross_site),
                "abc",
                "0123456789abcdef0123"
            ),
            Err(Refusal::CrossSite(_))
        ));
    }

    #[test]
    fn a_form_reuses_a_good_cookie_and_replaces_a_bad_one() {
        let existing = random_hex();
        let with = headers(&[("cookie", &format!("pgflow_csrf={existing}"))]);
        assert_eq!(csrf_for_form(&with), (existing, None));
        let (fresh, set) = csrf_for_form(&headers(&[("cookie", "pgflow_csrf=short")]));
        let set = set.unwrap();
        assert!(
            set.to_str()
                .unwrap()
                .starts_with(&format!("pgflow_csrf={fresh};"))
        );
        assert!(set.to_str().unwrap().contains("SameSite=Strict"));
    }
}
