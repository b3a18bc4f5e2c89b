//! Concurrency limiter: at most `limit` leases held at once, each expiring after `lease_ms`.
//!
//! A worker acquires a lease (named by an id of its choice) before it starts and releases
//! it when it is done. A worker that crashes never releases, so every lease also expires
//! `lease_ms` after it was last acquired: lost capacity comes back by itself. Acquiring an
//! id already held renews its lease (a heartbeat) and never needs a free slot.
//!
//! A lease is held while `now < expires_at`. The state keeps only live leases, ordered by
//! expiry, so it never holds more than `limit` leases of at most [`MAX_ID_LEN`] bytes.

use std::fmt;

use crate::algorithm::{positional, Algorithm, StateValue, StateView};
use crate::decision::{Decision, Outcome};
use crate::limits::{self, ParamError, Range};
use crate::rate::Numbers;
use crate::time::{Micros, Millis};

/// Largest `limit` (every call reads and rewrites all leases: its cost grows with it).
pub const MAX_LIMIT: u64 = 10_000;

/// Longest lease id, in bytes. Ids are arbitrary bytes (a UUID, a job name, ...).
pub const MAX_ID_LEN: usize = 256;

/// The range of `limit`: `limit must be an integer between 1 and 10000`.
pub const LIMIT: Range = Range {
    name: "limit",
    min: 1,
    max: MAX_LIMIT,
    spelling: crate::limits::Spelling::Integer,
};

/// The concurrency limiter in the [registry](crate::registry): `limit lease_ms`, then
/// `ACQUIRE id` or `RELEASE id` (not a rate limiter: a call takes a lease, not units).
pub struct Concurrency;

impl Algorithm for Concurrency {
    const NAME: &'static str = "CONCURRENCY";
    const COMMAND: &'static str = "RL.CONCURRENCY";
    const LABEL: &'static str = "concurrency";
    const TAG: u8 = b'C';
    const PARAMS: &'static [Range] = &[LIMIT, LEASE_MS];
    type Params = ConcurrencyParams;
    type State = ConcurrencyState;

    fn params(values: &[u64], _options: &[Option<u64>]) -> Result<Self::Params, ParamError> {
        let [limit, lease_ms] = positional(Self::PARAMS, values)?;
        Ok(ConcurrencyParams { limit, lease_ms })
    }

    fn numbers(p: &Self::Params) -> Numbers {
        Numbers::new(&[p.limit, p.lease_ms], &[])
    }

    /// The leases held now, and when (ms, rounded up) the soonest and the last of them
    /// expire (0 when none is held).
    fn view(state: &Self::State, now: Micros) -> StateView {
        // Soonest expiry first, so the last lease is the last to expire.
        let live = |l: &&Lease| l.expires_at > now;
        let expiry = |l: Option<&Lease>| l.map_or(0, |l| l.expires_at.ceil_millis().0);
        let next = expiry(state.leases.iter().find(live));
        let last = expiry(state.leases.last().filter(live));
        vec![
            ("held", StateValue::Int(state.held_at(now))),
            ("next_expiry_ms", StateValue::Int(next)),
            ("last_expiry_ms", StateValue::Int(last)),
        ]
    }
}

/// The range of `lease_ms`.
pub const LEASE_MS: Range = limits::duration_ms("lease_ms");

/// Validated concurrency parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConcurrencyParams {
    limit: u64,
    lease_ms: u64,
}

impl ConcurrencyParams {
    /// Checks every parameter against its documented range.
    ///
    /// ```
    /// use redis_rl_core::concurrency::ConcurrencyParams;
    /// assert!(ConcurrencyParams::new(20, 30_000).is_ok());
    /// assert!(ConcurrencyParams::new(0, 30_000).is_err());
    /// ```
    pub fn new(limit: u64, lease_ms: u64) -> Result<Self, ParamError> {
        Concurrency::params(&[limit, lease_ms], &[])
    }

    /// Most leases held at once.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// How long a lease lives unless renewed, in milliseconds.
    pub const fn lease_ms(&self) -> u64 {
        self.lease_ms
    }
}

/// A lease id that is not 1 to [`MAX_ID_LEN`] bytes long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdError;

impl fmt::Display for IdError {
    /// The public error text (without Redis's `ERR ` prefix).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "id must be between 1 and {MAX_ID_LEN} bytes long")
    }
}

impl std::error::Error for IdError {}

/// Returns `id` if it is a valid lease id (1 to [`MAX_ID_LEN`] bytes).
///
/// An empty id is refused: it is almost always an unset variable in the caller, and two
/// such workers would silently share one lease.
pub fn check_id(id: &[u8]) -> Result<&[u8], IdError> {
    if (1..=MAX_ID_LEN).contains(&id.len()) {
        Ok(id)
    } else {
        Err(IdError)
    }
}

/// One held lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The holder's id.
    pub id: Vec<u8>,
    /// When the lease ends unless renewed.
    pub expires_at: Micros,
}

/// The stored leases, soonest expiry first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConcurrencyState {
    /// The leases, ordered by `expires_at`.
    pub leases: Vec<Lease>,
}

impl ConcurrencyState {
    /// Leases held at `now` (not yet expired).
    pub fn held_at(&self, now: Micros) -> u64 {
        let held = self.leases.iter().filter(|l| l.expires_at > now).count();
        u64::try_from(held).unwrap_or(u64::MAX)
    }

    /// When the last lease expires (the epoch when none is held): the limiter is idle from
    /// then on, so its key can expire then.
    pub fn idle_at(&self) -> Micros {
        self.leases
            .iter()
            .map(|l| l.expires_at)
            .max()
            .unwrap_or_default()
    }
}

/// What a release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Release {
    /// The id held no live lease: nothing to write.
    NotHeld,
    /// The lease was released; the leases left, or `None` when none is held any more (the
    /// key can be deleted).
    Released(Option<ConcurrencyState>),
}

/// Acquires (or renews) the lease `id` at `now`.
///
/// Allowed when `id` already holds a live lease (renewed to `now + lease_ms`) or fewer than
/// `limit` leases are live. Denied otherwise, with `retry_after` the time until enough leases
/// expire for one more to fit (with the limit unchanged, the oldest one). The decision's
/// `remaining` is the free slots after the call; `reset_after` is always 0 (a concurrency
/// limiter has no refill). A denial returns no state: nothing is written.
///
/// ```
/// use redis_rl_core::concurrency::{acquire, ConcurrencyParams};
/// use redis_rl_core::{Micros, Millis, Outcome};
/// let params = ConcurrencyParams::new(1, 5_000).unwrap();
/// let (d, s) = acquire(None, Micros(0), &params, b"worker-1");
/// assert!(d.is_allowed());
/// let (d, _) = acquire(s, Micros(1_000_000), &params, b"worker-2");
/// assert_eq!(d.outcome, Outcome::Denied { retry_after: Millis(4_000) });
/// ```
pub fn acquire(
    state: Option<ConcurrencyState>,
    now: Micros,
    params: &ConcurrencyParams,
    id: &[u8],
) -> (Decision, Option<ConcurrencyState>) {
    let mut leases = live(state, now);
    let limit = params.limit;
    let held = leases.iter().any(|l| l.id == id);
    let count = |leases: &[Lease]| u64::try_from(leases.len()).unwrap_or(u64::MAX);
    let decision = |outcome, held: u64| Decision {
        outcome,
        limit,
        remaining: limit.saturating_sub(held),
        reset_after: Millis(0),
    };
    if !held && count(&leases) >= limit {
        // One more fits once `held - limit + 1` leases have expired: the soonest ones.
        let must_expire = count(&leases) - limit;
        let frees_a_slot = usize::try_from(must_expire)
            .ok()
            .and_then(|i| leases.get(i))
            .map_or(now, |l| l.expires_at);
        let retry_after = Micros(frees_a_slot.0.saturating_sub(now.0)).ceil_millis();
        return (
            decision(Outcome::Denied { retry_after }, count(&leases)),
            None,
        );
    }
    leases.retain(|l| l.id != id);
    let expires_at = Micros(now.0.saturating_add(params.lease_ms.saturating_mul(1000)));
    let at = leases.partition_point(|l| l.expires_at <= expires_at);
    leases.insert(
        at,
        Lease {
            id: id.to_vec(),
            expires_at,
        },
    );
    (
        decision(Outcome::Allowed, count(&leases)),
        Some(ConcurrencyState { leases }),
    )
}

/// Releases the lease `id` at `now`, if it is live.
///
/// ```
/// use redis_rl_core::concurrency::{acquire, release, ConcurrencyParams, Release};
/// use redis_rl_core::Micros;
/// let params = ConcurrencyParams::new(2, 5_000).unwrap();
/// let (_, s) = acquire(None, Micros(0), &params, b"job-7");
/// assert_eq!(release(s.clone(), Micros(1), b"job-8"), Release::NotHeld);
/// assert_eq!(release(s, Micros(1), b"job-7"), Release::Released(None));
/// ```
pub fn release(state: Option<ConcurrencyState>, now: Micros, id: &[u8]) -> Release {
    let mut leases = live(state, now);
    let before = leases.len();
    leases.retain(|l| l.id != id);
    if leases.len() == before {
        Release::NotHeld
    } else if leases.is_empty() {
        Release::Released(None)
    } else {
        Release::Released(Some(ConcurrencyState { leases }))
    }
}

/// The leases still held at `now`, soonest expiry first.
fn live(state: Option<ConcurrencyState>, now: Micros) -> Vec<Lease> {
    let mut leases = state.map(|s| s.leases).unwrap_or_default();
    leases.retain(|l| l.expires_at > now);
    // Already in order when we wrote it; a stable sort of sorted data is one linear pass.
    leases.sort_by_key(|l| l.expires_at);
    leases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::retry_ms;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn params(limit: u64, lease_ms: u64) -> ConcurrencyParams {
        ConcurrencyParams::new(limit, lease_ms).unwrap()
    }

    fn ms(v: u64) -> Micros {
        Millis(v).as_micros()
    }

    #[test]
    fn two_workers_spec() {
        let p = params(2, 1_000);
        let (d, s) = acquire(None, ms(0), &p, b"a");
        assert_eq!(
            (d.is_allowed(), d.remaining, d.reset_after),
            (true, 1, Millis(0))
        );
        let (d, s) = acquire(s, ms(100), &p, b"b");
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        let (d, none) = acquire(s.clone(), ms(200), &p, b"c");
        // "a" expires at 1000 ms.
        assert_eq!((retry_ms(&d), d.remaining), (800, 0));
        assert!(none.is_none());
        // Renewing "a" needs no free slot and moves it behind "b".
        let (d, s) = acquire(s, ms(300), &p, b"a");
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        let (d, _) = acquire(s.clone(), ms(400), &p, b"c");
        assert_eq!(retry_ms(&d), 700);
        // "b" expired at 1100 ms: "c" fits.
        let (d, s) = acquire(s, ms(1_100), &p, b"c");
        assert_eq!((d.is_allowed(), d.remaining), (true, 0));
        let s = s.unwrap();
        assert_eq!(s.idle_at(), ms(2_100));
        assert_eq!(
            s.leases.iter().map(|l| l.id.as_slice()).collect::<Vec<_>>(),
            vec![&b"a"[..], &b"c"[..]]
        );
    }

    #[test]
    fn release_frees_a_slot_at_once() {
        let p = params(1, 60_000);
        let (_, s) = acquire(None, ms(0), &p, b"a");
        assert!(!acquire(s.clone(), ms(1), &p, b"b").0.is_allowed());
        assert_eq!(release(s.clone(), ms(2), b"b"), Release::NotHeld);
        assert_eq!(release(s.clone(), ms(2), b"a"), Release::Released(None));
        // An expired lease is not held any more: releasing it releases nothing.
        assert_eq!(release(s, ms(60_000), b"a"), Release::NotHeld);
    }

    #[test]
    fn release_keeps_the_others_and_drops_expired_ones() {
        let (_, s) = acquire(None, ms(0), &params(3, 100), b"short");
        let (_, s) = acquire(s, ms(0), &params(3, 10_000), b"x");
        let (_, s) = acquire(s, ms(0), &params(3, 10_000), b"y");
        let Release::Released(Some(left)) = release(s, ms(500), b"x") else {
            panic!("x was held");
        };
        assert_eq!(left.leases.len(), 1);
        assert_eq!(left.leases[0].id, b"y");
    }

    #[test]
    fn lowering_the_limit_waits_for_enough_leases_to_expire() {
        let mut s = None;
        for (i, id) in [b"a", b"b", b"c", b"d"].iter().enumerate() {
            s = acquire(s, ms(i as u64 * 10), &params(4, 1_000), *id).1;
        }
        // Limit 2 with 4 held: 3 must expire ("a", "b", "c" at 1000, 1010, 1020 ms).
        let (d, _) = acquire(s.clone(), ms(100), &params(2, 1_000), b"e");
        assert_eq!((retry_ms(&d), d.remaining), (920, 0));
        // A holder over the new limit may still renew.
        let (d, _) = acquire(s, ms(100), &params(2, 1_000), b"d");
        assert!(d.is_allowed());
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn ids_are_bytes_of_bounded_length() {
        assert_eq!(check_id(b""), Err(IdError));
        assert!(check_id(&[0u8; MAX_ID_LEN]).is_ok());
        assert_eq!(check_id(&[0u8; MAX_ID_LEN + 1]), Err(IdError));
        assert_eq!(
            IdError.to_string(),
            "id must be between 1 and 256 bytes long"
        );
        let (_, s) = acquire(None, ms(0), &params(2, 1_000), b"\0\xff");
        assert!(acquire(s, ms(0), &params(1, 1_000), b"\0\xff")
            .0
            .is_allowed());
    }

    #[test]
    fn duplicate_ids_in_a_forged_state_are_one_holder() {
        let lease = |at: u64| Lease {
            id: b"a".to_vec(),
            expires_at: ms(at),
        };
        let forged = ConcurrencyState {
            leases: vec![lease(500), lease(100)],
        };
        let (d, s) = acquire(Some(forged.clone()), ms(0), &params(5, 1_000), b"a");
        assert_eq!(d.remaining, 4);
        assert_eq!(s.unwrap().leases.len(), 1);
        assert_eq!(release(Some(forged), ms(0), b"a"), Release::Released(None));
    }

    #[test]
    fn largest_parameters_do_not_overflow() {
        let p = params(MAX_LIMIT, limits::MAX_DURATION_MS);
        let (d, s) = acquire(None, Micros(u64::MAX - 1), &p, b"a");
        assert!(d.is_allowed());
        assert_eq!(s.unwrap().leases[0].expires_at, Micros(u64::MAX));
    }

    /// One step of a random run.
    #[derive(Clone, Debug)]
    enum Op {
        Acquire(u8),
        Release(u8),
    }

    fn ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
        let op = prop_oneof![
            3 => (0u8..8).prop_map(Op::Acquire),
            1 => (0u8..8).prop_map(Op::Release),
        ];
        prop::collection::vec((prop_oneof![Just(0u64), 0u64..400_000], op), 1..120)
    }

    proptest! {
        /// Against a model (id -> expiry): every decision, `remaining`, the bound (never more
        /// than `limit` live leases) and the retry promise for a new id (waiting
        /// `retry_after` is enough, 1 ms less is not).
        #[test]
        fn exact_against_the_model(limit in 1u64..6, lease_ms in 1u64..1_000, ops in ops()) {
            let p = params(limit, lease_ms);
            let mut state: Option<ConcurrencyState> = None;
            let mut model: HashMap<u8, u64> = HashMap::new();
            let mut now = 1_000_000u64;
            for (step, op) in ops {
                now += step;
                model.retain(|_, exp| *exp > now);
                let held = state.as_ref().map_or(0, |s| s.held_at(Micros(now)));
                prop_assert_eq!(held, model.len() as u64);
                match op {
                    Op::Acquire(id) => {
                        let expect = model.contains_key(&id) || (model.len() as u64) < limit;
                        let (d, next) = acquire(state.clone(), Micros(now), &p, &[id]);
                        prop_assert_eq!(d.is_allowed(), expect);
                        prop_assert_eq!(d.reset_after, Millis(0));
                        if expect {
                            model.insert(id, now + lease_ms * 1000);
                            let s = next.clone().unwrap();
                            prop_assert_eq!(s.leases.len(), model.len());
                            prop_assert!(s.leases.len() as u64 <= limit);
                            prop_assert!(s.leases.windows(2).all(|w| w[0].expires_at <= w[1].expires_at));
                        } else {
                            prop_assert!(next.is_none());
                            let Outcome::Denied { retry_after } = d.outcome else {
                                panic!("a denial must say when to retry");
                            };
                            let at = Micros(now + retry_after.as_micros().0);
                            prop_assert!(acquire(state.clone(), at, &p, &[id]).0.is_allowed());
                            let before = Micros(at.0 - 1_000);
                            prop_assert!(!acquire(state.clone(), before, &p, &[id]).0.is_allowed());
                        }
                        prop_assert_eq!(d.remaining, limit.saturating_sub(model.len() as u64));
                        state = next.or(state);
                    }
                    Op::Release(id) => {
                        let held = model.remove(&id).is_some();
                        match release(state.clone(), Micros(now), &[id]) {
                            Release::NotHeld => prop_assert!(!held),
                            Release::Released(next) => {
                                prop_assert!(held);
                                prop_assert_eq!(next.as_ref().map_or(0, |s| s.leases.len()), model.len());
                                state = next;
                            }
                        }
                    }
                }
            }
        }
    }
}
