//! `--store`: which checkpointer a command runs its agent on.

use std::fmt;
use std::path::PathBuf;
use tea_runtime::{DirStore, MemoryStore, SledStore};
use tea_yaml::Agent;

/// The store an agent keeps its threads in when the file names none and it can pause.
pub const DEFAULT_STORE: &str = "sled:.tea/store";

/// A `--store` argument: `memory`, `sled:PATH`, `dir:PATH` or `postgres://…`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreSpec {
    /// `memory`: threads live as long as the process.
    Memory,
    /// `sled:PATH`: the embedded on-disk store.
    Sled(PathBuf),
    /// `dir:PATH`: one file per checkpoint; pauses get a file named after their node.
    Dir(PathBuf),
    /// `postgres://…` or `postgresql://…`: PostgreSQL.
    Postgres(String),
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
            Ok(StoreSpec::Postgres(text.to_owned()))
        } else {
            Err(format!("unknown store `{text}`: use `memory`, `sled:PATH`, `dir:PATH` or `postgres://…`"))
        }
    }

    /// The same agent on this store.
    pub fn attach(&self, agent: Agent) -> Result<Agent, String> {
        let cannot = |e: &dyn fmt::Display| format!("cannot open the store `{self}`: {e}");
        Ok(match self {
            StoreSpec::Memory => agent.with_checkpointer(MemoryStore::new()),
            StoreSpec::Sled(path) => agent.with_checkpointer(SledStore::open(path).map_err(|e| cannot(&e))?),
            StoreSpec::Dir(path) => agent.with_checkpointer(DirStore::open(path).map_err(|e| cannot(&e))?),
            #[cfg(feature = "postgres")]
            StoreSpec::Postgres(url) => {
                agent.with_checkpointer(tea_runtime::PostgresStore::connect(url).map_err(|e| cannot(&e))?)
            }
            #[cfg(not(feature = "postgres"))]
            StoreSpec::Postgres(_) => {
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
            StoreSpec::Postgres(url) => {
                let host = url.rsplit_once('@').map_or_else(|| url.split_once("://").map_or("", |p| p.1), |p| p.1);
                write!(f, "postgres://…@{host}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_and_refuses_the_rest() {
        assert_eq!(StoreSpec::parse("memory"), Ok(StoreSpec::Memory));
        assert_eq!(StoreSpec::parse("sled:a/b"), Ok(StoreSpec::Sled("a/b".into())));
        assert_eq!(StoreSpec::parse("dir:c"), Ok(StoreSpec::Dir("c".into())));
        assert!(matches!(StoreSpec::parse("postgres://u@h/db"), Ok(StoreSpec::Postgres(_))));
        assert!(StoreSpec::parse("sled:").unwrap_err().contains("needs a path"));
        assert!(StoreSpec::parse("redis://x").unwrap_err().contains("unknown store `redis://x`"));
    }

    #[test]
    fn a_postgres_url_is_shown_without_its_password() {
        let spec = StoreSpec::parse("postgres://me:secret@db.example/tea").unwrap();
        assert_eq!(spec.to_string(), "postgres://…@db.example/tea");
    }
}
