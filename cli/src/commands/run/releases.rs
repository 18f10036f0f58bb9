//! How a run's command tells the run that it released one of the run's locks itself
//! (`redquorum release --lock NAME` inside the command): a file, named in the command's
//! environment, to which the release adds the name before it releases. The run reads it when
//! it finds a lock gone: a lock its command gave up is not a lost one, and the command is not
//! terminated for it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::held::RunsLocks;

/// The environment variable naming the file, set by `run` for its command.
pub(in crate::commands) const RELEASES_ENV: &str = "REDQUORUM_RUN_RELEASES";

/// The file of one run, removed when the run ends.
pub(in crate::commands) struct Releases {
    path: PathBuf,
}

impl Releases {
    /// A new, empty file that only this user may read or write.
    pub(super) fn create() -> std::io::Result<Self> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "redquorum-run-{}-{stamp}.releases",
            std::process::id()
        ));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        Ok(Releases { path })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Those of `names` that the command said it released.
    pub(super) fn released(&self, names: &[String]) -> Vec<String> {
        let said = std::fs::read_to_string(&self.path).unwrap_or_default();
        names
            .iter()
            .filter(|name| said.lines().any(|line| line == name.as_str()))
            .cloned()
            .collect()
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Inside a run's command, before the release of `name` with `token`: tells the run, when
/// they are one of its locks and its token for it.
pub(in crate::commands) fn tell_run(name: &str, token: &str) {
    let Some(path) = std::env::var_os(RELEASES_ENV) else {
        return;
    };
    if RunsLocks::from_env().token_of(name) != Some(token) {
        return;
    }
    let told = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(format!("{name}\n").as_bytes()));
    if let Err(e) = told {
        tracing::warn!(
            lock = name,
            "could not tell the run that its command releases this lock (it will take it for lost): {e}"
        );
    }
}
