// A step that runs a flow names its module or its alias, and neither waits for a signal nor
// sleeps.
#[pgflow::flow(slug = "child")]
pub mod child {
    #[step]
    pub async fn work(input: serde_json::Value) -> Result<u32, String> {
        Ok(input.as_u64().unwrap_or(0) as u32)
    }
}

#[pgflow::flow(slug = "parent")]
mod parent {
    #[step(subflow = 3)]
    async fn a(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }

    #[step(subflow = "Not-A-Flow")]
    async fn c(input: serde_json::Value) -> Result<serde_json::Value, String> {
        Ok(input)
    }

    #[step(subflow = super::child, signal = go)]
    async fn b(input: serde_json::Value, go: u32) -> Result<serde_json::Value, String> {
        let _ = go;
        Ok(input)
    }
}

fn main() {}
