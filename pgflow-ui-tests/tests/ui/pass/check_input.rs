//! A checked input through pgflow's own schemars, without a `schemars` dependency of one's own.

#[derive(serde::Serialize, serde::Deserialize, pgflow::schemars::JsonSchema)]
#[schemars(crate = "pgflow::schemars")]
pub struct Ticket {
    pub thread: String,
    pub priority: Option<u8>,
}

#[pgflow::flow(slug = "checked", input = super::Ticket, check_input)]
mod checked {
    #[step]
    async fn a(input: super::Ticket) -> Result<String, String> {
        Ok(input.thread)
    }
}

fn main() {
    use pgflow::FlowSpec;
    let definition = checked::Flow::definition();
    let schema = definition.input_schema.expect("check_input records the schema");
    assert_eq!(schema["title"], "Ticket");
    assert_eq!(schema["required"], serde_json::json!(["thread"]));
}
