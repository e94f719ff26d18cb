//! What `#[tool]` accepts: sync and async functions, `Option` parameters, doc comments on
//! parameters, no parameters, `Result` outputs, raw identifiers, a name and approval.

use tea::models::{Tool, ToolNode};
use tea::tool;

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Point {
    pub x: f64,
    pub y: f64,
}

/// Measures a point's distance from the origin.
#[tool]
pub fn distance(
    /// The point.
    point: Point,
    /// How many decimals to keep.
    decimals: Option<u32>,
) -> f64 {
    let d = (point.x * point.x + point.y * point.y).sqrt();
    let scale = 10f64.powi(decimals.unwrap_or(2) as i32);
    (d * scale).round() / scale
}

/// Tells the time.
#[tool(name = "clock")]
async fn now() -> Result<String, std::io::Error> {
    Ok("noon".to_owned())
}

/// Removes a file.
#[tool(approval)]
fn remove(r#type: String, paths: Vec<String>) {
    let _ = (r#type, paths);
}

fn main() {
    let tools = ToolNode::new().with(Distance).with(Now).with(Remove);
    assert_eq!(tools.definitions().len(), 3);
    assert_eq!(Now.name(), "clock");
    assert!(Remove.needs_approval());
    assert_eq!(Remove.parameters()["required"], serde_json::json!(["type", "paths"]));
    let out = tea::models::block_on(Distance.call(serde_json::json!({"point": {"x": 3.0, "y": 4.0}})));
    assert_eq!(out, Ok(serde_json::json!(5.0)));
    assert_eq!(distance(Point { x: 0.0, y: 1.0 }, None), 1.0);
    assert!(Remember.uses_memory());
    assert_eq!(Remember.parameters()["required"], serde_json::json!(["fact"]));
    let memory = tea::Memory::new(tea::MemoryStore::new());
    let out = tea::models::block_on(Remember.call_with_memory(serde_json::json!({"fact": "tea"}), &memory));
    assert_eq!(out, Ok(serde_json::Value::Null));
    assert_eq!(memory.get(&["facts"], "tea").unwrap().unwrap().value["fact"], "tea");
}

/// Remembers a fact; `&Memory` is the app's memory, not an argument of the model's.
#[tool]
async fn remember(fact: String, memory: &tea::Memory) -> Result<(), tea::Error> {
    memory.put(&["facts"], &fact, serde_json::json!({ "fact": fact }))
}
