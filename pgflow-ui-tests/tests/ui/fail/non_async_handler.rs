#[pgflow::flow(slug = "sync")]
mod sync {
    #[step]
    fn fetch() -> Result<u32, String> {
        Ok(1)
    }
}

fn main() {}
