//! The registry's own tests: names, tags, the numbers round trip, rates and shares.

use super::*;

#[test]
fn tags_and_names_are_unique_and_round_trip() {
    for (i, k) in Kind::ALL.iter().enumerate() {
        assert_eq!(Kind::from_tag(k.tag()), Some(*k));
        for other in &Kind::ALL[..i] {
            assert_ne!(k.tag(), other.tag());
            assert_ne!(k.name(), other.name());
            assert_ne!(k.spec_name(), other.spec_name());
        }
        assert!(k.params().len() <= crate::algorithm::MAX_PARAMS);
        assert!(k.options().len() <= crate::algorithm::MAX_OPTIONS);
    }
    assert_eq!(Kind::from_tag(b'?'), None);
}

#[test]
fn commands_and_config_names() {
    for (i, k) in Kind::ALL.iter().enumerate() {
        assert_eq!(k.command(), format!("RL.{}", k.spec_name()));
        assert_eq!(Kind::from_config_name(k.config_name()), Some(*k));
        for other in &Kind::ALL[..i] {
            assert_ne!(k.config_name(), other.config_name());
        }
        // A rate limiter's rate fields name a limit and a window (or a calendar
        // period), one per parameter.
        if k.is_limiter() {
            let fields = k.rate_fields();
            assert_eq!(fields.len(), k.params().len() + k.options().len(), "{k:?}");
            assert!(
                fields.contains(&RateField::Limit)
                    && (fields.contains(&RateField::WindowMs)
                        || fields.contains(&RateField::Period))
            );
        }
    }
    assert_eq!(
        Kind::CONFIG_NAMES,
        ["token_bucket", "sliding", "fixed", "gcra", "log", "quota"]
    );
    assert_eq!(Kind::from_config_name("nosuch"), None);
}

#[test]
fn numbers_are_the_inverse_of_params() {
    let rate = ConfigRate {
        limit: 7,
        window_ms: 300,
        burst: None,
    };
    for k in Kind::LIMITERS.iter().filter(|k| **k != Kind::Quota) {
        let p = AnyParams::from_rate(*k, &rate).unwrap().unwrap();
        let n = p.numbers();
        assert_eq!(
            AnyParams::from_numbers(*k, n.values(), n.options()),
            Some(Ok(p))
        );
        assert_eq!(AnyParams::from_rate(*k, &p.rate()), Some(Ok(p)), "{k:?}");
        assert_eq!(p.quota(), (7, 300), "{k:?}");
    }
    // GCRA's burst at its default is left out, as a caller would leave it.
    let g = AnyParams::new(b"GCRA", &[5, 1_000], &[Some(5)])
        .unwrap()
        .unwrap();
    assert_eq!(g.numbers().options(), [None]);
    let g = AnyParams::new(b"GCRA", &[5, 1_000], &[Some(2)])
        .unwrap()
        .unwrap();
    assert_eq!(g.numbers().options(), [Some(2)]);
    assert_eq!(g.quota(), (2, 400));
    // A calendar quota is not a window: its numbers round-trip, a windowed rate cannot
    // make one, and its defaults (UTC, anchor 1) are left out.
    let q = AnyParams::new(b"QUOTA", &[1_000, 3], &[Some(1_439 + 330), Some(15)])
        .unwrap()
        .unwrap();
    let n = q.numbers();
    assert_eq!(
        (n.values(), n.options()),
        (&[1_000, 3][..], &[Some(1_769), Some(15)][..])
    );
    assert_eq!(
        AnyParams::from_numbers(Kind::Quota, n.values(), n.options()),
        Some(Ok(q))
    );
    let utc = AnyParams::new(b"QUOTA", &[5, 1], &[Some(1_439), Some(1)])
        .unwrap()
        .unwrap();
    assert_eq!(utc.numbers().options(), [None, None]);
    assert_eq!(
        AnyParams::from_rate(Kind::Quota, &rate)
            .unwrap()
            .unwrap_err()
            .to_string(),
        "period must be DAY, WEEK, MONTH or YEAR"
    );
}

#[test]
fn configured_rates_name_the_configurations_fields() {
    let rate = |limit, window_ms| ConfigRate {
        limit,
        window_ms,
        burst: None,
    };
    let err = |k, r| {
        AnyParams::from_rate(k, &r)
            .unwrap()
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(Kind::TokenBucket, rate(0, 1)),
        "limit must be an integer between 1 and 1000000000000000"
    );
    assert_eq!(
        err(Kind::Gcra, rate(1, 0)),
        "window_ms must be an integer between 1 and 1000000000000"
    );
    assert_eq!(
        err(Kind::SlidingLog, rate(10_001, 1)),
        "limit must be an integer between 1 and 10000"
    );
    assert!(AnyParams::from_rate(Kind::Concurrency, &rate(1, 1)).is_none());
}

#[test]
fn local_shares_divide_the_limit_and_a_large_log_runs_as_a_sliding_window() {
    let p = |word: &[u8], values: &[u64], options: &[Option<u64>]| {
        AnyParams::new(word, values, options).unwrap().unwrap()
    };
    let g = p(b"GCRA", &[10, 1_000], &[None]);
    assert_eq!(g.local_share(4), Ok(p(b"GCRA", &[10, 4_000], &[Some(2)])));
    let tb = p(b"TOKENBUCKET", &[10, 2, 700], &[]);
    assert_eq!(
        tb.local_share(3),
        Ok(p(b"TOKENBUCKET", &[3, 2, 2_100], &[]))
    );
    let f = p(b"FIXED", &[3, 1_000], &[]);
    assert_eq!(f.local_share(4), Ok(p(b"FIXED", &[1, 1_000], &[])));
    for one in [1, 0] {
        assert_eq!(f.local_share(one), Ok(f));
    }
    let small = p(b"LOG", &[64, 1_000], &[]);
    assert_eq!(small.local_share(1), Ok(small));
    let large = p(b"LOG", &[65, 1_000], &[]);
    assert_eq!(large.local_share(1), Ok(p(b"SLIDING", &[65, 1_000], &[])));
    // The share decides: 10000 over 200 instances is 50 entries, exact again.
    let shared = p(b"LOG", &[10_000, 1_000], &[]);
    assert_eq!(shared.local_share(200), Ok(p(b"LOG", &[50, 1_000], &[])));
    // A calendar quota shares its limit and keeps its calendar.
    let q = p(b"QUOTA", &[1_000, 3], &[Some(1_769), Some(15)]);
    assert_eq!(
        q.local_share(3),
        Ok(p(b"QUOTA", &[333, 3], &[Some(1_769), Some(15)]))
    );
}

#[test]
fn spec_words_and_their_order() {
    assert_eq!(
        SpecNames.to_string(),
        "TOKENBUCKET, SLIDING, FIXED, GCRA, LOG or QUOTA"
    );
    assert_eq!(Kind::limiter(b"tokenBucket"), Some(Kind::TokenBucket));
    assert_eq!(Kind::limiter(b"CONCURRENCY"), None);
    let upto: Vec<_> = Kind::ALL.iter().filter(|k| k.upto()).collect();
    assert_eq!(
        upto,
        [
            &Kind::TokenBucket,
            &Kind::SlidingWindow,
            &Kind::FixedWindow,
            &Kind::Gcra,
            &Kind::Quota
        ]
    );
}

#[test]
fn any_params_dispatch_to_the_algorithm() {
    let p = AnyParams::new(b"TOKENBUCKET", &[2, 1, 1_000], &[])
        .unwrap()
        .unwrap();
    let (d, s) = p.check(None, Micros(0), 2);
    assert!(d.is_allowed());
    assert_eq!(s.as_ref().map(AnyState::kind), Some(Kind::TokenBucket));
    assert!(!p.check(s.clone(), Micros(0), 1).0.is_allowed());
    assert_eq!(p.refund(s, Micros(0), 5).0, 2);
    // A state of another algorithm is no state.
    let other = AnyParams::new(b"FIXED", &[1, 1_000], &[]).unwrap().unwrap();
    let (_, fixed) = other.check(None, Micros(0), 1);
    assert!(p.check(fixed.clone(), Micros(0), 2).0.is_allowed());
    let (d, granted, s) = p.upto(fixed, Micros(0), 5);
    assert_eq!((d.remaining, granted), (0, 2));
    assert_eq!(p.upto(s, Micros(0), 5).1, 0);
    assert_eq!(
        AnyParams::new(b"GCRA", &[1], &[]).unwrap(),
        Err(crate::limits::duration_ms("period_ms").error())
    );
}
