//! rl-loadgen: the load generator of `make fleet` (scripts/fleet.py drives it).
//!
//! - `rl-loadgen run --target 127.0.0.1:8001 --target ... --rate 600 --duration-ms 8000 --out F`:
//!   paced requests over Zipf-ranked API keys (three tiers), client IPs and endpoints;
//!   appends one line per request to F.
//! - `rl-loadgen upstream --listen 127.0.0.1:9000`: the upstream behind the gateways.
//! - `rl-loadgen tiers --keys 300`: `key tier` lines, for `HSET rl:tiers`.
//! - `rl-loadgen rls --target 127.0.0.1:8081 --concurrency 32 --duration-ms 5000`:
//!   `ShouldRateLimit` calls back to back against Envoy's rate limit service (make
//!   bench-gateway); prints decisions per second and latency percentiles (JSON).
//! - `rl-loadgen analyze --config fleet.toml --records F --phases P.json`: per phase,
//!   answers, latency, and admitted versus the exact budget per dimension (JSON).

mod analyze;
mod load;
mod record;
mod rls;
mod traffic;
mod upstream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `--version`: the release and the commit it was built from (build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RL_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(name = "rl-loadgen", version = VERSION, about = "The load generator of `make fleet`")]
struct Cli {
    /// Runtime worker threads.
    #[arg(long, default_value_t = 1, global = true)]
    threads: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Sends the load and appends the records.
    Run(load::LoadArgs),
    /// Answers every request with 200 and a small JSON body.
    Upstream {
        #[arg(long)]
        listen: SocketAddr,
        /// Exit after this many seconds at most.
        #[arg(long, default_value_t = 900)]
        max_s: u64,
    },
    /// ShouldRateLimit calls against Envoy's rate limit service.
    Rls(rls::RlsArgs),
    /// Prints `key tier` for the ranks 0..keys.
    Tiers {
        #[arg(long, default_value_t = 300)]
        keys: u32,
    },
    /// Reads records and phases; prints the report as JSON.
    Analyze {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        records: PathBuf,
        /// A JSON list of {name, start_us, end_us, burst_key?}.
        #[arg(long)]
        phases: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rl-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cli.threads.max(1))
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    };
    match cli.command {
        Command::Run(args) => {
            let (sent, not_sent, errors) = runtime()?.block_on(load::run(args))?;
            println!(
                "{}",
                serde_json::json!({"sent": sent, "not_sent": not_sent, "errors": errors})
            );
            Ok(())
        }
        Command::Rls(args) => {
            println!("{}", runtime()?.block_on(rls::run(args))?);
            Ok(())
        }
        Command::Upstream { listen, max_s } => runtime()?.block_on(upstream::serve(listen, max_s)),
        Command::Tiers { keys } => {
            for i in 0..keys {
                println!("{} {}", traffic::api_key(i), traffic::tier(i));
            }
            Ok(())
        }
        Command::Analyze {
            config,
            records,
            phases,
        } => {
            let text = std::fs::read_to_string(&phases)
                .map_err(|e| format!("{}: {e}", phases.display()))?;
            let phases: Vec<analyze::Phase> =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", phases.display()))?;
            let report = analyze::analyze(&config, &records, &phases)?;
            println!("{report}");
            Ok(())
        }
    }
}
