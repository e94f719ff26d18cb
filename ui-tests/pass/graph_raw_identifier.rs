// A node named with a raw identifier: the variant is `Type`, the name is `type`.
use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Doc {
    #[reducer(append)]
    log: Vec<String>,
}

fn r#type(_: &Doc, ctx: &Ctx<Doc>) -> DocUpdate {
    Doc::update().log(vec![ctx.node().to_string()])
}
fn r#match(_: &Doc) -> Command<RawNode> {
    Command::goto(RawNode::Type)
}
fn is_typed(s: &Doc) -> bool {
    !s.log.is_empty()
}

graph! {
    Raw for Doc {
        start -> r#match;
        r#match -> r#type | end;
        r#type -> end if is_typed;
        r#type -> r#match;
    }
}

fn main() {
    let out = Raw::builder().build().invoke(Doc::default()).unwrap();
    assert_eq!(out.log, ["type"]);
    assert_eq!(RawNode::Type.to_string(), "type");
    assert_eq!(RawNode::Match.name(), "match");
    assert!(Raw::MERMAID.contains("match -.-> type"), "{}", Raw::MERMAID);
}
