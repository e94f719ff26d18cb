use tea::tool;

/// Deletes a file.
#[tool(aproval)]
fn delete(path: String) -> String {
    path
}

fn main() {}
