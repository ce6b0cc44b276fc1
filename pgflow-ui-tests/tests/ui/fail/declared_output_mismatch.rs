#[derive(serde::Deserialize)]
pub struct Summary {
    pub total: u32,
    pub note: String,
}

// `output = T` must have one field per step nothing depends on, with that step's output type:
// here `note` is skippable (so `Option<String>`) and `total` produces a `u64`.
#[pgflow::flow(slug = "declared", output = super::Summary)]
mod declared {
    #[step]
    async fn total(input: serde_json::Value) -> Result<u64, String> {
        Ok(input.as_u64().unwrap_or(0))
    }

    #[step(when = json!({"noted": true}))]
    async fn note(input: serde_json::Value) -> Result<String, String> {
        Ok(input.to_string())
    }
}

#[derive(serde::Deserialize)]
pub struct Missing {
    pub total: u64,
}

// A leaf with no field, and a field with no leaf.
#[pgflow::flow(slug = "missing", output = super::Missing)]
mod missing {
    #[step]
    async fn sum(input: serde_json::Value) -> Result<u64, String> {
        Ok(input.as_u64().unwrap_or(0))
    }
}

fn main() {}
