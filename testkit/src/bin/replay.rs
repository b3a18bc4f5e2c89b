//! `rl-replay CAPACITY REFILL_TOKENS REFILL_MS`: replays a trace through the core's exact
//! token bucket (the code RL.TOKENBUCKET runs, not a model of it), one bucket per key, and
//! prints each call's decision. `scripts/gameday.py` pipes its request stream through it to
//! count what the limit allows.
//!
//! Input, one call a line in time order: `KEY TIME_US COST` (a key is any word; time is in
//! microseconds on any fixed origin). Output, one line a call: `1` allowed, `0` denied.
//!
//! ```text
//! $ printf 'a 0 1\na 0 1\na 1000000 1\n' | rl-replay 1 1 1000
//! 1
//! 0
//! 1
//! ```

use redis_rl_core::token_bucket::{check, TokenBucketParams, TokenBucketState};
use redis_rl_core::Micros;
use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::process::ExitCode;

/// `--version`: the release and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RL_GIT_COMMIT"),
    ")"
);

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some("--version") {
        println!("rl-replay {VERSION}");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rl-replay: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(|_| format!("not a number: {a:?}")))
        .collect::<Result<_, _>>()?;
    let [capacity, refill_tokens, refill_ms] = args[..] else {
        return Err("usage: rl-replay CAPACITY REFILL_TOKENS REFILL_MS < trace".into());
    };
    let params = TokenBucketParams::new(capacity, refill_tokens, refill_ms)
        .map_err(|e| format!("parameters: {e:?}"))?;
    let mut buckets: HashMap<String, TokenBucketState> = HashMap::new();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.map_err(|e| format!("stdin: {e}"))?;
        let bad = || format!("line {}: expected `KEY TIME_US COST`: {line:?}", n + 1);
        let [key, time_us, cost] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            return Err(bad());
        };
        let now = Micros(time_us.parse().map_err(|_| bad())?);
        let cost = cost.parse().map_err(|_| bad())?;
        let (decision, state) = check(buckets.get(key).copied(), now, &params, cost);
        if let Some(state) = state {
            buckets.insert(key.to_string(), state);
        }
        writeln!(out, "{}", u8::from(decision.is_allowed())).map_err(|e| e.to_string())?;
    }
    out.flush().map_err(|e| e.to_string())
}
