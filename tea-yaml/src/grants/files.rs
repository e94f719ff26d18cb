//! Reading the files an agent names (its own file, subgraph files, checkpoint files): regular
//! files only, and no more than a limit, checked before anything is read.
//!
//! Reading the files an agent names (its own, subgraph files, checkpoint files): regular files
//! only, sizes checked before reading.

use crate::error::LoadError;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest agent file read: 8 MiB.
pub(crate) const MAX_AGENT_FILE: u64 = 8 << 20;
/// The largest file `file.read` reads: 64 MiB.
pub(crate) const MAX_READ_FILE: u64 = 64 << 20;
/// The largest checkpoint file read (`checkpoint.load`, `Agent::checkpoint_call`, `config.checkpoint`):
/// 256 MiB.
pub(crate) const MAX_CHECKPOINT_FILE: u64 = 256 << 20;

/// The bytes of the regular file at `path` (a symbolic link is followed), refused without
/// reading when it is anything else (a FIFO, a device such as `/dev/zero`, a directory) or
/// larger than `max` bytes. The error says why, without the path (the caller names it).
pub(crate) fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    // `metadata` does not open the file, so a FIFO with no writer does not block here.
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    check(&meta, max)?;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // The file opened may not be the one looked at (it was replaced in between): look again.
    check(&file.metadata().map_err(|e| e.to_string())?, max)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("it is larger than {max} bytes (the limit)"));
    }
    Ok(bytes)
}

fn check(meta: &std::fs::Metadata, max: u64) -> Result<(), String> {
    if !meta.is_file() {
        let what = if meta.is_dir() { "a directory" } else { "not a regular file (a FIFO, a socket or a device?)" };
        return Err(format!("it is {what}; only regular files are read"));
    }
    if meta.len() > max {
        return Err(format!("it is {} bytes, larger than {max} bytes (the limit)", meta.len()));
    }
    Ok(())
}

/// An agent file's text, its name for messages, and the directory its relative paths start at.
pub(crate) fn read_agent_file(path: &Path) -> Result<(String, String, PathBuf), LoadError> {
    let shown = path.display().to_string();
    let bytes = read_regular(path, MAX_AGENT_FILE)
        .map_err(|e| LoadError::one(&shown, 1, 1, format!("cannot read the agent file: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| LoadError::one(&shown, 1, 1, format!("cannot read the agent file: it is not UTF-8: {e}")))?;
    let base =
        path.parent().filter(|p| !p.as_os_str().is_empty()).map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    Ok((text, shown, base))
}

/// `path` as written in an agent file: an absolute path as it is, a relative one under
/// `base` (the file's directory).
pub(crate) fn resolve(base: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    let joined = if path.is_absolute() { path.to_path_buf() } else { base.join(path) };
    // `./checkpoints` is `checkpoints`: paths print the way a person would write them.
    joined.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}
