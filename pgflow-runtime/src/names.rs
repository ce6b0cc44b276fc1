//! Validated names: slugs of flows, steps and aliases, and PGMQ queue names.
//!
//! The rules themselves live in the dependency-free `pgflow-names` crate, which the macros use
//! to check names at compile time; the SQL core's `CHECK`s implement the same rules.

use std::fmt;

pub use pgflow_names::{MAX_NAME_LEN, NameError, validate_queue_name, validate_slug};

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
