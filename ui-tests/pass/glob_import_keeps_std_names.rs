// `use tea::*;` brings in the crate root and hides none of the standard prelude's names: a
// `Send` bound still names the marker trait (the fan-out value is `SendTo`).
use tea::*;

fn needs_send<T: Send + Sync>(_: &T) {}

fn main() {
    needs_send(&MemoryStore::new());
    let _: Option<Box<dyn Send>> = None;
}
