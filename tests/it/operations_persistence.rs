//! Persistence for every RL.* command the build has: after `SAVE` and a restart (RDB), after
//! an AOF replay, and after `BGREWRITEAOF` and a restart, every key holds the same bytes and
//! the same absolute expiry. The AOF holds effects (`SET ... PXAT`, `DEL`), never RL.* calls.
//! (replication.rs does the same for the first two commands with hand-picked calls.)

use redis_rl_testkit::ops::*;
use redis_rl_testkit::*;
use std::collections::BTreeMap;
use std::time::Duration;

const AOF: [&str; 4] = ["--appendonly", "yes", "--appendfsync", "always"];
const KEYS_PER_KIND: u64 = 200;

type Dataset = BTreeMap<String, (Vec<u8>, i64)>;

/// Writes a few keys of every algorithm, then random calls of every command (all windows a
/// minute or more, so nothing expires during the test); returns the mix used.
fn fill(server: &Server, calls: usize, seed: u64) -> Mix {
    let mut c = server.client();
    let mix = Mix::new(available(&mut c), KEYS_PER_KIND, false);
    send(&mut c, &mix.first_calls(5));
    let mut rng = Rng::new(seed);
    let random: Vec<Vec<String>> = (0..calls).map(|_| mix.call(&mut rng)).collect();
    for batch in random.chunks(1000) {
        send(&mut c, batch);
    }
    mix
}

/// The dataset, checked to hold keys of every algorithm the build has.
fn checked_dataset(server: &Server, mix: &Mix) -> Dataset {
    let data = dataset(&mut server.client());
    for kind in &mix.kinds {
        let prefix = format!("{}:", kind.prefix());
        assert!(
            data.keys().any(|k| k.starts_with(&prefix)),
            "no {kind:?} key written"
        );
    }
    assert!(data.values().all(|(_, expiry)| *expiry > 0));
    data
}

/// Checks that the restarted `server` holds `before`, except keys whose absolute expiry has
/// passed since (an RL.REFUND or RL.CONCURRENCY RELEASE can leave a limiter idle, and its key
/// then expires after the TTL slack alone).
fn assert_restored(what: &str, before: &Dataset, server: &Server) {
    let mut c = server.client();
    let after = dataset(&mut c);
    let now = server_time_ms(&mut c);
    let required = assert_same(what, before, &after, now);
    assert!(
        required * 10 >= before.len() * 9,
        "{what}: too few keys left to compare"
    );
}

#[test]
fn every_command_survives_save_and_restart() {
    let mut first = Server::start();
    let mix = fill(&first, 5_000, 11);
    let before = checked_dataset(&first, &mix);
    query::<()>(&mut first.client(), &["SAVE"]);
    first.kill();
    let second = Server::start_in(Some(first.dir.clone()), &[]);
    assert_restored("after SAVE and restart", &before, &second);
    println!("RDB: {} keys restored", before.len());
}

#[test]
fn every_command_survives_aof_replay_and_rewrite() {
    let mut first = Server::start_with(&AOF);
    let mix = fill(&first, 5_000, 12);
    let before = checked_dataset(&first, &mix);
    let log = aof_bytes(&first);
    assert!(contains(&log, b"PXAT"), "no SET ... PXAT in the AOF");
    for name in &mix.commands {
        assert!(!contains(&log, name.as_bytes()), "{name} is in the AOF");
    }

    first.kill();
    let mut second = Server::start_in(Some(first.dir.clone()), &AOF);
    let mut c = second.client();
    assert_restored("after replaying the AOF", &before, &second);

    // A rewrite (RDB preamble), then more traffic appended to the new AOF.
    query::<String>(&mut c, &["BGREWRITEAOF"]);
    wait_until("the AOF rewrite", Duration::from_secs(20), || {
        info_field(&mut c, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut c, "persistence", "aof_rewrite_scheduled").as_deref() == Some("0")
    });
    let mut rng = Rng::new(13);
    let more: Vec<Vec<String>> = (0..1_000).map(|_| mix.call(&mut rng)).collect();
    send(&mut c, &more);
    let before = checked_dataset(&second, &mix);
    second.kill();
    let third = Server::start_in(Some(first.dir.clone()), &AOF);
    assert_restored("after a rewrite and a restart", &before, &third);
    println!(
        "AOF: {} keys restored after replay and rewrite",
        before.len()
    );
}
