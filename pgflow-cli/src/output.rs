//! How results reach the screen: JSON with `--json`, otherwise text and tables whose cells never
//! wrap, with colour only on a terminal and never when `NO_COLOR` is set.

use std::io::IsTerminal;

use comfy_table::{Cell, Color, ContentArrangement, Table, presets};

/// How to print.
pub(crate) struct Output {
    /// JSON instead of human text.
    pub json: bool,
    /// Colour (a terminal, and `NO_COLOR` unset or empty).
    pub colour: bool,
}

impl Output {
    /// JSON when asked for, else colour when stdout is a terminal and `NO_COLOR` is not set.
    pub(crate) fn detect(json: bool) -> Self {
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            json,
            colour: !json && !no_colour && std::io::stdout().is_terminal(),
        }
    }

    /// Prints `value` as one line of JSON, or `human()`'s text.
    pub(crate) fn print(&self, value: serde_json::Value, human: impl FnOnce() -> String) {
        if self.json {
            println!("{value}");
        } else {
            println!("{}", human());
        }
    }

    /// A table with these column headers, borderless. Cells never wrap, whatever the
    /// terminal's width (a width of 0, as some ptys and CI runners report, means unknown): an
    /// id or a header is never broken, and a long line overflows, as kubectl's tables do.
    pub(crate) fn table(&self, headers: &[&str]) -> Table {
        let mut table = Table::new();
        table
            .load_style(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Disabled);
        if !self.colour {
            table.force_no_tty();
        }
        table.set_header(headers.iter().map(|h| self.header(h)));
        // Two spaces between columns, none before the first.
        for column in table.column_iter_mut() {
            column.set_padding((0, 2));
        }
        table
    }

    fn header(&self, text: &str) -> Cell {
        let cell = Cell::new(text.to_uppercase());
        if self.colour {
            cell.add_attribute(comfy_table::Attribute::Bold)
        } else {
            cell
        }
    }
}

/// `n` and the noun in its number: `1 run`, `3 runs`, `0 runs`.
pub(crate) fn count(n: impl Into<i64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A table as text, without the spaces that pad its last column.
pub(crate) fn render(table: &Table) -> String {
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

impl Output {
    /// A cell for a status word, coloured by what it means: green when done or well, red when
    /// failed or stale, yellow while in progress or draining.
    pub(crate) fn status(&self, status: &str) -> Cell {
        self.coloured(status, status)
    }

    /// A cell showing `text`, coloured as [`status`](Self::status) colours `status`.
    pub(crate) fn coloured(&self, text: &str, status: &str) -> Cell {
        let cell = Cell::new(text);
        if !self.colour {
            return cell;
        }
        match status {
            "completed" | "alive" | "safe" | "finished" | "active" => cell.fg(Color::Green),
            "failed" | "permanent" | "stale" | "stalled" | "cancelled" | "lost" => {
                cell.fg(Color::Red)
            }
            "started" | "queued" | "scheduled" | "snoozed" | "draining" | "open" | "created"
            | "paused" => cell.fg(Color::Yellow),
            "skipped" => cell.fg(Color::Cyan),
            "waiting" => cell.fg(Color::Magenta),
            _ => cell,
        }
    }
}
