#[pgflow::flow(slug = "returns")]
mod returns {
    #[step]
    async fn fetch() -> u32 {
        1
    }
}

fn main() {}
