//! `tea`: runs YAML agents from a terminal — run, stop at a pause, answer, resume — and checks
//! agent files before a run spends anything.
//!
//! stdout is machine-readable JSON (the final state, a pause, or one event per line with
//! `--stream`); messages and progress go to stderr. Exit statuses: 0 done, 1 error, 2 usage
//! error, 3 paused (the thread waits in its store; `tea resume` continues it), 130 stopped by
//! Ctrl-C at a step boundary (`tea recover` or `tea resume` continues it, as stderr says).
//!
//! ```text
//! cargo install --path tea-cli
//! tea validate examples/agents/review.yaml
//! tea inspect examples/agents/review.yaml --format json
//! tea run examples/agents/review.yaml --interactive
//! tea run examples/agents/research.yaml -i '{"topic": "tea"}' -c checkpoints --interrupt-before merge
//! RUST_LOG=tea=debug tea run examples/agents/research.yaml --input '{"topic": "tea"}'
//! ```
//!
//! | cargo feature | default | enables |
//! |---|---|---|
//! | `postgres` | on | `--store postgres://…` and `config.checkpointer: { postgres: URL }` |
//! | `tracing` | on | `RUST_LOG=tea=debug`: the engine's spans and events on stderr |
//! | `python` | off | inline Python in files run with `--trust` (tea-yaml's feature `python`) |
//! | `prolog` | off | inline Prolog (`language: prolog`), sandboxed, on Scryer Prolog (tea-yaml's feature `prolog`) |
//!
//! `sled:` and `dir:` stores and tea-yaml's network actions (`llm.call`, `http.get`,
//! `http.post`, `actions.notify`; feature `net`) are always built in.
//!
//! This file holds the commands and their help (one `Command` enum, one dispatch `match`), the
//! exit statuses, `-v`/`-q`, `tea completions` (clap_complete), and the `RUST_LOG` logging of
//! the engine's spans through tracing-subscriber. The CLI runs agents only through tea-yaml's
//! `Agent`: it has no execution logic of its own, and an interactive session answers each pause
//! with the pause's token, so every answer goes through a checkpoint.

mod diagnostics;
mod inspect;
mod output;
mod run;
mod serve;
mod store;
mod trace;
mod watch;

use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use store::StoreSpec;

/// The run finished: the final state is on stdout.
pub const EXIT_DONE: u8 = 0;
/// Something failed: the message is on stderr.
pub const EXIT_ERROR: u8 = 1;
/// The command line was wrong (clap's status for usage errors).
pub const EXIT_USAGE: u8 = 2;
/// The run paused: the pause (thread, token, interrupts) is on stdout.
pub const EXIT_PAUSED: u8 = 3;
/// Ctrl-C stopped the run at a step boundary (128 + SIGINT, as shells report it); stderr says
/// how to continue the thread.
pub const EXIT_STOPPED: u8 = 130;

#[derive(Parser, Debug)]
#[command(
    name = "tea",
    version,
    about = "Runs agents written as YAML state graphs on tea's engine",
    long_about = "Runs agents written as YAML state graphs on tea's engine.\n\n\
        stdout is machine-readable JSON; messages and progress go to stderr.",
    after_help = "Exit status: 0 done, 1 error, 2 usage error, 3 paused (resume with `tea resume`), \
        130 stopped by Ctrl-C (continue as stderr says).\n\n\
        Examples:\n  \
        tea validate examples/agents/*.yaml\n  \
        tea inspect examples/agents/review.yaml\n  \
        tea run examples/agents/review.yaml\n  \
        tea resume examples/agents/review.yaml --token TOKEN --answer true\n  \
        tea run examples/agents/review.yaml --interactive"
)]
struct Cli {
    /// More on stderr: `-v` a line per node as it ends; `-vv` also the engine's events, `-vvv`
    /// its debug spans (when RUST_LOG is unset).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    /// Nothing on stderr but errors: no progress line, no notes or hints.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs an agent on a new thread until it finishes or pauses.
    #[command(after_help = "Done: the final state on stdout, exit 0. Paused: {\"status\": \"interrupted\", \
        \"thread\", \"token\", \"interrupts\": [{\"id\", \"node\", \"value\"}], \"checkpoint_path\"} on stdout, \
        exit 3.\n\n\
        Examples:\n  \
        tea run examples/agents/research.yaml --input '{\"topic\": \"tea\"}'\n  \
        tea run examples/agents/review.yaml --input @input.json --thread release-42\n  \
        tea run examples/agents/research.yaml --stream\n  \
        tea run examples/agents/review.yaml --interactive --store sled:.tea/store\n  \
        OPENAI_API_KEY=sk-… tea run examples/agents/summarize.yaml --allow-read . --allow-net api.openai.com --input '{\"path\": \"../../README.md\"}'\n  \
        tea run examples/agents/triage.yaml --allow-net api.openai.com --secrets-env TEA_SECRET_ --input @ticket.json")]
    Run(RunArgs),
    /// Continues a paused thread from its token or its checkpoint file.
    #[command(after_help = "Outputs and exit statuses as for `tea run`.\n\n\
        Examples:\n  \
        tea resume examples/agents/review.yaml --token TOKEN --answer true\n  \
        tea resume examples/agents/review.yaml --token TOKEN --answer-to ID='\"yes\"'\n  \
        tea resume examples/agents/review.yaml --token TOKEN --update '{\"draft\": \"Edited\"}'\n  \
        tea resume examples/agents/review.yaml --thread release-42 --answer Ada\n  \
        tea resume examples/agents/review.yaml --checkpoint examples/agents/checkpoints/review/THREAD/review_THREAD_000002.ckpt --answer true\n  \
        tea resume CHECKPOINT.ckpt --workflow examples/agents/review.yaml --input '{\"approved\": true}'   # The Edge Agent's form")]
    Resume(ResumeArgs),
    /// Continues a thread whose run was stopped part-way (Ctrl-C, a crash, a failure).
    #[command(after_help = "A thread stopped at a step boundary (Ctrl-C, or a run that failed) continues \
        at once; one whose process died continues once its lease expires (until then: \
        `ThreadBusy`, naming how long). A paused thread reports its pause, a finished one its \
        final state. Outputs and exit statuses as for `tea run`.\n\n\
        Examples:\n  \
        tea recover examples/agents/research.yaml --thread release-42\n  \
        tea recover examples/agents/research.yaml --thread release-42 --store postgres://localhost/tea")]
    Recover(RecoverArgs),
    /// Checks agent files: every problem as `file:line:column: message` and its source line.
    #[command(after_help = "Prints `ok: FILE (N nodes)` for a file that loads, else each problem as \
        `file:line:column: message` followed by the source line with a caret under the place \
        (in colour on a terminal, unless NO_COLOR is set); exit 1 when any file has a problem.\n\n\
        Examples:\n  \
        tea validate examples/agents/review.yaml\n  \
        tea validate examples/agents/*.yaml\n  \
        tea validate --detailed examples/agents/review.yaml\n  \
        tea validate --strict examples/agents/review.yaml")]
    Validate {
        /// The agent files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Before `ok:`, what `tea inspect` prints of each file that loads.
        #[arg(long)]
        detailed: bool,
        /// A node no path reaches is a problem (by default a warning: the file loads and the node
        /// never runs, as in The Edge Agent).
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Describes an agent: its nodes, edges, state schema, settings and breakpoints.
    #[command(after_help = "`text`: a summary for reading (The Edge Agent's layout: `Workflow:`, \
        `Nodes (N):`, `Edges (N):`, then the state schema, variables, settings and breakpoints); \
        `json`: the file's own structure as JSON (`name`, `nodes`, `edges`, `state_schema`, \
        `settings`, …); `dot`: the graph in Graphviz DOT. The file is loaded first: a file with \
        problems prints them as `tea validate` does and exits 1.\n\n\
        Examples:\n  \
        tea inspect examples/agents/review.yaml\n  \
        tea inspect examples/agents/review.yaml --format json | jq '.nodes[].name'\n  \
        tea inspect examples/agents/research.yaml -f dot | dot -Tsvg > research.svg")]
    Inspect {
        /// The agent file.
        file: PathBuf,
        /// The output format.
        #[arg(short, long, value_enum, default_value_t = InspectFormat::Text)]
        format: InspectFormat,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Prints an agent's graph as a Mermaid flowchart or Graphviz DOT.
    #[command(after_help = "Interrupt nodes are hexagons, filled; breakpoints (`interrupt_before`, \
        `interrupt_after`) have a thick red border (dashed: after); each is named in a comment \
        (Mermaid) or an `xlabel` (DOT).\n\n\
        Examples:\n  \
        tea draw examples/agents/review.yaml\n  \
        tea draw examples/agents/research.yaml --format dot | dot -Tsvg > research.svg")]
    Draw {
        /// The agent file.
        file: PathBuf,
        /// The output format.
        #[arg(long, value_enum, default_value_t = Format::Mermaid)]
        format: Format,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Lists the threads a store holds for an agent: status, next nodes, pause message, step.
    #[command(after_help = "A JSON array of {\"thread\", \"status\" (paused, done or stopped: \
        running now, or stopped part-way — `tea recover` continues it), \"next\", \"message\" (the \
        pause's), \"step\" (node runs so far), \"checkpoint\"}. Checkpoints carry no wall-clock time: \
        `tea run --trace FILE` records when each node ran.\n\n\
        Examples:\n  \
        tea threads examples/agents/review.yaml --store sled:.tea/store\n  \
        tea threads examples/agents/review.yaml   # the file's config: checkpoint_dir")]
    Threads {
        /// The agent file.
        file: PathBuf,
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Deletes what the store no longer needs to keep of an agent's threads: old checkpoints,
    /// finished threads past an age, and (only when asked) paused threads past it.
    #[command(after_help = "Finished threads whose last checkpoint is older than --older-than are \
        deleted; paused threads are kept unless --include-paused (or --paused-older-than) is given, \
        and each paused thread kept past that age is listed with why. Running threads and threads \
        stopped part-way (`tea recover` continues them) are never deleted. A thread's own retention \
        (set through the API) comes over these flags. Prints a JSON report: {\"threads\", \
        \"expired\": [{\"thread\", \"status\", \"idle_seconds\"}], \"pruned\" (checkpoints), \
        \"kept_paused\": [{\"thread\", \"idle_seconds\", \"reason\"}], \"unreadable\": [{\"thread\", \
        \"error\"}]}. Ages are a number and a unit: 90s, 15m, 12h, 30d, 2w.\n\n\
        Examples:\n  \
        tea prune examples/agents/review.yaml --keep-last 10\n  \
        tea prune examples/agents/review.yaml --older-than 30d --store postgres://db/agents\n  \
        tea prune examples/agents/review.yaml --older-than 30d --include-paused --store sled:.tea/store")]
    Prune(PruneArgs),
    /// Prints a thread's latest checkpoint (or every one, newest first) as JSON.
    #[command(after_help = "Checkpoints carry no wall-clock time: each shows its number (`checkpoint`) \
        and the node runs before it (`step`); `tea run --trace FILE` records when each node ran.\n\n\
        Examples:\n  \
        tea state examples/agents/review.yaml THREAD\n  \
        tea state examples/agents/review.yaml THREAD --history --store sled:.tea/store\n  \
        tea state examples/agents/review.yaml THREAD --at 3")]
    State {
        /// The agent file.
        file: PathBuf,
        /// The thread id.
        thread: String,
        /// Every checkpoint of the thread, newest first.
        #[arg(long)]
        history: bool,
        /// The checkpoint numbered CHECKPOINT instead of the latest (as `--history` numbers them).
        #[arg(long, value_name = "CHECKPOINT", conflicts_with = "history")]
        at: Option<u64>,
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Writes a thread's state as if a node had produced an update (time travel); `tea recover`
    /// then continues from where that node's edges lead.
    #[command(after_help = "The update is a JSON object of state keys (or @FILE), applied through the \
        declared types and reducers; the run goes on where AS_NODE's edges and guards lead on the \
        new state. A paused thread's pause is replaced (its token no longer resumes it). Refused, \
        with nothing written, for a node the agent lacks, a thread a live run owns, or a thread \
        standing inside a parallel fan-out. Prints the new checkpoint as `tea state` does.\n\n\
        Examples:\n  \
        tea update examples/agents/review.yaml THREAD --as-node review '{\"approved\": true}'\n  \
        tea recover examples/agents/review.yaml --thread THREAD")]
    Update {
        /// The agent file.
        file: PathBuf,
        /// The thread id.
        thread: String,
        /// The update: a JSON object of state keys, or @FILE.
        update: String,
        /// The node the update is written as.
        #[arg(long = "as-node", value_name = "NODE")]
        as_node: String,
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Starts a new thread from a past checkpoint of a thread (time travel); the original stays
    /// untouched.
    #[command(after_help = "CHECKPOINT is a checkpoint number as `tea state --history` shows it. The \
        new thread (a random id unless --to names one) starts as a copy of that checkpoint: \
        `tea recover` continues it from there, running only what came after (a paused checkpoint \
        prints the fork's own pause and token). Prints the new thread's first checkpoint.\n\n\
        Examples:\n  \
        tea state examples/agents/review.yaml THREAD --history\n  \
        tea fork examples/agents/review.yaml THREAD 3 --to THREAD-retry\n  \
        tea recover examples/agents/review.yaml --thread THREAD-retry")]
    Fork {
        /// The agent file.
        file: PathBuf,
        /// The thread to fork.
        thread: String,
        /// The checkpoint of the thread to start from.
        checkpoint: u64,
        /// The new thread's id (default: a random one).
        #[arg(long = "to", value_name = "THREAD")]
        to: Option<String>,
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        trust: TrustArg,
    },
    /// Prints a `--trace` file: a table of what ran when, and a chart of the timeline.
    #[command(after_help = "Examples:\n  \
        tea run examples/agents/research.yaml --trace run.jsonl\n  \
        tea trace run.jsonl")]
    Trace {
        /// The file `tea run --trace` (or `resume`, `recover`) wrote.
        file: PathBuf,
    },
    /// Prints a shell completion script for `tea`.
    #[command(after_help = "Examples:\n  \
        tea completions bash > ~/.local/share/bash-completion/completions/tea\n  \
        tea completions zsh > ~/.zfunc/_tea\n  \
        tea completions fish > ~/.config/fish/completions/tea.fish")]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Serves agents over HTTP: the Agent Protocol's routes and an inbox page for pauses.
    #[command(after_help = "Examples:\n  \
        tea serve examples/agents/review.yaml --insecure-local\n  \
        tea serve a.yaml b.yaml --store postgres://db/agents --bind 0.0.0.0:8080 --token-file tokens.txt")]
    Serve(serve::ServeArgs),
}

/// `--store`, shared by the commands that keep threads.
#[derive(Args, Debug, Clone)]
pub struct StoreArg {
    /// Where threads are kept: `memory`, `sled:PATH`, `dir:PATH` or `postgres://…[?schema=NAME]`
    /// [default: the file's `config`, else `sled:.tea/store` when the agent can pause].
    #[arg(long, value_name = "STORE", value_parser = store::parse)]
    pub store: Option<StoreSpec>,
    /// Keeps threads as files in DIR: `--store dir:DIR` (The Edge Agent's flag).
    #[arg(short = 'c', long, value_name = "DIR", conflicts_with = "store")]
    pub checkpoint_dir: Option<PathBuf>,
    #[command(flatten)]
    pub encryption: EncryptionArg,
    #[command(flatten)]
    pub group_commit: GroupCommitArg,
}

/// `--group-commit`, shared by the commands that run agents on a store (`tea serve` too).
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct GroupCommitArg {
    /// Writes a parallel step's finished branches together when their work, in all, took less
    /// than AGE (`1ms`, `50ms`): the step's end holds them instead of a write (on `dir:` and
    /// `sled:`, a flush) per branch. A crash then runs again at most AGE of finished branch
    /// work per parallel step [default: none, every finished branch written at once].
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub group_commit: Option<std::time::Duration>,
}

impl GroupCommitArg {
    /// `agent` with the window the flag gives, if any.
    pub fn apply(&self, agent: tea_yaml::Agent) -> tea_yaml::Agent {
        match self.group_commit {
            Some(window) => agent.with_group_commit(window),
            None => agent,
        }
    }
}

/// `--encryption-keys`, shared by the commands that open a store (`tea serve` too).
#[derive(Args, Debug, Clone, Default)]
pub struct EncryptionArg {
    /// Seals every checkpoint with XChaCha20-Poly1305: FILE holds one key a line, `ID:KEY` (a
    /// decimal id, 32 bytes in hex or base64), the current key first, older keys after it for
    /// reading. Else the variable TEA_ENCRYPTION_KEYS, if set, holds the same text.
    #[arg(long, value_name = "FILE")]
    pub encryption_keys: Option<PathBuf>,
}

/// The variable that holds a key ring's text when `--encryption-keys` is not given.
pub const KEYS_ENV: &str = "TEA_ENCRYPTION_KEYS";

impl EncryptionArg {
    /// The key ring the flag or the variable gives, if any.
    pub fn keys(&self) -> Result<Option<tea_runtime::KeyRing>, String> {
        let keys = match &self.encryption_keys {
            Some(file) => tea_runtime::KeyRing::from_file(file),
            None if std::env::var_os(KEYS_ENV).is_some() => tea_runtime::KeyRing::from_env(KEYS_ENV),
            None => return Ok(None),
        };
        keys.map(Some).map_err(|e| format!("cannot read the encryption keys: {e}"))
    }
}

impl StoreArg {
    /// The store the flags name, if any: `--store`, or `--checkpoint-dir DIR` as `dir:DIR`.
    pub fn spec(&self) -> Option<StoreSpec> {
        match (&self.store, &self.checkpoint_dir) {
            (Some(spec), _) => Some(spec.clone()),
            (None, Some(dir)) => Some(StoreSpec::Dir(dir.clone())),
            (None, None) => None,
        }
    }
}

/// `--trust` and the grants (`--allow-read`, `--allow-net`, …), shared by the commands that
/// load an agent.
#[derive(Args, Debug, Clone, Default)]
pub struct TrustArg {
    /// Runs what cannot be sandboxed in this file: inline Python, and `llm.call`'s shell
    /// providers (command lines such as `claude`). Without it such a file does not load; Lua
    /// needs no trust (it runs sandboxed). It lifts no grant.
    #[arg(long)]
    pub trust: bool,
    #[command(flatten)]
    pub grants: GrantArgs,
}

/// What an agent file may reach beyond its own folder (Deno's permission flags): nothing
/// unless granted here.
#[derive(Args, Debug, Clone, Default)]
pub struct GrantArgs {
    /// Lets the file read under DIR, besides its own folder (repeatable). `/proc`, `/sys`,
    /// `/dev`, FIFOs and devices stay refused.
    #[arg(long, value_name = "DIR")]
    pub allow_read: Vec<PathBuf>,
    /// Lets the file write (create, replace, delete) under DIR, besides its own folder
    /// (repeatable).
    #[arg(long, value_name = "DIR")]
    pub allow_write: Vec<PathBuf>,
    /// Lets the file's network actions reach HOST (`example.com`, `example.com:8443`,
    /// `127.0.0.1:11434`, or `*` for any); comma-separated or repeated. Without it no request
    /// is sent.
    #[arg(long, value_name = "HOST", value_delimiter = ',')]
    pub allow_net: Vec<String>,
    /// Lets the file's network actions reach the hosts its own `settings` name (a
    /// `settings.llm.base_url`, a webhook); it binds no secret to them.
    #[arg(long)]
    pub allow_net_from_file: bool,
    /// Lets the file read environment variable NAME where it expands `${NAME}`;
    /// comma-separated or repeated.
    #[arg(long, value_name = "NAME", value_delimiter = ',')]
    pub allow_env: Vec<String>,
    /// Sends secret NAME (or the API key in environment variable NAME) to HOST too
    /// (repeatable). A secret goes only to the hosts it is bound to — `llm_api_key` and the
    /// provider keys to their provider's own endpoint by default — never to one the file names.
    #[arg(long, value_name = "NAME=HOST")]
    pub secret_host: Vec<String>,
    /// Grants everything a flag above can: reading and writing everywhere (but `/proc`, `/sys`,
    /// `/dev`), any host, every variable. Secrets stay bound to their hosts.
    #[arg(long)]
    pub allow_all: bool,
}

/// `--interrupt-before` and `--interrupt-after`, shared by the commands that run nodes.
#[derive(Args, Debug, Clone, Default)]
pub struct BreakArgs {
    /// Pauses before these nodes, beside the file's `config.interrupt_before`: comma-separated
    /// names, or the flag repeated. A setting of this run: the thread resumes with or without it.
    #[arg(long, value_name = "NODES", value_delimiter = ',')]
    pub interrupt_before: Vec<String>,
    /// Pauses after these nodes have run, beside the file's `config.interrupt_after`.
    #[arg(long, value_name = "NODES", value_delimiter = ',')]
    pub interrupt_after: Vec<String>,
}

/// `--secrets` and `--secrets-env`, shared by the commands that run nodes.
#[derive(Args, Debug, Clone, Default)]
pub struct SecretArgs {
    /// Secrets templates read as `{{ secrets.NAME }}`: a JSON object of names to strings (or
    /// to `{"value": STRING, "hosts": [HOST, …]}`, the hosts the secret may be sent to, as
    /// `--secret-host`), or `@FILE` to read one from a file. They never reach the state,
    /// checkpoints or messages.
    #[arg(long, value_name = "JSON|@FILE")]
    pub secrets: Option<String>,
    /// Environment variables named PREFIXNAME become `{{ secrets.name }}` (the rest of the
    /// name, lower-cased): `--secrets-env TEA_SECRET_` makes TEA_SECRET_API_KEY
    /// `secrets.api_key`. Repeatable; `--secrets` wins on a name both give.
    #[arg(long, value_name = "PREFIX")]
    pub secrets_env: Vec<String>,
    /// The run's context: a JSON object (or `@FILE`) that is not state — a user id, a model
    /// name — which templates read as `{{ context.x }}` and `run:` blocks as `context.x`. Never
    /// checkpointed: give it again to `tea resume`/`tea recover`.
    #[arg(long, value_name = "JSON|@FILE")]
    pub context: Option<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The agent file.
    pub file: PathBuf,
    /// The input state: a JSON object, or `@FILE` to read it from a file.
    #[arg(short, long, value_name = "JSON|@FILE")]
    pub input: Option<String>,
    /// The new thread's id [default: a random one].
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub breaks: BreakArgs,
    #[command(flatten)]
    pub trust: TrustArg,
    /// One JSON event per line on stdout as the run goes (`step`, `interrupted`, `done`).
    #[arg(long)]
    pub stream: bool,
    /// At each pause, asks on stderr and reads the answer from stdin, then resumes.
    #[arg(short = 'I', long)]
    pub interactive: bool,
    /// Goes on past each breakpoint without stopping (The Edge Agent's flag); a pause that
    /// waits for an answer still stops the run (exit 3).
    #[arg(long, conflicts_with = "interactive")]
    pub auto_continue: bool,
    /// Writes the run's timeline to FILE as JSON lines (nodes with start, end and duration,
    /// checkpoint writes, pauses); `tea trace FILE` shows it.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("from").required(true).args(["token", "checkpoint", "thread", "workflow"]))]
pub struct ResumeArgs {
    /// The agent file; with --workflow, the checkpoint file to resume (The Edge Agent's form).
    #[arg(value_name = "FILE|CHECKPOINT")]
    pub file: PathBuf,
    /// The agent file, when FILE is a checkpoint file (`tea resume CHECKPOINT --workflow FILE`):
    /// the same as `tea resume FILE --checkpoint CHECKPOINT`.
    #[arg(short, long, value_name = "FILE", conflicts_with_all = ["token", "thread", "checkpoint", "answer_to", "stream"])]
    pub workflow: Option<PathBuf>,
    /// The token a pause printed.
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// The thread whose latest pause to resume (in the store; no token needed).
    #[arg(long, value_name = "ID")]
    pub thread: Option<String>,
    /// A pause's checkpoint file (`checkpoint_path`), or a file `checkpoint.save` wrote.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["answer_to", "stream"])]
    pub checkpoint: Option<PathBuf>,
    /// The answer to the one pending question: JSON (`true`, `3`, `'{"a": 1}'`), else the text
    /// itself as a string (`--answer Ada`); `@FILE` reads JSON from a file.
    #[arg(long, value_name = "ANSWER")]
    pub answer: Option<String>,
    /// The answer to the pause with id ID (JSON, else text); repeat for several pauses.
    #[arg(long, value_name = "ID=ANSWER", conflicts_with = "answer")]
    pub answer_to: Vec<String>,
    /// A JSON object of state keys to write (through the reducers) before the run continues, or
    /// `@FILE`; `--input`/`-i` is The Edge Agent's name for it.
    #[arg(short = 'i', long, visible_alias = "input", value_name = "JSON|@FILE")]
    pub update: Option<String>,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub breaks: BreakArgs,
    #[command(flatten)]
    pub trust: TrustArg,
    /// One JSON event per line on stdout as the run goes.
    #[arg(long)]
    pub stream: bool,
    /// At each further pause, asks on stderr and reads the answer from stdin.
    #[arg(short = 'I', long)]
    pub interactive: bool,
    /// Goes on past each further breakpoint without stopping; see `tea run --auto-continue`.
    #[arg(long, conflicts_with = "interactive")]
    pub auto_continue: bool,
    /// Writes the run's timeline to FILE as JSON lines; see `tea run --trace`.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

/// `tea prune`'s arguments (and, as [`RetentionArgs`], `tea serve`'s sweeper).
#[derive(Args, Debug)]
pub struct PruneArgs {
    /// The agent file.
    pub file: PathBuf,
    #[command(flatten)]
    pub retention: RetentionArgs,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub trust: TrustArg,
}

/// What a sweep keeps: `tea prune`'s flags, and `tea serve`'s for its sweeper.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionArgs {
    /// Keeps the newest K checkpoints of each thread (at least 1: the head stays).
    #[arg(long, value_name = "K")]
    pub keep_last: Option<usize>,
    /// Deletes finished threads whose last checkpoint is older than AGE (`30d`, `12h`, `15m`).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Option<std::time::Duration>,
    /// Deletes paused threads older than --older-than too (their tokens stop working).
    #[arg(long, requires = "older_than", conflicts_with = "paused_older_than")]
    pub include_paused: bool,
    /// Deletes paused threads whose pause is older than AGE (their tokens stop working).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub paused_older_than: Option<std::time::Duration>,
}

/// An age flag: tea's duration syntax, its error as clap's.
fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    tea_runtime::parse_duration(text).map_err(|e| e.to_string())
}

impl RetentionArgs {
    /// The retention the flags give (empty when none is given).
    pub fn retention(&self) -> tea_runtime::Retention {
        let mut retention = tea_runtime::Retention::new();
        if let Some(k) = self.keep_last {
            retention = retention.keep_last(k);
        }
        if let Some(age) = self.older_than {
            retention = retention.expire_finished_after(age);
            if self.include_paused {
                retention = retention.expire_paused_after(age);
            }
        }
        if let Some(age) = self.paused_older_than {
            retention = retention.expire_paused_after(age);
        }
        retention
    }
}

#[derive(Args, Debug)]
pub struct RecoverArgs {
    /// The agent file.
    pub file: PathBuf,
    /// The thread to continue.
    #[arg(long, value_name = "ID")]
    pub thread: String,
    #[command(flatten)]
    pub store: StoreArg,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub breaks: BreakArgs,
    #[command(flatten)]
    pub trust: TrustArg,
    /// At each pause it reaches, asks on stderr and reads the answer from stdin.
    #[arg(short = 'I', long)]
    pub interactive: bool,
    /// Goes on past each breakpoint it reaches without stopping; see `tea run --auto-continue`.
    #[arg(long, conflicts_with = "interactive")]
    pub auto_continue: bool,
    /// Writes the run's timeline to FILE as JSON lines; see `tea run --trace`.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
}

/// `draw --format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// A Mermaid flowchart.
    Mermaid,
    /// Graphviz DOT.
    Dot,
}

/// `inspect --format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum InspectFormat {
    /// A summary for reading.
    Text,
    /// The file's structure as JSON.
    Json,
    /// Graphviz DOT.
    Dot,
}

/// Logs to stderr through `tracing-subscriber`, filtered by `RUST_LOG` (`EnvFilter` syntax;
/// nothing when it is unset): `RUST_LOG=tea=debug` shows each run's nodes, fan-outs and
/// checkpoints, `tea=trace` adds the store calls. Without the feature `tracing`, nothing.
/// With `-vv` (`-vvv`) and RUST_LOG unset, the filter is `tea=info` (`tea=debug`).
#[cfg(feature = "tracing")]
fn install_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let directives = match std::env::var("RUST_LOG") {
        Ok(directives) => directives,
        Err(_) if verbose >= 3 => "tea=debug".to_owned(),
        Err(_) if verbose == 2 => "tea=info".to_owned(),
        Err(_) => return,
    };
    let filter = match EnvFilter::try_new(&directives) {
        Ok(filter) => filter,
        Err(error) => {
            eprintln!("tea: RUST_LOG={directives:?} is not a filter ({error}); logging nothing");
            return;
        }
    };
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .try_init();
    if let Err(error) = installed {
        eprintln!("tea: no logging: {error}");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "tracing")]
    install_logging(cli.verbose);
    watch::set_verbosity(if cli.quiet { watch::Verbosity::Quiet } else { watch::Verbosity::from_count(cli.verbose) });
    let result = match cli.command {
        Command::Run(args) => run::run(&args),
        Command::Resume(args) => run::resume(&args),
        Command::Recover(args) => run::recover(&args),
        Command::Validate { files, detailed, strict, trust } => Ok(run::validate(&files, detailed, strict, &trust)),
        Command::Inspect { file, format, trust } => inspect::inspect(&file, format, || run::checked(&file, &trust)),
        Command::Draw { file, format, trust } => run::load(&file, &trust).map(|agent| {
            let text = match format {
                Format::Mermaid => output::mermaid_marked(&agent),
                Format::Dot => output::dot_marked(&agent),
            };
            output::line(text.trim_end());
            EXIT_DONE
        }),
        Command::Threads { file, store, trust } => run::threads(&file, &store, &trust),
        Command::Prune(args) => run::prune(&args),
        Command::State { file, thread, history, at, store, trust } => {
            run::state(&file, &thread, history, at, &store, &trust)
        }
        Command::Update { file, thread, update, as_node, store, trust } => {
            run::update(&file, &thread, &update, &as_node, &store, &trust)
        }
        Command::Fork { file, thread, checkpoint, to, store, trust } => {
            run::fork(&file, &thread, checkpoint, to.as_deref(), &store, &trust)
        }
        Command::Trace { file } => trace::show(&file),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "tea", &mut std::io::stdout());
            Ok(EXIT_DONE)
        }
        Command::Serve(args) => serve::serve(&args),
    };
    match result {
        Ok(status) => ExitCode::from(status),
        Err(message) => {
            eprintln!("tea: {message}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn prune_reads_its_ages_and_refuses_bad_ones_as_usage_errors() {
        let cli = Cli::try_parse_from(["tea", "prune", "a.yaml", "--keep-last", "3", "--older-than", "30d"]).unwrap();
        let Command::Prune(args) = cli.command else { panic!("not prune") };
        let retention = args.retention.retention();
        assert_eq!(retention.kept_checkpoints(), Some(3));
        assert_eq!(retention.finished_ttl(), Some(std::time::Duration::from_secs(30 * 86_400)));
        assert_eq!(retention.paused_ttl(), None);
        let cli = Cli::try_parse_from(["tea", "prune", "a.yaml", "--older-than", "12h", "--include-paused"]).unwrap();
        let Command::Prune(args) = cli.command else { panic!("not prune") };
        assert_eq!(args.retention.retention().paused_ttl(), Some(std::time::Duration::from_secs(43_200)));
        let error = Cli::try_parse_from(["tea", "prune", "a.yaml", "--older-than", "30"]).unwrap_err();
        assert_eq!(error.exit_code(), i32::from(EXIT_USAGE));
        assert!(error.to_string().contains("`30` is not a duration: the number has no unit"), "{error}");
        let error = Cli::try_parse_from(["tea", "prune", "a.yaml", "--include-paused"]).unwrap_err();
        assert!(error.to_string().contains("--older-than"), "{error}");
    }

    #[test]
    fn the_usage_status_is_clap_s() {
        let error = Cli::try_parse_from(["tea", "resume", "a.yaml"]).unwrap_err();
        assert_eq!(error.exit_code(), i32::from(EXIT_USAGE));
    }
}
