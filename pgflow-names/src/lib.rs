//! pgflow's name rules, in plain `std` Rust and without dependencies, so that the
//! `pgflow-macros` crate checks names at compile time with the same code the runtime uses at
//! run time.
//!
//! - a slug (flow, step, alias) starts with an ASCII letter or `_`, continues with ASCII
//!   letters, digits or `_`, and is at most 47 bytes (so a lowercased flow slug is always a
//!   valid queue name);
//! - a queue name is 1 to 47 bytes of `a-z`, `0-9` and `_` (PGMQ's limit, lowercase only).
//!
//! The SQL core's `pgflow.is_valid_slug` and `pgflow.is_valid_queue_name` implement the same
//! rules; an integration test feeds both the same table of names.

use std::fmt;

/// The longest slug or queue name, in bytes.
pub const MAX_NAME_LEN: usize = 47;

/// Why a name was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    Empty {
        /// What was being named (`flow slug`, `queue name`, ...).
        kind: &'static str,
    },
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    TooLong {
        /// What was being named.
        kind: &'static str,
        /// The rejected name.
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The name contains a character outside its alphabet, or starts with a digit.
    InvalidCharacter {
        /// What was being named.
        kind: &'static str,
        /// The rejected name.
        name: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The name ends like the names pgflow gives its own queues: a queue's priority lanes are
    /// `<queue>__p1`, `__p2`, `__p4` and `__p5`.
    Reserved {
        /// What was being named.
        kind: &'static str,
        /// The rejected name.
        name: String,
    },
}

/// The suffixes of a queue's priority lanes, which no queue of one's own may end with.
pub const LANE_SUFFIXES: [&str; 4] = ["__p1", "__p2", "__p4", "__p5"];

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
    if LANE_SUFFIXES.iter().any(|suffix| name.ends_with(suffix)) {
        return Err(NameError::Reserved {
            kind,
            name: name.to_owned(),
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

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty { kind } => write!(f, "{kind} is empty"),
            Self::TooLong { kind, name, len } => write!(
                f,
                "{kind} `{name}` is {len} bytes long; the limit is {MAX_NAME_LEN}"
            ),
            Self::InvalidCharacter { kind, name, rule } => {
                write!(f, "{kind} `{name}` is invalid: {rule}")
            }
            Self::Reserved { kind, name } => write!(
                f,
                "{kind} `{name}` ends like a priority lane's name (`__p1`, `__p2`, `__p4`, \
                 `__p5`), which pgflow keeps for its own queues; choose another ending"
            ),
        }
    }
}

impl std::error::Error for NameError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_may_not_end_like_a_priority_lane() {
        for lane in ["mail__p1", "mail__p2", "mail__p4", "mail__p5"] {
            assert!(
                matches!(validate_queue_name(lane), Err(NameError::Reserved { .. })),
                "{lane}"
            );
        }
        for fine in ["mail", "mail__p3", "mail_p1", "mail__p12", "p1"] {
            assert_eq!(validate_queue_name(fine), Ok(()), "{fine}");
        }
    }
}
