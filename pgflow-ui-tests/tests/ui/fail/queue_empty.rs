#[pgflow::flow(slug = "empty")]
mod empty {
    #[step(queue = "")]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
