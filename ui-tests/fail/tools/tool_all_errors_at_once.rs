use tea::tool;

struct Files;

impl Files {
    /// Lists files.
    #[tool]
    fn list<T>(&self, (dir, depth): (String, u32), filter: Vec<&'static str>) -> Vec<String> {
        let _ = (dir, depth, filter);
        Vec::new()
    }
}

fn main() {}
