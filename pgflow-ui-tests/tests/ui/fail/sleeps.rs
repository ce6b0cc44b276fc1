// A step sleeps one way: for a time (`sleep`) or until a time it reads (`sleep_until`), and it
// does not also wait for a signal. The time is read at `input` or a dependency, as a path of
// fields; a sleep of no time is none.
#[pgflow::flow(slug = "misslept")]
mod misslept {
    #[step(sleep = "1h", sleep_until = input.at)]
    async fn a(input: serde_json::Value) -> Result<u32, String> {
        Ok(input.as_u64().unwrap_or(0) as u32)
    }

    #[step(depends_on = [a], sleep = "1d", signal = go)]
    async fn b(a: u32, go: u32) -> Result<u32, String> {
        Ok(a + go)
    }

    #[step(depends_on = [a], sleep_until = c.at)]
    async fn c(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], sleep_until = "tomorrow")]
    async fn d(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [a], sleep = 0)]
    async fn e(a: u32) -> Result<u32, String> {
        Ok(a)
    }
}

fn main() {}
