//! Subflows that compile: a step returns the child flow's input, and its dependents take the
//! child's output; a map step's dependents take a `Vec` of them.

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Charge {
    pub cents: u64,
}

pub mod billing {
    #[pgflow::flow(slug = "charge_v1", alias = "charge", input = crate::Charge)]
    pub mod charge_v1 {
        #[step]
        pub async fn capture(input: crate::Charge) -> Result<String, String> {
            Ok(format!("captured {}", input.cents))
        }
    }
}

#[pgflow::flow(slug = "order_v1", input = Vec<u64>)]
pub mod order_v1 {
    use crate::Charge;
    use crate::billing::charge_v1;

    #[step(subflow = charge_v1)]
    pub async fn charge(input: Vec<u64>) -> Result<Charge, String> {
        Ok(Charge { cents: input.iter().sum() })
    }

    #[step(map, subflow = crate::billing::charge_v1, wait_timeout = "1h")]
    pub async fn each(cents: u64) -> Result<Charge, String> {
        Ok(Charge { cents })
    }

    // By alias: the child's output comes as JSON.
    #[step(subflow = "charge")]
    pub async fn by_name(input: Vec<u64>) -> Result<Charge, String> {
        Ok(Charge { cents: input.len() as u64 })
    }

    #[step(depends_on = [charge, each, by_name])]
    pub async fn receipt(
        charge: charge_v1::Output,
        each: Vec<charge_v1::Output>,
        by_name: serde_json::Value,
    ) -> Result<String, String> {
        Ok(format!("{} and {} more, {by_name}", charge.capture, each.len()))
    }
}

fn main() {
    let deployment = order_v1::deployment();
    let subflows: Vec<_> = deployment
        .definition()
        .steps
        .iter()
        .filter_map(|step| step.subflow.as_ref().map(|s| s.flow.clone()))
        .collect();
    assert_eq!(subflows, ["charge", "charge", "charge"]);
}
