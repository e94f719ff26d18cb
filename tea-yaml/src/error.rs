//! [`LoadError`]: every problem found in an agent file, each with its line and column.

use std::fmt;

/// One problem in an agent file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub(crate) message: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Problem {
    /// What is wrong, and where possible how to fix it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The line it is on (1-based).
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column it starts at (1-based).
    pub fn column(&self) -> usize {
        self.column
    }
}

/// Why an agent file did not load: every problem found in it, in file order.
///
/// Its `Display` prints each as `file:line:column: message`, one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub(crate) file: String,
    pub(crate) problems: Vec<Problem>,
}

impl LoadError {
    /// Every problem found, in file order.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The file the problems are in (`<string>` for [`Engine::load_str`](crate::Engine::load_str)).
    pub fn file(&self) -> &str {
        &self.file
    }

    pub(crate) fn one(file: &str, line: usize, column: usize, message: impl Into<String>) -> Self {
        LoadError { file: file.to_owned(), problems: vec![Problem { message: message.into(), line, column }] }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}:{}:{}: {}", self.file, p.line, p.column, p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// "; did you mean `x`?" for `word` among `known` (`tea_check::suggest`, as `graph!` picks), or
/// nothing.
pub(crate) fn suggest<'k>(word: &str, known: impl IntoIterator<Item = &'k str>) -> String {
    let known: Vec<&str> = known.into_iter().collect();
    // Jaro-Winkler misses short words with two letters swapped (`rnu` for `run`): then one
    // edit (a letter changed, added, dropped, or two neighbours swapped) away also counts.
    let close = || known.iter().copied().find(|k| word.chars().count() >= 3 && one_edit(word, k));
    tea_check::suggest(word, known.iter().copied())
        .or_else(close)
        .map(|k| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

/// Whether `a` becomes `b` by one edit: a letter changed, added or dropped, or two neighbours
/// swapped.
fn one_edit(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a == b || a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let start = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (ra, rb) = (&a[start..], &b[start..]);
    match ra.len().cmp(&rb.len()) {
        std::cmp::Ordering::Equal => {
            ra[1..] == rb[1..] || (ra.len() >= 2 && ra[0] == rb[1] && ra[1] == rb[0] && ra[2..] == rb[2..])
        }
        std::cmp::Ordering::Greater => ra[1..] == *rb,
        std::cmp::Ordering::Less => *ra == rb[1..],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn swapped_letters_of_a_short_word_are_suggested() {
        assert_eq!(super::suggest("rnu", ["name", "run", "uses"]), "; did you mean `run`?");
        assert_eq!(super::suggest("usse", ["uses"]), "; did you mean `uses`?");
        assert_eq!(super::suggest("zz", ["run"]), "");
    }
}
