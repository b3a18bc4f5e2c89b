// The build scripts of the crates that ship a binary `include!` this file: it gives the crate
// `RL_GIT_COMMIT`, the short hash of the commit it was built from, for `--version` and
// `INFO rl`. From `git rev-parse --short HEAD` in a checkout; without one (a source tarball),
// from the `RL_GIT_COMMIT` environment variable; else `unknown`.
//
// Cargo reruns the script when HEAD moves (the files git keeps it in), not on every build:
// a rerun recompiles the crate.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").current_dir(dir).args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// The files whose change means HEAD moved: HEAD itself, the branch it names, packed-refs.
fn head_files(dir: &Path) -> Vec<PathBuf> {
    let mut names = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        names.push(branch);
    }
    names
        .iter()
        .filter_map(|name| git(dir, &["rev-parse", "--path-format=absolute", "--git-path", name]))
        .map(PathBuf::from)
        .filter(|path| path.exists())
        .collect()
}

fn emit_git_commit() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()));
    println!("cargo:rerun-if-env-changed=RL_GIT_COMMIT");
    let commit = match git(&dir, &["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            for path in head_files(&dir) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
            commit
        }
        None => std::env::var("RL_GIT_COMMIT")
            .ok()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=RL_GIT_COMMIT={commit}");
}
