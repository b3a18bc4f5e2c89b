//! Proves that a decision of the fixed-size algorithms allocates nothing: a counting global
//! allocator counts every allocation made on the calling thread while `check` runs.
//!
//! The counter is per thread, so the test harness and tests running in parallel on other
//! threads do not disturb it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use redis_rl_core::fixed_window::{self, FixedWindowParams};
use redis_rl_core::gcra::{self, GcraParams};
use redis_rl_core::sliding_log::{self, SlidingLogParams};
use redis_rl_core::sliding_window::{self, SlidingWindowParams};
use redis_rl_core::token_bucket::{self, TokenBucketParams};
use redis_rl_core::{Decision, Micros};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the thread-local may already be gone while a thread shuts down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs, and its result.
fn allocations<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = std::hint::black_box(f());
    (ALLOCATIONS.with(Cell::get) - before, out)
}

const T0: Micros = Micros(1_700_000_000_000_000);

/// For one algorithm: a new key, an allowed call on a stored state, a denial and an
/// impossible cost all allocate nothing.
fn assert_no_allocation<S: Copy>(
    name: &str,
    limit: u64,
    check: impl Fn(Option<S>, Micros, u64) -> (Decision, Option<S>),
) {
    let (n, (d, first)) = allocations(|| check(None, T0, 1));
    assert!(d.is_allowed(), "{name}: first call");
    assert_eq!(n, 0, "{name}: new key allocated");

    let (n, (d, _)) = allocations(|| check(first, Micros(T0.0 + 1), 1));
    assert!(d.is_allowed(), "{name}: second call");
    assert_eq!(n, 0, "{name}: allowed call allocated");

    let (n, (d, full)) = allocations(|| check(first, Micros(T0.0 + 1), limit - 1));
    assert!(d.is_allowed(), "{name}: filling call");
    assert_eq!(n, 0, "{name}: filling call allocated");

    let (n, (d, none)) = allocations(|| check(full, Micros(T0.0 + 2), 1));
    assert!(!d.is_allowed() && none.is_none(), "{name}: denial");
    assert_eq!(n, 0, "{name}: denied call allocated");

    let (n, (d, _)) = allocations(|| check(first, Micros(T0.0 + 2), limit + 1));
    assert!(!d.is_allowed(), "{name}: impossible cost");
    assert_eq!(n, 0, "{name}: impossible cost allocated");
}

#[test]
fn the_counter_sees_allocations() {
    let (n, v) = allocations(|| vec![1u8; 64]);
    assert_eq!(v.len(), 64);
    assert!(n >= 1);
}

#[test]
fn token_bucket_decisions_do_not_allocate() {
    let p = TokenBucketParams::new(1_000, 1_000, 60_000).unwrap();
    assert_no_allocation("token_bucket", 1_000, |s, now, cost| {
        token_bucket::check(s, now, &p, cost)
    });
}

#[test]
fn sliding_window_decisions_do_not_allocate() {
    let p = SlidingWindowParams::new(1_000, 60_000).unwrap();
    assert_no_allocation("sliding_window", 1_000, |s, now, cost| {
        sliding_window::check(s, now, &p, cost)
    });
}

#[test]
fn fixed_window_decisions_do_not_allocate() {
    let p = FixedWindowParams::new(1_000, 60_000).unwrap();
    assert_no_allocation("fixed_window", 1_000, |s, now, cost| {
        fixed_window::check(s, now, &p, cost)
    });
}

#[test]
fn gcra_decisions_do_not_allocate() {
    let p = GcraParams::new(1_000, 60_000, None).unwrap();
    assert_no_allocation("gcra", 1_000, |s, now, cost| gcra::check(s, now, &p, cost));
}

/// The log's state owns a `Vec`, so it is not allocation-free in general: a new log
/// allocates its first entry, and an append to a full `Vec` grows it. What the check itself
/// guarantees: with a stored log that has room for one more entry, an allowed call, a denial
/// and an impossible cost allocate nothing (decoding the stored value is the glue's cost).
#[test]
fn sliding_log_decisions_allocate_only_to_grow_the_log() {
    let p = SlidingLogParams::new(100, 60_000).unwrap();
    let (n, (_, first)) = allocations(|| sliding_log::check(None, T0, &p, 1));
    assert!(n <= 1, "new log: {n} allocations");

    let mut state = first.unwrap();
    state.entries.reserve(8);
    let (n, (d, next)) = allocations(|| sliding_log::check(Some(state), Micros(T0.0 + 1), &p, 99));
    assert!(d.is_allowed());
    assert_eq!(n, 0, "allowed append with spare capacity allocated");

    let full = next.unwrap();
    let (n, (d, _)) = allocations(|| sliding_log::check(Some(full), Micros(T0.0 + 2), &p, 1));
    assert!(!d.is_allowed());
    assert_eq!(n, 0, "denied call allocated");
}
