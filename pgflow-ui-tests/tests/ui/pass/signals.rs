//! A step that waits for a signal: at the root or after a dependency, with a timeout, in a
//! flow that checks what comes in; the generated senders take the payload type.

use pgflow::schemars::{self, JsonSchema};

#[derive(Debug, serde::Serialize, serde::Deserialize, JsonSchema)]
pub struct Approval {
    pub by: String,
}

#[pgflow::flow(slug = "refund_v1", input = u64, check_input)]
pub mod refund_v1 {
    use super::Approval;

    #[step(signal = vetted, wait_timeout = "3d", when_timed_out = fail)]
    pub async fn vet(input: u64, vetted: bool) -> Result<u64, String> {
        Ok(if vetted { input } else { 0 })
    }

    #[step(depends_on = [vet], signal = approval, wait_timeout = "1h", when_timed_out = skip)]
    pub async fn pay(vet: u64, approval: Approval, ctx: pgflow::Context) -> Result<String, String> {
        let _ = ctx;
        Ok(format!("{vet} by {}", approval.by))
    }

    #[step(depends_on = [pay])]
    pub async fn close(pay: Option<String>) -> Result<bool, String> {
        Ok(pay.is_some())
    }
}

#[derive(Debug, serde::Serialize, serde::Deserialize, JsonSchema)]
pub struct Order {
    pub id: u64,
}

/// Reached by key: from the flow input, and from a dependency's output.
#[pgflow::flow(slug = "orders_v1", input = Order)]
pub mod orders_v1 {
    use super::{Approval, Order};

    #[step(signal = paid, key = input.id)]
    pub async fn pay(input: Order, paid: bool) -> Result<Order, String> {
        Ok(Order { id: if paid { input.id } else { 0 } })
    }

    #[step(depends_on = [pay], signal = approved, key = pay.id)]
    pub async fn approve(pay: Order, approved: Approval) -> Result<String, String> {
        Ok(format!("{} by {}", pay.id, approved.by))
    }
}

async fn send(client: &pgflow::Client, run_id: pgflow::sqlx::types::Uuid) {
    let _ = refund_v1::signal_vetted(client, run_id, &true).await;
    let _ = refund_v1::signal_approval(client, run_id, &Approval { by: "ana".into() }).await;
    let mut tx = client.pool().begin().await.unwrap();
    let _ = refund_v1::signal_approval_in(&mut *tx, run_id, &Approval { by: "bo".into() }).await;
    let _ = orders_v1::emit_paid(client, &7, &true).await;
    let _ = orders_v1::emit_approved_in(&mut *tx, "7", &Approval { by: "cy".into() }).await;
}

fn main() {
    let _ = send;
}
