// A concurrency cap is a whole number of at least one; a key needs the cap it applies per, and
// is read at `input` or a dependency, as a path of fields.
#[pgflow::flow(slug = "overcapped")]
mod overcapped {
    #[step(concurrency = 0)]
    async fn a(input: serde_json::Value) -> Result<u32, String> {
        Ok(input.as_u64().unwrap_or(0) as u32)
    }

    #[step(depends_on = [a], concurrency_key = a.tenant)]
    async fn b(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], concurrency = 2, concurrency_key = tenant.id)]
    async fn c(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], concurrency = 2, concurrency_key = "tenant")]
    async fn d(a: u32) -> Result<u32, String> {
        Ok(a)
    }
}

fn main() {}
