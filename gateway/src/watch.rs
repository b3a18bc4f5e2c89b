//! Watching a configuration directory: a callback once the directory has been quiet for a
//! moment after a change. inotify on the directory, not on a file, so that a Kubernetes
//! ConfigMap update is seen: the kubelet writes a new timestamped folder, points a
//! temporary symlink at it and renames that over `..data`; the files themselves
//! (`config.yaml -> ..data/config.yaml`) never change, the directory does. Editors that
//! save by writing a new file and renaming it over the old one are seen the same way.
//!
//! The callback runs on a thread of the watch's own (reloads read files: blocking work),
//! and may be called for a change that turns out to change nothing (a reload then loads
//! the same configuration again).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, EventKind};
use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};

/// A change is acted on once nothing more happened in the directory for this long (one
/// ConfigMap update is a handful of events within milliseconds; an editor's save a few).
pub const DEFAULT_QUIET: Duration = Duration::from_millis(200);
/// A directory that never stays quiet is still reloaded this often.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// Which entries of the watched directory count.
#[derive(Clone, Debug)]
pub enum Names {
    /// Every entry (a directory of configuration files).
    All,
    /// One file (a configuration file), and the names Kubernetes' atomic writer uses for
    /// its swap (`..data`, `..2026_12_05_...`): all begin with two dots.
    File(OsString),
}

impl Names {
    /// The directory to watch for `path` and the names that count: a directory as a whole,
    /// a file through its parent directory.
    pub fn for_path(path: &Path) -> (PathBuf, Names) {
        if path.is_dir() {
            return (path.to_path_buf(), Names::All);
        }
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().map_or_else(OsString::new, OsString::from);
        (parent, Names::File(name))
    }

    fn counts(&self, path: &Path) -> bool {
        match self {
            Names::All => true,
            Names::File(name) => path
                .file_name()
                .is_some_and(|n| n == name.as_os_str() || n.as_encoded_bytes().starts_with(b"..")),
        }
    }
}

/// A running watch; dropping it stops the watch and its thread.
pub struct DirWatch {
    _watcher: RecommendedWatcher,
}

/// Watches `dir` (its entries; with `recursive`, its subdirectories too) and calls
/// `on_change` each time a change to an entry that `names` counts is followed by `quiet`
/// without another one.
pub fn watch_dir(
    dir: &Path,
    names: Names,
    recursive: bool,
    quiet: Duration,
    mut on_change: impl FnMut() + Send + 'static,
) -> Result<DirWatch, String> {
    let (tx, rx) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        let relevant = match event {
            Ok(e) => changes(&e.kind) && e.paths.iter().any(|p| names.counts(p)),
            // A lost event (the kernel's queue overflowed) may have been a change.
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(());
        }
    })
    .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    let mode = if recursive {
        RecursiveMode::Recursive
    } else {
        RecursiveMode::NonRecursive
    };
    watcher
        .watch(dir, mode)
        .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    std::thread::Builder::new()
        .name("config-watch".into())
        .spawn(move || {
            // Ends when the watcher (and so the sender) is dropped.
            while rx.recv().is_ok() {
                let first = Instant::now();
                loop {
                    let left = MAX_DELAY.saturating_sub(first.elapsed());
                    match rx.recv_timeout(quiet.min(left)) {
                        Ok(()) if !left.is_zero() => {}
                        Ok(()) | Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                on_change();
            }
        })
        .map_err(|e| format!("cannot start the watch of {}: {e}", dir.display()))?;
    Ok(DirWatch { _watcher: watcher })
}

/// Whether an event can change what a file reads: not a mere open, read or close after
/// reading (the reload itself reads the files), but a close after writing does.
fn changes(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_counts_with_the_configmap_names_only() {
        let names = Names::File("gateway.toml".into());
        assert!(names.counts(Path::new("/etc/rl/gateway.toml")));
        assert!(names.counts(Path::new("/etc/rl/..data")));
        assert!(names.counts(Path::new("/etc/rl/..2026_12_05_10_00_00.1")));
        assert!(!names.counts(Path::new("/etc/rl/other.toml")));
        assert!(!names.counts(Path::new("/etc/rl/.gateway.toml.swp")));
        assert!(Names::All.counts(Path::new("/etc/rl/anything")));
    }

    #[test]
    fn reads_do_not_count_writes_do() {
        assert!(!changes(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!changes(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(changes(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(changes(&EventKind::Remove(notify::event::RemoveKind::Any)));
    }
}
