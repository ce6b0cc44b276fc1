#[pgflow::flow(slug = "Bad-Slug")]
mod flow {
    #[step]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
