#[pgflow::flow(slug = "keys", jitter_percent = 150)]
mod keys {
    #[step(max_delay = 0)]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
