#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Order {
    pub order_id: String,
}

// An event's key is read at a field of the flow input or of a dependency's output: a field
// that does not exist is a compile error at its name.
#[pgflow::flow(slug = "keyed", input = super::Order)]
mod keyed {
    use super::Order;

    #[step(signal = paid, key = input.orderid)]
    async fn a(input: Order, paid: bool) -> Result<Order, String> {
        let _ = paid;
        Ok(input)
    }

    #[step(depends_on = [a], signal = shipped, key = a.order_idd)]
    async fn b(a: Order, shipped: bool) -> Result<bool, String> {
        let _ = a;
        Ok(shipped)
    }
}

fn main() {}
