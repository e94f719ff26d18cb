use tea::prelude::*;

#[derive(GraphState)]
union Bits {
    int: u32,
    float: f32,
}

fn main() {}
