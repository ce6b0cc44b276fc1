#[pgflow::flow(slug = "deps")]
mod deps {
    #[step(depends_on = [split])]
    async fn split() -> Result<u32, String> {
        Ok(1)
    }
}

fn main() {}
