//! What the operator grants the agent files an [`Engine`](crate::Engine) loads, in the manner of
//! Deno's permission flags: the folders a file may read and write (besides its own), the hosts
//! its network actions may reach, the environment variables it may read by name, and the hosts
//! each secret may be sent to. An agent file is someone else's code: it reaches nothing the
//! operator did not grant, and `Engine::trust_code` does not lift a grant.
//!
//! Every path an action opens goes through [`AgentGrants::confine`]; every request goes
//! through [`AgentGrants::check_request`] (in `net::send`, once the request is built).
//!
//! What an untrusted file may reach (`Grants`, `AgentGrants`): every path an action opens confined
//! to the agent's folder and the operator's `allow_read`/`allow_write` roots (symlinks and `..`
//! resolved first, special files refused), every request's host checked against `allow_net` before
//! it is sent, secrets sent only to the hosts bound to them.
//!
//! - `files.rs` — reading the files an agent names: regular files only, under a size limit.

// Without the feature `net` nothing sends requests: the network half is unused.
#![cfg_attr(not(feature = "net"), allow(dead_code))]

pub(crate) mod files;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The folders no agent reads or writes, whatever is granted: the kernel's views of processes
/// (`/proc/self/environ` holds the environment), of the system, and devices.
const SPECIAL_ROOTS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Environment variables holding a provider's API key that the engine itself reads, the
/// provider's own host, and the variable that may name another endpoint for it (the
/// operator's): a key read from the environment is sent only to those hosts, unless the
/// operator binds it to others ([`crate::Engine::secret_host`]).
pub(crate) const PROVIDER_KEYS: &[(&str, &str, &str)] = &[
    ("OPENAI_API_KEY", "api.openai.com", "OPENAI_BASE_URL"),
    ("AZURE_OPENAI_API_KEY", "", "AZURE_OPENAI_ENDPOINT"),
    ("ANTHROPIC_API_KEY", "api.anthropic.com", "ANTHROPIC_BASE_URL"),
    ("PERPLEXITY_API_KEY", "api.perplexity.ai", "PERPLEXITY_API_BASE"),
    ("FIRECRAWL_API_KEY", "api.firecrawl.dev", "FIRECRAWL_API_BASE"),
    ("SCRAPEGRAPH_API_KEY", "api.scrapegraphai.com", "SCRAPEGRAPH_API_BASE"),
    ("LLAMAEXTRACT_API_KEY", "api.cloud.llamaindex.ai", "LLAMA_CLOUD_BASE_URL"),
    ("LLAMAPARSE_API_KEY", "api.cloud.llamaindex.ai", "LLAMA_CLOUD_BASE_URL"),
];

/// The hosts secret `llm_api_key` (the key `llm.call` uses when the file names none) goes to
/// unless the operator binds it: the model providers' own endpoints, and those the operator's
/// environment names for them.
const LLM_KEY_HOSTS: &[&str] = &["api.openai.com", "api.anthropic.com"];
const LLM_KEY_HOST_VARS: &[&str] =
    &["OPENAI_BASE_URL", "AZURE_OPENAI_ENDPOINT", "OLLAMA_API_BASE", "ANTHROPIC_BASE_URL"];

/// Values shorter than this are not looked for in requests (as the secrets guard of the state).
const MIN_SECRET_LEN: usize = 4;

/// A host the operator grants: a name or address (lower-case), and a port or any; `*` is
/// every host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostGrant {
    host: String,
    port: Option<u16>,
}

impl HostGrant {
    /// Parses `example.com`, `example.com:8443`, `127.0.0.1:3000`, `[::1]:8080`, `*`, or a URL
    /// (`https://example.com/v1`, whose host and explicit port count).
    ///
    /// ```
    /// use tea_yaml::HostGrant;
    /// assert_eq!(HostGrant::parse("API.example.com:8443").unwrap().to_string(), "api.example.com:8443");
    /// assert_eq!(HostGrant::parse("https://example.com/v1").unwrap().to_string(), "example.com");
    /// assert!(HostGrant::parse("exa mple.com").is_err());
    /// assert!(HostGrant::parse("").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<HostGrant, String> {
        let bad = |why: &str| format!("`{text}` is not a host (`example.com`, `example.com:8443`, `*`): {why}");
        let mut rest = text.trim();
        if let Some((_, after)) = rest.split_once("://") {
            rest = after;
        }
        let rest = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let rest = rest.rsplit_once('@').map_or(rest, |p| p.1);
        if rest == "*" {
            return Ok(HostGrant { host: "*".to_owned(), port: None });
        }
        let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (addr, after) = v6.split_once(']').ok_or_else(|| bad("an IPv6 address without its `]`"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("text after the address"))?),
            };
            (format!("[{}]", addr.to_ascii_lowercase()), port)
        } else if rest.matches(':').count() > 1 {
            // An IPv6 address written without brackets has no port.
            (format!("[{}]", rest.to_ascii_lowercase()), None)
        } else {
            match rest.rsplit_once(':') {
                Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
                None => (rest.to_ascii_lowercase(), None),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(bad("no host"));
        }
        if !host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']')) {
            return Err(bad("a host name is letters, digits, `.`, `-` and `_`"));
        }
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().map_err(|_| bad("the port is not a number from 0 to 65535"))?),
        };
        Ok(HostGrant { host, port })
    }

    /// Whether it lets a request reach `host` (as a URL gives it) on `port`.
    fn allows(&self, host: &str, port: u16) -> bool {
        (self.host == "*" || self.host.eq_ignore_ascii_case(host)) && self.port.is_none_or(|p| p == port)
    }
}

impl std::fmt::Display for HostGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// What the operator granted an engine's agents (see the module's docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Grants {
    pub(crate) read: Vec<PathBuf>,
    pub(crate) write: Vec<PathBuf>,
    pub(crate) net: Vec<HostGrant>,
    /// The hosts a file's own `settings` name may be reached too.
    pub(crate) net_from_settings: bool,
    pub(crate) env: BTreeSet<String>,
    /// The hosts each secret (by name) may be sent to, beyond its defaults.
    pub(crate) secret_hosts: BTreeMap<String, Vec<HostGrant>>,
    /// Grants given as text that do not parse: every load reports them.
    pub(crate) invalid: Vec<String>,
}

/// A path as [`AgentGrants::confine`] wants it used: read, or written (created, replaced,
/// deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

impl Access {
    fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Access::Read => "--allow-read",
            Access::Write => "--allow-write",
        }
    }
}

/// The grants of one loaded agent: the engine's, its own folder, and the hosts its
/// `settings` name. (Its `Debug` names the secrets, never their values.)
#[derive(Clone)]
pub(crate) struct AgentGrants {
    pub(crate) grants: Arc<Grants>,
    /// Where relative paths start (the agent file's folder).
    pub(crate) base_dir: PathBuf,
    /// The agent's folder, canonical: read and written without a grant.
    own: Option<PathBuf>,
    /// The folders of the files whose `type: subgraph` nodes load this one (canonical): a
    /// subgraph reads and writes where its parents may.
    pub(crate) parents: Vec<PathBuf>,
    /// Hosts named in the file's `settings` (reached only with `net_from_settings`).
    pub(crate) settings_hosts: Vec<HostGrant>,
    /// The engine's secrets, by name: looked for in every request.
    pub(crate) secrets: Vec<(String, String)>,
}

impl std::fmt::Debug for AgentGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentGrants")
            .field("grants", &self.grants)
            .field("base_dir", &self.base_dir)
            .field("own", &self.own)
            .field("parents", &self.parents)
            .field("settings_hosts", &self.settings_hosts)
            .field("secrets", &self.secrets.iter().map(|(name, _)| name).collect::<Vec<_>>())
            .finish()
    }
}

impl AgentGrants {
    /// The grants of an agent whose relative paths start at `base_dir` (its folder).
    pub(crate) fn new(grants: Arc<Grants>, base_dir: PathBuf, secrets: Vec<(String, String)>) -> AgentGrants {
        let own = absolute(&base_dir).and_then(|d| std::fs::canonicalize(d).ok());
        AgentGrants { grants, base_dir, own, parents: Vec::new(), settings_hosts: Vec::new(), secrets }
    }

    /// `path` as written in the file (relative to the agent's folder), confined: see
    /// [`confine_path`](Self::confine_path).
    pub(crate) fn confine(&self, path: &str, access: Access) -> Result<PathBuf, String> {
        self.confine_path(&crate::grants::files::resolve(&self.base_dir, path), access)
    }

    /// The canonical form of `path` (symbolic links resolved; for a path that does not exist
    /// yet, its nearest existing folder's, with the rest appended), when it lies under a root
    /// this agent may use for `access` — its own folder, or one the operator granted — and is
    /// neither under `/proc`, `/sys` or `/dev` nor a FIFO, socket or device. Else why not,
    /// naming the flag that would grant it. The caller uses the path returned, not `path`.
    pub(crate) fn confine_path(&self, path: &Path, access: Access) -> Result<PathBuf, String> {
        let shown = path.display();
        let full = absolute(path).ok_or_else(|| format!("`{shown}`: the current directory is unknown"))?;
        let canonical = canonical(&full).map_err(|why| format!("`{shown}` is refused: {why}"))?;
        if let Some(root) = SPECIAL_ROOTS.iter().find(|r| canonical.starts_with(r)) {
            return Err(format!(
                "`{shown}` is refused: it is under `{root}`, whose files (the process's environment and memory, \
                 devices) no agent file may {}, whatever is granted",
                access.verb()
            ));
        }
        if let Ok(meta) = std::fs::metadata(&canonical) {
            if !meta.is_file() && !meta.is_dir() {
                return Err(format!(
                    "`{shown}` is refused: it is a FIFO, a socket or a device, which no agent file may {}",
                    access.verb()
                ));
            }
        }
        let granted = match access {
            Access::Read => &self.grants.read,
            Access::Write => &self.grants.write,
        };
        let inside = self.own.iter().chain(&self.parents).chain(granted.iter()).any(|root| {
            // A granted folder that does not exist yet (`--allow-write ./out`) counts as it will be.
            let root = absolute(root).map(|r| crate::grants::canonical(&r).unwrap_or(r));
            root.is_some_and(|root| canonical.starts_with(root))
        });
        if inside {
            return Ok(canonical);
        }
        let folder = if std::fs::metadata(&canonical).is_ok_and(|m| m.is_dir()) {
            canonical.clone()
        } else {
            canonical.parent().map_or_else(|| canonical.clone(), Path::to_path_buf)
        };
        let own = match &self.own {
            Some(own) => format!("its own folder `{}` and those the operator grants", own.display()),
            None => "only those the operator grants: loaded from a string, it has no folder of its own".to_owned(),
        };
        let resolved =
            if canonical.as_path() == path { String::new() } else { format!(" (`{}`)", canonical.display()) };
        Err(format!(
            "`{shown}`{resolved} is outside the folders this agent may {} ({own}); \
             the operator grants it with `{} {}` (`Engine::allow_{}`)",
            access.verb(),
            access.flag(),
            folder.display(),
            access.verb()
        ))
    }

    /// Forgets the agent's own folder: an agent loaded from a string has none.
    pub(crate) fn drop_own_folder(&mut self) {
        self.own = None;
    }

    /// The folders this agent reads and writes without a grant: its own and its parents'.
    pub(crate) fn folders(&self) -> Vec<PathBuf> {
        self.own.iter().chain(&self.parents).cloned().collect()
    }

    /// Whether environment variable `name` may be read on behalf of the file; else why not.
    pub(crate) fn env(&self, name: &str) -> Result<Option<String>, String> {
        if self.grants.env.contains(name) || self.grants.env.contains("*") {
            return Ok(std::env::var(name).ok());
        }
        Err(format!(
            "environment variable `{name}` is not granted to agent files; the operator grants it with \
             `--allow-env {name}` (`Engine::allow_env`)"
        ))
    }

    /// Whether a request may go to `host` on `port`: the operator granted the host, or it is
    /// one the file's `settings` name and the operator allows those. Else why not.
    pub(crate) fn check_host(&self, host: &str, port: u16) -> Result<(), String> {
        let grants = &self.grants;
        if grants.net.iter().any(|g| g.allows(host, port))
            || (grants.net_from_settings && self.settings_hosts.iter().any(|g| g.allows(host, port)))
        {
            return Ok(());
        }
        let from_settings = if !grants.net_from_settings && self.settings_hosts.iter().any(|g| g.allows(host, port)) {
            " (the file's `settings` name it: `--allow-net-from-file` lets those be reached)"
        } else {
            ""
        };
        Err(format!(
            "host `{host}` is not granted to this agent{from_settings}; the operator grants it with `--allow-net {host}` \
             (`Engine::allow_net`)"
        ))
    }

    /// Checks a request before it is sent: its host is granted ([`check_host`](Self::check_host)),
    /// and every secret it carries — anywhere: URL, headers, body — is bound to that host.
    /// Errors name the secret, never its value.
    pub(crate) fn check_request(&self, host: &str, port: u16, carried: &dyn Fn(&str) -> bool) -> Result<(), String> {
        self.check_host(host, port)?;
        for (name, value) in &self.secrets {
            if value.len() >= MIN_SECRET_LEN && carried(value) && !self.secret_goes_to(name, host, port) {
                return Err(refused_secret(&format!("secret `{name}`"), name, host));
            }
        }
        for (var, _, _) in PROVIDER_KEYS {
            let Some(value) = std::env::var(var).ok().filter(|v| v.len() >= MIN_SECRET_LEN) else { continue };
            if carried(&value) && !self.secret_goes_to(var, host, port) {
                return Err(refused_secret(&format!("the API key in environment variable `{var}`"), var, host));
            }
        }
        Ok(())
    }

    /// Whether secret (or key variable) `name` may be sent to `host`: bound to it by the
    /// operator, or one of its defaults (a provider's own endpoint).
    fn secret_goes_to(&self, name: &str, host: &str, port: u16) -> bool {
        if self.grants.secret_hosts.get(name).is_some_and(|hosts| hosts.iter().any(|g| g.allows(host, port))) {
            return true;
        }
        let env_host = |var: &str| {
            std::env::var(var).ok().and_then(|url| HostGrant::parse(&url).ok()).is_some_and(|g| g.allows(host, port))
        };
        if name == "llm_api_key" {
            return LLM_KEY_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(host))
                || LLM_KEY_HOST_VARS.iter().any(|v| env_host(v));
        }
        PROVIDER_KEYS
            .iter()
            .filter(|(var, _, _)| *var == name)
            .any(|(_, own, var)| (!own.is_empty() && own.eq_ignore_ascii_case(host)) || env_host(var))
    }
}

fn refused_secret(what: &str, name: &str, host: &str) -> String {
    format!(
        "{what} is not sent to `{host}`: a secret goes only to the hosts the operator binds it to (a model \
         provider's own endpoint by default), never to one the agent file names; the operator binds it with \
         `--secret-host {name}={host}` (`Engine::secret_host`)"
    )
}

/// `path` made absolute against the current directory.
fn absolute(path: &Path) -> Option<PathBuf> {
    if path.is_absolute() {
        Some(path.to_path_buf())
    } else {
        std::env::current_dir().ok().map(|d| d.join(path))
    }
}

/// The canonical form of absolute `path`: its nearest existing ancestor canonicalized, with
/// the components that do not exist yet appended (which must be plain names).
fn canonical(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut missing: Vec<std::ffi::OsString> = Vec::new();
    loop {
        match std::fs::symlink_metadata(&existing) {
            Ok(meta) => {
                let found = std::fs::canonicalize(&existing).map_err(|e| {
                    if meta.file_type().is_symlink() {
                        "it is (or passes through) a symbolic link that points nowhere".to_owned()
                    } else {
                        e.to_string()
                    }
                })?;
                let mut out = found;
                for name in missing.iter().rev() {
                    out.push(name);
                }
                return Ok(out);
            }
            Err(_) => {
                let Some(last) = existing.components().next_back() else {
                    return Err("no part of it exists".to_owned());
                };
                match last {
                    Component::Normal(name) => missing.push(name.to_owned()),
                    Component::CurDir => {}
                    Component::ParentDir => {
                        return Err("it climbs (`..`) out of a folder that does not exist".to_owned());
                    }
                    Component::RootDir | Component::Prefix(_) => return Err("no part of it exists".to_owned()),
                }
                if !existing.pop() {
                    return Err("no part of it exists".to_owned());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(read: &[&Path], write: &[&Path], base: &Path) -> AgentGrants {
        let grants = Grants {
            read: read.iter().map(|p| p.to_path_buf()).collect(),
            write: write.iter().map(|p| p.to_path_buf()).collect(),
            ..Grants::default()
        };
        AgentGrants::new(Arc::new(grants), base.to_path_buf(), Vec::new())
    }

    #[test]
    fn paths_stay_in_their_roots() {
        let dir = std::env::temp_dir().join(format!("tea-grants-unit-{}", std::process::id()));
        let own = dir.join("agent");
        let other = dir.join("other");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("x.txt"), "x").unwrap();
        let g = grants(&[], &[], &own);
        assert!(g.confine("new/file.txt", Access::Write).is_ok());
        assert!(g.confine("../other/x.txt", Access::Read).unwrap_err().contains("--allow-read"));
        assert!(g.confine("nope/../../other/x.txt", Access::Read).unwrap_err().contains("`..`"));
        assert!(g.confine("/proc/self/environ", Access::Read).unwrap_err().contains("/proc"));
        let granted = grants(&[&other], &[], &own);
        assert!(granted.confine("../other/x.txt", Access::Read).is_ok());
        assert!(granted.confine("../other/x.txt", Access::Write).unwrap_err().contains("--allow-write"));
        // A granted folder that does not exist yet.
        let later = grants(&[], &[&dir.join("later")], &own);
        assert!(later.confine_path(&dir.join("later/sub/x.txt"), Access::Write).is_ok());
        assert!(later.confine_path(&dir.join("lateral.txt"), Access::Write).is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(other.join("x.txt"), own.join("link")).unwrap();
            assert!(g.confine("link", Access::Read).is_err());
            std::os::unix::fs::symlink(other.join("nowhere"), own.join("dangling")).unwrap();
            assert!(g.confine("dangling", Access::Write).unwrap_err().contains("points nowhere"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hosts_parse_and_match() {
        let g = HostGrant::parse("127.0.0.1:8080").unwrap();
        assert!(g.allows("127.0.0.1", 8080) && !g.allows("127.0.0.1", 8081));
        assert!(HostGrant::parse("*").unwrap().allows("example.com", 443));
        assert!(HostGrant::parse("[::1]").unwrap().allows("[::1]", 80));
        assert!(HostGrant::parse("::1").unwrap().allows("[::1]", 8080));
        assert!(HostGrant::parse("[::1]:8080").unwrap().allows("[::1]", 8080));
        assert!(HostGrant::parse("example.com:99999").is_err());
    }
}
