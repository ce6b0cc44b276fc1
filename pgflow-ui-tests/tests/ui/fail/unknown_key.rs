#[pgflow::flow(slug = "keys")]
mod keys {
    #[step(retries = 3)]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
