//! Secrets made from operating-system randomness: action tokens and CSRF tokens.

/// 64 hex digits of operating-system randomness (two version-4 UUIDs: 244 random bits).
pub(crate) fn random_hex() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}
