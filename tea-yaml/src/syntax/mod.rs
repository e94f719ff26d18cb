//! The syntax of an agent file: YAML text read into a tree whose every value knows its line
//! and column, for the loader (`load/`) to walk and place its problems.
//!
//! - `yaml.rs` — the position-carrying YAML 1.2 tree ([`yaml::Node`]) on saphyr's parser.

pub(crate) mod yaml;
