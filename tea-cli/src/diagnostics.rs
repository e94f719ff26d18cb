//! `tea validate`'s problems: each as `file:line:column: message`, then its source line with a
//! caret under the place, rendered by annotate-snippets — in colour when the stream they go to
//! is a terminal and `NO_COLOR` is unset, plain text otherwise.

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};
use std::io::IsTerminal;
use tea_yaml::LoadError;

/// Every problem of `error`, each with its snippet when the file's text shows the place, for
/// stdout.
pub fn render(error: &LoadError) -> String {
    render_to(error, std::io::stdout().is_terminal())
}

/// [`render`] for a stream that is a `terminal` or not: colour only on a terminal, and only
/// when `NO_COLOR` is unset (or empty).
pub fn render_to(error: &LoadError, terminal: bool) -> String {
    let color = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    render_with(error, std::fs::read_to_string(error.file()).ok().as_deref(), color)
}

/// [`render`] on the file's `text` (`None`: no snippets), with or without colour.
pub fn render_with(error: &LoadError, text: Option<&str>, color: bool) -> String {
    let renderer = if color { Renderer::styled() } else { Renderer::plain() };
    let mut out = String::new();
    for problem in error.problems() {
        out.push_str(&format!("{}:{}:{}: {}\n", error.file(), problem.line(), problem.column(), problem.message()));
        let Some((source, span)) = text.and_then(|t| place(t, problem.line(), problem.column())) else {
            continue;
        };
        let report = [Group::with_level(Level::ERROR).element(
            Snippet::source(source)
                .line_start(problem.line())
                .path(error.file())
                .annotation(AnnotationKind::Primary.span(span)),
        )];
        out.push_str(&renderer.render(&report));
        out.push('\n');
    }
    out
}

/// The line `line` of `text` and the span (in bytes of that line) of the word starting at
/// character `column` (one character when none starts there); `None` when the file has no such
/// line or it is blank.
fn place(text: &str, line: usize, column: usize) -> Option<(&str, std::ops::Range<usize>)> {
    let source = text.lines().nth(line.checked_sub(1)?)?;
    if source.trim().is_empty() {
        return None;
    }
    // Columns count characters; the span is in bytes.
    let begin = source.char_indices().nth(column.saturating_sub(1)).map_or(source.len(), |(b, _)| b);
    let rest = &source[begin..];
    let word = rest.find(|c: char| c.is_whitespace() || ",]}".contains(c)).unwrap_or(rest.len());
    let end = begin + if word == 0 { rest.chars().next().map_or(0, char::len_utf8) } else { word };
    Some((source, begin..end))
}
