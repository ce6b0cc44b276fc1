#[pgflow::flow(slug = "keys", max_attempts = 2, max_attempts = 3)]
mod keys {
    #[step]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
