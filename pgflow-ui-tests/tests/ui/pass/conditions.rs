//! Conditional steps: the run output gives `Option<T>` for leaves a run may skip, and
//! dependents of a skippable step take it as `Option<T>`.

#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub struct Label {
    pub kind: String,
}

#[pgflow::flow(slug = "conditions")]
pub mod conditions {
    use super::Label;

    #[step]
    pub async fn classify(input: serde_json::Value) -> Result<Label, String> {
        let _ = input;
        Ok(Label { kind: "urgent".into() })
    }

    #[step(depends_on = [classify], when = json!({"classify": {"kind": "urgent"}}))]
    pub async fn page(classify: Label) -> Result<String, String> {
        Ok(classify.kind)
    }

    #[step(depends_on = [page, classify])]
    pub async fn record(page: Option<String>, classify: Label) -> Result<u32, String> {
        let _ = classify;
        Ok(u32::from(page.is_some()))
    }

    #[step(when = r#"{"beta": true}"#, when_unmet = skip_cascade)]
    pub async fn beta(input: serde_json::Value) -> Result<u32, String> {
        let _ = input;
        Ok(1)
    }

    #[step(depends_on = [beta])]
    pub async fn beta_report(beta: u32) -> Result<u32, String> {
        Ok(beta + 1)
    }

    #[step(map = classify_all, when_exhausted = skip)]
    pub async fn each(label: Label) -> Result<String, String> {
        Ok(label.kind)
    }

    #[step]
    pub async fn classify_all(input: serde_json::Value) -> Result<Vec<Label>, String> {
        let _ = input;
        Ok(Vec::new())
    }
}

fn main() {
    // Leaves a run may skip are `Option`s: `record` always runs, `beta_report` is downstream
    // of a cascading skip, `each` may be skipped when its retries run out.
    let output = conditions::Output {
        record: 1,
        beta_report: None,
        each: Some(vec!["urgent".to_owned()]),
    };
    let _: (u32, Option<u32>, Option<Vec<String>>) =
        (output.record, output.beta_report, output.each);
}
