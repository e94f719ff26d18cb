//! `tea serve AGENT.yaml… --store URL --bind ADDR`: the agents as an HTTP service — the Agent
//! Protocol's routes and the inbox page (tea-serve) — until SIGTERM or Ctrl-C, which lets the
//! requests in flight finish; paused threads stay in the store, resumable by the next server.

use crate::run;
use crate::store::{StoreSpec, DEFAULT_STORE};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tea_runtime::{Checkpointer, DirStore, MemoryStore, SledStore};
use tea_serve::{Access, Serve};

/// `tea serve`'s arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The agent files; each is served under its name.
    #[arg(required = true, value_name = "AGENT.yaml")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub trust: crate::TrustArg,
    /// Where all the agents keep their threads (and the server its thread records):
    /// `memory`, `sled:PATH`, `dir:PATH` or `postgres://…` (several servers on one PostgreSQL
    /// database serve the same threads).
    #[arg(long, value_name = "STORE", value_parser = StoreSpec::parse, default_value = DEFAULT_STORE)]
    pub store: StoreSpec,
    /// The address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Bearer tokens, one per line: `TOKEN` or `answer TOKEN` (may answer), `read TOKEN` (may read).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Loopback peers need no token (only with a loopback `--bind`).
    #[arg(long)]
    pub insecure_local: bool,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = tea_serve::DEFAULT_BODY_LIMIT)]
    pub body_limit: usize,
}

/// The store all agents share.
fn open(spec: &StoreSpec) -> Result<Arc<dyn Checkpointer>, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot open the store `{spec}`: {e}");
    Ok(match spec {
        StoreSpec::Memory => Arc::new(MemoryStore::new()),
        StoreSpec::Sled(path) => Arc::new(SledStore::open(path).map_err(|e| cannot(&e))?),
        StoreSpec::Dir(path) => Arc::new(DirStore::open(path).map_err(|e| cannot(&e))?),
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres(url) => {
            let (url, schema) = crate::store::split_schema(url);
            let mut builder = tea_runtime::PostgresStore::builder(&url);
            if let Some(schema) = schema {
                builder = builder.schema(schema);
            }
            Arc::new(builder.connect().map_err(|e| cannot(&e))?)
        }
        #[cfg(not(feature = "postgres"))]
        StoreSpec::Postgres(_) => {
            return Err(format!("cannot open the store `{spec}`: this `tea` was built without the `postgres` feature"))
        }
    })
}

/// Runs `tea serve`; returns the exit status once the server stopped.
pub fn serve(args: &ServeArgs) -> Result<u8, String> {
    let access =
        match (&args.token_file, args.insecure_local) {
            (None, false) => return Err(
                "`tea serve` needs `--token-file FILE` (bearer tokens), or `--insecure-local` on a loopback `--bind`"
                    .into(),
            ),
            (Some(file), local) => {
                let access = Access::from_file(file).map_err(|e| e.to_string())?;
                if local {
                    access.allow_local()
                } else {
                    access
                }
            }
            (None, true) => Access::insecure_local(),
        };
    if args.insecure_local && !args.bind.ip().is_loopback() {
        return Err(format!(
            "`--insecure-local` needs a loopback `--bind` (such as 127.0.0.1:8080), not {}",
            args.bind
        ));
    }
    let store = open(&args.store)?;
    let mut server = Serve::new().access(access).body_limit(args.body_limit);
    let mut names = Vec::new();
    for file in &args.files {
        let agent = run::load(file, &args.trust)?;
        if names.iter().any(|n| n == agent.name()) {
            return Err(format!(
                "{}: a second agent named `{}`: agent names must differ",
                file.display(),
                agent.name()
            ));
        }
        names.push(agent.name().to_owned());
        server = server.yaml(agent, store.clone());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.bind)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.bind))?;
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!(
            "tea serve: {} on http://{address} (store {}); the inbox is http://{address}/inbox",
            names.join(", "),
            args.store
        );
        tea_serve::serve(listener, server.router(), tea_serve::shutdown_signal())
            .await
            .map_err(|e| format!("the server failed: {e}"))?;
        eprintln!("tea serve: stopped; paused threads stay in the store");
        Ok(crate::EXIT_DONE)
    })
}
