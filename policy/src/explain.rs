//! The effective plan of a configuration in words (`rl-gateway --check-config`): every
//! dimension and rule, its windows, its keys and which requests it applies to.

use std::fmt::Write;

use crate::engine::{Compiled, Engine};
use crate::limit::{window_label, LimitSpec};
use crate::schema::Dimension;

fn spec_text(s: &LimitSpec) -> String {
    if let Some(cal) = s.calendar {
        let mut t = format!(
            "{}/{} quota",
            s.limit,
            cal.period().word().to_ascii_lowercase()
        );
        if cal.offset_min() != 0 {
            let _ = write!(t, " at UTC{:+}min", cal.offset_min());
        }
        if cal.anchor() != 1 {
            let _ = write!(t, " from day {}", cal.anchor());
        }
        return t;
    }
    let mut t = format!(
        "{}/{} {}",
        s.limit,
        window_label(s.window_ms),
        s.algorithm.config_name()
    );
    if let Some(b) = s.burst {
        let _ = write!(t, " burst {b}");
    }
    t
}

fn windows(label: &str, c: &Compiled) -> String {
    let several = c.specs.len() > 1;
    let mut out: Vec<String> = c
        .specs
        .iter()
        .map(|s| {
            if several {
                format!("\"{label}-{}\" {}", s.label(), spec_text(s))
            } else {
                format!("\"{label}\" {}", spec_text(s))
            }
        })
        .collect();
    if c.shadow {
        out.push("(shadow: never denies)".into());
    }
    if let Some(m) = c.failure_mode {
        out.push(format!("(failure mode {})", m.name()));
    }
    if let Some(ms) = c.delay_max_ms {
        out.push(format!("(held up to {ms} ms instead of 429)"));
    }
    // Shadow items never ban (Plan::ban_targets).
    if let Some(ban) = c.ban.filter(|_| !c.shadow) {
        out.push(format!("(banned {ban}, key <key>:ban)"));
    }
    out.join(", ")
}

fn suffix(c: &Compiled) -> &'static str {
    if c.specs.len() > 1 {
        ":<window>"
    } else {
        ""
    }
}

impl Engine {
    /// The effective plan, for people: what `--check-config` prints.
    pub fn explain(&self) -> String {
        let c = self.config();
        let p = &c.key_prefix;
        let mut o = String::new();
        let hot: Vec<&str> = c.hot.iter().map(Dimension::name).collect();
        let _ = writeln!(
            o,
            "failure_mode {}, api key header {}, IPv6 clients per /{}, leases for [{}]",
            c.failure_mode.name(),
            c.api_key_header,
            c.ipv6_prefix,
            hot.join(", ")
        );
        let _ = writeln!(o, "\ndimensions (every request, in this order):");
        for d in &c.dimensions {
            match d {
                Dimension::ApiKey => {
                    let _ = writeln!(
                        o,
                        "  api_key   requests with an API key, key {p}:{{k:<tenant>}}:key, the tier's rate:"
                    );
                    for (name, t) in &self.tiers {
                        let default = if *name == c.default_tier {
                            " (default)"
                        } else {
                            ""
                        };
                        let _ = writeln!(
                            o,
                            "    tier {name}{default}: {}",
                            windows("api_key", &t.api_key)
                        );
                    }
                }
                Dimension::Ip => {
                    let _ = writeln!(
                        o,
                        "  ip        key {p}:{{ip:<client>}}{}: {}",
                        suffix(&self.ip),
                        windows("ip", &self.ip)
                    );
                }
                Dimension::Endpoint => {
                    let _ = writeln!(
                        o,
                        "  endpoint  key {p}:{{k:<tenant>}}:ep:<route>{s} ({p}:{{ip:<client>}}:ep:<route>{s} without a key): {}",
                        windows("endpoint", &self.endpoint),
                        s = suffix(&self.endpoint)
                    );
                }
                Dimension::Global => {
                    let _ = writeln!(
                        o,
                        "  global    key {p}:{{global}}{}: {}",
                        suffix(&self.global),
                        windows("global", &self.global)
                    );
                }
            }
        }
        let mut own = Vec::new();
        for (name, t) in &self.tiers {
            for (d, c) in [
                ("ip", &t.ip),
                ("endpoint", &t.endpoint),
                ("global", &t.global),
            ] {
                if let Some(c) = c {
                    own.push(format!("  tier {name}, {d}: {}", windows(d, c)));
                }
            }
        }
        if !own.is_empty() {
            let _ = writeln!(
                o,
                "\ntier overrides (ip and global in keys of their own, ...:tier:<tier>):"
            );
            for l in own {
                let _ = writeln!(o, "{l}");
            }
        }
        let _ = writeln!(o, "\nrules ({}):", self.rules.len());
        for (rule, compiled) in &self.rules {
            let paths: Vec<&str> = rule.paths.iter().map(|t| t.as_str()).collect();
            let any = |v: &[String], what: &str| {
                if v.is_empty() {
                    format!("any {what}")
                } else {
                    v.join(", ")
                }
            };
            let headers: Vec<String> = rule
                .headers
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let key: Vec<String> = rule.key.iter().map(ToString::to_string).collect();
            let _ = writeln!(o, "  {}: {}", rule.name, windows(&rule.name, compiled));
            let _ = writeln!(
                o,
                "    matches {} {} on {}, headers [{}], tiers {}",
                any(&rule.methods, "method"),
                if paths.is_empty() {
                    "any path".to_string()
                } else {
                    paths.join(", ")
                },
                any(&rule.hosts, "host"),
                headers.join(", "),
                if rule.tiers.is_empty() {
                    "any (with or without a key)".to_string()
                } else {
                    rule.tiers.join(", ")
                },
            );
            let _ = writeln!(
                o,
                "    counted per [{}] in {p}:{{<first part>}}:r:{}:<other parts>{} (not applied when a part is missing)",
                key.join(", "),
                rule.name,
                suffix(compiled)
            );
            if let Some(cost) = &rule.cost {
                let _ = writeln!(
                    o,
                    "    reserves the units of request header {} (1 without it)",
                    cost.header
                );
            }
            if let Some(settle) = &rule.settle {
                let _ = writeln!(
                    o,
                    "    settled after the response from its header or trailer {} (refund or charge the difference)",
                    settle.header
                );
            }
        }
        let routes: Vec<&str> = self.routes.iter().map(|t| t.as_str()).collect();
        let _ = writeln!(
            o,
            "\nroutes of the endpoint dimension: {}",
            routes.join(" ")
        );
        let a = &c.access;
        if !a.is_empty() {
            let _ = writeln!(
                o,
                "access: {} allowed and {} denied networks, {} allowed and {} denied keys",
                a.allow_ips.len(),
                a.deny_ips.len(),
                a.allow_api_keys.len(),
                a.deny_api_keys.len()
            );
        }
        o
    }
}
