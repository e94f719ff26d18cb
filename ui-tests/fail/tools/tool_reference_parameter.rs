use tea::tool;

/// Looks up the weather.
#[tool]
fn weather(city: &str) -> String {
    format!("sunny in {city}")
}

fn main() {}
