//! Admitted versus the exact budget, per phase and dimension.
//!
//! The reference is the core's own algorithms (the code the module runs), one limiter per
//! key at the whole configured limit (one limiter for the whole fleet), fed with requests
//! in send order at their send times (Unix microseconds: window edges fall where the
//! server's do). For a dimension `d`, the requests that *reached* it are those the fleet
//! admitted plus those it refused naming `d` (a request refused by another dimension took
//! nothing from `d`). Through the reference they make *exact*: how many the limit admits
//! when it admits whenever it can, the budget of `d` for that traffic. Per key, *over* =
//! admitted - exact and *under* = exact - admitted, when positive; summed over the keys.
//! Counts, not request-by-request verdicts: a saturated limiter sits at its limit, and
//! which of two requests a millisecond apart gets the last unit depends on when the server
//! decided, not on whether the limit held.
//! State carries over from phase to phase (one replay over the whole variant), as it does in
//! Redis when nothing is lost.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::Path;

use redis_rl_client::{AnyParams, LocalLimiter};
use redis_rl_core::Micros;
use redis_rl_middleware::{params_of, Dimension, Rate, RateLimitConfig, RateLimitConfigExt};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::record::{Dim, Rec, NO_KEY, STATUS_ERROR, STATUS_NOT_SENT};
use crate::traffic;

/// A phase: a name and an interval of send times (Unix microseconds).
#[derive(Clone, Debug, Deserialize)]
pub struct Phase {
    pub name: String,
    pub start_us: u64,
    pub end_us: u64,
    /// The bursting key's rank, if any (reported separately).
    #[serde(default)]
    pub burst_key: Option<u32>,
}

struct Limits {
    tiers: HashMap<String, AnyParams>,
    default_tier: AnyParams,
    ip: AnyParams,
    endpoint: AnyParams,
    global: AnyParams,
    /// The global limit in units per second.
    global_per_s: f64,
}

fn limits(config: &RateLimitConfig) -> Result<Limits, String> {
    // The reference limiter models one window per dimension: the first of each rate.
    let alg = |r: &Rate| {
        let spec = r.specs()?;
        let first = spec
            .first()
            .ok_or_else(|| "a rate without a window".to_string())?;
        params_of(first).map_err(|e| e.to_string())
    };
    let mut tiers = HashMap::new();
    for (name, tier) in &config.tiers {
        tiers.insert(name.clone(), alg(&tier.rate)?);
    }
    let global = config
        .global
        .windows
        .first()
        .copied()
        .unwrap_or(redis_rl_middleware::Window::new(1, 60_000));
    Ok(Limits {
        tiers,
        default_tier: alg(&config.dimension_rate(Dimension::ApiKey))?,
        ip: alg(&config.ip)?,
        endpoint: alg(&config.endpoint)?,
        global: alg(&config.global)?,
        global_per_s: global.limit as f64 * 1000.0 / global.window_ms as f64,
    })
}

/// The reference limiter's key and algorithm of `d` for `r`.
fn target(l: &Limits, r: &Rec, d: Dim) -> Option<(String, AnyParams)> {
    let k = r.key;
    match d {
        Dim::ApiKey if k != NO_KEY => Some((
            format!("k{k}"),
            *l.tiers.get(traffic::tier(k)).unwrap_or(&l.default_tier),
        )),
        Dim::Ip => Some((format!("i{}", r.ip), l.ip)),
        Dim::Endpoint if k != NO_KEY => Some((format!("e{k}:{}", r.route), l.endpoint)),
        Dim::Endpoint => Some((format!("ei{}:{}", r.ip, r.route), l.endpoint)),
        Dim::Global => Some(("g".to_string(), l.global)),
        _ => None,
    }
}

fn pct(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[i]) / 1000.0
}

#[derive(Default, Clone)]
struct DimCount {
    reached: u64,
    exact: u64,
    /// Per key: (admitted, exact, reference refusals).
    keys: HashMap<String, (u64, u64, u64)>,
}

/// Reads the records and phases and returns the report (JSON).
pub fn analyze(config: &Path, records: &Path, phases: &[Phase]) -> Result<Value, String> {
    let config = RateLimitConfig::load(config).map_err(|e| e.to_string())?;
    let l = limits(&config)?;
    let text =
        std::fs::read_to_string(records).map_err(|e| format!("{}: {e}", records.display()))?;
    let mut recs: Vec<Rec> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    recs.sort_by_key(|r| r.t_us);
    let budget = LocalLimiter::new(1 << 20);
    let one = NonZeroU32::MIN;

    // Per request and dimension: None if it did not reach the dimension, else whether the
    // reference admits it.
    let mut verdicts: Vec<[Option<bool>; 4]> = Vec::with_capacity(recs.len());
    for r in &recs {
        let mut v = [None; 4];
        if r.key != NO_KEY && r.status > STATUS_NOT_SENT {
            for (i, d) in Dim::ALL.iter().enumerate() {
                let reached = r.admitted() || ((r.status == 429 || r.status == 503) && r.dim == *d);
                if !reached {
                    continue;
                }
                if let Some((key, alg)) = target(&l, r, *d) {
                    let now = Micros(r.t_us);
                    v[i] = Some(budget.check_at(&key, &alg, one, 1, false, now).allows());
                }
            }
        }
        verdicts.push(v);
    }

    let mut out = Vec::new();
    for ph in phases {
        let idx: Vec<usize> = (0..recs.len())
            .filter(|&i| recs[i].t_us >= ph.start_us && recs[i].t_us < ph.end_us)
            .collect();
        // The phase's send span (the load's start-up and its wait for the last answers are
        // not sending time).
        let span_us = match (idx.first(), idx.last()) {
            (Some(&a), Some(&b)) => recs[b].t_us - recs[a].t_us,
            _ => ph.end_us.saturating_sub(ph.start_us),
        };
        let dur_s = (span_us as f64 / 1e6).max(1e-3);
        let in_phase = |f: &dyn Fn(&Rec) -> bool| idx.iter().filter(|&&i| f(&recs[i])).count();
        let not_sent = in_phase(&|r| r.status == STATUS_NOT_SENT);
        let errors = in_phase(&|r| r.status == STATUS_ERROR);
        let ok = in_phase(&|r| r.admitted());
        let r429 = in_phase(&|r| r.status == 429);
        let r503 = in_phase(&|r| r.status == 503);
        let other = idx.len() - not_sent - errors - ok - r429 - r503;
        let mut refused_by = serde_json::Map::new();
        for d in [Dim::ApiKey, Dim::Ip, Dim::Endpoint, Dim::Global, Dim::Other] {
            let n = in_phase(&|r| (r.status == 429 || r.status == 503) && r.dim == d);
            refused_by.insert(d.name().to_string(), json!(n));
        }
        let mut lat_ok: Vec<u32> = idx
            .iter()
            .filter(|&&i| recs[i].admitted())
            .map(|&i| recs[i].lat_us)
            .collect();
        lat_ok.sort_unstable();
        let mut lat_all: Vec<u32> = idx
            .iter()
            .filter(|&&i| recs[i].status > STATUS_NOT_SENT)
            .map(|&i| recs[i].lat_us)
            .collect();
        lat_all.sort_unstable();

        let mut dims = serde_json::Map::new();
        for (di, d) in Dim::ALL.iter().enumerate() {
            let mut c = DimCount::default();
            for &i in &idx {
                let r = &recs[i];
                let Some(exact) = verdicts[i][di] else {
                    continue;
                };
                c.reached += 1;
                c.exact += u64::from(exact);
                if let Some((key, _)) = target(&l, r, *d) {
                    let e = c.keys.entry(key).or_default();
                    e.0 += u64::from(r.admitted());
                    e.1 += u64::from(exact);
                    e.2 += u64::from(!exact);
                }
            }
            let over: u64 = c.keys.values().map(|k| k.0.saturating_sub(k.1)).sum();
            let under: u64 = c.keys.values().map(|k| k.1.saturating_sub(k.0)).sum();
            // Keys the limit bound on (the reference refused some): admitted / exact.
            let binding: Vec<&(u64, u64, u64)> =
                c.keys.values().filter(|k| k.2 > 0 && k.1 > 0).collect();
            let (sum_a, sum_e) = binding
                .iter()
                .fold((0u64, 0u64), |(a, e), k| (a + k.0, e + k.1));
            let max_ratio = binding
                .iter()
                .filter(|k| k.1 >= 5)
                .map(|k| k.0 as f64 / k.1 as f64)
                .fold(0.0, f64::max);
            let admitted: u64 = c.keys.values().map(|k| k.0).sum();
            dims.insert(
                d.name().to_string(),
                json!({
                    "reached": c.reached,
                    "admitted": admitted,
                    "exact": c.exact,
                    "over": over,
                    "under": under,
                    "keys": c.keys.len(),
                    "binding_keys": binding.len(),
                    "binding_admitted": sum_a,
                    "binding_exact": sum_e,
                    "binding_ratio": if sum_e > 0 { sum_a as f64 / sum_e as f64 } else { 0.0 },
                    "max_key_ratio": max_ratio,
                }),
            );
        }
        let burst = ph.burst_key.map(|k| {
            let mine: Vec<usize> = idx.iter().copied().filter(|&i| recs[i].key == k).collect();
            let exact = mine
                .iter()
                .filter(|&&i| verdicts[i][0] == Some(true))
                .count();
            json!({
                "key": k,
                "tier": traffic::tier(k),
                "sent": mine.len(),
                "admitted": mine.iter().filter(|&&i| recs[i].admitted()).count(),
                "exact": exact,
            })
        });
        out.push(json!({
            "name": ph.name,
            "duration_s": dur_s,
            "offered": idx.len(),
            "not_sent": not_sent,
            "errors": errors,
            "ok": ok,
            "r429": r429,
            "r503": r503,
            "other": other,
            "refused_by": refused_by,
            "ok_p50_ms": pct(&lat_ok, 50.0),
            "ok_p99_ms": pct(&lat_ok, 99.0),
            "ok_max_ms": lat_ok.last().map_or(0.0, |v| f64::from(*v) / 1000.0),
            "all_p50_ms": pct(&lat_all, 50.0),
            "all_p99_ms": pct(&lat_all, 99.0),
            "dims": dims,
            "global_per_s": l.global_per_s,
            "burst": burst,
        }));
    }
    Ok(json!({ "phases": out }))
}
