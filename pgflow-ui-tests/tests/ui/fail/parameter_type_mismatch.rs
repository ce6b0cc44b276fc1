#[pgflow::flow(slug = "types")]
mod types {
    #[step]
    async fn fetch() -> Result<u32, String> {
        Ok(1)
    }

    #[step(depends_on = [fetch])]
    async fn split(fetch: String) -> Result<usize, String> {
        Ok(fetch.len())
    }
}

fn main() {}
