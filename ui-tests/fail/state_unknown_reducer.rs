use tea::prelude::*;

#[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Review {
    #[reducer(apend)]
    log: Vec<String>,
    #[reducer(concat)]
    text: String,
}

fn main() {
    // The rest of the derive is still generated: no second error here.
    let _ = Review::update().log(Vec::new()).text(String::new());
}
