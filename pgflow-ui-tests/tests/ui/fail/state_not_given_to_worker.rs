pub struct AppState {
    pub greeting: String,
}

pub struct OtherState;

// No `state` key: the workers of this flow carry no application state.
#[pgflow::flow(slug = "stateless")]
mod stateless {
    use pgflow::State;

    use super::AppState;

    #[step]
    async fn greet(state: State<AppState>) -> Result<String, String> {
        Ok(state.greeting.clone())
    }
}

// The flow's workers carry `AppState`; this handler asks for another type.
#[pgflow::flow(slug = "stateful", state = super::AppState)]
mod stateful {
    use super::OtherState;

    #[step]
    async fn greet(state: pgflow::State<OtherState>) -> Result<(), String> {
        let _ = state;
        Ok(())
    }
}

fn main() {}
