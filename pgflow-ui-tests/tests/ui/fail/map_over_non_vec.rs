#[pgflow::flow(slug = "maps")]
mod maps {
    #[step]
    async fn fetch() -> Result<String, String> {
        Ok("one".into())
    }

    #[step(map = fetch)]
    async fn each(item: char) -> Result<char, String> {
        Ok(item)
    }
}

fn main() {}
