//! Caps that compile: one for every task of a step, and one per key read from the flow input or
//! a dependency's output.

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Call {
    pub tenant_id: String,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Account {
    pub id: u64,
}

#[pgflow::flow(slug = "calls", input = Call)]
pub mod calls {
    use super::*;

    #[step(concurrency = 50)]
    pub async fn look_up(input: Call) -> Result<Account, String> {
        Ok(Account {
            id: input.tenant_id.len() as u64,
        })
    }

    #[step(depends_on = [look_up], concurrency = 2, concurrency_key = input.tenant_id)]
    pub async fn per_tenant(look_up: Account) -> Result<u64, String> {
        Ok(look_up.id)
    }

    #[step(depends_on = [look_up], concurrency = 1, concurrency_key = look_up.id)]
    pub async fn per_account(look_up: Account) -> Result<u64, String> {
        Ok(look_up.id)
    }
}

fn main() {
    let definition = calls::definition();
    let capped = definition.steps.iter().filter(|s| s.concurrency.is_some()).count();
    assert_eq!(capped, 3);
}
