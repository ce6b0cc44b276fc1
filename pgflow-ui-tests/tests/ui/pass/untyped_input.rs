//! A flow without `input =` takes `serde_json::Value`, by any of its names.

#[pgflow::flow(slug = "untyped")]
mod untyped {
    use serde_json::Value;

    #[step]
    async fn a(input: Value) -> Result<usize, String> {
        Ok(input.to_string().len())
    }

    #[step(depends_on = [a])]
    async fn b(a: usize, input: serde_json::Value) -> Result<usize, String> {
        Ok(a + input.to_string().len())
    }
}

fn main() {
    let _ = untyped::deployment();
}
