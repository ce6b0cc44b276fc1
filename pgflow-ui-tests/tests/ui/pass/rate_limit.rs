//! Rate limits that compile: one for every task of a step, one per key read from the flow input
//! or a dependency's output, and beside a concurrency cap; the period's forms.

use std::time::Duration;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Call {
    pub account: String,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Reply {
    pub region: String,
}

#[pgflow::flow(slug = "rated", input = Call)]
pub mod rated {
    use super::*;

    #[step(rate_limit = "10/s")]
    pub async fn look_up(input: Call) -> Result<Reply, String> {
        Ok(Reply {
            region: input.account,
        })
    }

    #[step(depends_on = [look_up], rate_limit = "100/m", rate_key = input.account)]
    pub async fn per_account(look_up: Reply) -> Result<String, String> {
        Ok(look_up.region)
    }

    #[step(
        depends_on = [look_up],
        rate_limit = "5/500ms",
        rate_key = look_up.region,
        concurrency = 2
    )]
    pub async fn per_region(look_up: Reply) -> Result<String, String> {
        Ok(look_up.region)
    }

    #[step(depends_on = [look_up], rate_limit = "1000/2h")]
    pub async fn slowly(look_up: Reply) -> Result<String, String> {
        Ok(look_up.region)
    }
}

fn main() {
    let deployment = rated::deployment();
    let limits: Vec<_> = deployment
        .definition()
        .steps
        .iter()
        .map(|step| {
            step.rate_limit
                .as_ref()
                .map(|r| (r.limit, r.period, r.key_path.clone()))
        })
        .collect();
    assert_eq!(
        limits,
        [
            Some((10, Duration::from_secs(1), None)),
            Some((
                100,
                Duration::from_secs(60),
                Some(vec!["input".to_owned(), "account".to_owned()])
            )),
            Some((
                5,
                Duration::from_millis(500),
                Some(vec!["look_up".to_owned(), "region".to_owned()])
            )),
            Some((1000, Duration::from_secs(7200), None)),
        ]
    );
}
