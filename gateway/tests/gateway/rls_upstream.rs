//! envoyproxy/ratelimit's own tests, ported: the configurations of its test/config (one
//! domain each here, renamed so one gateway serves them all) and the lookups, refusals and
//! answers its config_test.go and test/integration expect, except what depends on its
//! internals (statsd names, the local cache, memcache, its runtime loader). The few
//! intended differences are in the book's Envoy chapter.

use redis_rl_testkit::{free_port, Server};
use rl_gateway_proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;

use super::rls::{descriptor, limit_of, start, with_hits, Rls};

const OK: i32 = 1;
const OVER: i32 = 2;
const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const HOUR: i32 = 3;
const DAY: i32 = 4;

/// test/config/basic_config.yaml (domain test-domain there).
const BASIC: &str = "domain: basic\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          unit: second\n          requests_per_unit: 5\n      - key: subkey1\n        value: subvalue1\n        rate_limit:\n          unit: second\n          requests_per_unit: 10\n  - key: key2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n  - key: key2\n    value: value2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 30\n  - key: key2\n    value: value3\n  - key: key3\n    rate_limit:\n      unit: hour\n      requests_per_unit: 1\n  - key: key4\n    rate_limit:\n      name: key4_rate_limit\n      unit: day\n      requests_per_unit: 1\n  - key: key5\n    value: value5\n    rate_limit:\n      unit: day\n      requests_per_unit: 15\n    descriptors:\n      - key: subkey5\n        value: subvalue5\n        rate_limit:\n          unit: day\n          requests_per_unit: 25\n  - key: key6\n    rate_limit:\n      unlimited: true\n  - key: key7\n    detailed_metric: true\n    rate_limit:\n      unit: minute\n      requests_per_unit: 70\n";

/// test/config/wildcard.yaml.
const WILDCARD: &str = "domain: wildcard\ndescriptors:\n  - key: wild\n    value: foo*\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n  - key: noWild\n    value: foo\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n  - key: noVal\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n  - key: midWild\n    value: bar*b\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n  - key: multiWild\n    value: foo*bar*baz\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n  - key: nestedWild\n    value: val1\n    descriptors:\n      - key: wild\n        value: goo*\n        rate_limit:\n          unit: minute\n          requests_per_unit: 20\n";

/// test/config/shadowmode_config.yaml.
const SHADOW: &str = "domain: shadow\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          unit: second\n          requests_per_unit: 5\n      - key: subkey1\n        value: subvalue1\n        rate_limit:\n          unit: second\n          requests_per_unit: 10\n        shadow_mode: true\n  - key: key2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n    shadow_mode: true\n  - key: key2\n    value: value2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 30\n";

/// test/integration/runtime/current/ratelimit/config/another.yaml.
const ANOTHER: &str = "domain: another\ndescriptors:\n  - key: key2\n    rate_limit:\n      unit: minute\n      requests_per_unit: 20\n  - key: key3\n    rate_limit:\n      unit: hour\n      requests_per_unit: 10\n  - key: key4\n    rate_limit:\n      unit: day\n      requests_per_unit: 20\n";

/// What a descriptor gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// No rule: OK, no current limit.
    None,
    /// `unlimited: true`: OK, no current limit, the most remaining.
    Unlimited,
    /// A rule: requests per unit, unit.
    Limit(u32, i32),
}

/// A domain, a descriptor's entries, and what it gets.
type Lookup = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Expect,
);

async fn serving(server: &Server) -> (Rls, std::path::PathBuf) {
    serving_with(server, &[]).await
}

/// [`serving`] with `extra` flags.
async fn serving_with(server: &Server, extra: &[&str]) -> (Rls, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("rl-rls-upstream-{}", server.port));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        ("basic.yaml", BASIC),
        ("wildcard.yaml", WILDCARD),
        ("shadow.yaml", SHADOW),
        ("another.yaml", ANOTHER),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    (start(server, &dir, extra).await, dir)
}

/// config_test.go's GetLimit cases, looked up through the service (hits_addend 0 takes
/// nothing): which rule a descriptor falls under, if any.
#[tokio::test]
async fn lookups_match_config_test() {
    use Expect::*;
    let server = Server::start();
    let (mut rls, dir) = serving(&server).await;
    let cases: &[Lookup] = &[
        // TestBasicConfig
        ("foo_domain", &[("key1", "value1")], None),
        ("basic", &[("key1", "something")], None),
        ("basic", &[("key1", "value1")], None),
        ("basic", &[("key2", "value2"), ("subkey", "subvalue")], None),
        (
            "basic",
            &[("key5", "value5"), ("subkey5", "subvalue")],
            None,
        ),
        (
            "basic",
            &[("key1", "value1"), ("subkey1", "something")],
            Limit(5, SECOND),
        ),
        (
            "basic",
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            Limit(10, SECOND),
        ),
        ("basic", &[("key2", "something")], Limit(20, MINUTE)),
        ("basic", &[("key2", "value2")], Limit(30, MINUTE)),
        ("basic", &[("key2", "value3")], None),
        ("basic", &[("key3", "foo")], Limit(1, HOUR)),
        ("basic", &[("key4", "foo")], Limit(1, DAY)),
        ("basic", &[("key5", "value5")], Limit(15, DAY)),
        (
            "basic",
            &[("key5", "value5"), ("subkey5", "subvalue5")],
            Limit(25, DAY),
        ),
        ("basic", &[("key6", "foo")], Unlimited),
        ("basic", &[("key7", "unspecified_value")], Limit(70, MINUTE)),
        ("basic", &[("key7", "another_value")], Limit(70, MINUTE)),
        // TestWildcardConfig
        ("wildcard", &[("noVal", "foo1")], Limit(20, MINUTE)),
        ("wildcard", &[("wild", "foo1")], Limit(20, MINUTE)),
        ("wildcard", &[("wild", "foo")], Limit(20, MINUTE)),
        (
            "wildcard",
            &[("nestedWild", "val1"), ("wild", "goo2")],
            Limit(20, MINUTE),
        ),
        ("wildcard", &[("wild", "bar")], None),
        ("wildcard", &[("noWild", "foo1")], None),
        ("wildcard", &[("midWild", "barab")], Limit(20, MINUTE)),
        ("wildcard", &[("midWild", "bar123b")], Limit(20, MINUTE)),
        ("wildcard", &[("midWild", "barb")], Limit(20, MINUTE)),
        ("wildcard", &[("midWild", "bara")], None),
        ("wildcard", &[("midWild", "xbarb")], None),
        (
            "wildcard",
            &[("multiWild", "foo123bar456baz")],
            Limit(10, MINUTE),
        ),
        ("wildcard", &[("multiWild", "foobarbaz")], Limit(10, MINUTE)),
        ("wildcard", &[("multiWild", "foobaz")], None),
        // TestShadowModeConfig: the rules are found (shadow mode is below)
        (
            "shadow",
            &[("key1", "value1"), ("subkey1", "something")],
            Limit(5, SECOND),
        ),
        (
            "shadow",
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            Limit(10, SECOND),
        ),
        ("shadow", &[("key2", "something")], Limit(20, MINUTE)),
        ("shadow", &[("key2", "value2")], Limit(30, MINUTE)),
    ];
    for (domain, entries, expect) in cases {
        let r = rls
            .ask(domain, vec![with_hits(descriptor(entries), 0)], 0)
            .await;
        let s = &r.statuses[0];
        let got = match (limit_of(s), s.limit_remaining) {
            (Some((n, unit)), _) => Limit(n, unit),
            (Option::None, u32::MAX) => Unlimited,
            (Option::None, _) => None,
        };
        assert_eq!((s.code, got), (OK, *expect), "{domain} {entries:?}");
    }
    // The rule's name is reported (key4_rate_limit), none where the file gives none.
    let r = rls
        .ask(
            "basic",
            vec![with_hits(descriptor(&[("key4", "foo")]), 0)],
            0,
        )
        .await;
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().name,
        "key4_rate_limit"
    );
    let r = rls
        .ask(
            "basic",
            vec![with_hits(descriptor(&[("key3", "foo")]), 0)],
            0,
        )
        .await;
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// TestConfigLimitOverride: in a configured domain, a descriptor's own limit applies, rule
/// or not, per descriptor values; in a domain not configured, nothing applies.
#[tokio::test]
async fn limit_overrides_as_config_test() {
    let server = Server::start();
    let (mut rls, dir) = serving(&server).await;
    let over = |entries: &[(&str, &str)], n: u32, unit: i32| {
        let mut d = descriptor(entries);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: n,
            unit,
        });
        d
    };
    let something = [("key1", "value1"), ("subkey1", "something")];
    let r = rls
        .ask("foo_domain", vec![over(&something, 10, DAY)], 1)
        .await;
    assert_eq!(
        (r.overall_code, r.statuses[0].current_limit.clone()),
        (OK, None)
    );
    let r = rls.ask("basic", vec![over(&something, 10, DAY)], 1).await;
    assert_eq!(limit_of(&r.statuses[0]), Some((10, DAY)));
    assert_eq!(r.statuses[0].limit_remaining, 9);
    let r = rls.ask("basic", vec![over(&something, 42, HOUR)], 1).await;
    assert_eq!(limit_of(&r.statuses[0]), Some((42, HOUR)));
    let other = [("key1", "value1"), ("subkey1", "something_else")];
    let r = rls.ask("basic", vec![over(&other, 42, HOUR)], 1).await;
    assert_eq!(
        (limit_of(&r.statuses[0]), r.statuses[0].limit_remaining),
        (Some((42, HOUR)), 41)
    );
    // No rule for this descriptor in the file: the override still applies.
    let none = [("nokey", "x")];
    let r = rls.ask("basic", vec![over(&none, 1, HOUR)], 1).await;
    assert_eq!(
        (r.overall_code, limit_of(&r.statuses[0])),
        (OK, Some((1, HOUR)))
    );
    let r = rls.ask("basic", vec![over(&none, 1, HOUR)], 1).await;
    assert_eq!(r.overall_code, OVER);
    let _ = std::fs::remove_dir_all(&dir);
}

/// test/integration's testBasicBaseConfig: an unknown domain is OK without a limit; a
/// minute rule counts down and then refuses; two descriptors in one request, the second
/// over its hour limit; shadow mode answers OK over the limit. Without the deny cache,
/// which answers a refusal it has seen without asking Redis (the other descriptors'
/// numbers are then not looked up: see the book's list of differences).
#[tokio::test]
async fn answers_as_the_integration_test() {
    let server = Server::start();
    let (mut rls, dir) = serving_with(&server, &["--deny-cache", "0"]).await;
    let r = rls
        .ask("foo", vec![descriptor(&[("hello", "world")])], 1)
        .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!((r.statuses[0].code, r.statuses[0].limit_remaining), (OK, 0));
    assert_eq!(r.statuses[0].current_limit, None);

    let value = free_port().to_string();
    for i in 0..25u32 {
        let r = rls
            .ask("another", vec![descriptor(&[("key2", &value)])], 1)
            .await;
        let (code, left) = if i >= 20 {
            (OVER, 0)
        } else {
            (OK, 20 - (i + 1))
        };
        assert_eq!(r.overall_code, code, "hit {i}");
        assert_eq!(
            (r.statuses[0].code, r.statuses[0].limit_remaining),
            (code, left)
        );
        assert_eq!(limit_of(&r.statuses[0]), Some((20, MINUTE)));
        assert!(r.statuses[0].duration_until_reset.is_some());
    }

    // Two keys of one domain: key3 (10 an hour) refuses from the 11th request on; key2 then
    // keeps what it had (envoyproxy/ratelimit with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT:
    // a refused request takes nothing).
    let value = format!("{value}-2");
    for i in 0..15u32 {
        let r = rls
            .ask(
                "another",
                vec![
                    descriptor(&[("key2", &value)]),
                    descriptor(&[("key3", &value)]),
                ],
                1,
            )
            .await;
        let (code, left1, left2) = if i >= 10 {
            (OVER, 10, 0)
        } else {
            (OK, 20 - (i + 1), 10 - (i + 1))
        };
        assert_eq!(r.overall_code, code, "request {i}");
        assert_eq!(
            (r.statuses[0].code, r.statuses[0].limit_remaining),
            (OK, left1),
            "request {i}"
        );
        assert_eq!(
            (r.statuses[1].code, r.statuses[1].limit_remaining),
            (code, left2),
            "request {i}"
        );
        assert_eq!(limit_of(&r.statuses[0]), Some((20, MINUTE)));
        assert_eq!(limit_of(&r.statuses[1]), Some((10, HOUR)));
    }

    // Shadow mode (TestShadowModeConfig's rules, answered): over the limit but OK.
    let r = rls
        .ask("shadow", vec![descriptor(&[("key2", "x")])], 21)
        .await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
    let r = rls
        .ask("shadow", vec![descriptor(&[("key2", "value2")])], 31)
        .await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OVER, OVER));
    let _ = std::fs::remove_dir_all(&dir);
}

/// config_test.go's refused files, checked offline with `--check-config`: envoyproxy/ratelimit's
/// message, after the file, line and column.
#[test]
fn refused_files_as_config_test() {
    let dir = std::env::temp_dir().join(format!("rl-rls-upstream-bad-{}", free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: &[(&str, &str, &str)] = &[
        // TestEmptyDomain (empty_domain.yaml)
        ("descriptors:\n  - key: key1\n", "1:1", "config file cannot have empty domain"),
        // TestEmptyKey (empty_key.yaml)
        ("domain: test-domain\ndescriptors:\n  - value: value1\n", "3:5", "descriptor has empty key"),
        // TestDuplicateKey (duplicate_key.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n",
            "8:5",
            "duplicate descriptor composite key 'test-domain.key1_value1'",
        ),
        // TestBadLimitUnit (bad_limit_unit.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
            "6:13",
            "invalid rate limit unit 'foo'",
        ),
        // TestReplacesSelf (replaces_self.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      name: key1\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name: key1\n",
            "9:11",
            "replaces should not contain name of same descriptor",
        ),
        // TestReplacesEmpty (replaces_empty.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      name: key1\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name:\n",
            "9:11",
            "should not have an empty replaces entry",
        ),
        // TestBadYaml (bad_yaml.yaml)
        ("domain: test-domain\ndescriptors:\n  - key: key1\n    value: 'value1\n", "5:1", "error loading config file: "),
        // TestMisspelledKey (misspelled_key.yaml, misspelled_key2.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: second\n      requests_per_unit: 5\n",
            "5:5",
            "config error, unknown key 'ratelimit'",
        ),
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: second\n      requestsperunit: 5\n",
            "7:7",
            "config error, unknown key 'requestsperunit'",
        ),
        // TestNonStringKey (non_string_key.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    0.25:\n      unit: second\n",
            "5:5",
            "config error, key is not of type string: 0.25",
        ),
        // TestNonMapList (non_map_list.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - a\n  - b\n",
            "3:5",
            "config error, yaml file contains list of type other than map: a",
        ),
        // TestUnlimitedWithRateLimitUnit (unlimited_with_unit.yaml)
        (
            "domain: test-domain\ndescriptors:\n  - key: key1\n    rate_limit:\n      unlimited: true\n      unit: day\n",
            "6:13",
            "should not specify rate limit unit when unlimited",
        ),
        // share_threshold.yaml's rule: only on a wildcard value
        (
            "domain: test-domain\ndescriptors:\n  - key: files\n    value: files\n    share_threshold: true\n",
            "5:22",
            "share_threshold can only be used with wildcard values (containing '*'), but found key 'files_files'",
        ),
    ];
    for (i, (text, position, message)) in cases.iter().enumerate() {
        let file = dir.join(format!("bad{i}.yaml"));
        std::fs::write(&file, text).unwrap();
        let out = super::check_config(&file);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}");
        let prefix = format!("rl-gateway: {}:{position}: ", file.display());
        assert!(err.starts_with(&prefix), "{err}\nwant: {prefix}");
        assert!(err.contains(message), "{err}\nwant: {message}");
    }
    // TestDuplicateDomain (basic_config.yaml twice).
    std::fs::write(dir.join("a.yaml"), BASIC).unwrap();
    std::fs::write(dir.join("b.yaml"), BASIC).unwrap();
    let two = dir.join("two");
    std::fs::create_dir_all(&two).unwrap();
    std::fs::rename(dir.join("a.yaml"), two.join("a.yaml")).unwrap();
    std::fs::rename(dir.join("b.yaml"), two.join("b.yaml")).unwrap();
    let out = super::check_config(&two);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("b.yaml:1:9: duplicate domain 'basic' in config file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
