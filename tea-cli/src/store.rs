//! `--store`: which checkpointer a command runs its agent on.
//!
//! The spec is tea-yaml's `StoreSpec` (`memory`, `sled:PATH`, `dir:PATH`,
//! `postgres://…?schema=NAME`): parsed here, shown in messages without a password, and opened,
//! sealed when the command is given encryption keys.

use std::fmt;
use tea_runtime::{Checkpointer, DirStore, KeyRing, MemoryStore, SledStore};
use tea_yaml::Agent;
pub use tea_yaml::StoreSpec;

/// The store an agent keeps its threads in when the file names none and it can pause.
pub const DEFAULT_STORE: &str = "sled:.tea/store";

/// Parses a `--store` argument (for clap: an error here is a usage error): tea-yaml's
/// [`StoreSpec`], and a PostgreSQL URL's `?schema=` must name a schema.
pub fn parse(text: &str) -> Result<StoreSpec, String> {
    let spec = StoreSpec::parse(text)?;
    if let StoreSpec::Postgres(url) = &spec {
        if split_schema(url).1.as_deref() == Some("") {
            return Err("`schema=` in the store URL needs a name, as in `?schema=agents`".to_owned());
        }
    }
    Ok(spec)
}

/// The store's name for messages: never a password; a PostgreSQL schema is named.
pub fn shown(spec: &StoreSpec) -> String {
    match spec {
        StoreSpec::Postgres(url) => match split_schema(url).1 {
            Some(schema) => format!("{spec} (schema `{schema}`)"),
            None => spec.to_string(),
        },
        _ => spec.to_string(),
    }
}

/// `agent` on `store`, sealed with `keys` if given (`--encryption-keys`).
fn put<C: Checkpointer + 'static>(agent: Agent, store: C, keys: Option<KeyRing>) -> Agent {
    match keys {
        Some(keys) => agent.with_sealed_checkpointer(store, keys),
        None => agent.with_checkpointer(store),
    }
}

/// The same agent on the store `spec` names, its checkpoints sealed with `keys` if given.
pub fn attach(spec: &StoreSpec, agent: Agent, keys: Option<KeyRing>) -> Result<Agent, String> {
    let cannot = |e: &dyn fmt::Display| format!("cannot open the store `{}`: {e}", shown(spec));
    Ok(match spec {
        StoreSpec::Memory => put(agent, MemoryStore::new(), keys),
        StoreSpec::Sled(path) => put(
            agent,
            SledStore::open(path).map_err(|e| {
                let message = cannot(&e);
                if message.contains("could not acquire lock") {
                    format!(
                        "{message} (another process has it open: a sled store serves one process at a time; \
                     for several use `dir:PATH` or `postgres://…`)"
                    )
                } else {
                    message
                }
            })?,
            keys,
        ),
        StoreSpec::Dir(path) => put(agent, DirStore::open(path).map_err(|e| cannot(&e))?, keys),
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres(url) => {
            let (url, schema) = split_schema(url);
            let mut builder = tea_runtime::PostgresStore::builder(&url);
            if let Some(schema) = schema {
                builder = builder.schema(schema);
            }
            put(agent, builder.connect().map_err(|e| cannot(&e))?, keys)
        }
        #[cfg(not(feature = "postgres"))]
        StoreSpec::Postgres(_) => {
            return Err(format!(
                "cannot open the store `{}`: this `tea` was built without the `postgres` feature \
                 (`cargo install --path tea-cli --features postgres`)",
                shown(spec)
            ))
        }
    })
}

/// `schema=NAME` taken out of a PostgreSQL URL's query string (the driver does not know it).
pub(crate) fn split_schema(text: &str) -> (String, Option<String>) {
    let Some((base, query)) = text.split_once('?') else { return (text.to_owned(), None) };
    let mut schema = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(name) => {
                schema = Some(name.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let url = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    (url, schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_refuses_the_rest() {
        assert_eq!(parse("memory"), Ok(StoreSpec::Memory));
        assert_eq!(parse("sled:a/b"), Ok(StoreSpec::Sled("a/b".into())));
        assert_eq!(parse("dir:c"), Ok(StoreSpec::Dir("c".into())));
        assert_eq!(parse("postgres://u@h/db"), Ok(StoreSpec::Postgres("postgres://u@h/db".into())));
        let url = "postgresql://u@h/db?sslmode=disable&schema=agents";
        assert_eq!(parse(url), Ok(StoreSpec::Postgres(url.into())));
        assert_eq!(split_schema(url), ("postgresql://u@h/db?sslmode=disable".to_owned(), Some("agents".to_owned())));
        assert!(parse("postgres://u@h/db?schema=").unwrap_err().contains("needs a name"));
        assert!(parse("sled:").unwrap_err().contains("needs a path"));
        assert!(parse("redis://x").unwrap_err().contains("unknown store `redis://x`"));
    }

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        let spec = parse("postgres://me:secret@db.example/tea").unwrap();
        assert_eq!(shown(&spec), "postgres://…@db.example/tea");
        let spec = parse("postgres://me:secret@db.example/tea?schema=s1").unwrap();
        assert_eq!(shown(&spec), "postgres://…@db.example/tea (schema `s1`)");
    }
}
