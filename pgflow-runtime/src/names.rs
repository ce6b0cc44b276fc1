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
                // `pad`, so that widths and alignment (`{:<20}`) apply as they do to `str`.
                f.pad(&self.0)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <String as sqlx::Type<sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        /// Read back from the database, the name is validated again: the schema's `CHECK`s
        /// hold the same rules, so this fails only on a database changed by hand.
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <String as sqlx::Decode<'r, sqlx::Postgres>>::decode(value)?;
                Ok(Self::new(text)?)
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.0.as_str(), buf)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_print_and_compare_like_their_text() {
        let step = StepSlug::new("classify").expect("valid");
        assert_eq!(format!("[{step:<10}]"), "[classify  ]");
        assert_eq!(step, "classify");
        assert!(step != "alert");
        let borrowed: &str = std::borrow::Borrow::borrow(&step);
        assert_eq!(borrowed, "classify");
    }

    #[test]
    fn a_flow_slugs_default_queue_is_its_lowercased_slug() {
        let flow = FlowSlug::new("Triage_V2").expect("valid");
        assert_eq!(flow.default_queue().as_str(), "triage_v2");
    }
}
