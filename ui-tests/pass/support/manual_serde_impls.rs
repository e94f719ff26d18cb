//! Serde impls written by hand, in a file of their own: `#[derive(GraphState)]` cannot see them
//! from the state's file, hence `#[graph_state(manual_serde)]` there.

use super::Manual;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

impl Serialize for Manual {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.count.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Manual {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Manual { count: u32::deserialize(deserializer)? })
    }
}
