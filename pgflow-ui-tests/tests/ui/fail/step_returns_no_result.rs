#[pgflow::flow(slug = "returns")]
mod returns {
    #[step]
    async fn fetch() {}
}

fn main() {}
