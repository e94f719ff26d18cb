//! The LLM providers of `llm.call`, `llm.chat` and `llm.embed` (feature `net`), as The Edge
//! Agent names them: `provider: openai | azure | ollama | litellm | shell | auto`, and
//! `anthropic` (Anthropic's Messages API, which The Edge Agent reaches through LiteLLM's
//! `anthropic/…` models: `provider: litellm` with such a model and no endpoint goes there too).
//!
//! Every provider but `shell` and `anthropic` is an OpenAI-compatible HTTP endpoint; this
//! module says which one (its API, URL, key, the header the key goes in, the model), and
//! `net/mod.rs` sends the chat request through tea-models' `OpenAi` or `Anthropic` provider
//! (the ones Rust agents use), with the agent's grants checked by its request hook.
//! `shell` runs a command line (The Edge Agent's `claude`, `codex`, `gemini`, `qwen`,
//! `opencode` and `cursor` ones, or those of `settings.shell_providers`) with the prompt on its
//! standard input or in its arguments, under a timeout; its standard output is the answer.
//!
//! The Edge Agent's LLM providers: `Provider` (`openai`, `azure`, `ollama`, `litellm`, `shell`,
//! `auto` by its environment variables) and `endpoint` (URL, key, `api-key` header for Azure, model
//! or the provider's default); `shell_call`/`ShellCall::run`, a shell provider's command line (its
//! built-ins `claude`, `codex`, `gemini`, `qwen`, `opencode`, `cursor`, or
//! `settings.shell_providers`) run as a tokio child process with the prompt on stdin, in its
//! arguments (`{prompt}`) or in a file (`{input_file}`), killed at its timeout or when the call is
//! dropped; it runs only when the engine trusts the file (`Shells::trusted`).

use serde_json::{json, Map, Value};
use std::time::Duration;

/// The largest answer a shell provider may print: 16 MiB.
const MAX_OUTPUT: u64 = 16 << 20;
/// How much of a failed shell provider's standard error an error shows.
const MAX_STDERR: u64 = 64 << 10;
/// A prompt longer than this goes on standard input even when the command line has a
/// `{prompt}` argument (The Edge Agent's limit for arguments).
const MAX_ARG_PROMPT: usize = 100_000;
/// A shell provider's timeout when neither the call nor its configuration sets one (The Edge
/// Agent's).
const SHELL_TIMEOUT: Duration = Duration::from_secs(300);
/// The model a chat call sends when it names none (The Edge Agent's Rust engine's default).
pub(crate) const DEFAULT_CHAT_MODEL: &str = "gpt-3.5-turbo";
/// The model `llm.embed` uses when it names none (The Edge Agent's).
pub(crate) const DEFAULT_EMBED_MODEL: &str = "nomic-embed-text";
/// Azure OpenAI's API version when `OPENAI_API_VERSION` is not set (The Edge Agent's).
const AZURE_API_VERSION: &str = "2024-02-15-preview";

/// Where an LLM request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    /// OpenAI or any OpenAI-compatible server (`base_url`, else `OPENAI_BASE_URL`).
    OpenAi,
    /// Azure OpenAI: a deployment's endpoint, the key in an `api-key` header.
    Azure,
    /// Ollama's OpenAI-compatible endpoint (`OLLAMA_API_BASE`, else localhost:11434).
    Ollama,
    /// A LiteLLM proxy, which speaks OpenAI's API (`base_url`, else `OPENAI_BASE_URL`).
    LiteLlm,
    /// Anthropic's Messages API (`base_url`, else `ANTHROPIC_BASE_URL`, else
    /// `https://api.anthropic.com`).
    Anthropic,
    /// A command line (`shell_provider`).
    Shell,
}

/// The provider names `provider:` takes.
pub(crate) const PROVIDER_NAMES: &str = "`openai`, `azure`, `ollama`, `litellm`, `anthropic`, `shell` or `auto`";

impl Provider {
    /// The provider `name` names; `auto` is The Edge Agent's detection: Ollama when
    /// `OLLAMA_API_BASE` is set, Azure when `AZURE_OPENAI_API_KEY` and `AZURE_OPENAI_ENDPOINT`
    /// are, else OpenAI.
    pub(crate) fn named(name: &str) -> Result<Provider, String> {
        Ok(match name.to_ascii_lowercase().as_str() {
            "openai" => Provider::OpenAi,
            "azure" | "azure_openai" | "azureopenai" => Provider::Azure,
            "ollama" => Provider::Ollama,
            "litellm" => Provider::LiteLlm,
            "anthropic" => Provider::Anthropic,
            "shell" => Provider::Shell,
            "auto" | "" => {
                let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty());
                if set("OLLAMA_API_BASE") {
                    Provider::Ollama
                } else if set("AZURE_OPENAI_API_KEY") && set("AZURE_OPENAI_ENDPOINT") {
                    Provider::Azure
                } else {
                    Provider::OpenAi
                }
            }
            other => return Err(format!("unknown provider `{other}`; it is one of {PROVIDER_NAMES}")),
        })
    }

    /// `provider:` of `args` (a string), or `default`.
    pub(crate) fn of(what: &str, args: &Map<String, Value>, default: Provider) -> Result<Provider, String> {
        match args.get("provider") {
            None | Some(Value::Null) => Ok(default),
            Some(Value::String(name)) => Provider::named(name).map_err(|e| format!("{what}: {e}")),
            Some(other) => Err(format!("{what}: `provider` must be a string, not {}", crate::state::describe(other))),
        }
    }
}

/// The API an endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// OpenAI's chat completions (and embeddings).
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// An HTTP endpoint of a provider, resolved.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// The API it speaks.
    pub(crate) api: Api,
    /// The full URL, the operation's path included.
    pub(crate) url: String,
    /// The API key, if any.
    pub(crate) key: Option<String>,
    /// The key goes in an `api-key` header (Azure), not `Authorization: Bearer`.
    pub(crate) api_key_header: bool,
    /// The model the request names.
    pub(crate) model: String,
}

fn text(what: &str, args: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!("{what}: `{key}` must be a string, not {}", crate::state::describe(other))),
    }
}

fn env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

/// The path of a chat call on an OpenAI-compatible endpoint.
pub(crate) const CHAT_PATH: &str = "chat/completions";

/// The Messages API's URL from a base: Anthropic's SDKs' form (`https://api.anthropic.com`),
/// with `/v1`, or LiteLLM's whole URL (`…/v1/messages`).
fn messages_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/messages") {
        base.to_owned()
    } else if base.ends_with("/v1") {
        format!("{base}/messages")
    } else {
        format!("{base}/v1/messages")
    }
}

/// The endpoint of `provider` for the operation at `path` (`chat/completions`, `embeddings`):
/// `base_url` (or The Edge Agent's `api_base`) wins over the provider's environment variable
/// and default; `fallback_key` (the secret `llm_api_key`) is the key when `args` name none
/// (OpenAI, LiteLLM and Anthropic; then `OPENAI_API_KEY`, or `ANTHROPIC_API_KEY`). Anthropic's
/// endpoint is its Messages API whatever `path` is: it has no embeddings.
pub(crate) fn endpoint(
    what: &str,
    provider: Provider,
    args: &Map<String, Value>,
    fallback_key: Option<String>,
    path: &str,
    default_model: &str,
) -> Result<Endpoint, String> {
    let base = match (text(what, args, "base_url")?, text(what, args, "api_base")?) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!("{what}: `base_url` and `api_base` name the same thing; give one"));
        }
        (a, b) => a.or(b),
    };
    let key = text(what, args, "api_key")?;
    let model = text(what, args, "model")?;
    // The Edge Agent's LiteLLM calls `anthropic/…` models on Anthropic's API when no proxy is named.
    let direct = |m: &str| m.strip_prefix("anthropic/").filter(|m| !m.is_empty()).map(str::to_owned);
    let to_anthropic = provider == Provider::LiteLlm && base.is_none() && env("OPENAI_BASE_URL").is_none();
    let anthropic = to_anthropic && model.as_deref().and_then(direct).is_some();
    Ok(match (anthropic, provider) {
        (true, _) | (_, Provider::Anthropic) => {
            if path != CHAT_PATH {
                return Err(format!("{what}: Anthropic's API gives no embeddings; use an OpenAI-compatible provider"));
            }
            let model = match model {
                Some(m) => direct(&m).unwrap_or(m),
                None => {
                    return Err(format!(
                    "{what}: `provider: anthropic` needs `model`, the Claude model to call (`claude-sonnet-4-5`, …)"
                ))
                }
            };
            let base =
                base.or_else(|| env("ANTHROPIC_BASE_URL")).unwrap_or_else(|| "https://api.anthropic.com".to_owned());
            Endpoint {
                api: Api::Anthropic,
                url: messages_url(&base),
                key: key.or(fallback_key).or_else(|| env("ANTHROPIC_API_KEY")).filter(|k| !k.is_empty()),
                api_key_header: false,
                model,
            }
        }
        (false, Provider::OpenAi | Provider::LiteLlm) => {
            let base =
                base.or_else(|| env("OPENAI_BASE_URL")).unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
            Endpoint {
                api: Api::OpenAi,
                url: format!("{}/{path}", base.trim_end_matches('/')),
                key: key.or(fallback_key).or_else(|| env("OPENAI_API_KEY")).filter(|k| !k.is_empty()),
                api_key_header: false,
                model: model.unwrap_or_else(|| default_model.to_owned()),
            }
        }
        (false, Provider::Ollama) => {
            let base =
                base.or_else(|| env("OLLAMA_API_BASE")).unwrap_or_else(|| "http://localhost:11434/v1".to_owned());
            Endpoint {
                api: Api::OpenAi,
                url: format!("{}/{path}", base.trim_end_matches('/')),
                key,
                api_key_header: false,
                model: model.unwrap_or_else(|| default_model.to_owned()),
            }
        }
        (false, Provider::Azure) => {
            let base = base.or_else(|| env("AZURE_OPENAI_ENDPOINT")).ok_or_else(|| {
                format!("{what}: `provider: azure` needs the resource's endpoint: `base_url`, or AZURE_OPENAI_ENDPOINT")
            })?;
            let deployment = text(what, args, "deployment")?
                .or_else(|| env("AZURE_OPENAI_DEPLOYMENT"))
                .or(model)
                .unwrap_or_else(|| "gpt-4".to_owned());
            let version = env("OPENAI_API_VERSION").unwrap_or_else(|| AZURE_API_VERSION.to_owned());
            Endpoint {
                api: Api::OpenAi,
                url: format!(
                    "{}/openai/deployments/{deployment}/{path}?api-version={version}",
                    base.trim_end_matches('/')
                ),
                key: key.or_else(|| env("AZURE_OPENAI_API_KEY")),
                api_key_header: true,
                model: deployment,
            }
        }
        (false, Provider::Shell) => {
            return Err(format!("{what}: `provider: shell` runs a command line, not an endpoint"))
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Shell providers.

/// The Edge Agent's built-in shell providers: name, command, arguments, standard input.
const BUILT_IN_SHELLS: &[(&str, &str, &[&str], bool)] = &[
    ("claude", "claude", &["-p", "{prompt}", "--dangerously-skip-permissions", "--no-session-persistence"], false),
    ("codex", "codex", &["--yolo", "exec", "-c", "model=gpt-5.5", "-c", "model_reasoning_effort=xhigh", "-"], true),
    ("gemini", "gemini", &["prompt"], true),
    ("qwen", "qwen", &[], true),
    ("opencode", "opencode", &["-p", "{prompt}", "-q"], false),
    ("cursor", "agent", &["-p", "{prompt}", "--output-format", "text"], false),
];

/// The timeout of The Edge Agent's built-in shell providers: 1800 minutes.
const BUILT_IN_SHELL_TIMEOUT: Duration = Duration::from_secs(108_000);

/// The keys a `shell_providers` entry takes.
pub(crate) const SHELL_KEYS: &[&str] = &["command", "args", "stdin_mode", "timeout", "env", "verbose"];

/// The names of the built-in shell providers.
pub(crate) fn built_in_shells() -> impl Iterator<Item = &'static str> {
    BUILT_IN_SHELLS.iter().map(|s| s.0)
}

/// The shell providers an agent may run: its `settings.shell_providers` and
/// `settings.llm.shell_providers` (as JSON, checked at load), and whether the engine trusts
/// the file's code (a shell provider runs only then).
#[derive(Clone, Debug, Default)]
pub(crate) struct Shells {
    pub(crate) configured: Map<String, Value>,
    pub(crate) trusted: bool,
}

/// How a shell provider gets the prompt.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    /// In its arguments (`{prompt}`).
    Argument,
    /// On its standard input.
    Pipe,
    /// In a temporary file whose path replaces `{input_file}`.
    File,
}

/// A shell provider's command, ready to run.
#[derive(Debug)]
pub(crate) struct ShellCall {
    name: String,
    program: String,
    args: Vec<String>,
    input: Input,
    prompt: String,
    env: Vec<(String, String)>,
    timeout: Duration,
}

/// `${VAR}` replaced by the environment's value (empty when unset), as The Edge Agent does.
fn expand(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        match rest[start + 2..].find('}') {
            Some(end) => {
                let name = &rest[start + 2..start + 2 + end];
                out.push_str(&std::env::var(name).unwrap_or_default());
                rest = &rest[start + 3 + end..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The chat messages as one text (The Edge Agent's form for command lines): a system message
/// as `System: …`, an assistant's as `Assistant: …`, a user's as it is, blank lines between.
pub(crate) fn prompt_text(messages: &[Value]) -> String {
    let parts: Vec<String> = messages
        .iter()
        .map(|m| {
            let content = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            match m.get("role").and_then(Value::as_str) {
                Some("system") => format!("System: {content}"),
                Some("assistant") => format!("Assistant: {content}"),
                _ => content,
            }
        })
        .collect();
    parts.join("\n\n")
}

/// Checks a `shell_providers` entry (`what` names it): its keys and their types.
pub(crate) fn check_shell_config(what: &str, config: &Value) -> Result<(), String> {
    let Value::Object(map) = config else {
        return Err(format!("{what} must be a mapping with `command` and `args`"));
    };
    for (key, value) in map {
        let ok = match key.as_str() {
            "command" => value.is_string(),
            "args" => value.as_array().is_some_and(|a| a.iter().all(|v| v.is_string() || v.is_number())),
            "stdin_mode" => matches!(value.as_str(), Some("pipe" | "file")),
            "timeout" => value.as_f64().is_some_and(|t| t > 0.0 && t.is_finite()),
            "env" => value.as_object().is_some_and(|m| m.values().all(|v| v.is_string() || v.is_number())),
            "verbose" => value.is_boolean(),
            other => {
                let hint = crate::error::suggest(other, SHELL_KEYS.iter().copied());
                return Err(format!("unknown key `{other}` in {what}{hint}; it takes {}", SHELL_KEYS.join(", ")));
            }
        };
        if !ok {
            let want = match key.as_str() {
                "command" => "a string",
                "args" => "a list of strings",
                "stdin_mode" => "`pipe` or `file`",
                "timeout" => "a positive number of seconds",
                "env" => "a mapping of names to strings",
                _ => "true or false",
            };
            return Err(format!("`{key}` of {what} must be {want}, not {}", crate::state::describe(value)));
        }
    }
    Ok(())
}

/// The command line of shell provider `args.shell_provider` for `messages`.
pub(crate) fn shell_call(
    what: &str,
    args: &Map<String, Value>,
    messages: &[Value],
    shells: &Shells,
) -> Result<ShellCall, String> {
    let name = text(what, args, "shell_provider")?.ok_or_else(|| {
        format!(
            "{what}: `provider: shell` needs `shell_provider`, the command line to run ({}, or one of \
             `settings.shell_providers`)",
            built_in_shells().collect::<Vec<_>>().join(", ")
        )
    })?;
    if !shells.trusted {
        return Err(format!(
            "{what}: shell provider `{name}` runs a program on this machine; tea runs it only in a file it trusts \
             (`tea run --trust`, `Engine::trust_code(true)`)"
        ));
    }
    // The call's own `shell_providers` (from `settings.llm`) over the file's, over the built-ins.
    let from_args = args.get("shell_providers").and_then(|v| v.get(&name)).cloned();
    let config = match from_args.or_else(|| shells.configured.get(&name).cloned()) {
        Some(config) => {
            check_shell_config(&format!("shell provider `{name}`"), &config).map_err(|e| format!("{what}: {e}"))?;
            config
        }
        None => match BUILT_IN_SHELLS.iter().find(|s| s.0 == name) {
            Some((_, command, argv, stdin)) => json!({
                "command": command,
                "args": argv,
                "stdin_mode": if *stdin { "pipe" } else { "argument" },
                "timeout": BUILT_IN_SHELL_TIMEOUT.as_secs(),
            }),
            None => {
                let mut known: Vec<String> = built_in_shells().map(str::to_owned).collect();
                known.extend(shells.configured.keys().cloned());
                return Err(format!(
                    "{what}: shell provider `{name}` is not configured; known: {} (add it to `settings.shell_providers`)",
                    known.join(", ")
                ));
            }
        },
    };
    let program = expand(config.get("command").and_then(Value::as_str).unwrap_or(&name));
    let template: Vec<String> = config
        .get("args")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), expand)).collect())
        .unwrap_or_default();
    let prompt = prompt_text(messages);
    let in_args = template.iter().any(|a| a.contains("{prompt}"));
    let (args_out, input) = if in_args && prompt.len() <= MAX_ARG_PROMPT {
        (template.iter().map(|a| a.replace("{prompt}", &prompt)).collect(), Input::Argument)
    } else if in_args {
        (template.into_iter().filter(|a| !a.contains("{prompt}")).collect(), Input::Pipe)
    } else if config.get("stdin_mode").and_then(Value::as_str) == Some("file") {
        (template, Input::File)
    } else {
        (template, Input::Pipe)
    };
    let timeout = match args.get("timeout").and_then(Value::as_f64) {
        Some(t) if t > 0.0 => Duration::try_from_secs_f64(t).unwrap_or(SHELL_TIMEOUT),
        _ => config
            .get("timeout")
            .and_then(Value::as_f64)
            .and_then(|t| Duration::try_from_secs_f64(t).ok())
            .unwrap_or(SHELL_TIMEOUT),
    };
    let env = config
        .get("env")
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), expand))).collect())
        .unwrap_or_default();
    Ok(ShellCall { name, program, args: args_out, input, prompt, env, timeout })
}

impl ShellCall {
    /// The command line as errors show it (the prompt left out).
    fn shown(&self) -> String {
        let mut line = self.program.clone();
        for a in &self.args {
            line.push(' ');
            if self.input == Input::Argument && a.contains(&self.prompt) && !self.prompt.is_empty() {
                line.push('…');
            } else {
                line.push_str(a);
            }
        }
        line
    }

    /// Runs the command; its standard output, trimmed, is the answer
    /// (`{content, response, usage: {}, provider: "shell", shell_provider}`).
    pub(crate) async fn run(self, what: &'static str) -> Result<Value, String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let shown = self.shown();
        let name = self.name.clone();
        let fail = |why: String| format!("{what}: shell provider `{name}` (`{shown}`): {why}");
        let mut file = None;
        let mut args = self.args.clone();
        if self.input == Input::File {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("tea-prompt-{}-{n}.txt", std::process::id()));
            std::fs::write(&path, self.prompt.as_bytes())
                .map_err(|e| fail(format!("cannot write the prompt to `{}`: {e}", path.display())))?;
            let shown_path = path.display().to_string();
            args = args.iter().map(|a| a.replace("{input_file}", &shown_path)).collect();
            file = Some(TempFile(path));
        }
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if self.input == Input::Pipe { std::process::Stdio::piped() } else { std::process::Stdio::null() })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => fail(format!("the command `{}` is not found", self.program)),
            _ => fail(format!("cannot start it: {e}")),
        })?;
        let stdin = child.stdin.take();
        let prompt = self.prompt.clone();
        let writer = async move {
            if let Some(mut stdin) = stdin {
                // A command that stops reading early is not an error of the call.
                let _ = stdin.write_all(prompt.as_bytes()).await;
                let _ = stdin.shutdown().await;
            }
        };
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let read_out = async move {
            let mut out = Vec::new();
            if let Some(s) = stdout {
                let _ = s.take(MAX_OUTPUT + 1).read_to_end(&mut out).await;
            }
            out
        };
        let read_err = async move {
            let mut out = Vec::new();
            if let Some(s) = stderr {
                let _ = s.take(MAX_STDERR).read_to_end(&mut out).await;
            }
            out
        };
        let run = async {
            let ((), out, err) = tokio::join!(writer, read_out, read_err);
            let status = child.wait().await;
            (status, out, err)
        };
        let (status, out, err) = match tokio::time::timeout(self.timeout, run).await {
            Ok(done) => done,
            Err(_) => {
                let secs = self.timeout.as_secs_f64();
                return Err(fail(format!("no answer within {secs} s; it was stopped")));
            }
        };
        drop(file);
        let status = status.map_err(|e| fail(format!("cannot wait for it: {e}")))?;
        if out.len() as u64 > MAX_OUTPUT {
            return Err(fail(format!("it printed more than {} MiB", MAX_OUTPUT >> 20)));
        }
        if !status.success() {
            let stderr = String::from_utf8_lossy(&err);
            let code = status.code().map_or_else(|| "a signal".to_owned(), |c| format!("status {c}"));
            return Err(fail(format!("it exited with {code}: {}", stderr.trim())));
        }
        let content = String::from_utf8_lossy(&out).trim().to_owned();
        Ok(json!({
            "content": content,
            "response": content,
            "usage": {},
            "provider": "shell",
            "shell_provider": self.name,
        }))
    }
}

/// A temporary file, removed when dropped.
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_become_one_prompt() {
        let text = prompt_text(&[
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
            json!({"role": "assistant", "content": "Hello"}),
        ]);
        assert_eq!(text, "System: Be brief.\n\nHi\n\nAssistant: Hello");
    }

    #[test]
    fn variables_expand() {
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(expand("a${PATH}b${TEA_LLM_UNSET_VAR}c${"), format!("a{path}bc${{"));
    }

    #[test]
    fn azure_endpoints_name_the_deployment() {
        let args = json!({"base_url": "https://r.openai.azure.com/", "deployment": "d1", "api_key": "k"});
        let e =
            endpoint("llm.call", Provider::Azure, args.as_object().unwrap(), None, "chat/completions", "m").unwrap();
        assert!(e.url.starts_with("https://r.openai.azure.com/openai/deployments/d1/chat/completions?api-version="));
        assert!(e.api_key_header);
        assert_eq!(e.model, "d1");
    }

    #[test]
    fn anthropic_endpoints_take_the_sdks_base_and_name_a_model() {
        assert_eq!(messages_url("https://api.anthropic.com/"), "https://api.anthropic.com/v1/messages");
        assert_eq!(messages_url("http://gw/v1"), "http://gw/v1/messages");
        assert_eq!(messages_url("http://gw/v1/messages"), "http://gw/v1/messages");
        let args = json!({"base_url": "http://gw", "model": "claude-haiku-4-5", "api_key": "k"});
        let e = endpoint("llm.call", Provider::Anthropic, args.as_object().unwrap(), None, CHAT_PATH, "m").unwrap();
        assert_eq!(
            (e.api, e.url.as_str(), e.model.as_str()),
            (Api::Anthropic, "http://gw/v1/messages", "claude-haiku-4-5")
        );
        let args = json!({"base_url": "http://gw"});
        let err =
            endpoint("llm.call", Provider::Anthropic, args.as_object().unwrap(), None, CHAT_PATH, "m").unwrap_err();
        assert!(err.contains("needs `model`"), "{err}");
        let args = json!({"base_url": "http://gw", "model": "c"});
        let err =
            endpoint("llm.embed", Provider::Anthropic, args.as_object().unwrap(), None, "embeddings", "m").unwrap_err();
        assert!(err.contains("no embeddings"), "{err}");
        // A LiteLLM proxy named by `base_url` gets `anthropic/…` models as they are.
        let args = json!({"base_url": "http://proxy/v1", "model": "anthropic/claude"});
        let e = endpoint("llm.call", Provider::LiteLlm, args.as_object().unwrap(), None, CHAT_PATH, "m").unwrap();
        assert_eq!((e.api, e.model.as_str()), (Api::OpenAi, "anthropic/claude"));
    }

    #[test]
    fn unknown_providers_are_named() {
        let err = Provider::named("antropic").unwrap_err();
        assert!(err.contains("unknown provider `antropic`"), "{err}");
    }

    #[test]
    fn shell_providers_need_trust() {
        let args = json!({"provider": "shell", "shell_provider": "claude"});
        let err = shell_call("llm.call", args.as_object().unwrap(), &[], &Shells::default()).unwrap_err();
        assert!(err.contains("trust"), "{err}");
    }
}
