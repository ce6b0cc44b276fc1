#[derive(serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub id: u64,
}

// No `input = Order`: the root step's parameter says what the input is, once.
#[pgflow::flow(slug = "orders")]
mod orders {
    use super::Order;

    #[step]
    async fn fetch(order: Order) -> Result<u64, String> {
        Ok(order.id)
    }

    #[step(depends_on = [fetch])]
    async fn charge(fetch: u64, input: Order) -> Result<u64, String> {
        Ok(fetch + input.id)
    }
}

fn main() {}
