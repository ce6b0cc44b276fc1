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

/// One line of a chart: its name (in the caption and `data-series`) and its points, oldest
/// first.
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) points: &'a [Point],
}

/// A small line chart of one series over the `span_seconds` before now (see [`lines`]).
pub(crate) fn line(
    kind: &str,
    label: &str,
    unit: &str,
    points: &[Point],
    span_seconds: f64,
) -> Markup {
    lines(
        kind,
        label,
        unit,
        &[Series { name: "", points }],
        span_seconds,
    )
}

/// A small line chart of `series` over the `span_seconds` before now, all scaled to the largest
/// value (at least 1: `data-max`), with the largest value and each series' latest as its
/// caption. `kind`
/// names the chart for tests and styles (`data-chart`); each line carries `data-series` and
/// its own `data-max`.
pub(crate) fn lines(
    kind: &str,
    label: &str,
    unit: &str,
    series: &[Series<'_>],
    span_seconds: f64,
) -> Markup {
    let largest = |points: &[Point]| points.iter().map(|p| p.value).fold(0.0, f64::max);
    let highest = series.iter().map(|s| largest(s.points)).fold(0.0, f64::max);
    let max = highest.max(1.0);
    let place = |p: &Point| {
        let x = WIDTH * (1.0 - (p.ago_seconds / span_seconds).clamp(0.0, 1.0));
        let y = HEIGHT - HEIGHT * (p.value / max).clamp(0.0, 1.0);
        (format!("{x:.1}"), format!("{y:.1}"))
    };
    let points = series.iter().map(|s| s.points.len()).sum::<usize>();
    html! {
        figure.chart data-chart=(kind) data-points=(points) data-max=(max) {
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) preserveAspectRatio="none" role="img"
                aria-label=(format!("{label}: at most {}{unit}", number(highest))) {
                title { (label) }
                line.axis x1="0" y1=(HEIGHT) x2=(WIDTH) y2=(HEIGHT) {}
                @for (index, s) in series.iter().enumerate() {
                    @let class = format!("series series-{index}");
                    @match s.points {
                        [] => {}
                        [only] => {
                            @let (x, y) = place(only);
                            circle class=(class) data-series=(s.name) data-max=(largest(s.points))
                                cx=(x) cy=(y) r="2" {}
                        }
                        all => {
                            @let coordinates: Vec<String> = all.iter()
                                .map(|p| { let (x, y) = place(p); format!("{x},{y}") })
                                .collect();
                            polyline class=(class) data-series=(s.name)
                                data-max=(largest(s.points)) points=(coordinates.join(" ")) {}
                        }
                    }
                }
            }
            figcaption {
                "max " (number(highest)) (unit)
                @for s in series {
                    @if let Some(latest) = s.points.last() {
                        ", " @if !s.name.is_empty() { (s.name) " " }
                        "now " (number(latest.value)) (unit)
                    }
                }
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
        assert!(markup.contains("cx=\"236.0\" cy=\"0.0\""), "{markup}");
        let none = line("queue-depth", "Depth", "", &[], 3600.0).into_string();
        assert!(!none.contains("class=\"series"), "{none}");
        assert!(none.contains("max 0"), "{none}");
    }

    #[test]
    fn several_series_share_one_scale_and_each_names_its_latest() {
        let p50 = [
            Point {
                ago_seconds: 120.0,
                value: 10.0,
            },
            Point {
                ago_seconds: 60.0,
                value: 20.0,
            },
        ];
        let p95 = [
            Point {
                ago_seconds: 120.0,
                value: 40.0,
            },
            Point {
                ago_seconds: 60.0,
                value: 30.0,
            },
        ];
        let series = [
            Series {
                name: "p50",
                points: &p50,
            },
            Series {
                name: "p95",
                points: &p95,
            },
        ];
        let markup = lines("task-duration", "Duration", " ms", &series, 240.0).into_string();
        assert!(
            markup.contains("data-max=\"40\" data-points=\"4\"")
                || markup.contains("data-points=\"4\" data-max=\"40\""),
            "{markup}"
        );
        // p50 at 20 of 40 is half way up; p95's 40 at the top.
        assert!(
            markup.contains("points=\"120.0,36.0 180.0,24.0\""),
            "{markup}"
        );
        assert!(
            markup.contains("points=\"120.0,0.0 180.0,12.0\""),
            "{markup}"
        );
        assert!(
            markup.contains("data-series=\"p95\" data-max=\"40\""),
            "{markup}"
        );
        assert!(
            markup.contains("max 40 ms, p50 now 20 ms, p95 now 30 ms"),
            "{markup}"
        );
    }
}
