//! The conformance suite of `redis_rl_testkit::conformance`, run for every algorithm of the
//! core's registry: what each command shares with the others (refusals, argument errors,
//! reply shape, storage, replication, atomicity) is checked here once; each algorithm's own
//! file keeps what is particular to it.

use redis_rl_core::Kind;
use redis_rl_testkit::conformance::*;
use redis_rl_testkit::*;

#[test]
fn every_command_refuses_every_other_kind_of_key_untouched() {
    let server = Server::start();
    wrong_type_matrix(&mut server.client());
}

#[test]
fn every_bad_argument_is_refused_with_its_text_and_changes_nothing() {
    let server = Server::start();
    let mut c = server.client();
    for &kind in Kind::ALL {
        bad_arguments(&mut c, kind);
    }
}

#[test]
fn the_edges_of_every_range_are_accepted() {
    let server = Server::start();
    let mut c = server.client();
    for &kind in Kind::ALL {
        edges_accepted(&mut c, kind);
    }
}

#[test]
fn a_fresh_key_replies_peeks_and_denies_alike() {
    let server = Server::start();
    let mut c = server.client();
    for &kind in Kind::ALL {
        fresh_reply(&mut c, kind);
    }
}

#[test]
fn a_limiter_is_one_plain_string_that_dump_and_restore_copy() {
    let server = Server::start();
    let mut c = server.client();
    for &kind in Kind::ALL {
        plain_string(&mut c, kind);
    }
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
