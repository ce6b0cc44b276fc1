//! Charts drawn on the server as inline SVG: no script and no asset from anywhere else, so a
//! page shows them wherever it loads, and a test reads them as markup.

use maud::{Markup, html};

/// The drawing's size in SVG units (it scales with the page).
const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 48.0;

/// A point of a series: how many seconds before the chart's end it was taken, and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    pub(crate) ago_seconds: f64,
    pub(crate) value: f64,
}

/// A small line chart of `points` (oldest first) over the `span_seconds` before now, scaled to
/// its largest value (at least 1), with the largest and the latest value as its caption.
/// `kind` names the chart for tests and styles (`data-chart`).
pub(crate) fn line(
    kind: &str,
    label: &str,
    unit: &str,
    points: &[Point],
    span_seconds: f64,
) -> Markup {
    let max = points.iter().map(|p| p.value).fold(1.0, f64::max);
    let coordinates: Vec<String> = points
        .iter()
        .map(|p| {
            let x = WIDTH * (1.0 - (p.ago_seconds / span_seconds).clamp(0.0, 1.0));
            let y = HEIGHT - HEIGHT * (p.value / max).clamp(0.0, 1.0);
            format!("{x:.1},{y:.1}")
        })
        .collect();
    let latest = points.last().map(|p| p.value);
    html! {
        figure.chart data-chart=(kind) data-points=(points.len()) data-max=(max) {
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) preserveAspectRatio="none" role="img"
                aria-label=(format!("{label}: at most {}{unit}", number(max))) {
                title { (label) }
                line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
                @match coordinates.as_slice() {
                    [] => {}
                    [only] => {
                        @let (x, y) = only.split_once(',').unwrap_or(("0", "0"));
                        circle.series cx=(x) cy=(y) r="2" {}
                    }
                    _ => { polyline.series points=(coordinates.join(" ")) {} }
                }
            }
            figcaption {
                "max " (number(max)) (unit)
                @if let Some(latest) = latest { ", now " (number(latest)) (unit) }
            }
        }
    }
}

/// A value as people read it on a chart: whole when it is whole.
fn number(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_scaled_to_its_largest_value_and_placed_by_its_age() {
        let points = [
            Point {
                ago_seconds: 3600.0,
                value: 0.0,
            },
            Point {
                ago_seconds: 1800.0,
                value: 10.0,
            },
            Point {
                ago_seconds: 0.0,
                value: 5.0,
            },
        ];
        let markup = line("queue-depth", "Depth", "", &points, 3600.0).into_string();
        assert!(
            markup.contains("points=\"0.0,48.0 120.0,0.0 240.0,24.0\""),
            "{markup}"
        );
        assert!(markup.contains("data-max=\"10\""), "{markup}");
        assert!(markup.contains("max 10, now 5"), "{markup}");
    }

    #[test]
    fn one_point_is_a_dot_and_none_is_an_empty_chart() {
        let one = [Point {
            ago_seconds: 60.0,
            value: 3.0,
        }];
        let markup = line("queue-depth", "Depth", "", &one, 3600.0).into_string();
        assert!(
            markup.contains("<circle class=\"series\" cx=\"236.0\" cy=\"0.0\""),
            "{markup}"
        );
        let none = line("queue-depth", "Depth", "", &[], 3600.0).into_string();
        assert!(!none.contains("series"), "{none}");
        assert!(none.contains("max 1"), "{none}");
    }
}
