// A worker's queue may come from any flow of its registry, whatever the tuple position.
#[pgflow::flow(slug = "first_v1", alias = "first", version = 1)]
mod first_v1 {
    #[step(queue = "shared")]
    async fn a() -> Result<(), String> {
        Ok(())
    }
}

#[pgflow::flow(slug = "first_v2", alias = "first", version = 2)]
mod first_v2 {
    #[step(queue = "shared")]
    async fn a() -> Result<(), String> {
        Ok(())
    }

    #[step(queue = "later", depends_on = [a])]
    async fn b() -> Result<(), String> {
        Ok(())
    }
}

fn main() {
    use pgflow::{Worker, WorkerConfig};
    let _ = Worker::start_with(first_v1::deployment(), WorkerConfig::new(first_v1::Queue::Shared));
    let _ = Worker::start_with(
        (first_v1::deployment(), first_v2::deployment()),
        WorkerConfig::new(first_v2::Queue::Later).max_concurrent(1),
    );
    let _ = Worker::start_with(
        (first_v1::deployment(), first_v2::deployment()),
        WorkerConfig::new(first_v1::Queue::Shared),
    );
    let _ = Worker::start(first_v2::deployment());
}
