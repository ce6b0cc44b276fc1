#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Trial {
    pub user: String,
    pub ends_at: chrono::DateTime<chrono::Utc>,
}

// A step sleeps until a time read at a field of the flow input or of a dependency's output: a
// field that does not exist is a compile error at its name, and so is one that holds no time.
#[pgflow::flow(slug = "trial", input = super::Trial)]
mod trial {
    use super::Trial;

    #[step(sleep_until = input.ends)]
    async fn a(input: Trial) -> Result<Trial, String> {
        Ok(input)
    }

    #[step(depends_on = [a], sleep_until = a.user)]
    async fn b(a: Trial) -> Result<String, String> {
        Ok(a.user)
    }
}

fn main() {}
