#[pgflow::flow(slug = "patterns")]
mod patterns {
    // A pattern is constant JSON: no Rust values.
    #[step(when = json!({"plan": PLAN}))]
    async fn root(input: serde_json::Value) -> Result<u32, String> {
        let _ = input;
        Ok(1)
    }

    // A step with dependencies matches against the object of their outputs.
    #[step(depends_on = [root], when = json!({"rot": 1}))]
    async fn misspelt(root: Option<u32>) -> Result<u32, String> {
        Ok(root.unwrap_or(0))
    }

    #[step(depends_on = [root], unless = json!([1, 2]))]
    async fn not_an_object(root: Option<u32>) -> Result<u32, String> {
        Ok(root.unwrap_or(0))
    }

    #[step(when_unmet = fail)]
    async fn no_condition(input: serde_json::Value) -> Result<u32, String> {
        let _ = input;
        Ok(1)
    }

    #[step(when = "{not json", when_exhausted = retry)]
    async fn broken(input: serde_json::Value) -> Result<u32, String> {
        let _ = input;
        Ok(1)
    }
}

fn main() {}
