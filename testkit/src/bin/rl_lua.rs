//! `make lua`: writes lua/rl.lua from lua/src and the registry (see `twin`); `--check` only
//! says whether it is up to date (exit 1 if not).

use redis_rl_testkit::twin;

fn main() {
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
