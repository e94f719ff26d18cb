//! Agents written as YAML files, run on tea's engine.
//!
//! A YAML agent is loaded at run time ([`Engine::load_file`]) into a graph that implements
//! `tea::Graph` over tables, so it pauses, checkpoints, resumes and runs parallel branches on
//! the same executor, stores and tokens as a `graph!` graph. The dialect is The Edge Agent's
//! (Lua `run:` blocks, `uses:` actions with minijinja templates, `goto`, `edges` with
//! `targets`, parallel edges, `type: while_loop`, `steps:`, `dynamic_parallel` and `subgraph`
//! nodes, `config:` interrupts and checkpoints) plus YamlGraph's `type: interrupt` nodes. The
//! guide's chapter "The YAML language" (`docs/src/yaml.md`) describes the file format.
//!
//! ```
//! use serde_json::json;
//! use tea_yaml::Engine;
//!
//! let agent = Engine::new().load_str(r#"
//! name: review
//! state:
//!   log: { type: list, reducer: append }
//! config:
//!   checkpointer: memory
//! nodes:
//!   - name: draft
//!     run: return { draft = "v1", log = { "drafted" } }
//!   - name: ask
//!     type: interrupt
//!     message: "Approve {{ state.draft }}?"
//!     resume_key: approved
//!   - name: publish
//!     run: return { log = { state.approved and "published" or "rejected" } }
//! "#)?;
//! let (state, resume) = agent.invoke(json!({}))?.interrupted().unwrap();
//! assert_eq!(state["interrupt_message"], "Approve v1?");
//! let done = agent.resume(resume.answer(true))?.done().unwrap();
//! assert_eq!(done["log"], json!(["drafted", "published"]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What a file may reach
//!
//! An agent file is someone else's code: it reaches only what the [`Engine`] grants. Its file
//! actions read and write under its own folder and the folders of [`Engine::allow_read`] and
//! [`Engine::allow_write`] (never `/proc`, `/sys`, `/dev`, FIFOs or devices); its requests go to
//! the hosts of [`Engine::allow_net`]; a secret goes only to the hosts it is bound to
//! ([`Engine::secret_host`]); `${VAR}` reads only the variables of [`Engine::allow_env`]. The
//! guide's page "What an untrusted agent file can and cannot do" (`docs/src/permissions.md`)
//! sets the model out.
//!
//! # Cargo features
//!
//! | feature | default | enables |
//! |---|---|---|
//! | `sled` | on | `config.checkpointer: { sled: PATH }`, the embedded on-disk store |
//! | `postgres` | off | `config.checkpointer: { postgres: URL }`, a PostgreSQL store shared by many processes |
//! | `net` | off | `llm.call`, `http.get`, `http.post`, `actions.notify`: async requests with retries and timeouts (reqwest with rustls, on tokio) |
//! | `tokio` | off | `Agent::invoke_async` and its kin on the engine's tokio driver, which awaits network nodes without a thread each |
//! | `tracing` | off | the engine's spans and events (target `tea`) for agents' runs |
//! | `python` | off | `run:` blocks in Python, run by embedded CPython (PyO3) in files the engine trusts ([`Engine::trust_code`]) |
//! | `prolog` | off | `run:` blocks in Prolog (`language: prolog`), run sandboxed by Scryer Prolog (pure Rust) |
//!
//! The `tea` facade re-exports this crate as `tea::yaml` with its feature `yaml`.
#![deny(missing_docs, missing_debug_implementations)]

mod actions;
mod agent;
mod error;
mod grants;
mod ir;
mod lang;
mod load;
mod run;
mod state;
mod syntax;

pub use actions::ActionFn;
pub use agent::{
    Agent, AgentStream, Engine, DEFAULT_LUA_INSTRUCTION_LIMIT, DEFAULT_LUA_MEMORY_LIMIT, DEFAULT_LUA_TIME_LIMIT,
};
pub use error::{LoadError, Problem};
pub use grants::HostGrant;
pub use ir::{AutoTrace, NodeIx, YamlGraph};
pub use load::StoreSpec;
pub use state::{State, Update};
