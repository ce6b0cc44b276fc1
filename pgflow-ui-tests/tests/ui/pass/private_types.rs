// A flow module may be private and take private input and output types declared next to it, as
// an application's own code does; restricted visibilities (`pub(crate)`, `pub(super)`) work the
// same way. No `Clone` is
// asked of output types.
#![allow(dead_code)]

use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Input {
    id: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    id: u64,
}

#[pgflow::flow(slug = "private_flow", input = Input)]
mod private_flow {
    use super::*;

    #[step]
    async fn report(input: Input) -> Result<Report, String> {
        Ok(Report { id: input.id })
    }
}

mod nested {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    pub(crate) struct Inner(pub(crate) u32);

    #[pgflow::flow(slug = "nested_flow", input = Inner)]
    pub(crate) mod nested_flow {
        use super::*;

        #[step(queue = "elsewhere")]
        pub async fn echo(input: Inner) -> Result<u32, String> {
            Ok(input.0)
        }
    }

    #[pgflow::flow(slug = "sibling_flow", input = Inner)]
    pub(super) mod sibling_flow {
        use super::*;

        #[step]
        pub async fn echo(input: Inner) -> Result<u32, String> {
            Ok(input.0)
        }
    }

    pub(crate) async fn start_both() {
        let _ = pgflow::Worker::start_with(
            nested_flow::deployment(),
            pgflow::WorkerConfig::new(nested_flow::Queue::Elsewhere),
        );
    }
}

fn main() {
    let _ = pgflow::Worker::start(private_flow::deployment());
    let _ = nested::start_both();
    let _ = pgflow::Worker::start(nested::sibling_flow::deployment());
}
