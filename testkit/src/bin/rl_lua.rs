//! `make lua`: writes lua/rl.lua from lua/src and the registry (see `twin`); `--check` only
//! says whether it is up to date (exit 1 if not); `--version` prints the release and commit.

use redis_rl_testkit::twin;

/// `--version`: the release and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RL_GIT_COMMIT"),
    ")"
);

fn main() {
    if std::env::args().any(|a| a == "--version") {
        println!("rl-lua {VERSION}");
        return;
    }
    let path = twin::lua_dir().join("rl.lua");
    let fresh = twin::assemble();
    if std::env::args().any(|a| a == "--check") {
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current != fresh {
            eprintln!("{} is stale: run `make lua`", path.display());
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = std::fs::write(&path, fresh) {
        eprintln!("{}: {e}", path.display());
        std::process::exit(1);
    }
}
