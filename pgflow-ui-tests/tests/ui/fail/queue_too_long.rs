#[pgflow::flow(slug = "long")]
mod long {
    #[step(queue = "a_queue_name_that_is_far_too_long_for_pgmq_tables")]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
