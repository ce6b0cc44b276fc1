#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Approval {
    pub by: String,
}

pub struct NotSerde;

// The payload of a signal has the type its step takes: another type does not compile.
#[pgflow::flow(slug = "refund_v1")]
pub mod refund_v1 {
    #[step(signal = approval)]
    pub async fn pay(approval: super::Approval) -> Result<String, String> {
        Ok(approval.by)
    }
}

async fn send_the_wrong_payload(client: &pgflow::Client, run_id: pgflow::sqlx::types::Uuid) {
    let _ = refund_v1::signal_approval(client, run_id, &"ana".to_owned()).await;
}

// A step that waits for a signal receives its payload in the parameter of the same name.
#[pgflow::flow(slug = "no_parameter")]
mod no_parameter {
    #[step(signal = approval)]
    async fn pay(input: serde_json::Value) -> Result<String, String> {
        Ok(input.to_string())
    }
}

// A timeout and its mode need a signal; a signal is a name, used by one step, and not also a
// dependency's name; durations take a unit the macro knows.
#[pgflow::flow(slug = "misused")]
mod misused {
    #[step(wait_timeout = "1h", when_timed_out = skip)]
    async fn a() -> Result<u32, String> {
        Ok(1)
    }

    #[step(depends_on = [a], signal = a)]
    async fn b(a: u32) -> Result<u32, String> {
        Ok(a)
    }

    #[step(signal = "go")]
    async fn c(input: serde_json::Value) -> Result<u32, String> {
        Ok(input.as_u64().unwrap_or(0) as u32)
    }

    #[step(signal = go, wait_timeout = "2w")]
    async fn d(go: u32) -> Result<u32, String> {
        Ok(go)
    }

    #[step(signal = go)]
    async fn e(go: u32) -> Result<u32, String> {
        Ok(go)
    }

    // The name the macro gives the signal's sender is taken.
    fn signal_go() {}
}

// A key starts at the flow input or a dependency, and needs a signal.
#[pgflow::flow(slug = "keyed")]
mod keyed {
    #[step(signal = closed, key = order.order_id)]
    async fn c(input: serde_json::Value, closed: bool) -> Result<bool, String> {
        Ok(input.is_null() && closed)
    }

    #[step(depends_on = [c], key = c)]
    async fn d(c: bool) -> Result<bool, String> {
        Ok(c)
    }
}

// A payload must be JSON both ways.
#[pgflow::flow(slug = "opaque")]
mod opaque {
    #[step(signal = token)]
    async fn a(token: super::NotSerde) -> Result<u32, String> {
        let _ = token;
        Ok(1)
    }
}

fn main() {
    let _ = send_the_wrong_payload;
}
