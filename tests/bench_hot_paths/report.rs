//! The report writer: markdown sections printed at the end of the run and
//! written to `target/bench-hot-paths.md`, plus the targets with their
//! verdicts.

use std::fmt::Write as _;

/// A markdown table.
pub struct Table {
    headers: Vec<String>,
    /// `true` for a right-aligned (numeric) column.
    numeric: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Headers ending in `>` are numeric (right-aligned); the `>` is dropped.
    pub fn new(headers: &[&str]) -> Self {
        Self {
            headers: headers
                .iter()
                .map(|h| h.trim_end_matches('>').to_owned())
                .collect(),
            numeric: headers.iter().map(|h| h.ends_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.headers.len(), "table row width");
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| {} |", self.headers.join(" | "));
        let rule: Vec<&str> = self
            .numeric
            .iter()
            .map(|n| if *n { "---:" } else { "---" })
            .collect();
        let _ = writeln!(out, "|{}|", rule.join("|"));
        for row in &self.rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out
    }
}

/// One target and whether this run met it.
pub struct Verdict {
    pub target: String,
    pub measured: String,
    pub met: bool,
}

#[derive(Default)]
pub struct Report {
    text: String,
    verdicts: Vec<Verdict>,
}

impl Report {
    pub fn heading(&mut self, title: &str) {
        let _ = write!(self.text, "\n### {title}\n\n");
    }

    pub fn para(&mut self, text: &str) {
        let _ = write!(self.text, "{text}\n\n");
    }

    pub fn table(&mut self, table: &Table) {
        let _ = writeln!(self.text, "{}", table.render());
    }

    pub fn verdict(&mut self, target: impl Into<String>, measured: impl Into<String>, met: bool) {
        self.verdicts.push(Verdict {
            target: target.into(),
            measured: measured.into(),
            met,
        });
    }

    /// The whole report, targets first.
    pub fn render(&self, title: &str) -> String {
        let mut out = format!("## {title}\n");
        if !self.verdicts.is_empty() {
            out.push_str("\n### Targets\n\n");
            let mut t = Table::new(&["target", "measured", "met"]);
            for v in &self.verdicts {
                t.row(vec![
                    v.target.clone(),
                    v.measured.clone(),
                    if v.met { "yes" } else { "**no**" }.to_owned(),
                ]);
            }
            out.push_str(&t.render());
        }
        out.push_str(&self.text);
        out
    }

    /// Prints the report and writes it to `target/bench-hot-paths.md`.
    pub fn finish(&self, title: &str) {
        let text = self.render(title);
        println!("\n{text}");
        write_out(&text, true);
    }

    /// Writes the report so far to `target/bench-hot-paths.md`, quietly.
    pub fn write(&self) {
        write_out(&self.render("Hot paths: measured figures (partial)"), false);
    }
}

fn write_out(text: &str, say: bool) {
    let path = crate::workspace_target().join("bench-hot-paths.md");
    match std::fs::write(&path, text) {
        Ok(()) if say => eprintln!("report written to {}", path.display()),
        Ok(()) => {}
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}
