// A rate limit is so many starts per period, written as a string; a key needs the limit it
// applies per, and is read at `input` or a dependency, as a path of fields.
#[pgflow::flow(slug = "overrated")]
mod overrated {
    #[step(rate_limit = "10/fortnight")]
    async fn a(input: serde_json::Value) -> Result<u32, String> {
        Ok(input.as_u64().unwrap_or(0) as u32)
    }

    #[step(depends_on = [a], rate_limit = "0/s")]
    async fn b(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], rate_limit = 10)]
    async fn c(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], rate_key = a.account)]
    async fn d(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], rate_limit = "5/s", rate_key = account.id)]
    async fn e(a: u32) -> Result<u32, String> {
        Ok(a)
    }
}

fn main() {}
