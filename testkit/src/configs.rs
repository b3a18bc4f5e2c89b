//! Configuration text the rules tests of rl-gateway and of the client's middleware start
//! from, so that what "a quiet configuration" means is written once.

/// The top-level keys of a configuration for a test of rules: keys under `prefix`, one `ip`
/// dimension generous enough (1000 a minute) never to be what refuses, no hot keys (no
/// leases: every call reaches the server, so its counts are exact) and no fleet membership
/// (one instance, so no limit is divided). Dotted keys, not tables, so that more top-level
/// keys, tables and `[[rules]]` may follow.
pub fn rules_preamble(prefix: &str) -> String {
    format!(
        "key_prefix = \"{prefix}\"\n\
         dimensions = [\"ip\"]\n\
         hot = []\n\
         fleet.membership = false\n\
         ip.limit = 1000\n"
    )
}
