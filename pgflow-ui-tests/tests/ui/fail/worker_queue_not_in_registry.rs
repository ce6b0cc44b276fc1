#[pgflow::flow(slug = "alpha")]
mod alpha {
    #[step]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

#[pgflow::flow(slug = "beta")]
mod beta {
    #[step(queue = "beta_only")]
    async fn b() -> Result<(), String> {
        Ok(())
    }
}

// A queue of `beta`, but the registry carries only `alpha`: one error, at the registry.
async fn start() -> Result<pgflow::WorkerHandle, pgflow::WorkerError> {
    pgflow::Worker::start_with(
        alpha::deployment(),
        pgflow::WorkerConfig::new(beta::Queue::BetaOnly),
    )
    .await
}

fn main() {
    let _ = start();
}
