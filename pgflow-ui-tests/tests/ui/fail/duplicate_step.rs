#[pgflow::flow(slug = "dup")]
mod dup {
    #[step]
    async fn fetch() -> Result<u32, String> {
        Ok(1)
    }

    mod inner {}

    #[step]
    async fn fetch() -> Result<u32, String> {
        Ok(2)
    }
}

fn main() {}
