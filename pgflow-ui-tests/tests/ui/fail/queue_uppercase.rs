#[pgflow::flow(slug = "upper")]
mod upper {
    #[step(queue = "Classify")]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
