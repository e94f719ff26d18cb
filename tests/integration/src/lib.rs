//! tea's integration tests (`tests/`) and the guide's doc tests: what needs a server, a browser,
//! PostgreSQL, YAML, HTTP, tokio or tracing, kept out of the root package so that its examples and
//! `cargo test` build little more than the library.
//!
//! `cargo test -p tea-integration-tests` runs them on this package's default features (`sled`,
//! `tokio`, `tracing`, `serve`, `yaml`); `--features postgres` adds the PostgreSQL tests, which
//! skip with a message unless `TEA_TEST_POSTGRES_URL` names a server. CI runs them all with
//! `cargo test --workspace --all-features`.

/// The guide's chapters (`docs/src`), whose Rust examples run as doc tests of this crate: they
/// may use tokio, axum, serde_json and every feature of tea, which the root package's doc tests
/// (the README's) do without.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../../../docs/src/concepts.md")]
    struct Concepts;
    #[doc = include_str!("../../../docs/src/graphs.md")]
    struct Graphs;
    #[doc = include_str!("../../../docs/src/state.md")]
    struct State;
    #[doc = include_str!("../../../docs/src/parallel.md")]
    struct Parallel;
    #[doc = include_str!("../../../docs/src/async.md")]
    struct Async;
    #[doc = include_str!("../../../docs/src/pauses.md")]
    struct Pauses;
    #[doc = include_str!("../../../docs/src/postgres.md")]
    struct Postgres;
    #[doc = include_str!("../../../docs/src/retention.md")]
    struct Retention;
    #[doc = include_str!("../../../docs/src/memory.md")]
    struct Memory;
    #[doc = include_str!("../../../docs/src/hitl.md")]
    struct Hitl;
    #[doc = include_str!("../../../docs/src/subgraphs.md")]
    struct Subgraphs;
    #[doc = include_str!("../../../docs/src/policies.md")]
    struct Policies;
    #[doc = include_str!("../../../docs/src/tracing.md")]
    struct Tracing;
    #[doc = include_str!("../../../docs/src/web.md")]
    struct Web;
    #[doc = include_str!("../../../docs/src/yaml.md")]
    struct Yaml;
    #[cfg(feature = "models")]
    #[doc = include_str!("../../../docs/src/models.md")]
    struct Models;
    #[cfg(feature = "models")]
    #[doc = include_str!("../../../docs/src/tutorial-chatbot.md")]
    struct TutorialChatbot;
    #[doc = include_str!("../../../docs/src/yaml-net.md")]
    struct YamlNet;
    #[doc = include_str!("../../../docs/src/yaml-python.md")]
    struct YamlPython;
    #[doc = include_str!("../../../docs/src/yaml-prolog.md")]
    struct YamlProlog;
    #[doc = include_str!("../../../docs/src/permissions.md")]
    struct Permissions;
    #[doc = include_str!("../../../docs/src/cli.md")]
    struct Cli;
    #[doc = include_str!("../../../docs/src/errors.md")]
    struct Errors;
    #[doc = include_str!("../../../docs/src/from-langgraph.md")]
    struct FromLanggraph;
    #[doc = include_str!("../../../docs/src/from-the-edge-agent.md")]
    struct FromTheEdgeAgent;
    #[doc = include_str!("../../../docs/src/introduction.md")]
    struct Introduction;
}
