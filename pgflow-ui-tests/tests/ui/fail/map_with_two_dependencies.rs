#[pgflow::flow(slug = "maps")]
mod maps {
    #[step]
    async fn fetch() -> Result<Vec<u32>, String> {
        Ok(vec![1])
    }

    #[step]
    async fn other() -> Result<u32, String> {
        Ok(2)
    }

    #[step(map = fetch, depends_on = [other])]
    async fn each(item: u32) -> Result<u32, String> {
        Ok(item)
    }
}

fn main() {}
