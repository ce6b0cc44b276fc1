#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Call {
    pub account: String,
}

// A rate limit's key is read at a field of the flow input or of a dependency's output: a field
// that does not exist is a compile error at its name.
#[pgflow::flow(slug = "rated_calls", input = super::Call)]
mod rated_calls {
    use super::Call;

    #[step(rate_limit = "10/s", rate_key = input.acount)]
    async fn a(input: Call) -> Result<Call, String> {
        Ok(input)
    }

    #[step(depends_on = [a], rate_limit = "100/m", rate_key = a.tenant)]
    async fn b(a: Call) -> Result<String, String> {
        Ok(a.account)
    }
}

fn main() {}
