//! `--store`: which checkpointer a command runs its agent on.

use std::fmt;
use std::path::PathBuf;
use tea_runtime::{DirStore, MemoryStore, SledStore};
use tea_yaml::Agent;

/// The store an agent keeps its threads in when the file names none and it can pause.
pub const DEFAULT_STORE: &str = "sled:.tea/store";

/// A `--store` argument: `memory`, `sled:PATH`, `dir:PATH` or `postgres://…[?schema=NAME]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: threads live as long as the process.
    Memory,
    /// `sled:PATH`: the embedded on-disk store.
    Sled(PathBuf),
    /// `dir:PATH`: one file per checkpoint; pauses get a file named after their node.
    Dir(PathBuf),
    /// `postgres://…` or `postgresql://…`: PostgreSQL; `?schema=NAME` picks the schema its
    /// tables live in (default `public`).
    Postgres {
        /// The URL without `schema=`.
        url: String,
        /// The schema, when the URL named one.
        schema: Option<String>,
    },
}

impl StoreSpec {
    /// Parses a `--store` argument (for clap: an error here is a usage error).
    pub fn parse(text: &str) -> Result<StoreSpec, String> {
        let path = |rest: &str, kind: &str| {
            if rest.is_empty() {
                Err(format!("`{kind}:` needs a path, as in `{kind}:.tea/store`"))
            } else {
                Ok(PathBuf::from(rest))
            }
        };
        if text == "memory" {
            Ok(StoreSpec::Memory)
        } else if let Some(rest) = text.strip_prefix("sled:") {
            path(rest, "sled").map(StoreSpec::Sled)
        } else if let Some(rest) = text.strip_prefix("dir:") {
            path(rest, "dir").map(StoreSpec::Dir)
        } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            let (url, schema) = split_schema(text);
            if schema.as_deref() == Some("") {
                return Err("`schema=` in the store URL needs a name, as in `?schema=agents`".to_owned());
            }
            Ok(StoreSpec::Postgres { url, schema })
        } else {
            Err(format!("unknown store `{text}`: use `memory`, `sled:PATH`, `dir:PATH` or `postgres://…`"))
        }
    }

    /// The same agent on this store.
    pub fn attach(&self, agent: Agent) -> Result<Agent, String> {
        let cannot = |e: &dyn fmt::Display| format!("cannot open the store `{self}`: {e}");
        Ok(match self {
            StoreSpec::Memory => agent.with_checkpointer(MemoryStore::new()),
            StoreSpec::Sled(path) => agent.with_checkpointer(SledStore::open(path).map_err(|e| {
                let message = cannot(&e);
                if message.contains("could not acquire lock") {
                    format!(
                        "{message} (another process has it open: a sled store serves one process at a time; \
                         for several use `dir:PATH` or `postgres://…`)"
                    )
                } else {
                    message
                }
            })?),
            StoreSpec::Dir(path) => agent.with_checkpointer(DirStore::open(path).map_err(|e| cannot(&e))?),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres { url, schema } => {
                let mut builder = tea_runtime::PostgresStore::builder(url);
                if let Some(schema) = schema {
                    builder = builder.schema(schema);
                }
                agent.with_checkpointer(builder.connect().map_err(|e| cannot(&e))?)
            }
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres { .. } => {
                return Err(format!(
                    "cannot open the store `{self}`: this `tea` was built without the `postgres` feature \
                     (`cargo install --path tea-cli --features postgres`)"
                ))
            }
        })
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Sled(path) => write!(f, "sled:{}", path.display()),
            StoreSpec::Dir(path) => write!(f, "dir:{}", path.display()),
            // The URL may carry a password: show only where it points.
            StoreSpec::Postgres { url, schema } => {
                let rest = url.split_once("://").map_or(url.as_str(), |p| p.1);
                let host = rest.rsplit_once('@').map_or(rest, |p| p.1);
                let host = host.split_once('?').map_or(host, |p| p.0);
                write!(f, "postgres://…@{host}")?;
                match schema {
                    Some(schema) => write!(f, " (schema `{schema}`)"),
                    None => Ok(()),
                }
            }
        }
    }
}

/// `schema=NAME` taken out of a PostgreSQL URL's query string (the driver does not know it).
fn split_schema(text: &str) -> (String, Option<String>) {
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
        assert_eq!(StoreSpec::parse("memory"), Ok(StoreSpec::Memory));
        assert_eq!(StoreSpec::parse("sled:a/b"), Ok(StoreSpec::Sled("a/b".into())));
        assert_eq!(StoreSpec::parse("dir:c"), Ok(StoreSpec::Dir("c".into())));
        assert_eq!(
            StoreSpec::parse("postgres://u@h/db"),
            Ok(StoreSpec::Postgres { url: "postgres://u@h/db".into(), schema: None })
        );
        assert_eq!(
            StoreSpec::parse("postgresql://u@h/db?sslmode=disable&schema=agents"),
            Ok(StoreSpec::Postgres {
                url: "postgresql://u@h/db?sslmode=disable".into(),
                schema: Some("agents".into())
            })
        );
        assert!(StoreSpec::parse("postgres://u@h/db?schema=").unwrap_err().contains("needs a name"));
        assert!(StoreSpec::parse("sled:").unwrap_err().contains("needs a path"));
        assert!(StoreSpec::parse("redis://x").unwrap_err().contains("unknown store `redis://x`"));
    }

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        let spec = StoreSpec::parse("postgres://me:secret@db.example/tea").unwrap();
        assert_eq!(spec.to_string(), "postgres://…@db.example/tea");
        let spec = StoreSpec::parse("postgres://me:secret@db.example/tea?schema=s1").unwrap();
        assert_eq!(spec.to_string(), "postgres://…@db.example/tea (schema `s1`)");
    }
}
