//! Drawings of YAML agents (`Agent::mermaid`, `Agent::dot`): what `tea draw` prints.

#[test]
fn breakpoints_are_marked_after_the_edges() {
    let yaml = "config: { checkpointer: memory }\nnodes:\n  - name: draft\n    run: return {}\n  - name: publish\n    run: return {}\n    interrupt: before\n";
    let agent = tea_yaml::Engine::new().load_str(yaml).unwrap();
    let mermaid = agent.mermaid();
    assert!(
        mermaid.ends_with(
            "    n1 --> __end__\n    classDef interrupt_before stroke-width:4px\n    class n1 interrupt_before\n"
        ),
        "{mermaid}"
    );
    let dot = agent.dot();
    assert!(dot.contains("    \"n1\" [label=\"publish\"];\n"), "{dot}");
    assert!(dot.ends_with("    \"n1\" [xlabel=\"interrupt_before\", penwidth=3];\n}\n"), "{dot}");
}
