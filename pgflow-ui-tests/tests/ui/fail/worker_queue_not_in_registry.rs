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

fn main() {
    // A queue of `beta`, but the registry carries only `alpha`.
    let _worker = pgflow::Worker::start_with(
        alpha::deployment(),
        pgflow::WorkerConfig::new(beta::Queue::BetaOnly),
    );
}
