//! `tea trace FILE`: a `--trace` timeline as a table (what ran, when, how long) and a text chart
//! (one bar per node run, checkpoint write and pause, on one time axis).

use crate::EXIT_DONE;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The chart's width in characters, for the whole timeline.
const WIDTH: usize = 50;

/// One bar of the timeline.
#[derive(Debug, PartialEq)]
struct Span {
    /// `node`, `checkpoint`, `pause`, `done`, `error`, `stopped`, `run`.
    kind: String,
    /// The node (for a checkpoint: the node it follows), or what the record says.
    label: String,
    start_ms: f64,
    end_ms: f64,
}

/// Reads a trace: each line a JSON object with an `event`; an error names the file and line.
fn read(file: &Path) -> Result<Vec<Span>, String> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read the trace file `{shown}`: {e}"))?;
    let mut spans = Vec::new();
    for (number, line) in (1..).zip(text.lines()) {
        if line.trim().is_empty() {
            continue;
        }
        let at = |what: &str| format!("{shown}:{number}: {what}");
        let record: Value = serde_json::from_str(line).map_err(|e| at(&format!("not a JSON object: {e}")))?;
        let event = record.get("event").and_then(Value::as_str).ok_or_else(|| at("no `event`"))?;
        let number_of = |key: &str| record.get(key).and_then(Value::as_f64);
        let text_of = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let span = match event {
            "node" | "checkpoint" => {
                let (Some(start_ms), Some(end_ms)) = (number_of("start_ms"), number_of("end_ms")) else {
                    return Err(at(&format!("a `{event}` record needs `start_ms` and `end_ms`")));
                };
                let label = if event == "node" {
                    match record.get("branch").and_then(Value::as_str) {
                        Some(branch) => format!("{} [{branch}]", text_of("node")),
                        None => text_of("node"),
                    }
                } else {
                    format!("after {}", text_of("after"))
                };
                Span { kind: event.to_owned(), label, start_ms, end_ms }
            }
            "start" => continue,
            other => {
                let at_ms = number_of("at_ms").ok_or_else(|| at(&format!("a `{other}` record needs `at_ms`")))?;
                let label = match other {
                    "run" => text_of("call"),
                    "pause" => text_of("node"),
                    "error" => text_of("message"),
                    "stopped" => "Ctrl-C".to_owned(),
                    _ => String::new(),
                };
                Span { kind: other.to_owned(), label, start_ms: at_ms, end_ms: at_ms }
            }
        };
        spans.push(span);
    }
    if spans.is_empty() {
        return Err(format!("the trace file `{shown}` records nothing (is it a `tea run --trace` file?)"));
    }
    Ok(spans)
}

/// The table and the chart of `spans`.
fn render(spans: &[Span]) -> String {
    let origin = spans.iter().map(|s| s.start_ms).fold(f64::INFINITY, f64::min);
    let last = spans.iter().map(|s| s.end_ms).fold(f64::NEG_INFINITY, f64::max);
    let total = (last - origin).max(f64::EPSILON);
    let label_width = spans.iter().map(|s| s.label.chars().count()).max().unwrap_or(0).clamp(4, 40);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>10}  {:>10}  {:<10}  {:<label_width$}  timeline ({:.1} ms)",
        "start ms", "ms", "event", "what", total
    );
    for span in spans {
        let label: String = span.label.chars().take(label_width).collect();
        let duration = span.end_ms - span.start_ms;
        let shown =
            if matches!(span.kind.as_str(), "node" | "checkpoint") { format!("{duration:.1}") } else { String::new() };
        let _ = writeln!(
            out,
            "{:>10.1}  {:>10}  {:<10}  {:<label_width$}  |{}|",
            span.start_ms - origin,
            shown,
            span.kind,
            label,
            bar(span, origin, total)
        );
    }
    let (mut nodes, mut writes) = (0.0, 0.0);
    for span in spans {
        match span.kind.as_str() {
            "node" => nodes += span.end_ms - span.start_ms,
            "checkpoint" => writes += span.end_ms - span.start_ms,
            _ => {}
        }
    }
    let _ = writeln!(out, "\n{total:.1} ms in all: {nodes:.1} ms in nodes, {writes:.1} ms writing checkpoints");
    out
}

/// A span's bar on the chart: `#` for a node, `=` for a checkpoint write, a mark for an instant.
fn bar(span: &Span, origin: f64, total: f64) -> String {
    let column = |ms: f64| (((ms - origin) / total) * WIDTH as f64).floor().clamp(0.0, (WIDTH - 1) as f64) as usize;
    let (from, to) = (column(span.start_ms), column(span.end_ms));
    let fill = match span.kind.as_str() {
        "node" => '#',
        "checkpoint" => '=',
        "pause" => 'P',
        "done" => '.',
        "error" => 'X',
        "stopped" => 'C',
        _ => '>',
    };
    (0..WIDTH).map(|c| if c >= from && c <= to { fill } else { ' ' }).collect()
}

/// `tea trace FILE`.
pub fn show(file: &Path) -> Result<u8, String> {
    let spans = read(file)?;
    crate::output::line(render(&spans).trim_end());
    Ok(EXIT_DONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("tea-trace-test-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_timeline_is_a_table_and_a_chart() {
        let path = file(
            "ok",
            r#"{"event":"start","at_ms":0.0,"command":"run","agent":"a","unix_ms":1}
{"event":"run","call":"run","at_ms":0.0,"agent":"a"}
{"event":"node","node":"draft","branch":null,"step":1,"start_ms":0.0,"end_ms":40.0,"duration_ms":40.0}
{"event":"checkpoint","after":"draft","start_ms":40.0,"end_ms":50.0,"duration_ms":10.0}
{"event":"node","node":"publish","branch":null,"step":2,"start_ms":50.0,"end_ms":100.0,"duration_ms":50.0}
{"event":"done","at_ms":100.0}
"#,
        );
        let text = render(&read(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        let draft = text.lines().find(|l| l.contains("draft") && l.contains("node")).unwrap();
        assert!(draft.contains("40.0"), "{text}");
        // 0–40 of 100 ms: the first 21 of 50 columns.
        assert!(draft.contains(&format!("|{}{}|", "#".repeat(21), " ".repeat(29))), "{text}");
        assert!(text.contains("100.0 ms in all: 90.0 ms in nodes, 10.0 ms writing checkpoints"), "{text}");
    }

    #[test]
    fn a_bad_line_is_named() {
        let path = file("bad", "{\"event\":\"start\",\"at_ms\":0}\nnot json\n");
        let error = read(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(error.contains(":2: not a JSON object"), "{error}");
        let path = file("empty", "");
        let error = read(&path).unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(error.contains("records nothing"), "{error}");
    }
}
