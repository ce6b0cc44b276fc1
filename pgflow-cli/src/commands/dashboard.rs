//! `pgflow dashboard`: serves the web dashboard until interrupted.

use std::net::SocketAddr;

use pgflow_dashboard::{Access, ActionToken, DashboardConfig};

use crate::failure::Failure;

/// Database connections the dashboard's pages share (its event listener holds one more).
pub(super) const CONNECTIONS: u32 = 4;

/// The command's options.
pub(super) struct Options {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub read_only: bool,
    pub hide_payloads: bool,
    pub metrics: bool,
}

/// Serves until Ctrl-C or SIGTERM; the pages read from `replica` when one is given.
pub(super) async fn serve(
    db: pgflow::Db,
    replica: Option<pgflow::Db>,
    options: Options,
) -> Result<(), Failure> {
    let (access, generated) = if options.read_only {
        (Access::ReadOnly, false)
    } else if let Some(token) = options.token {
        let token = ActionToken::new(token).map_err(|e| Failure::usage(e.to_string()))?;
        (Access::Token(token), false)
    } else {
        (Access::Token(ActionToken::generate()), true)
    };
    let mut config = DashboardConfig::new(access.clone());
    config.listen = options.listen;
    config.hide_payloads = options.hide_payloads;
    config.metrics = options.metrics;
    let served = match replica {
        Some(replica) => pgflow_dashboard::serve_with_replica(config, db, replica).await,
        None => pgflow_dashboard::serve(config, db).await,
    };
    let dashboard = served.map_err(|error| {
        Failure::runtime(format!(
            "cannot serve the dashboard at {}: {error}",
            options.listen
        ))
    })?;
    eprintln!("pgflow dashboard at {}", dashboard.url());
    match &access {
        Access::ReadOnly => eprintln!("read-only: no cancel, no retry"),
        Access::Token(token) if generated => eprintln!(
            "action token for cancel and retry (this run of the dashboard only; set --token or \
             PGFLOW_DASHBOARD_TOKEN to choose one): {}",
            token.expose()
        ),
        Access::Token(_) => eprintln!("cancel and retry need the token given"),
    }
    stopped().await;
    drop(dashboard);
    Ok(())
}

async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
