#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Call {
    pub tenant_id: String,
}

// A cap's key is read at a field of the flow input or of a dependency's output: a field that
// does not exist is a compile error at its name.
#[pgflow::flow(slug = "calls", input = super::Call)]
mod calls {
    use super::Call;

    #[step(concurrency = 2, concurrency_key = input.tenant)]
    async fn a(input: Call) -> Result<Call, String> {
        Ok(input)
    }

    #[step(depends_on = [a], concurrency = 2, concurrency_key = a.account)]
    async fn b(a: Call) -> Result<String, String> {
        Ok(a.tenant_id)
    }
}

fn main() {}
