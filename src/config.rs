//! Module configuration: `CONFIG GET/SET rl.<name>` and `loadmodule libredis_rl.so <name> <value> ...`.
//!
//! Each value is an atomic read on the hot path (commands run on Redis's main thread; the
//! atomics only make the statics safe to share). Redis validates the ranges on CONFIG SET,
//! with its own error text naming the config and its range. The load arguments are checked
//! here ([`load_arguments`]) before the configs are registered: a misspelt name or a bad value
//! would otherwise be ignored or stop the server with a parse error that names nothing.

use std::sync::atomic::{AtomicI64, Ordering};

use redis_rl_core::limits::{self, Range, MAX_COUNT};
use redis_rl_core::{sliding_log, throttle};
use redis_rl_core::{Algorithm, Kind, Millis};

/// `rl.max-cost`: the largest cost a call may ask for, however it arrives: `COST n`,
/// RL.THROTTLE's `quantity`, or the implicit cost of 1 when neither is given (default and
/// ceiling: 10^15).
pub static MAX_COST: AtomicI64 = AtomicI64::new(MAX_COUNT as i64);
/// Ceiling of `rl.max-cost`.
pub const MAX_COST_CEILING: i64 = MAX_COUNT as i64;

/// `rl.max-all-keys`: the most keys one RL.ALL may check (default 16).
pub static MAX_ALL_KEYS: AtomicI64 = AtomicI64::new(16);
/// Ceiling of `rl.max-all-keys`.
pub const MAX_ALL_KEYS_CEILING: i64 = 256;

/// `rl.max-log-entries`: the largest `limit` of RL.LOG, so the most entries one log key holds
/// (default and ceiling: 10000).
pub static MAX_LOG_ENTRIES: AtomicI64 = AtomicI64::new(sliding_log::MAX_LIMIT as i64);
/// Ceiling of `rl.max-log-entries`.
pub const MAX_LOG_ENTRIES_CEILING: i64 = sliding_log::MAX_LIMIT as i64;

/// `rl.ttl-slack-ms`: how long a key outlives the moment its limiter is idle (default 1000).
pub static TTL_SLACK_MS: AtomicI64 = AtomicI64::new(1_000);
/// Ceiling of `rl.ttl-slack-ms` (one day).
pub const TTL_SLACK_CEILING: i64 = 86_400_000;

fn read(value: &AtomicI64) -> u64 {
    u64::try_from(value.load(Ordering::Relaxed)).unwrap_or(0)
}

/// The accepted range of `COST n` under the current configuration.
pub fn cost_range() -> Range {
    Range {
        max: read(&MAX_COST),
        ..limits::COST
    }
}

/// The accepted range of RL.THROTTLE's `quantity` (its cost) under the current configuration.
pub fn quantity_range() -> Range {
    Range {
        max: read(&MAX_COST),
        ..throttle::QUANTITY
    }
}

/// The accepted range of RL.ALL's `numkeys` under the current configuration.
pub fn numkeys_range() -> Range {
    Range {
        name: "numkeys",
        min: 1,
        max: read(&MAX_ALL_KEYS),
        spelling: redis_rl_core::limits::Spelling::Integer,
    }
}

/// The accepted range of parameter `range` of algorithm `A` under the current
/// configuration: the registry's range, except RL.LOG's `limit`, capped by
/// `rl.max-log-entries`.
pub fn param_range<A: Algorithm>(range: Range) -> Range {
    param_range_of(Kind::from_tag(A::TAG), range)
}

/// [`param_range`] for the algorithm of `kind`.
pub fn param_range_of(kind: Option<Kind>, range: Range) -> Range {
    if kind == Some(Kind::SlidingLog) && range == sliding_log::LIMIT {
        log_limit_range()
    } else {
        range
    }
}

/// The accepted range of RL.LOG's `limit` under the current configuration.
pub fn log_limit_range() -> Range {
    Range {
        max: read(&MAX_LOG_ENTRIES),
        ..sliding_log::LIMIT
    }
}

/// How long a written key outlives its limiter's idle instant.
pub fn ttl_slack() -> Millis {
    Millis(read(&TTL_SLACK_MS))
}

/// One config: its name (after `rl.`), where it lives, its default and its accepted range.
pub struct Setting {
    pub name: &'static str,
    pub value: &'static AtomicI64,
    pub default: i64,
    pub min: i64,
    pub max: i64,
}

/// Every config of the module, in the order `CONFIG GET rl.*` lists them.
pub static SETTINGS: [Setting; 4] = [
    Setting {
        name: "max-cost",
        value: &MAX_COST,
        default: MAX_COST_CEILING,
        min: 0,
        max: MAX_COST_CEILING,
    },
    Setting {
        name: "max-all-keys",
        value: &MAX_ALL_KEYS,
        default: 16,
        min: 1,
        max: MAX_ALL_KEYS_CEILING,
    },
    Setting {
        name: "max-log-entries",
        value: &MAX_LOG_ENTRIES,
        default: MAX_LOG_ENTRIES_CEILING,
        min: 1,
        max: MAX_LOG_ENTRIES_CEILING,
    },
    Setting {
        name: "ttl-slack-ms",
        value: &TTL_SLACK_MS,
        default: 1_000,
        min: 0,
        max: TTL_SLACK_CEILING,
    },
];

/// The value of each of [`SETTINGS`] given by the load arguments (`name value` pairs; a name
/// may also be written `rl.name`, as in CONFIG SET), or the text of why the module must not
/// load: an unknown name, a name given twice, a missing value, or a value that is not a plain
/// decimal integer within the config's range.
pub fn load_arguments(args: &[&[u8]]) -> Result<[Option<i64>; SETTINGS.len()], String> {
    let mut values = [None; SETTINGS.len()];
    let mut rest = args.iter();
    while let Some(&name) = rest.next() {
        let bare = name.strip_prefix(b"rl.").unwrap_or(name);
        let Some(index) = SETTINGS.iter().position(|s| s.name.as_bytes() == bare) else {
            return Err(format!(
                "unknown load argument '{}', expected {} (each followed by its value)",
                quoted(name),
                names()
            ));
        };
        let Some(setting) = SETTINGS.get(index) else {
            continue;
        };
        let range = format!("an integer between {} and {}", setting.min, setting.max);
        let Some(&text) = rest.next() else {
            return Err(format!(
                "load argument {} needs a value: {range}",
                setting.name
            ));
        };
        let value = parse_decimal(text)
            .filter(|v| (setting.min..=setting.max).contains(v))
            .ok_or_else(|| {
                format!(
                    "load argument {} must be {range}, got '{}'",
                    setting.name,
                    quoted(text)
                )
            })?;
        match values.get_mut(index) {
            Some(slot @ None) => *slot = Some(value),
            _ => {
                return Err(format!(
                    "load argument {} given more than once",
                    setting.name
                ))
            }
        }
    }
    Ok(values)
}

/// "max-cost, max-all-keys, max-log-entries or ttl-slack-ms".
fn names() -> String {
    let all: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
    match all.split_last() {
        Some((last, first)) if !first.is_empty() => format!("{} or {last}", first.join(", ")),
        _ => all.join(""),
    }
}

/// A plain ASCII decimal integer (no sign, no spaces), as the commands accept.
fn parse_decimal(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 18 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// Argument text for a log line: at most 40 bytes, bytes outside printable ASCII as `\xNN`.
fn quoted(text: &[u8]) -> String {
    text.iter()
        .take(40)
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(args: &[&str]) -> Result<[Option<i64>; 4], String> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        load_arguments(&bytes)
    }

    #[test]
    fn known_arguments_in_range_are_taken() {
        assert_eq!(load(&[]), Ok([None; 4]));
        assert_eq!(
            load(&["max-cost", "5", "rl.ttl-slack-ms", "0"]),
            Ok([Some(5), None, None, Some(0)])
        );
        assert_eq!(
            load(&["max-all-keys", "256", "max-log-entries", "1"]),
            Ok([None, Some(256), Some(1), None])
        );
    }

    #[test]
    fn refusals_name_the_argument_and_its_range() {
        assert_eq!(
            load(&["maxcost", "10"]),
            Err(
                "unknown load argument 'maxcost', expected max-cost, max-all-keys, \
                 max-log-entries or ttl-slack-ms (each followed by its value)"
                    .into()
            )
        );
        assert_eq!(
            load(&["max-cost", "abc"]),
            Err("load argument max-cost must be an integer between 0 and \
                 1000000000000000, got 'abc'"
                .into())
        );
        for bad in ["-1", "257", "0", "+5", " 5", "99999999999999999999"] {
            assert_eq!(
                load(&["max-all-keys", bad]),
                Err(format!(
                    "load argument max-all-keys must be an integer between 1 and 256, got '{bad}'"
                ))
            );
        }
        assert_eq!(
            load(&["ttl-slack-ms"]),
            Err(
                "load argument ttl-slack-ms needs a value: an integer between 0 and 86400000"
                    .into()
            )
        );
        assert_eq!(
            load(&["max-cost", "1", "rl.max-cost", "2"]),
            Err("load argument max-cost given more than once".into())
        );
        assert_eq!(
            load(&["max-cost\u{1}", "2"]).unwrap_err(),
            "unknown load argument 'max-cost\\x01', expected max-cost, max-all-keys, \
             max-log-entries or ttl-slack-ms (each followed by its value)"
        );
    }
}
