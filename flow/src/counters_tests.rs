use super::*;
use crate::record::Refusal;

fn counter(key: &str, units: u64) -> Counter {
    Counter {
        key: key.into(),
        units,
        shadow: false,
        admits: true,
        give_back: false,
        window_ms: 60_000,
        subject_len: key.len(),
    }
}

fn d(verdict: Verdict, remaining: u64, source: Source) -> Decided {
    Decided {
        verdict,
        remaining,
        reset_after_ms: 1_000,
        shadow: false,
        source,
    }
}

fn allowed(remaining: u64) -> Decided {
    d(Verdict::Allowed, remaining, Source::Redis)
}

fn denied(source: Source) -> Decided {
    d(
        Verdict::Denied {
            retry_after_ms: 500,
        },
        0,
        source,
    )
}

fn book(step: CounterStep) -> Vec<Take> {
    match step {
        CounterStep::Book(b) => {
            assert!(b.ban_reads.is_empty());
            b.takes
        }
        other => panic!("expected a book, got {other:?}"),
    }
}

fn done(step: CounterStep) -> Counted {
    match step {
        CounterStep::Done(c) => c,
        other => panic!("expected done, got {other:?}"),
    }
}

#[test]
fn counters_of_one_key_are_booked_once_with_their_units_added() {
    let (mut flow, step) = CounterFlow::start(
        vec![counter("a", 2), counter("b", 1), counter("a", 3)],
        "rls:d".into(),
    );
    let takes = book(step);
    assert_eq!(
        takes.iter().map(|t| (t.item, t.units)).collect::<Vec<_>>(),
        [(0, 5), (1, 1)]
    );
    let c = done(flow.booked(vec![allowed(5), allowed(9)], None));
    assert!(!c.refused);
    assert_eq!(
        c.decided,
        [Some(allowed(5)), Some(allowed(9)), Some(allowed(5))]
    );
    assert_eq!(
        c.record,
        Record::default(),
        "an allowed request leaves nothing"
    );
}

#[test]
fn past_one_book_a_refusal_gives_back_what_earlier_books_took_and_only_looks_after() {
    let mut counters: Vec<Counter> = (0..40).map(|i| counter(&format!("k{i}"), 2)).collect();
    counters[3].shadow = true;
    let (mut flow, step) = CounterFlow::start(counters, "rls:d".into());
    let first = book(step);
    assert_eq!(first.len(), MAX_KEYS_PER_BOOK);
    let second = book(flow.booked(vec![allowed(1); MAX_KEYS_PER_BOOK], None));
    assert!(second.iter().all(|t| t.units == 2));
    let mut answers = vec![allowed(1); MAX_KEYS_PER_BOOK];
    answers[4] = denied(Source::Redis);
    let third = book(flow.booked(answers, Some(4)));
    assert_eq!(third.len(), 40 - 2 * MAX_KEYS_PER_BOOK);
    assert!(
        third.iter().all(|t| t.units == 0),
        "refused: only looked at"
    );
    let c = done(flow.booked(vec![allowed(1); third.len()], None));
    assert!(c.refused);
    // The first book's enforced takes go back (not the shadow counter's), not the second's
    // (its slot refused: nothing taken there).
    let back: Vec<(usize, u64)> = c
        .record
        .give_back
        .iter()
        .map(|t| (t.item, t.units))
        .collect();
    let expected: Vec<(usize, u64)> = (0..MAX_KEYS_PER_BOOK)
        .filter(|&i| i != 3)
        .map(|i| (i, 2))
        .collect();
    assert_eq!(back, expected);
    assert_eq!(
        c.record.refusals,
        [Refusal {
            policy: "rls:d".into(),
            subject: "k20".into(),
            ban: None
        }]
    );
}

#[test]
fn a_counter_that_can_admit_nothing_is_answered_here_and_refuses_the_rest() {
    let mut zero = counter("z", 1);
    zero.admits = false;
    let huge = counter("h", MAX_UNITS);
    let (mut flow, step) = CounterFlow::start(
        vec![zero, huge.clone(), huge, counter("a", 1)],
        "rls:d".into(),
    );
    let takes = book(step);
    assert_eq!(
        takes
            .iter()
            .map(|t| (t.key.as_str(), t.units))
            .collect::<Vec<_>>(),
        [("a", 0)],
        "the 0 limit refused: the rest only looked at; over MAX_UNITS added up: not sent"
    );
    let c = done(flow.booked(vec![allowed(7)], None));
    assert!(c.refused);
    let never = || Decided {
        verdict: Verdict::Never,
        remaining: 0,
        reset_after_ms: 60_000,
        shadow: false,
        source: Source::Redis,
    };
    assert_eq!(
        c.decided[..3],
        [Some(never()), Some(never()), Some(never())]
    );
    assert_eq!(c.record.refusals[0].subject, "z");
    assert!(c.record.give_back.is_empty());
    // 0 units on a counter of limit 0: allowed.
    let mut zero = counter("z", 0);
    zero.admits = false;
    let (mut flow, step) = CounterFlow::start(vec![zero], "rls:d".into());
    let c = done(match step {
        CounterStep::Done(_) => step,
        _ => flow.looked(None),
    });
    assert!(!c.refused);
}

#[test]
fn counters_a_layer_did_not_ask_about_are_looked_at_once_each() {
    let (mut flow, step) = CounterFlow::start(
        vec![counter("a", 1), counter("b", 1), counter("b", 1)],
        "rls:d".into(),
    );
    book(step);
    let look = match flow.booked(
        vec![
            denied(Source::DenyCache),
            d(Verdict::Allowed, 0, Source::Unchecked),
        ],
        Some(0),
    ) {
        CounterStep::Look(takes) => takes,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        look.iter()
            .map(|t| (t.key.as_str(), t.units))
            .collect::<Vec<_>>(),
        [("b", 0)]
    );
    let c = done(flow.looked(Some(vec![allowed(3)])));
    assert_eq!(c.decided[1], Some(allowed(3)));
    assert_eq!(c.decided[2], Some(allowed(3)));
    assert_eq!(c.record.refusals.len(), 1, "a deny cache refusal counts");
    // A failed look leaves them unknown.
    let (mut flow, step) =
        CounterFlow::start(vec![counter("a", 1), counter("b", 1)], "rls:d".into());
    book(step);
    let _ = flow.booked(
        vec![
            denied(Source::Lease),
            d(Verdict::Allowed, 0, Source::Unchecked),
        ],
        Some(0),
    );
    let c = done(flow.looked(None));
    assert_eq!(c.decided[1].map(|d| d.source), Some(Source::Unchecked));
}

#[test]
fn negative_costs_are_given_back_first_and_never_booked() {
    let mut back = counter("a", 4);
    back.give_back = true;
    let (mut flow, step) = CounterFlow::start(vec![back, counter("b", 1)], "rls:d".into());
    let CounterStep::Return(takes) = step else {
        panic!("{step:?}")
    };
    assert_eq!((takes[0].key.as_str(), takes[0].units), ("a", 4));
    let takes = book(flow.returned(vec![allowed(10)]));
    assert_eq!(takes.len(), 1);
    let c = done(flow.booked(vec![allowed(2)], None));
    assert_eq!(c.decided, [Some(allowed(10)), Some(allowed(2))]);
}

#[test]
fn refusals_while_redis_is_unavailable_and_shadow_denials_count_nowhere() {
    let (mut flow, step) = CounterFlow::start(vec![counter("a", 1)], "rls:d".into());
    book(step);
    let c = done(flow.booked(vec![denied(Source::FailClosed)], Some(0)));
    assert!(c.refused);
    assert!(c.record.refusals.is_empty());
    let mut shadow = counter("a", 1);
    shadow.shadow = true;
    let (mut flow, step) = CounterFlow::start(vec![shadow], "rls:d".into());
    book(step);
    let c = done(flow.booked(
        vec![Decided {
            shadow: true,
            ..denied(Source::Redis)
        }],
        None,
    ));
    assert!(!c.refused);
    assert_eq!(c.record, Record::default());
}

#[test]
fn a_counters_subject_is_its_key_without_the_windows_suffix() {
    let mut c = counter("rl:rls:d:k=v:fixed_window:60", 1);
    c.subject_len = "rl:rls:d:k=v".len();
    assert_eq!(c.subject(), "rl:rls:d:k=v");
    c.subject_len = 999;
    assert_eq!(c.subject(), c.key, "not a place in the key: the whole key");
}
