//! How `pgflow run` shows a JSON payload (a run's input and output, a step's output): pretty
//! printed and indented, cut after [`SHOWN_LINES`] lines or [`SHOWN_CHARS`] characters with a
//! line that gives the whole size and says how to see it all (`--full`).

use pgflow_runtime::admin::human;
use serde_json::Value;

/// The most lines of a payload shown without `--full`.
pub(crate) const SHOWN_LINES: usize = 20;

/// The most characters of a payload shown without `--full`.
pub(crate) const SHOWN_CHARS: usize = 2_000;

/// `label` and the size of `value`, then `value` pretty printed, each line indented by
/// `indent` spaces; cut to the bounds unless `full`.
pub(crate) fn block(label: &str, value: &Value, indent: usize, full: bool) -> String {
    let pretty = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    let size = value.to_string().len();
    let pad = " ".repeat(indent);
    let mut text = format!("{pad}{label} ({}):\n", human::bytes(size as i64));
    let (shown, cut) = if full {
        (pretty.as_str(), false)
    } else {
        cut_to_bounds(&pretty)
    };
    for line in shown.lines() {
        text.push_str(&format!("{pad}  {line}\n"));
    }
    if cut {
        text.push_str(&format!(
            "{pad}  … cut here: {} in all; `--full` shows all of it\n",
            human::bytes(size as i64)
        ));
    }
    text
}

/// The start of `pretty` within [`SHOWN_LINES`] lines and [`SHOWN_CHARS`] characters, and
/// whether anything was left out.
fn cut_to_bounds(pretty: &str) -> (&str, bool) {
    let mut end = pretty.len();
    if let Some((at, _)) = pretty.match_indices('\n').nth(SHOWN_LINES - 1) {
        end = at;
    }
    if let Some((at, _)) = pretty.char_indices().nth(SHOWN_CHARS) {
        end = end.min(at);
    }
    (&pretty[..end], end < pretty.len())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_small_payload_is_shown_whole_and_pretty() {
        let text = block("input", &json!({"thread": 5}), 0, false);
        assert_eq!(text, "input (12 B):\n  {\n    \"thread\": 5\n  }\n");
    }

    #[test]
    fn a_long_payload_is_cut_to_the_bounds_with_its_size_unless_full() {
        let many: Vec<i32> = (0..100).collect();
        let text = block("output", &json!(many), 2, false);
        assert_eq!(text.lines().count(), 1 + SHOWN_LINES + 1, "{text}");
        assert!(
            text.ends_with("… cut here: 291 B in all; `--full` shows all of it\n"),
            "{text}"
        );

        let long = "x".repeat(5_000);
        let text = block("output", &json!(long), 0, false);
        assert!(text.len() < SHOWN_CHARS + 200, "{}", text.len());

        let text = block("output", &json!(long), 0, true);
        assert!(text.contains(&long), "--full shows everything");
        assert!(!text.contains("cut here"));
    }
}
