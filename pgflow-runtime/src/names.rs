//! Validated names: slugs of flows, steps and aliases, and PGMQ queue names.
//!
//! These rules are the single source for Rust code (the macros call [`validate_slug`] and
//! [`validate_queue_name`] at compile time) and match the SQL core's `pgflow.is_valid_slug` and
//! `pgflow.is_valid_queue_name`:
//! - a slug starts with an ASCII letter or `_`, continues with ASCII letters, digits or `_`, and
//!   is at most 47 bytes (so a lowercased flow slug is always a valid queue name);
//! - a queue name is 1 to 47 bytes of `a-z`, `0-9` and `_` (PGMQ's limit, lowercase only).

use std::fmt;

/// The longest slug or queue name, in bytes.
pub const MAX_NAME_LEN: usize = 47;

/// Why a name was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("{kind} is empty")]
    Empty {
        /// What was being named (`flow slug`, `queue name`, ...).
        kind: &'static str,
    },
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    #[error("{kind} `{name}` is {len} bytes long; the limit is 47")]
    TooLong {
        /// What was being named.
        kind: &'static str,
        /// The rejected name.
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The name contains a character outside its alphabet, or starts with a digit.
    #[error("{kind} `{name}` is invalid: {rule}")]
    InvalidCharacter {
        /// What was being named.
        kind: &'static str,
        /// The rejected name.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
}

const SLUG_RULE: &str = "use ASCII letters, digits and `_`, starting with a letter or `_`";
const QUEUE_RULE: &str = "use lowercase ASCII letters, digits and `_`";

/// Checks a slug (flow, step or alias) against the slug rules.
pub fn validate_slug(kind: &'static str, name: &str) -> Result<(), NameError> {
    check_length(kind, name)?;
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if !first_ok || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(NameError::InvalidCharacter {
            kind,
            name: name.to_owned(),
            rule: SLUG_RULE,
        });
    }
    Ok(())
}

/// Checks a PGMQ queue name against the queue name rules.
pub fn validate_queue_name(name: &str) -> Result<(), NameError> {
    let kind = "queue name";
    check_length(kind, name)?;
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(NameError::InvalidCharacter {
            kind,
            name: name.to_owned(),
            rule: QUEUE_RULE,
        });
    }
    Ok(())
}

fn check_length(kind: &'static str, name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty { kind });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong {
            kind,
            name: name.to_owned(),
            len: name.len(),
        });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $validate:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates `name` and wraps it.
            pub fn new(name: impl Into<String>) -> Result<Self, NameError> {
                let name = name.into();
                let validate: fn(&str) -> Result<(), NameError> = $validate;
                validate(&name)?;
                Ok(Self(name))
            }

            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = NameError;
            fn try_from(name: &str) -> Result<Self, NameError> {
                Self::new(name)
            }
        }
    };
}

name_type!(
    /// The slug of a concrete flow (also used for aliases), e.g. `triage_v2`.
    FlowSlug,
    |name| validate_slug("flow slug", name)
);
name_type!(
    /// The slug of a step within a flow, e.g. `classify`.
    StepSlug,
    |name| validate_slug("step slug", name)
);
name_type!(
    /// The name of a PGMQ queue, e.g. `classify_threads`.
    QueueName,
    validate_queue_name
);

impl FlowSlug {
    /// The queue a step of this flow routes to when it names none: the lowercased slug.
    pub fn default_queue(&self) -> QueueName {
        // A valid slug lowercased is a valid queue name: same length, alphabet within `[a-z0-9_]`.
        QueueName(self.0.to_ascii_lowercase())
    }
}
