// A setter is as visible as its field: a private field cannot be written from outside its module.
mod state {
    use tea::prelude::*;

    #[derive(GraphState, Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
    pub struct Review {
        pub draft: String,
        #[reducer(sum)]
        secret: u32,
    }
}

use tea::prelude::*;

fn main() {
    let _ = state::Review::update().draft(String::new()).secret(1);
    let _ = state::Review::update().overwrite_secret(0);
}
