#[pgflow::flow(slug = "cycle")]
mod cycle {
    #[step(depends_on = [c])]
    async fn a(c: u32) -> Result<u32, String> {
        Ok(c)
    }

    #[step(depends_on = [a])]
    async fn b(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(depends_on = [b])]
    async fn c(b: u32) -> Result<u32, String> {
        Ok(b)
    }
}

fn main() {}
