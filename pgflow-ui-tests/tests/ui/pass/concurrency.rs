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
    let deployment = calls::deployment();
    let caps: Vec<_> = deployment
        .definition()
        .steps
        .iter()
        .map(|step| step.concurrency.as_ref().map(|c| (c.limit, c.key_path.clone())))
        .collect();
    assert_eq!(
        caps,
        [
            Some((50, None)),
            Some((2, Some(vec!["input".to_owned(), "tenant_id".to_owned()]))),
            Some((1, Some(vec!["look_up".to_owned(), "id".to_owned()]))),
        ]
    );
}
