#[pgflow::flow(slug = "dash")]
mod dash {
    #[step(queue = "classify-threads")]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
