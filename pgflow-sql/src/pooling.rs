//! How connections reach Postgres: straight (or through a session-mode pooler), or through a
//! transaction-mode pooler such as PgBouncer with `pool_mode = transaction`.
//!
//! Behind a transaction-mode pooler a client connection gets a server connection only for the
//! length of a transaction. Two things sqlx does by default then break: a named prepared
//! statement lives on one server connection and the next transaction may run on another, and
//! an unnamed statement is parsed and executed in two protocol exchanges that the pooler may
//! send to different server connections. So pgflow, told it is behind such a pooler, runs every
//! call in a transaction of its own with unnamed statements (see `pgflow_runtime::Db`).
//!
//! A URL says so the way Prisma and Supabase spell it: `?pgbouncer=true`. The parameter is
//! removed before the URL reaches sqlx (which would warn about a parameter it does not know).

/// How pgflow's connections reach Postgres.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooling {
    /// Straight to Postgres, or through a pooler in session mode: statements are prepared once
    /// per connection and cached.
    #[default]
    Direct,
    /// Through a transaction-mode pooler (PgBouncer `pool_mode = transaction`, Supavisor's
    /// transaction port): every call is a transaction of its own with unnamed statements, and
    /// nothing relies on session state (`LISTEN`, session advisory locks).
    Transaction,
}

impl Pooling {
    /// The URL parameter that selects [`Pooling::Transaction`]: `pgbouncer=true`.
    pub const URL_PARAMETER: &'static str = "pgbouncer";
}

/// Splits the `pgbouncer` parameter off a connection URL: returns the URL without it and the
/// pooling it asks for (`pgbouncer=true` is [`Pooling::Transaction`]; `false` or no parameter
/// is [`Pooling::Direct`]). Another value is an error naming the accepted ones.
pub fn split_pooling(url: &str) -> Result<(String, Pooling), String> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Pooling::Direct));
    };
    let mut pooling = Pooling::Direct;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != Pooling::URL_PARAMETER {
            kept.push(pair);
            continue;
        }
        pooling = match value {
            "true" | "1" => Pooling::Transaction,
            "false" | "0" => Pooling::Direct,
            other => {
                return Err(format!(
                    "the URL parameter `pgbouncer={other}` is neither true nor false; write \
                     `pgbouncer=true` when the URL goes through a transaction-mode pooler"
                ));
            }
        };
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, pooling))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parameter_is_removed_and_read() {
        assert_eq!(
            split_pooling("postgres://u@h/db?pgbouncer=true").unwrap(),
            ("postgres://u@h/db".to_owned(), Pooling::Transaction)
        );
        assert_eq!(
            split_pooling("postgres://u@h/db?sslmode=require&pgbouncer=true&application_name=x")
                .unwrap(),
            (
                "postgres://u@h/db?sslmode=require&application_name=x".to_owned(),
                Pooling::Transaction
            )
        );
        assert_eq!(
            split_pooling("postgres://u@h/db?pgbouncer=false").unwrap(),
            ("postgres://u@h/db".to_owned(), Pooling::Direct)
        );
        assert_eq!(
            split_pooling("postgres://u@h/db?sslmode=require").unwrap(),
            (
                "postgres://u@h/db?sslmode=require".to_owned(),
                Pooling::Direct
            )
        );
        assert_eq!(
            split_pooling("postgres://u@h/db").unwrap(),
            ("postgres://u@h/db".to_owned(), Pooling::Direct)
        );
    }

    #[test]
    fn an_unknown_value_is_refused_with_the_accepted_spelling() {
        let error = split_pooling("postgres://u@h/db?pgbouncer=yes").unwrap_err();
        assert!(
            error.contains("pgbouncer=yes") && error.contains("pgbouncer=true"),
            "{error}"
        );
    }
}
