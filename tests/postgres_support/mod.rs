//! A PostgreSQL schema of its own for one test, dropped when the test ends.
//!
//! The server is `TEA_TEST_POSTGRES_URL`, else `postgres://postgres@127.0.0.1:5432/test`. When
//! the variable is not set and no server answers, [`TestSchema::new`] prints why the test is
//! skipped and returns `None`; when it is set, a server that does not answer fails the test.
//! Shared (via `#[path]`) by the tests of tests/integration, tea-runtime and tea-cli.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tea::PostgresStore;

/// The variable that names the test server and makes it required.
pub const URL_ENV: &str = "TEA_TEST_POSTGRES_URL";
/// The server tried when the variable is not set.
pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// A schema named after the test, this process and a counter, so tests run in parallel and
/// re-runs never collide.
#[derive(Debug)]
pub struct TestSchema {
    url: String,
    name: String,
    /// Whether dropping the value drops the schema (not in child processes of a test).
    owned: bool,
}

impl TestSchema {
    /// A new schema for `test`, or `None` if the test is to be skipped.
    pub fn new(test: &str) -> Option<TestSchema> {
        let (url, required) = match std::env::var(URL_ENV) {
            Ok(url) => (url, true),
            Err(_) => (DEFAULT_URL.to_owned(), false),
        };
        if let Err(error) = execute(&url, "SELECT 1") {
            if required {
                panic!("{URL_ENV} is set, but PostgreSQL at {url} does not answer: {error}");
            }
            eprintln!("skipped: no PostgreSQL at {url} ({error}); set {URL_ENV} to require one");
            return None;
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let short: String = test.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(24).collect();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let name = format!(
            "tea_test_{}_{}_{}_{}",
            short.to_ascii_lowercase(),
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            nanos % 1_000_000
        );
        Some(TestSchema { url, name, owned: true })
    }

    /// The schema another process created, which this one must not drop.
    pub fn borrowed(url: String, name: String) -> TestSchema {
        TestSchema { url, name, owned: false }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A store on this schema (a new connection pool each call).
    pub fn store(&self) -> PostgresStore {
        PostgresStore::builder(&self.url).schema(&self.name).max_connections(8).connect().unwrap()
    }

    /// Runs `statement` (several may be separated by `;`) on the server, outside any store.
    pub fn execute(&self, statement: &str) {
        execute(&self.url, statement).unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if self.owned {
            let _ = execute(&self.url, &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name));
        }
    }
}

/// Runs `statement` on a connection of its own.
fn execute(url: &str, statement: &str) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| e.to_string())?;
        config.connect_timeout(Duration::from_secs(3));
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| format!("{e:?}"))?;
        let driver = tokio::spawn(connection);
        let result = client.batch_execute(statement).await.map_err(|e| format!("{e:?}"));
        drop(client);
        let _ = driver.await;
        result
    })
}
