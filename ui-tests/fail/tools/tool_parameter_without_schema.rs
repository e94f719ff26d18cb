use tea::tool;

#[derive(serde::Deserialize)]
pub struct Point {
    x: f64,
    y: f64,
}

/// Measures a point's distance from the origin.
#[tool]
fn distance(point: Point) -> f64 {
    (point.x * point.x + point.y * point.y).sqrt()
}

fn main() {
    // The tool's type still exists: this use is no second error.
    let _ = Distance;
}
