use tea::{tool, Memory};

/// Saves a note twice over.
#[tool]
fn save(text: String, memory: &Memory, again: &Memory) -> String {
    let _ = (memory, again);
    text
}

/// Saves a note through a unique borrow.
#[tool]
fn keep(text: String, memory: &mut Memory) -> String {
    let _ = memory;
    text
}

fn main() {}
