//! The golden command files (`testdata/commands/*.txt`, format in `testdata/README.md`):
//! each file on a fresh dataset, through the module and through the Lua twin on the same
//! server, must get exactly the replies and error texts written there, to a RESP2 client and
//! to a RESP3 one. Python's tests read
//! the same files (`python/tests/test_golden.py`).

use redis_rl_testkit::golden::{self, Via};
use redis_rl_testkit::*;

fn run_all(via: Via) {
    let server = Server::start();
    if via == Via::Twin {
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(include_str!("../../lua/rl.lua"))
            .query(&mut server.client())
            .expect("FUNCTION LOAD");
    }
    let files = golden::files();
    assert!(
        files.len() >= 8,
        "testdata/commands has {} files",
        files.len()
    );
    let mut wrong = Vec::new();
    // The same replies to a RESP2 client and to a RESP3 one (`HELLO 3`).
    for protocol in PROTOCOLS {
        let mut c = server.client_speaking(protocol);
        for (_, cases) in &files {
            query::<()>(&mut c, &["FLUSHALL"]);
            let found = golden::run(&mut c, cases, via);
            wrong.extend(found.into_iter().map(|w| format!("{protocol:?}: {w}")));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_module_gives_every_golden_reply() {
    run_all(Via::Module);
}

#[test]
fn the_lua_twin_gives_every_golden_reply() {
    run_all(Via::Twin);
}
