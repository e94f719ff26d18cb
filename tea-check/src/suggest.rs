//! "Did you mean …?": the one way both front ends pick a known name for a misspelled one.

/// The known name `word` most likely misspells, if one is close enough to suggest: a name that
/// differs from `word` only in letter case, or else the most similar by Jaro-Winkler similarity
/// (above 0.8; the first of equals). `word` itself is never suggested.
///
/// Jaro-Winkler rewards a shared beginning, so a word cut short or with letters swapped
/// (`integr` → `int`, `reveiw` → `review`, `temprature` → `temperature`) finds its name, while
/// short unrelated names (`x` for `y`) do not.
///
/// ```
/// use tea_check::suggest;
///
/// let nodes = ["draft", "review", "publish"];
/// assert_eq!(suggest("pubish", nodes), Some("publish"));
/// assert_eq!(suggest("Review", nodes), Some("review"));
/// assert_eq!(suggest("frobnicate", nodes), None);
/// assert_eq!(suggest("draft", nodes), None, "a known name needs no suggestion");
/// ```
pub fn suggest<'k>(word: &str, known: impl IntoIterator<Item = &'k str>) -> Option<&'k str> {
    let mut best: Option<(f64, &'k str)> = None;
    for name in known {
        if name == word {
            continue;
        }
        let score = if name.to_lowercase() == word.to_lowercase() { 2.0 } else { jaro_winkler(word, name) };
        if score > 0.8 && best.is_none_or(|(top, _)| score > top) {
            best = Some((score, name));
        }
    }
    best.map(|(_, name)| name)
}

/// The Jaro-Winkler similarity of `a` and `b`, from 0 (nothing in common) to 1 (equal), over
/// characters: the Jaro similarity, raised for a common prefix of up to four characters when
/// it is above 0.7.
pub fn jaro_winkler(a: &str, b: &str) -> f64 {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let sim = jaro(&a, &b);
    if sim > 0.7 {
        let prefix = a.iter().zip(&b).take(4).take_while(|(x, y)| x == y).count();
        sim + 0.1 * prefix as f64 * (1.0 - sim)
    } else {
        sim
    }
}

/// The Jaro similarity: characters that match within half the longer length, and how many of
/// them are out of order.
fn jaro(a: &[char], b: &[char]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let window = (a.len().max(b.len()) / 2).saturating_sub(1);
    let mut a_matched = vec![false; a.len()];
    let mut b_matched = vec![false; b.len()];
    let mut matches = 0usize;
    for (i, ca) in a.iter().enumerate() {
        let low = i.saturating_sub(window);
        let high = (i + window + 1).min(b.len());
        for j in low..high {
            if !b_matched[j] && b[j] == *ca {
                a_matched[i] = true;
                b_matched[j] = true;
                matches += 1;
                break;
            }
        }
    }
    if matches == 0 {
        return 0.0;
    }
    let in_a = a.iter().zip(&a_matched).filter(|(_, m)| **m).map(|(c, _)| c);
    let in_b = b.iter().zip(&b_matched).filter(|(_, m)| **m).map(|(c, _)| c);
    let transpositions = in_a.zip(in_b).filter(|(x, y)| x != y).count() / 2;
    let m = matches as f64;
    (m / a.len() as f64 + m / b.len() as f64 + (matches - transpositions) as f64 / m) / 3.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 0.001
    }

    #[test]
    fn similarities_are_the_textbook_ones() {
        assert!(close(jaro_winkler("MARTHA", "MARHTA"), 0.961));
        assert!(close(jaro_winkler("DWAYNE", "DUANE"), 0.84));
        assert!(close(jaro_winkler("DIXON", "DICKSONX"), 0.813));
        assert!(close(jaro_winkler("cheeseburger", "cheese fries"), 0.866));
        assert!(close(jaro_winkler("", ""), 1.0));
        assert!(close(jaro_winkler("a", ""), 0.0));
        assert!(close(jaro_winkler("abc", "xyz"), 0.0));
    }

    #[test]
    fn misspellings_find_their_names() {
        let reducers = ["replace", "append", "sum", "max", "min", "union", "merge", "with"];
        assert_eq!(suggest("apend", reducers), Some("append"));
        assert_eq!(suggest("unoin", reducers), Some("union"));
        assert_eq!(suggest("Sum", reducers), Some("sum"), "letter case alone");
        assert_eq!(suggest("frobnicate", reducers), None);
        assert_eq!(suggest("x", reducers), None);
        let types = ["str", "int", "float", "bool", "list", "dict", "any"];
        assert_eq!(suggest("integr", types), Some("int"), "a word cut short");
        assert_eq!(suggest("fecth", ["fetch", "tidy"]), Some("fetch"), "letters swapped");
        assert_eq!(suggest("temprature", ["model", "temperature", "prompt"]), Some("temperature"));
        assert_eq!(suggest("bok", ["book", "publish"]), Some("book"));
    }

    #[test]
    fn an_exact_name_or_nothing_close_is_no_suggestion() {
        assert_eq!(suggest("write", ["write"]), None);
        assert_eq!(suggest("x", ["y", "z"]), None);
        assert_eq!(suggest("anything", []), None);
    }

    #[test]
    fn the_first_of_equally_close_names_wins() {
        assert_eq!(suggest("ab", ["abc", "abd"]), Some("abc"));
        assert_eq!(suggest("ab", ["abd", "abc"]), Some("abd"));
    }
}
