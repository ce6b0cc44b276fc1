//! What an operator chooses when starting the dashboard, checked before it listens.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};

/// The shortest action token accepted: long enough that guessing it over HTTP is hopeless.
pub const MIN_TOKEN_LEN: usize = 16;

/// The secret that cancel and retry need. Its `Debug` form never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ActionToken(String);

impl ActionToken {
    /// `token` as the action token; refused when shorter than [`MIN_TOKEN_LEN`] characters or
    /// when it has whitespace (a copy-paste accident).
    pub fn new(token: impl Into<String>) -> Result<Self, ConfigError> {
        let token = token.into();
        if token.chars().count() < MIN_TOKEN_LEN {
            return Err(ConfigError::TokenTooShort {
                length: token.chars().count(),
            });
        }
        if token.chars().any(char::is_whitespace) {
            return Err(ConfigError::TokenHasWhitespace);
        }
        Ok(Self(token))
    }

    /// A fresh random token (64 hex digits, 244 random bits from the operating system).
    pub fn generate() -> Self {
        Self(crate::random::random_hex())
    }

    /// The token's text, to show the operator once.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ActionToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ActionToken(..)")
    }
}

/// Who may change runs from the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Nobody: the dashboard only shows, and offers no actions.
    ReadOnly,
    /// Whoever gives this token with a cancel or retry (on a same-origin form).
    Token(ActionToken),
}

/// How the dashboard serves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DashboardConfig {
    /// Where it listens; loopback (`127.0.0.1:8080`) unless the operator chooses otherwise.
    pub listen: SocketAddr,
    /// Whether cancel and retry are offered, and the token they need.
    pub access: Access,
    /// Show payload sizes only, never run inputs, outputs or step outputs.
    pub hide_payloads: bool,
    /// How many characters of a payload a page shows before truncating it.
    pub payload_preview_chars: u16,
    /// Serve Prometheus metrics at `/metrics` too.
    pub metrics: bool,
}

impl DashboardConfig {
    /// Loopback port 8080, with `access`, payloads shown (truncated to 2,000 characters), no
    /// metrics endpoint.
    pub fn new(access: Access) -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            access,
            hide_payloads: false,
            payload_preview_chars: 2_000,
            metrics: false,
        }
    }

    /// Whether actions (cancel, retry) are offered.
    pub fn actions_enabled(&self) -> bool {
        matches!(self.access, Access::Token(_))
    }
}

/// A dashboard option that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The token is too short to keep anyone out.
    #[error(
        "the action token has {length} characters; use at least {MIN_TOKEN_LEN} (for example \
         the output of `openssl rand -hex 32`), or start with --read-only"
    )]
    TokenTooShort {
        /// Its length in characters.
        length: usize,
    },
    /// The token has whitespace in it.
    #[error("the action token has whitespace in it; give the token alone, without spaces")]
    TokenHasWhitespace,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_spaced_token_is_refused_with_the_way_out() {
        let short = ActionToken::new("secret").unwrap_err();
        assert_eq!(short, ConfigError::TokenTooShort { length: 6 });
        assert!(short.to_string().contains("--read-only"));
        assert_eq!(
            ActionToken::new("0123456789abcdef 0123").unwrap_err(),
            ConfigError::TokenHasWhitespace
        );
        assert!(ActionToken::new("0123456789abcdef").is_ok());
    }

    #[test]
    fn a_token_never_shows_in_debug_output() {
        let token = ActionToken::generate();
        assert_eq!(token.expose().len(), 64);
        assert!(!format!("{token:?}").contains(token.expose()));
        assert_ne!(token, ActionToken::generate());
    }
}
