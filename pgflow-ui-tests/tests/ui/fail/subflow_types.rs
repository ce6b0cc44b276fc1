#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub cents: u64,
}

#[pgflow::flow(slug = "charge_v1", input = super::Charge)]
pub mod charge_v1 {
    #[step]
    pub async fn capture(input: super::Charge) -> Result<String, String> {
        Ok(format!("captured {}", input.cents))
    }
}

// A step that runs a flow returns that flow's input, and its dependents take that flow's
// output: anything else does not compile.
#[pgflow::flow(slug = "order_v1")]
mod order_v1 {
    #[step(subflow = super::charge_v1)]
    async fn charge(input: serde_json::Value) -> Result<u64, String> {
        Ok(input.as_u64().unwrap_or(0))
    }

    #[step(depends_on = [charge])]
    async fn receipt(charge: String) -> Result<String, String> {
        Ok(charge)
    }
}

fn main() {}
