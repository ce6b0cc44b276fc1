#[pgflow::flow(slug = "params")]
mod params {
    #[step]
    async fn fetch() -> Result<u32, String> {
        Ok(1)
    }

    #[step(depends_on = [fetch])]
    async fn split(fetched: u32) -> Result<u32, String> {
        Ok(fetched)
    }
}

fn main() {}
