//! The exact commands the client sends: one place, so tests can assert the arguments.

use redis_rl_core::AnyParams;
// The commands the async decider sends (feature `transport`).
#[cfg(feature = "transport")]
use {
    crate::layers::decider::{cost_at, uniform_cost, AllMode},
    redis::Cmd,
};

/// The parameters as the server reads them after the key (or spec word): the positional
/// ones, then each option given (`BURST b`), in the registry's order.
pub(crate) fn args(params: &AnyParams) -> Vec<String> {
    let numbers = params.numbers();
    let kind = params.kind();
    // Each number as the server reads it: an integer, a word (`MONTH`) or a signed offset.
    let mut args: Vec<String> = kind
        .params()
        .iter()
        .zip(numbers.values())
        .map(|(range, v)| range.show(*v))
        .collect();
    for (opt, value) in kind.options().iter().zip(numbers.options()) {
        if let Some(value) = value {
            args.push(opt.token.to_string());
            args.push(opt.range.show(*value));
        }
    }
    args
}

/// `RL.<ALG> key params... [COST n] [PEEK]` (COST omitted when 1, the server default).
#[cfg(feature = "transport")]
pub(crate) fn single(key: &str, params: &AnyParams, cost: u64, peek: bool) -> Cmd {
    let mut cmd = redis::cmd(params.kind().command());
    cmd.arg(key).arg(args(params));
    push_cost_peek(&mut cmd, cost, peek);
    cmd
}

/// `RL.<ALG> key params... COST n UPTO [PEEK]`: a partial grant (COST always named).
#[cfg(feature = "transport")]
pub(crate) fn upto(key: &str, params: &AnyParams, cost: u64, peek: bool) -> Cmd {
    let mut cmd = redis::cmd(params.kind().command());
    cmd.arg(key)
        .arg(args(params))
        .arg("COST")
        .arg(cost)
        .arg("UPTO");
    if peek {
        cmd.arg("PEEK");
    }
    cmd
}

/// `RL.ALL numkeys key... spec... [COST n | COSTS n1 ... nk] [PEEK | FORCE]`: `costs[i]` on
/// `keys[i]`, one atomic call whether the costs are equal (`COST n`, omitted when 1) or not
/// (`COSTS`, one per key; a missing one is 1). `mode` `None` takes on every key if every key
/// allows it, else nothing; `Some` looks (`PEEK`) or takes over the limits (`FORCE`).
#[cfg(feature = "transport")]
pub(crate) fn all(keys: &[(&str, &AnyParams)], costs: &[u64], mode: Option<AllMode>) -> Cmd {
    // Room for the usual command at once (growing it word by word was a visible share of a
    // decision): per key, its name, a spec word and a few numbers.
    let key_bytes: usize = keys.iter().map(|(key, _)| key.len()).sum();
    let mut cmd = Cmd::with_capacity(8 + 8 * keys.len(), 32 + key_bytes + 48 * keys.len());
    cmd.arg("RL.ALL");
    cmd.arg(keys.len());
    for (key, _) in keys {
        cmd.arg(*key);
    }
    for (_, params) in keys {
        cmd.arg(params.kind().spec_name()).arg(args(params));
    }
    let peek = mode == Some(AllMode::Peek);
    match uniform_cost(keys.len(), costs) {
        Some(n) => push_cost_peek(&mut cmd, n, peek),
        None => {
            cmd.arg("COSTS");
            for i in 0..keys.len() {
                cmd.arg(cost_at(costs, i));
            }
            push_cost_peek(&mut cmd, 1, peek);
        }
    }
    if mode == Some(AllMode::Force) {
        cmd.arg("FORCE");
    }
    cmd
}

/// `RL.REFUND key spec COST n`.
#[cfg(feature = "transport")]
pub(crate) fn refund(key: &str, params: &AnyParams, cost: u64) -> Cmd {
    let mut cmd = redis::cmd("RL.REFUND");
    cmd.arg(key)
        .arg(params.kind().spec_name())
        .arg(args(params))
        .arg("COST")
        .arg(cost);
    cmd
}

/// `COMMAND INFO RL.ALL RL.REFUND`: a nil entry per command the server does not have.
#[cfg(feature = "transport")]
pub(crate) fn capabilities() -> Cmd {
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("RL.ALL").arg("RL.REFUND");
    cmd
}

#[cfg(feature = "transport")]
fn push_cost_peek(cmd: &mut Cmd, cost: u64, peek: bool) {
    if cost != 1 {
        cmd.arg("COST").arg(cost);
    }
    if peek {
        cmd.arg("PEEK");
    }
}

/// Groups key indexes by cluster hash slot, slots in order of first appearance, so a
/// multi-key check sends one `RL.ALL` per slot. On a standalone server every key is in
/// one group (slot `None`).
pub(crate) fn slot_groups(keys: &[&str], cluster: bool) -> Vec<(Option<u16>, Vec<usize>)> {
    if !cluster {
        return vec![(None, (0..keys.len()).collect())];
    }
    let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let slot = Some(redis::cluster_routing::get_slot(key.as_bytes()));
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, members)) => members.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups
}

/// The arguments of a command as text, for tests.
#[cfg(all(feature = "transport", any(test, feature = "testing")))]
pub(crate) fn words(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            redis::Arg::Cursor => "<cursor>".to_string(),
        })
        .collect()
}

#[cfg(all(test, feature = "transport"))]
mod tests {
    use super::*;
    use crate::Policy;

    fn tb() -> AnyParams {
        *Policy::token_bucket(100, 100, 60_000).unwrap().params()
    }

    fn sw() -> AnyParams {
        *Policy::sliding(10, 1_000).unwrap().params()
    }

    fn gcra() -> AnyParams {
        *Policy::gcra(5, 1_000, Some(3)).unwrap().params()
    }

    #[test]
    fn params_are_the_server_arguments_in_order() {
        let cases: &[(Policy, &str, &[&str])] = &[
            (
                Policy::token_bucket(10, 1, 100).unwrap(),
                "RL.TOKENBUCKET",
                &["10", "1", "100"],
            ),
            (
                Policy::sliding(5, 60_000).unwrap(),
                "RL.SLIDING",
                &["5", "60000"],
            ),
            (Policy::fixed(5, 1_000).unwrap(), "RL.FIXED", &["5", "1000"]),
            (
                Policy::gcra(5, 1_000, Some(2)).unwrap(),
                "RL.GCRA",
                &["5", "1000", "BURST", "2"],
            ),
            (
                Policy::gcra(5, 1_000, None).unwrap(),
                "RL.GCRA",
                &["5", "1000"],
            ),
            (Policy::log(7, 10).unwrap(), "RL.LOG", &["7", "10"]),
        ];
        for (policy, command, params) in cases {
            let mut expected = vec![command.to_string(), "k".to_string()];
            expected.extend(params.iter().map(|p| p.to_string()));
            assert_eq!(words(&single("k", policy.params(), 1, false)), expected);
        }
    }

    #[test]
    fn single_commands() {
        assert_eq!(
            words(&single("k", &tb(), 1, false)),
            ["RL.TOKENBUCKET", "k", "100", "100", "60000"]
        );
        assert_eq!(
            words(&single("k", &sw(), 3, true)),
            ["RL.SLIDING", "k", "10", "1000", "COST", "3", "PEEK"]
        );
        assert_eq!(
            words(&single("k", &gcra(), 0, false)),
            ["RL.GCRA", "k", "5", "1000", "BURST", "3", "COST", "0"]
        );
    }

    #[test]
    fn all_puts_keys_then_specs_then_options() {
        let cmd = all(
            &[("{a}:1", &tb()), ("{a}:2", &sw()), ("{a}:3", &gcra())],
            &[2, 2, 2],
            None,
        );
        assert_eq!(
            words(&cmd),
            [
                "RL.ALL",
                "3",
                "{a}:1",
                "{a}:2",
                "{a}:3",
                "TOKENBUCKET",
                "100",
                "100",
                "60000",
                "SLIDING",
                "10",
                "1000",
                "GCRA",
                "5",
                "1000",
                "BURST",
                "3",
                "COST",
                "2"
            ]
        );
        assert_eq!(
            words(&all(&[("k", &sw())], &[1], Some(AllMode::Peek))),
            ["RL.ALL", "1", "k", "SLIDING", "10", "1000", "PEEK"]
        );
    }

    #[test]
    fn different_costs_go_in_one_call_with_costs() {
        let keys = [("a", &sw()), ("b", &sw()), ("c", &sw())];
        let spec = ["SLIDING", "10", "1000"];
        let head = |n: &'static str| {
            let mut w = vec!["RL.ALL", n, "a", "b", "c"];
            w.extend(spec.iter().chain(&spec).chain(&spec));
            w
        };
        let mut expected = head("3");
        expected.extend(["COSTS", "1", "250", "0", "PEEK"]);
        assert_eq!(
            words(&all(&keys, &[1, 250, 0], Some(AllMode::Peek))),
            expected
        );
        // A missing cost is 1: equal to the others here, so no COSTS.
        assert_eq!(words(&all(&keys, &[1, 1], None)), head("3"));
        let mut expected = head("3");
        expected.extend(["COSTS", "2", "2", "1"]);
        assert_eq!(words(&all(&keys, &[2, 2], None)), expected);
        // FORCE comes after the costs, one for all or one per key.
        expected.push("FORCE");
        assert_eq!(words(&all(&keys, &[2, 2], Some(AllMode::Force))), expected);
        let mut expected = head("3");
        expected.extend(["COST", "4", "FORCE"]);
        assert_eq!(words(&all(&keys, &[4; 3], Some(AllMode::Force))), expected);
    }

    #[test]
    fn upto_always_names_the_cost() {
        assert_eq!(
            words(&upto("k", &tb(), 1, false)),
            [
                "RL.TOKENBUCKET",
                "k",
                "100",
                "100",
                "60000",
                "COST",
                "1",
                "UPTO"
            ]
        );
        assert_eq!(
            words(&upto("k", &gcra(), 50, true)),
            ["RL.GCRA", "k", "5", "1000", "BURST", "3", "COST", "50", "UPTO", "PEEK"]
        );
    }

    #[test]
    fn refund_always_names_the_cost() {
        assert_eq!(
            words(&refund("k", &sw(), 1)),
            ["RL.REFUND", "k", "SLIDING", "10", "1000", "COST", "1"]
        );
        assert_eq!(
            words(&capabilities()),
            ["COMMAND", "INFO", "RL.ALL", "RL.REFUND"]
        );
    }

    #[test]
    fn keys_group_by_hash_tag_in_first_seen_order() {
        let keys = ["rl:{k:1}:key", "rl:{ip:9}", "rl:{k:1}:ep:/a", "rl:{global}"];
        let groups = slot_groups(&keys, true);
        assert_eq!(groups.len(), 3);
        assert_eq!(groups[0].1, vec![0, 2]);
        assert_eq!(groups[1].1, vec![1]);
        assert_eq!(groups[2].1, vec![3]);
        assert_eq!(groups[0].0, Some(redis::cluster_routing::get_slot(b"k:1")));
        assert_eq!(slot_groups(&keys, false), vec![(None, vec![0, 1, 2, 3])]);
    }
}
