//! `tea serve AGENT.yaml… --store URL --bind ADDR`: the agents as an HTTP service — the Agent
//! Protocol's routes and the inbox page (tea-serve) — until SIGTERM or Ctrl-C, which lets the
//! requests in flight finish; paused threads stay in the store, resumable by the next server.

use crate::run;
use crate::store::StoreSpec;
use clap::Args;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// database serve the same threads)
    /// [default: `sled:$XDG_DATA_HOME/tea/serve`, else `sled:~/.local/share/tea/serve`, else
    /// `tea/serve` in the system's temporary directory; never the current directory].
    #[arg(long, value_name = "STORE", value_parser = StoreSpec::parse)]
    pub store: Option<StoreSpec>,
    #[command(flatten)]
    pub encryption: crate::EncryptionArg,
    #[command(flatten)]
    pub group_commit: crate::GroupCommitArg,
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
    /// With `--insecure-local`: a host name (`tea.lan`, or `tea.lan:8080` for that port only)
    /// that tokenless requests may be addressed to besides `localhost`, `127.0.0.1` and `[::1]`
    /// (any other `Host` gets 421, so a web page cannot reach the server through DNS
    /// rebinding). Repeat it for several.
    #[arg(long, value_name = "HOST", value_parser = parse_host)]
    pub allowed_host: Vec<String>,
    /// What the sweeper keeps of the agents' threads (`tea prune`'s flags): it runs at start
    /// and every --sweep-every while the server runs, when any of them is given.
    #[command(flatten)]
    pub retention: crate::RetentionArgs,
    /// How often the sweeper runs (`10m`, `1h`).
    #[arg(long, value_name = "AGE", default_value = "10m", value_parser = parse_every)]
    pub sweep_every: std::time::Duration,
    /// How long a run stays with this server without news from it (`30s`, `1m`, the default):
    /// when a server on the same store dies mid-run (or this one restarts), another takes its
    /// runs over once their lease lapses and finishes them from their last checkpoint. The
    /// agents' runs hold their threads by the same lease; make it longer than the slowest node.
    #[arg(long, value_name = "AGE", default_value = "1m", value_parser = parse_lease)]
    pub lease: std::time::Duration,
}

/// `--lease`: tea's duration syntax, and not zero.
fn parse_lease(text: &str) -> Result<std::time::Duration, String> {
    match tea_runtime::parse_duration(text) {
        Ok(lease) if lease.is_zero() => Err("a run's lease needs a time above zero".to_owned()),
        Ok(lease) => Ok(lease),
        Err(e) => Err(e.to_string()),
    }
}

/// `--sweep-every`: tea's duration syntax, and not zero.
fn parse_every(text: &str) -> Result<std::time::Duration, String> {
    match tea_runtime::parse_duration(text) {
        Ok(every) if every.is_zero() => Err("the sweeper needs a time between sweeps above zero".to_owned()),
        Ok(every) => Ok(every),
        Err(e) => Err(e.to_string()),
    }
}

/// An `--allowed-host`: a host name or address, with an optional port; no scheme, no path.
fn parse_host(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']'));
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("`{text}` is not a host name such as `tea.lan` or `tea.lan:8080` (no scheme, no path)"))
    }
}

/// The per-user data directory of `tea`: `$XDG_DATA_HOME/tea` (an absolute path, as the XDG
/// base directory specification wants), else `$HOME/.local/share/tea`, else `tea` in the system's
/// temporary directory.
fn data_dir(xdg_data_home: Option<OsString>, home: Option<OsString>, temp: &Path) -> PathBuf {
    let set = |value: Option<OsString>| value.filter(|v| !v.is_empty()).map(PathBuf::from);
    match (set(xdg_data_home).filter(|p| p.is_absolute()), set(home)) {
        (Some(data), _) => data.join("tea"),
        (None, Some(home)) => home.join(".local/share/tea"),
        (None, None) => temp.join("tea"),
    }
}

/// The store of a `tea serve` without `--store`: a sled database in `tea`'s data directory, so
/// a server started from a project (a repository) leaves nothing in it.
pub fn default_store() -> StoreSpec {
    let dir = data_dir(std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME"), &std::env::temp_dir());
    StoreSpec::Sled(dir.join("serve"))
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
    let spec = args.store.clone().unwrap_or_else(default_store);
    let store = match args.encryption.keys()? {
        Some(keys) => Arc::new(tea_runtime::Sealed::new(open(&spec)?, keys)),
        None => open(&spec)?,
    };
    let retention = args.retention.retention();
    let mut server = Serve::new().access(access).body_limit(args.body_limit).lease(args.lease);
    if !retention.is_empty() {
        server = server.sweep_every(args.sweep_every);
    }
    for host in &args.allowed_host {
        server = server.allowed_host(host.clone());
    }
    let mut names = Vec::new();
    for file in &args.files {
        let agent = run::load(file, &args.trust)?.with_retention(retention).with_lease(args.lease);
        let agent = args.group_commit.apply(agent);
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
            spec
        );
        if !retention.is_empty() {
            eprintln!("tea serve: sweeping every {}: {retention}", show_every(args.sweep_every));
        }
        tea_serve::serve(listener, server.router(), tea_serve::shutdown_signal())
            .await
            .map_err(|e| format!("the server failed: {e}"))?;
        eprintln!("tea serve: stopped; paused threads stay in the store");
        Ok(crate::EXIT_DONE)
    })
}

/// `every` as `--sweep-every` takes it.
fn show_every(every: std::time::Duration) -> String {
    let s = every.as_secs();
    match s {
        _ if s >= 86_400 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s >= 3_600 && s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s >= 60 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct ServeCli {
        #[command(flatten)]
        args: ServeArgs,
    }

    #[test]
    fn the_sweepers_configuration_reads_from_the_flags() {
        let parse = |extra: &[&str]| ServeCli::try_parse_from(["serve", "a.yaml"].iter().chain(extra)).map(|s| s.args);
        let args = parse(&[]).unwrap();
        assert!(args.retention.retention().is_empty(), "no flag: no sweeper");
        assert_eq!(args.sweep_every, std::time::Duration::from_secs(600));
        let args =
            parse(&["--keep-last", "5", "--older-than", "30d", "--paused-older-than", "90d", "--sweep-every", "1h"])
                .unwrap();
        let retention = args.retention.retention();
        assert_eq!(retention.kept_checkpoints(), Some(5));
        assert_eq!(retention.finished_ttl(), Some(std::time::Duration::from_secs(30 * 86_400)));
        assert_eq!(retention.paused_ttl(), Some(std::time::Duration::from_secs(90 * 86_400)));
        assert_eq!(args.sweep_every, std::time::Duration::from_secs(3_600));
        assert_eq!(show_every(args.sweep_every), "1h");
        let error = parse(&["--older-than", "soon"]).err().unwrap().to_string();
        assert!(error.contains("`soon` is not a duration"), "{error}");
        let error = parse(&["--sweep-every", "0s"]).err().unwrap().to_string();
        assert!(error.contains("above zero"), "{error}");
    }

    #[test]
    fn the_data_directory_is_xdgs_else_the_homes_else_the_temporary_one() {
        let temp = Path::new("/tmp");
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(data_dir(os("/data"), os("/home/ada"), temp), Path::new("/data/tea"));
        assert_eq!(data_dir(None, os("/home/ada"), temp), Path::new("/home/ada/.local/share/tea"));
        // An empty or relative XDG_DATA_HOME is ignored, as the specification says.
        assert_eq!(data_dir(os(""), os("/home/ada"), temp), Path::new("/home/ada/.local/share/tea"));
        assert_eq!(data_dir(os("data"), os("/home/ada"), temp), Path::new("/home/ada/.local/share/tea"));
        assert_eq!(data_dir(None, None, temp), Path::new("/tmp/tea"));
        assert_eq!(data_dir(None, os(""), temp), Path::new("/tmp/tea"));
    }
}
