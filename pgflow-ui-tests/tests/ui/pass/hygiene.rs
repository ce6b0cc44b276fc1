// Generated code keeps working next to user items named like the ones it uses. Inside a flow
// module the generated `Queue` (and `Flow`, `Output`) shadow glob-imported user items of the
// same name, so the module names the user's `Queue` by path.
#![allow(dead_code)]

use serde::{Deserialize, Serialize};

/// A user `Result` alias with one parameter.
pub type Result<T> = std::result::Result<T, String>;

/// User types named `Queue` and `Context`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Queue(pub u32);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Context {
    pub tenant: String,
}

/// A user module named `core`.
pub mod core {
    pub fn helper() -> u32 {
        41
    }
}

#[pgflow::flow(slug = "hygiene", input = crate::Context)]
pub mod hygiene {
    use super::*;

    #[step]
    pub async fn first(input: crate::Context) -> Result<crate::Queue> {
        Ok(crate::Queue(input.tenant.len() as u32 + crate::core::helper()))
    }

    #[step(depends_on = [first])]
    pub async fn second(first: crate::Queue, ctx: pgflow::Context) -> Result<u32> {
        Ok(first.0 + ctx.attempt() as u32)
    }
}

/// Flows in nested modules, two in one file.
pub mod nested {
    pub mod deeper {
        #[pgflow::flow(slug = "nested_a", input = Vec<serde_json::Value>)]
        pub mod nested_a {
            #[step(map)]
            pub async fn each(item: serde_json::Value) -> Result<bool, String> {
                Ok(item.is_null())
            }
        }

        #[pgflow::flow(slug = "nested_b", alias = "nested", version = 2)]
        pub mod nested_b {
            #[step(queue = "shared_queue")]
            pub async fn only(input: serde_json::Value) -> Result<serde_json::Value, String> {
                Ok(input)
            }
        }
    }
}

fn main() {
    let _ = hygiene::deployment();
    let _ = hygiene::Queue::Hygiene;
    assert_eq!(nested::deeper::nested_b::Queue::SharedQueue.as_str(), "shared_queue");
    assert_eq!(nested::deeper::nested_a::SLUG, "nested_a");
    let _ = Queue(1);
}
