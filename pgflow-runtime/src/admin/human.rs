//! Ages, durations, sizes and times as people read them: `2m ago`, `1.3 s`, `4.2 KiB`. The
//! `pgflow` command's tables and the dashboard's pages print them.
//!
//! Hand-written because they are a few lines each: `humantime` prints every unit (`2m 13s
//! 402ms`), which is exact but hard to scan in a table column.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// How long ago `at` was: `just now`, `42s ago`, `5m ago`, `3h ago`, `2d ago`.
pub fn ago(at: DateTime<Utc>) -> String {
    age_seconds((Utc::now() - at).num_milliseconds() as f64 / 1000.0)
}

/// An age in seconds, as [`ago`] prints it.
pub fn age_seconds(seconds: f64) -> String {
    if seconds < 1.0 {
        return "just now".to_owned();
    }
    format!("{} ago", compact(seconds))
}

/// `42s`, `5m`, `3h`, `2d`: the largest whole unit.
pub fn compact(seconds: f64) -> String {
    let whole = seconds.max(0.0) as u64;
    match whole {
        0..60 => format!("{whole}s"),
        60..3_600 => format!("{}m", whole / 60),
        3_600..86_400 => format!("{}h", whole / 3_600),
        _ => format!("{}d", whole / 86_400),
    }
}

/// A span of time: `850 ms`, `1.3 s`, `42 s`, `5m 3s`, `2h 5m`.
pub fn duration(span: Duration) -> String {
    let millis = span.as_millis();
    let seconds = span.as_secs();
    match millis {
        0..1_000 => format!("{millis} ms"),
        1_000..10_000 => format!("{:.1} s", span.as_secs_f64()),
        10_000..60_000 => format!("{seconds} s"),
        60_000..3_600_000 => format!("{}m {}s", seconds / 60, seconds % 60),
        _ => format!("{}h {}m", seconds / 3_600, seconds % 3_600 / 60),
    }
}

/// The span from `from` to `to` (zero when `to` is earlier).
pub fn between(from: DateTime<Utc>, to: DateTime<Utc>) -> String {
    duration((to - from).to_std().unwrap_or_default())
}

/// A size: `512 B`, `4.2 KiB`, `1.5 MiB`.
pub fn bytes(count: i64) -> String {
    let count = count.max(0) as f64;
    if count < 1024.0 {
        format!("{count} B")
    } else if count < 1024.0 * 1024.0 {
        format!("{:.1} KiB", count / 1024.0)
    } else {
        format!("{:.1} MiB", count / (1024.0 * 1024.0))
    }
}

/// A timestamp to the second, in UTC: `2026-12-03 16:30:05`.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_use_the_largest_whole_unit() {
        assert_eq!(age_seconds(0.2), "just now");
        assert_eq!(age_seconds(42.9), "42s ago");
        assert_eq!(age_seconds(76.0), "1m ago");
        assert_eq!(age_seconds(3.0 * 3600.0 + 5.0), "3h ago");
        assert_eq!(age_seconds(2.5 * 86400.0), "2d ago");
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_millis(1_340)), "1.3 s");
        assert_eq!(duration(Duration::from_secs(42)), "42 s");
        assert_eq!(duration(Duration::from_secs(303)), "5m 3s");
        assert_eq!(duration(Duration::from_secs(7_500)), "2h 5m");
    }

    #[test]
    fn sizes_use_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4_300), "4.2 KiB");
        assert_eq!(bytes(1_572_864), "1.5 MiB");
    }
}
