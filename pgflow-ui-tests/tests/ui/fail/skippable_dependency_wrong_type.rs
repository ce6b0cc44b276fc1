// A dependency that may be skipped is taken as `Option<T>` with its own output type `T`.
#[pgflow::flow(slug = "skippable_type")]
mod skippable_type {
    #[step(when_exhausted = skip)]
    async fn enrich(input: serde_json::Value) -> Result<u32, String> {
        let _ = input;
        Ok(1)
    }

    #[step(depends_on = [enrich])]
    async fn store(enrich: Option<String>) -> Result<(), String> {
        let _ = enrich;
        Ok(())
    }
}

fn main() {}
