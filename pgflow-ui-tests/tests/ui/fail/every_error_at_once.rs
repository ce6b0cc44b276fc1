// One invocation, several mistakes: all of them are reported together.
#[pgflow::flow(slug = "many", colour = "red")]
mod many {
    #[step(queue = "Bad")]
    async fn fetch() -> Result<u32, String> {
        Ok(1)
    }

    #[step(depends_on = [missing])]
    async fn split(nothing: u32) -> Result<u32, String> {
        Ok(nothing)
    }
}

fn main() {}
