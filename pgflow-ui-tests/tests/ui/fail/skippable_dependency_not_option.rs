// `fetch` may be skipped (its condition, or its retries running out), and then its dependents
// run without its output: a parameter for it must be an `Option`.
#[pgflow::flow(slug = "skippable")]
mod skippable {
    #[step(when = json!({"fetch": true}))]
    async fn fetch(input: serde_json::Value) -> Result<String, String> {
        Ok(input.to_string())
    }

    #[step(when_exhausted = skip)]
    async fn enrich(input: serde_json::Value) -> Result<u32, String> {
        let _ = input;
        Ok(1)
    }

    #[step(depends_on = [fetch, enrich])]
    async fn store(fetch: String, enrich: Option<String>) -> Result<(), String> {
        let _ = (fetch, enrich);
        Ok(())
    }
}

// A cascading skip skips the dependents too, so they take the plain type.
#[pgflow::flow(slug = "cascading")]
mod cascading {
    #[step(when = json!({"go": true}), when_unmet = skip_cascade)]
    async fn gate(input: serde_json::Value) -> Result<String, String> {
        Ok(input.to_string())
    }

    #[step(depends_on = [gate])]
    async fn after(gate: String) -> Result<(), String> {
        let _ = gate;
        Ok(())
    }
}

fn main() {}
