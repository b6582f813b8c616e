//! What the CLI prints: readable tables for people, one JSON document for scripts.

use serde::Serialize;

use super::client::{Failure, Outcome, Output};

/// Rows with a header, printed aligned (the last column unpadded).
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&'static str]) -> Self {
        Self { header: header.to_vec(), rows: Vec::new() }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}  ", width = widths[i]));
                }
            }
            out.trim_end().to_owned()
        };
        let mut out = line(self.header.iter().map(|h| h.to_uppercase()).collect());
        for row in &self.rows {
            out.push('\n');
            out.push_str(&line(row.clone()));
        }
        out
    }
}

/// Prints `value` as JSON, or as what `human` makes of it.
pub fn print<T: Serialize>(output: Output, value: &T, human: impl FnOnce(&T) -> String) -> Outcome<()> {
    match output {
        Output::Json => {
            let text = serde_json::to_string_pretty(value).map_err(|e| Failure(e.to_string()))?;
            println!("{text}");
        }
        Output::Table => {
            let text = human(value);
            if !text.is_empty() {
                println!("{text}");
            }
        }
    }
    Ok(())
}

/// Milliseconds since the epoch as RFC 3339 (UTC, seconds).
pub fn time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime_serde::re::humantime::format_rfc3339_seconds(at).to_string()
}

pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Bytes for people (`1.5 GiB`).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}
