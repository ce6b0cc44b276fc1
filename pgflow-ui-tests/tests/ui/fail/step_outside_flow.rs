use pgflow::step;

#[step(queue = "alone")]
async fn fetch() -> Result<u32, String> {
    Ok(1)
}

fn main() {}
