//! The stored value's framing: header, versions, refusals with their reason, round trips.

use proptest::prelude::*;
use redis_rl_core::sliding_window::SlidingWindowState;
use redis_rl_core::token_bucket::TokenBucketState;
use redis_rl_core::{Micros, Millis};

use super::*;

const MAX_COUNT_FOR_TESTS: u64 = redis_rl_core::limits::MAX_COUNT;

fn bucket() -> TokenBucketState {
    TokenBucketState {
        level: 123_456_789,
        updated_at: Micros(1_700_000_000_000_000),
        refill_ms: 60_000,
    }
}

fn window() -> SlidingWindowState {
    SlidingWindowState {
        window_ms: 1_000,
        window_start: Millis(1_700_000_000_000),
        previous: 7,
        current: 3,
    }
}

#[test]
fn round_trips_and_sizes() {
    let b = bucket().encode();
    assert_eq!(b.as_bytes().len(), 5 + 7 + 3 + 4);
    assert_eq!(&b.as_bytes()[..5], b"\0RL\x02T");
    assert_eq!(TokenBucketState::decode(b.as_bytes()), Ok(bucket()));
    let w = window().encode();
    assert_eq!(
        w.as_bytes(),
        b"\0RL\x02S\xe8\x07\x80\xe2\xcf\xaa\x06\x07\x03"
    );
    assert_eq!(SlidingWindowState::decode(w.as_bytes()), Ok(window()));
    // Version 1, as older modules wrote it, is still read.
    let b1 = bucket().encode_v1();
    assert_eq!(b1.as_bytes().len(), 37);
    assert_eq!(&b1.as_bytes()[..5], b"\0RL\x01T");
    assert_eq!(TokenBucketState::decode(b1.as_bytes()), Ok(bucket()));
    let w1 = window().encode_v1();
    assert_eq!(w1.as_bytes().len(), 37);
    assert_eq!(SlidingWindowState::decode(w1.as_bytes()), Ok(window()));
    // A version 1 length with the version 2 byte (or the other way round) is corrupt.
    let mut mixed = b1.as_bytes().to_vec();
    mixed[3] = 2;
    assert_eq!(
        TokenBucketState::decode(&mixed),
        Err(DecodeError::Corrupt(Kind::TokenBucket))
    );
    let mut mixed = b.as_bytes().to_vec();
    mixed[3] = 1;
    assert_eq!(
        TokenBucketState::decode(&mixed),
        Err(DecodeError::Corrupt(Kind::TokenBucket))
    );
}

#[test]
fn refuses_what_is_not_ours_with_the_reason() {
    assert_eq!(
        TokenBucketState::decode(b"hello"),
        Err(DecodeError::NotOurs)
    );
    assert_eq!(TokenBucketState::decode(b""), Err(DecodeError::NotOurs));
    let mut v = bucket().encode().as_bytes().to_vec();
    assert_eq!(
        SlidingWindowState::decode(&v),
        Err(DecodeError::WrongAlgorithm {
            stored: Kind::TokenBucket,
            expected: Kind::SlidingWindow
        })
    );
    v[3] = 3;
    assert_eq!(
        TokenBucketState::decode(&v),
        Err(DecodeError::UnsupportedVersion(3))
    );
    v[3] = 1;
    v[4] = b'?';
    assert_eq!(
        TokenBucketState::decode(&v),
        Err(DecodeError::UnknownAlgorithm(b'?'))
    );
    v[4] = b'T';
    v.pop();
    assert_eq!(
        TokenBucketState::decode(&v),
        Err(DecodeError::Corrupt(Kind::TokenBucket))
    );
}

#[test]
fn refuses_impossible_fields() {
    let mut w = window();
    w.window_start = Millis(1_500);
    assert!(SlidingWindowState::decode(w.encode_v1().as_bytes()).is_err());
    let mut b = bucket();
    b.refill_ms = 0;
    assert!(TokenBucketState::decode(b.encode().as_bytes()).is_err());
    assert!(TokenBucketState::decode(b.encode_v1().as_bytes()).is_err());
}

proptest! {
    #[test]
    fn arbitrary_bytes_decode_to_a_value_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        let _ = TokenBucketState::decode(&bytes);
        let _ = SlidingWindowState::decode(&bytes);
    }

    #[test]
    fn our_header_with_random_fields_never_panics(body in prop::collection::vec(any::<u8>(), 0..40)) {
        for (tag, version) in [(b'T', 1), (b'S', 1), (b'T', 2), (b'S', 2)] {
            let mut v = vec![0, b'R', b'L', version, tag];
            v.extend_from_slice(&body);
            let _ = TokenBucketState::decode(&v);
            let _ = SlidingWindowState::decode(&v);
        }
    }

    #[test]
    fn round_trip(level in 0u128..1_000_000_000_000_000_000, at in any::<u64>(), refill_ms in 1u64..1_000_000) {
        let s = TokenBucketState { level, updated_at: Micros(at), refill_ms };
        prop_assert_eq!(TokenBucketState::decode(s.encode().as_bytes()), Ok(s));
        prop_assert_eq!(TokenBucketState::decode(s.encode_v1().as_bytes()), Ok(s));
    }

    #[test]
    fn window_round_trip(window_ms in 1u64..1_000_000_000_000, index in 0u64..10_000_000, previous in 0..=MAX_COUNT_FOR_TESTS, current in 0..=MAX_COUNT_FOR_TESTS) {
        let s = SlidingWindowState { window_ms, window_start: Millis(window_ms * index), previous, current };
        prop_assert_eq!(SlidingWindowState::decode(s.encode().as_bytes()), Ok(s));
        prop_assert_eq!(SlidingWindowState::decode(s.encode_v1().as_bytes()), Ok(s));
    }
}

/// Lengths of every algorithm's stored value, from its `Stored` impl: version 1 for a
/// fixed-size state with a compact form (`None` for one without, or of variable length: the
/// twin's `M.V1_LEN` lists the tags whose version 1 has one length) and the longest valid
/// value.
macro_rules! stored_lengths {
    (
        limiters: [$($l:ident = $lt:ty),* $(,)?],
        others: [$($o:ident = $ot:ty),* $(,)?] $(,)?
    ) => {
        fn stored_lengths(kind: Kind) -> (Option<usize>, usize) {
            fn of<S: Stored>() -> (Option<usize>, usize) {
                let compact_most = S::COMPACT_BODY.map_or(0, |(_, most)| most);
                (
                    S::COMPACT_BODY
                        .filter(|_| !S::VARIABLE_LEN)
                        .map(|_| HEADER_LEN + S::BODY_LEN),
                    HEADER_LEN + S::MAX_BODY_LEN.max(compact_most),
                )
            }
            match kind {
                $(Kind::$l => of::<<$lt as CoreAlgorithm>::State>(),)*
                $(Kind::$o => of::<<$ot as CoreAlgorithm>::State>(),)*
            }
        }
    };
}
redis_rl_core::registry!(stored_lengths);

/// The entries `TAG = expression` of the Lua table assigned by `M.<name> = {` in `text`.
fn lua_table(text: &str, name: &str) -> Vec<(String, String)> {
    let start = text
        .find(&format!("M.{name} = {{"))
        .unwrap_or_else(|| panic!("no M.{name} in lua/src/storage.lua"));
    let open = start + text[start..].find('{').unwrap();
    let mut depth = 0;
    let close = text[open..]
        .find(|c| {
            depth += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            depth == 0
        })
        .unwrap();
    let body = &text[open + 1..open + close];
    body.split([',', '\n'])
        .filter_map(|entry| entry.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The Lua twin keeps the stored lengths it checks by hand (`M.V1_LEN` and `M.MAX_LEN` in
/// lua/src/storage.lua): they must be the module's, for every algorithm of the registry. A
/// twin without a new algorithm's lengths writes its key once and then fails on every call
/// that reads it, which no other test sees.
#[test]
fn the_lua_twins_stored_lengths_are_the_modules() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/lua/src/storage.lua");
    let text = std::fs::read_to_string(path).unwrap();
    let v1 = lua_table(&text, "V1_LEN");
    let max = lua_table(&text, "MAX_LEN");
    for &kind in Kind::ALL {
        let tag = char::from(kind.tag()).to_string();
        let (v1_len, max_len) = stored_lengths(kind);
        let lua_v1 = v1.iter().find(|(k, _)| *k == tag).map(|(_, v)| v.parse());
        assert_eq!(
            lua_v1,
            v1_len.map(Ok),
            "M.V1_LEN.{tag} ({kind:?}) in {path}: the version 1 length of a state with a compact form"
        );
        let lua_max = max.iter().find(|(k, _)| *k == tag).map(|(_, v)| v.as_str());
        let lua_max = lua_max.unwrap_or_else(|| panic!("no M.MAX_LEN.{tag} ({kind:?}) in {path}"));
        // `5 + n` is checked; a longer expression (a log's or a lease table's) only exists.
        if let Some(body) = lua_max
            .strip_prefix("5 + ")
            .and_then(|n| n.parse::<usize>().ok())
        {
            assert_eq!(5 + body, max_len, "M.MAX_LEN.{tag} ({kind:?}) in {path}");
        }
    }
}
