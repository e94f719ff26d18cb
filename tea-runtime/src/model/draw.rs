//! Drawings of graphs with subgraph nodes, put together at compile time.
//!
//! `graph!` writes each graph's `MERMAID` and `DOT` as a *template*: the drawing with
//! [`MARK`] before every node id. A parent's template is its own text with, for each subgraph
//! node, the child's template inserted with every id prefixed by the node (`review__check`), so
//! ids stay unique however deep children nest. The constants are the template without its
//! marks. Everything here is `const fn` over fixed buffers, so `MERMAID`/`DOT` stay
//! `&'static str` constants.

/// The byte that marks a node id in a template.
pub const MARK: u8 = 0x01;

/// A part of a template: text, or a child's template whose ids get a prefix.
#[derive(Clone, Copy, Debug)]
pub enum Piece {
    /// Text, copied as it is (its marks stay marks).
    Text(&'static str),
    /// A child's template; every mark in it is followed by the prefix.
    Child(&'static str, &'static str),
}

const fn marks(text: &[u8]) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < text.len() {
        if text[i] == MARK {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The length of the template `pieces` make.
pub const fn len(pieces: &[Piece]) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < pieces.len() {
        n += match pieces[i] {
            Piece::Text(text) => text.len(),
            Piece::Child(child, prefix) => child.len() + marks(child.as_bytes()) * prefix.len(),
        };
        i += 1;
    }
    n
}

const fn copy<const N: usize>(out: &mut [u8; N], mut at: usize, text: &[u8]) -> usize {
    let mut i = 0;
    while i < text.len() {
        out[at] = text[i];
        at += 1;
        i += 1;
    }
    at
}

/// The template `pieces` make, in a buffer of exactly [`len`]`(pieces)` bytes.
pub const fn build<const N: usize>(pieces: &[Piece]) -> [u8; N] {
    let mut out = [0u8; N];
    let (mut i, mut at) = (0, 0);
    while i < pieces.len() {
        match pieces[i] {
            Piece::Text(text) => at = copy(&mut out, at, text.as_bytes()),
            Piece::Child(child, prefix) => {
                let child = child.as_bytes();
                let mut j = 0;
                while j < child.len() {
                    out[at] = child[j];
                    at += 1;
                    if child[j] == MARK {
                        at = copy(&mut out, at, prefix.as_bytes());
                    }
                    j += 1;
                }
            }
        }
        i += 1;
    }
    assert!(at == N, "a drawing's buffer has the wrong length");
    out
}

/// The length of `head`, then `template` without its marks, then `tail`.
pub const fn unmarked_len(head: &str, template: &str, tail: &str) -> usize {
    head.len() + template.len() - marks(template.as_bytes()) + tail.len()
}

/// `head`, then `template` without its marks, then `tail`, in a buffer of exactly
/// [`unmarked_len`] bytes.
pub const fn unmark<const N: usize>(head: &str, template: &str, tail: &str) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = copy(&mut out, 0, head.as_bytes());
    let text = template.as_bytes();
    let mut i = 0;
    while i < text.len() {
        if text[i] != MARK {
            out[at] = text[i];
            at += 1;
        }
        i += 1;
    }
    at = copy(&mut out, at, tail.as_bytes());
    assert!(at == N, "a drawing's buffer has the wrong length");
    out
}

/// A buffer built from UTF-8 text (marks and text split only between characters) as `&str`.
pub const fn as_str(bytes: &'static [u8]) -> &'static str {
    match core::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => panic!("a drawing is not UTF-8"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIECES: &[Piece] =
        &[Piece::Text("a \u{1}x\n"), Piece::Child("\u{1}c -> \u{1}d\n", "n__"), Piece::Text("end")];
    const LEN: usize = len(PIECES);
    const BUF: [u8; LEN] = build(PIECES);
    const TEMPLATE: &str = as_str(&BUF);
    const OUT_LEN: usize = unmarked_len("{\n", TEMPLATE, "}");
    const OUT: [u8; OUT_LEN] = unmark("{\n", TEMPLATE, "}");

    #[test]
    fn a_child_is_inserted_with_its_ids_prefixed() {
        assert_eq!(TEMPLATE, "a \u{1}x\n\u{1}n__c -> \u{1}n__d\nend");
        assert_eq!(as_str(&OUT), "{\na x\nn__c -> n__d\nend}");
    }
}
