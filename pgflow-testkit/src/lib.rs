//! Throwaway Postgres clusters for pgflow's examples and tests: [`Cluster`] runs `initdb` and
//! `pg_ctl` from this machine's Postgres binaries in a temporary directory, and
//! [`tls::tls_only_cluster`] adds a certificate authority, a server certificate and a
//! `pg_hba.conf` that refuses connections without TLS, and [`PgBouncer`] puts a real PgBouncer in
//! transaction mode in front of a server. [`db`] holds the helpers of tests against a
//! `#[sqlx::test]` database (install pgflow, its URL, claim tasks), and [`harness`] the `main`
//! of a test binary of its own.
//!
//! Not published: the examples fall back to a cluster when no server answers, and the tests
//! start one when they need server settings of their own. Errors are boxed, since every caller
//! only reports them.

mod cluster;
pub mod db;
pub mod harness;
mod pgbouncer;
pub mod tls;

pub use cluster::{Cluster, Error};
pub use pgbouncer::PgBouncer;
