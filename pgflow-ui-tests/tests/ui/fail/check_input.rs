#[derive(serde::Serialize, serde::Deserialize)]
pub struct NoSchema {
    pub thread: String,
}

// `check_input` needs an input type to check against.
#[pgflow::flow(slug = "no_input", check_input)]
mod no_input {
    #[step]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

// `check_input` takes no value.
#[pgflow::flow(slug = "with_value", input = String, check_input = true)]
mod with_value {
    #[step]
    async fn a(input: String) -> Result<String, String> {
        Ok(input)
    }
}

// The input type has no JSON Schema.
#[pgflow::flow(slug = "no_schema", input = super::NoSchema, check_input)]
mod no_schema {
    #[step]
    async fn a(input: super::NoSchema) -> Result<String, String> {
        Ok(input.thread)
    }
}

fn main() {}
