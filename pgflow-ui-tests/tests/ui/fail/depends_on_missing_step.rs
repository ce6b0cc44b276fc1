#[pgflow::flow(slug = "deps")]
mod deps {
    #[step]
    async fn fetch() -> Result<u32, String> {
        Ok(1)
    }

    #[step(depends_on = [fecth])]
    async fn split(fetch: u32) -> Result<u32, String> {
        Ok(fetch)
    }
}

fn main() {}
