//! The conformance suite of `redis_rl_testkit::conformance`, run for every algorithm of the
//! core's registry: what each command shares with the others (refusals, argument errors,
//! reply shape, storage, replication, atomicity) is checked here once; each algorithm's own
//! file keeps what is particular to it. The checks on one connection run under RESP2 and RESP3.

use redis_rl_core::Kind;
use redis_rl_testkit::conformance::*;
use redis_rl_testkit::*;

/// Runs `check` on a fresh dataset once per protocol (RESP2, then RESP3 after `HELLO 3`).
fn under_each_protocol(check: impl Fn(&mut redis::Connection)) {
    let server = Server::start();
    for protocol in PROTOCOLS {
        let mut c = server.client_speaking(protocol);
        query::<()>(&mut c, &["FLUSHALL"]);
        check(&mut c);
    }
}

#[test]
fn every_command_refuses_every_other_kind_of_key_untouched() {
    under_each_protocol(wrong_type_matrix);
}

#[test]
fn every_bad_argument_is_refused_with_its_text_and_changes_nothing() {
    under_each_protocol(|c| Kind::ALL.iter().for_each(|&kind| bad_arguments(c, kind)));
}

#[test]
fn the_edges_of_every_range_are_accepted() {
    under_each_protocol(|c| Kind::ALL.iter().for_each(|&kind| edges_accepted(c, kind)));
}

#[test]
fn a_fresh_key_replies_peeks_and_denies_alike() {
    under_each_protocol(|c| Kind::ALL.iter().for_each(|&kind| fresh_reply(c, kind)));
}

#[test]
fn a_limiter_is_one_plain_string_that_dump_and_restore_copy() {
    under_each_protocol(|c| Kind::ALL.iter().for_each(|&kind| plain_string(c, kind)));
}

#[test]
fn a_replica_holds_the_same_bytes_and_absolute_expiry() {
    for &kind in Kind::ALL {
        replica_matches(kind);
    }
}

#[test]
fn thirty_two_clients_admit_exactly_the_budget() {
    for &kind in Kind::ALL {
        clients_admit_exactly_the_budget(kind, 500);
    }
}

#[test]
fn thirty_two_clients_with_mixed_costs_form_one_chain() {
    for &kind in Kind::LIMITERS {
        mixed_costs_form_one_chain(kind, 500);
    }
}

#[test]
fn waiting_retry_after_is_enough() {
    let server = Server::start();
    let mut c = server.client();
    let checked = Kind::ALL
        .iter()
        .filter(|&&kind| waiting_retry_after_is_enough_for(&mut c, kind))
        .count();
    assert!(
        checked >= Kind::ALL.len() - 1,
        "only {checked} kinds checked"
    );
}
