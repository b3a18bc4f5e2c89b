//! Decisions made on the server by the module's commands: `RL.<ALG>` for one key (a
//! `check_all` of one key too, and a hash slot's group of one key), one `RL.ALL` per hash
//! slot for several, `RL.REFUND` to give back what earlier slots took; sent
//! over the wire the server accepts (the module's commands, or the Lua twin as a function or
//! a script, see `wire.rs`).

use std::sync::Arc;

use futures_util::future::join_all;
use redis::{Cmd, Value};

use super::lua::check_range;
use super::wire::{Route, ServerImpl, Wire};
use super::{booking_of_one, parse_booking_of_one};
use super::{cost_at, unknown, AllMode, Check, Decided, Decider, EveryKey, Items, Refund};
use crate::error::{Error, Result};
use crate::limiter::decision::{self, Decision, Grant, MultiDecision};
use crate::transport::command;
use crate::transport::{is_unknown_command, Capabilities, Transport};
use redis_rl_core::AnyParams;

/// The module's commands over a [`Transport`], on the wire [`ServerImpl`] picks.
///
/// `check_all`: one key is its algorithm's own command (`RL.<ALG> key ... [COST n]`, on any
/// server: one key needs neither `RL.ALL` nor `RL.REFUND`). Several keys: with `RL.ALL` on
/// the server, one call per hash slot (one in all on a standalone server, atomic; keys of
/// different costs in the same call, `COSTS`; a slot's group of one key as its own command);
/// across slots, every slot at once (concurrently: one round trip of latency), refunding
/// (`RL.REFUND`) the slots that took their units when another one denies or fails. Without
/// `RL.ALL`: every key is
/// peeked first (nothing taken if one denies), then taken; a denial racing in between is
/// compensated with `RL.REFUND` when the server has it. The Lua twin has both.
#[derive(Debug)]
pub struct ServerDecider {
    transport: Arc<Transport>,
    wire: Wire,
}

type Item<'a> = (&'a str, &'a AnyParams);

/// One hash slot's `RL.ALL`: the indexes of its keys in the request, and its reply (the
/// index in the slot of its first denial, and its decisions in the slot's order).
struct SlotReply {
    members: Vec<usize>,
    reply: Result<(Option<usize>, Vec<Decision>)>,
}

/// Puts a slot's decisions at its keys' places among the request's `decisions`.
fn place(decisions: &mut [Decision], members: &[usize], slot_decisions: Vec<Decision>) {
    for (&i, d) in members.iter().zip(slot_decisions) {
        if let Some(slot) = decisions.get_mut(i) {
            *slot = d;
        }
    }
}

/// How a multi-key call reaches the server, and what the server offers there.
#[derive(Clone, Copy, Debug)]
struct Reach {
    route: Route,
    caps: Capabilities,
}

impl ServerDecider {
    /// Decisions over `transport`, by the module's commands or the Lua twin as `server_impl` says.
    pub fn new(transport: Arc<Transport>, server_impl: ServerImpl) -> Self {
        Self {
            transport,
            wire: Wire::new(server_impl),
        }
    }

    /// The implementation in use: asks the server on first use (an error leaves it unknown, so the
    /// next call asks again).
    pub async fn server_impl(&self) -> Result<ServerImpl> {
        Ok(match self.wire.route(&self.transport).await? {
            Route::Command => ServerImpl::Module,
            Route::Function | Route::Script => ServerImpl::Lua,
        })
    }

    /// `RL.RESET key` (the module's command or the twin's): true when the key held a
    /// limiter.
    pub async fn reset(&self, key: &str) -> Result<bool> {
        let route = self.wire.route(&self.transport).await?;
        let mut cmd = redis::cmd("RL.RESET");
        cmd.arg(key);
        match self.send_on(route, key, &cmd).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(Error::Reply {
                command: "RL.RESET",
                detail: format!("{other:?}"),
            }),
        }
    }

    /// `RL.STATE key` (the module's command or the twin's): the reply as sent, nil for a
    /// missing key.
    pub async fn state(&self, key: &str) -> Result<Value> {
        let route = self.wire.route(&self.transport).await?;
        let mut cmd = redis::cmd("RL.STATE");
        cmd.arg(key);
        self.send_on(route, key, &cmd).await
    }

    /// The route for calls on `algorithms`: the twin refuses policies whose waits it could
    /// not reply exactly, before any call.
    async fn route<'p>(
        &self,
        algorithms: impl IntoIterator<Item = &'p AnyParams>,
    ) -> Result<Route> {
        let route = self.wire.route(&self.transport).await?;
        if route != Route::Command {
            for algorithm in algorithms {
                check_range(algorithm)?;
            }
        }
        Ok(route)
    }

    /// Sends one of the module's commands by `route`.
    async fn send(&self, route: Route, cmd: &Cmd, slot: Option<u16>) -> Result<Value> {
        self.wire.send(&self.transport, route, cmd, slot).await
    }

    /// What the server offers: the twin has RL.ALL and RL.REFUND.
    async fn capabilities(&self, route: Route) -> Result<Capabilities> {
        if route != Route::Command {
            return Ok(Capabilities {
                rl_all: true,
                rl_refund: true,
            });
        }
        self.transport.capabilities().await
    }

    /// Sends `cmd`, a call on `key`, to the key's slot.
    async fn send_on(&self, route: Route, key: &str, cmd: &Cmd) -> Result<Value> {
        self.send(route, cmd, self.transport.slot_of(key)).await
    }

    async fn one(&self, call: Check<'_>) -> Result<Decision> {
        let route = self.route([call.algorithm]).await?;
        self.single(route, call).await
    }

    async fn single(&self, route: Route, call: Check<'_>) -> Result<Decision> {
        let cmd = command::single(call.key, call.algorithm, call.cost, call.peek);
        let v = self.send_on(route, call.key, &cmd).await?;
        decision::parse_single(call.algorithm.kind().command(), &v)
    }

    async fn upto(&self, call: Check<'_>) -> Result<Grant> {
        let command = call.algorithm.kind().command();
        if !call.algorithm.kind().upto() {
            return Err(Error::Config(format!(
                "{command} takes no UPTO (partial grants): use another algorithm"
            )));
        }
        let route = self.route([call.algorithm]).await?;
        let cmd = command::upto(call.key, call.algorithm, call.cost, call.peek);
        decision::parse_upto(command, &self.send_on(route, call.key, &cmd).await?)
    }

    async fn give_back(&self, units: Refund<'_>) -> Result<u64> {
        let route = self.route([units.algorithm]).await?;
        let cmd = command::refund(units.key, units.algorithm, units.amount);
        decision::parse_refund(&self.send_on(route, units.key, &cmd).await?)
    }

    async fn all(&self, items: &[Item<'_>], costs: &[u64]) -> Result<MultiDecision> {
        let route = self.route(items.iter().map(|(_, a)| *a)).await?;
        if let Some((&(key, algorithm), cost)) = booking_of_one(items, costs) {
            // Atomic by itself, and a denial takes nothing: no capabilities to ask, no
            // peek before the take, nothing to refund.
            let slot = self.transport.slot_of(key);
            return self.book_one(route, key, algorithm, cost, slot).await;
        }
        let reach = Reach {
            route,
            caps: self.capabilities(route).await?,
        };
        if reach.caps.rl_all {
            self.rl_all(reach, items, costs).await
        } else {
            self.peek_then_take(reach, items, costs).await
        }
    }

    /// All or nothing with RL.ALL: if a slot denies or fails, the slots that took their
    /// units are refunded. A denial wins over a failure (Redis did say no: the first
    /// denying slot in request order is reported); with failures only, the first error is
    /// returned. A slot that failed is not refunded: whether it took anything is unknown,
    /// and refunding what was not taken would give units away.
    async fn rl_all(
        &self,
        reach: Reach,
        items: &[Item<'_>],
        costs: &[u64],
    ) -> Result<MultiDecision> {
        let replies = self.rl_all_per_slot(reach.route, items, costs, None).await;
        let mut decisions: Vec<Decision> = items.iter().map(|(_, a)| unknown(a)).collect();
        let mut taken: Vec<usize> = Vec::new();
        let mut denied = None;
        let mut error = None;
        for SlotReply { members, reply } in replies {
            match reply {
                Ok((slot_denied, slot_decisions)) => {
                    place(&mut decisions, &members, slot_decisions);
                    match slot_denied {
                        Some(j) => denied = denied.or(members.get(j).copied()),
                        None => taken.extend(members),
                    }
                }
                Err(e) => {
                    if is_unknown_command(&e) {
                        // The module was replaced by one without RL.ALL: detect again later.
                        self.transport.forget_capabilities();
                    }
                    error = error.or(Some(e));
                }
            }
        }
        if denied.is_none() && error.is_none() {
            return Ok(MultiDecision {
                denied: None,
                decisions,
            });
        }
        self.refund(reach, items, &taken, costs).await;
        match (denied, error) {
            (None, Some(e)) => Err(e),
            (denied, _) => Ok(MultiDecision { denied, decisions }),
        }
    }

    /// [`Decider::every_key`]: every key's own decision, over the wire the server takes (the
    /// twin has both `PEEK` and `FORCE`); the first slot's error if a slot failed.
    async fn every_key_per_slot(
        &self,
        items: &[Item<'_>],
        costs: &[u64],
        mode: AllMode,
    ) -> Result<Vec<Decision>> {
        let route = self.route(items.iter().map(|(_, a)| *a)).await?;
        let replies = self.rl_all_per_slot(route, items, costs, Some(mode)).await;
        let mut decisions: Vec<Decision> = items.iter().map(|(_, a)| unknown(a)).collect();
        for SlotReply { members, reply } in replies {
            let (_, slot_decisions) = reply?;
            place(&mut decisions, &members, slot_decisions);
        }
        Ok(decisions)
    }

    /// One `RL.ALL` per hash slot of `items` (`costs[i]` on `items[i]`; `mode` as
    /// [`command::all`] takes it), every slot asked at once: one round trip of latency
    /// however many slots the request spans. The replies in slot order.
    async fn rl_all_per_slot(
        &self,
        route: Route,
        items: &[Item<'_>],
        costs: &[u64],
        mode: Option<AllMode>,
    ) -> Vec<SlotReply> {
        if !self.transport.is_cluster() {
            // One server, one call: no grouping by slot, no concurrent calls to join.
            let reply = self.slot_call(route, items, costs, mode, None).await;
            let members = (0..items.len()).collect();
            return vec![SlotReply { members, reply }];
        }
        let keys: Vec<&str> = items.iter().map(|(k, _)| *k).collect();
        let groups = command::slot_groups(&keys, self.transport.is_cluster());
        let calls = groups.into_iter().map(|(slot, members)| async move {
            let group: Vec<Item<'_>> = members
                .iter()
                .filter_map(|&i| items.get(i).copied())
                .collect();
            let group_costs: Vec<u64> = members.iter().map(|&i| cost_at(costs, i)).collect();
            let reply = self
                .slot_call(route, &group, &group_costs, mode, slot)
                .await;
            SlotReply { members, reply }
        });
        join_all(calls).await
    }

    /// One slot's call: a booking (no `mode`) of one key as its algorithm's own command,
    /// else `RL.ALL` ([`command::all`]). The index in `items` of the first denial, and the
    /// decisions in `items`' order.
    async fn slot_call(
        &self,
        route: Route,
        items: &[Item<'_>],
        costs: &[u64],
        mode: Option<AllMode>,
        slot: Option<u16>,
    ) -> Result<(Option<usize>, Vec<Decision>)> {
        if let (None, Some((&(key, algorithm), cost))) = (mode, booking_of_one(items, costs)) {
            let booked = self.book_one(route, key, algorithm, cost, slot).await?;
            return Ok((booked.denied, booked.decisions));
        }
        let cmd = command::all(items, costs, mode);
        let v = self.send(route, &cmd, slot).await?;
        decision::parse_all(&v, items.len())
    }

    /// A booking of `cost` units of `key` alone: `RL.<ALG> key ... [COST n]` to `slot`, read
    /// as a `check_all` of one key (see `one_key.rs`).
    async fn book_one(
        &self,
        route: Route,
        key: &str,
        algorithm: &AnyParams,
        cost: u64,
        slot: Option<u16>,
    ) -> Result<MultiDecision> {
        let cmd = command::single(key, algorithm, cost, false);
        let v = self.send(route, &cmd, slot).await?;
        parse_booking_of_one(algorithm.kind().command(), &v)
    }

    /// Without RL.ALL: peek every key (concurrently, pipelined on the one connection),
    /// then take every key; refund on a racing denial.
    async fn peek_then_take(
        &self,
        reach: Reach,
        items: &[Item<'_>],
        costs: &[u64],
    ) -> Result<MultiDecision> {
        let peeks = self.singles(reach.route, items, costs, true).await?;
        if let Some(i) = peeks.iter().position(|d| d.is_denied()) {
            return Ok(MultiDecision {
                denied: Some(i),
                decisions: peeks,
            });
        }
        let taken = self.singles(reach.route, items, costs, false).await?;
        let denied = taken.iter().position(|d| d.is_denied());
        if denied.is_some() {
            let allowed: Vec<usize> = (0..taken.len())
                .filter(|&j| taken.get(j).is_some_and(|d| !d.is_denied()))
                .collect();
            self.refund(reach, items, &allowed, costs).await;
        }
        Ok(MultiDecision {
            denied,
            decisions: taken,
        })
    }

    async fn singles(
        &self,
        route: Route,
        items: &[Item<'_>],
        costs: &[u64],
        peek: bool,
    ) -> Result<Vec<Decision>> {
        let calls = items.iter().enumerate().map(|(i, &(key, algorithm))| {
            let call = Check {
                key,
                algorithm,
                cost: cost_at(costs, i),
                peek,
            };
            self.single(route, call)
        });
        join_all(calls).await.into_iter().collect()
    }

    /// Gives back their costs on the keys at `indexes`, best effort (errors are logged).
    async fn refund(&self, reach: Reach, items: &[Item<'_>], indexes: &[usize], costs: &[u64]) {
        let indexes: Vec<usize> = indexes
            .iter()
            .copied()
            .filter(|&i| cost_at(costs, i) > 0)
            .collect();
        if indexes.is_empty() {
            return;
        }
        if !reach.caps.rl_refund {
            tracing::debug!(
                keys = indexes.len(),
                "server has no RL.REFUND: units taken on other slots stay taken"
            );
            return;
        }
        let calls = indexes
            .iter()
            .filter_map(|&i| Some((items.get(i)?, cost_at(costs, i))))
            .map(|((key, algorithm), cost)| async move {
                let cmd = command::refund(key, algorithm, cost);
                if let Err(e) = self.send_on(reach.route, key, &cmd).await {
                    self.transport.log_error("RL.REFUND", &e);
                }
            });
        join_all(calls).await;
    }
}

impl Decider for ServerDecider {
    fn check<'a>(&'a self, call: Check<'a>) -> Decided<'a, Decision> {
        Box::pin(self.one(call))
    }

    fn check_all<'a>(&'a self, items: Items<'a>, cost: u64) -> Decided<'a, MultiDecision> {
        Box::pin(async move { self.all(items, &vec![cost; items.len()]).await })
    }

    fn check_all_costs<'a>(
        &'a self,
        items: Items<'a>,
        costs: &'a [u64],
    ) -> Decided<'a, MultiDecision> {
        Box::pin(self.all(items, costs))
    }

    fn take_upto<'a>(&'a self, call: Check<'a>) -> Decided<'a, Grant> {
        Box::pin(self.upto(call))
    }

    fn refund<'a>(&'a self, units: Refund<'a>) -> Decided<'a, u64> {
        Box::pin(self.give_back(units))
    }

    fn every_key<'a>(&'a self, call: EveryKey<'a>) -> Decided<'a, Vec<Decision>> {
        Box::pin(self.every_key_per_slot(call.items, call.costs, call.mode))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::super::ServerImpl;
    use crate::limiter::decision::Source;
    use crate::limiter::policy::Policy;
    use crate::testing::*;
    use crate::Limiter;

    #[tokio::test(start_paused = true)]
    async fn check_all_sends_one_rl_all_on_a_standalone_server() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.ALL" => all_reply(0, vec![ints(&[2, 1, 0, 500]), ints(&[5, 3, 0, 100])]),
            _ => Value::Nil,
        });
        let l = limiter(&mock);
        let items = [
            ("rl:{a}", Policy::sliding(2, 1_000).unwrap()),
            ("rl:{b}", Policy::token_bucket(5, 1, 100).unwrap()),
        ];
        let md = l.check_all(&items).await;
        assert!(md.allows());
        assert_eq!(md.decisions[1].remaining, 3);
        l.check_all(&items).await;
        let cmds = mock.commands();
        assert_eq!(cmds[0], ["COMMAND", "INFO", "RL.ALL", "RL.REFUND"]);
        assert_eq!(
            cmds[1],
            [
                "RL.ALL",
                "2",
                "rl:{a}",
                "rl:{b}",
                "SLIDING",
                "2",
                "1000",
                "TOKENBUCKET",
                "5",
                "1",
                "100"
            ]
        );
        assert_eq!(
            mock.names(),
            ["COMMAND", "RL.ALL", "RL.ALL"],
            "capabilities detected once"
        );
    }

    /// Keys of different costs are one RL.ALL with COSTS: a denial takes nothing anywhere,
    /// so nothing is given back (no call per cost, no refund).
    #[tokio::test(start_paused = true)]
    async fn different_costs_are_one_rl_all_and_a_denial_refunds_nothing() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.ALL" => all_reply(2, vec![ints(&[10, 9, 0, 1]), ints(&[10, 3, 400, 1])]),
            _ => allow(),
        });
        let l = limiter(&mock);
        let p = Policy::sliding(10, 60_000).unwrap();
        let md = l.check_all_units(&[("a", p), ("b", p)], &[1, 5]).await;
        assert_eq!(md.denied, Some(1));
        assert_eq!(
            mock.commands()[1..],
            [[
                "RL.ALL", "2", "a", "b", "SLIDING", "10", "60000", "SLIDING", "10", "60000",
                "COSTS", "1", "5"
            ]]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn across_slots_a_denial_refunds_the_slots_that_took() {
        let mock = Mock::new(true, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            "RL.ALL" => all_reply(0, vec![ints(&[10, 9, 0, 1]); w[1].parse().unwrap()]),
            "RL.REFUND" => ints(&[1, 10, 10, 0, 0]),
            // The slots of one key: their algorithm's own command; the ip key denies.
            "RL.SLIDING" if w[1].starts_with("rl:{ip") => ints(&[0, 100, 0, 2_500, 60_000]),
            "RL.SLIDING" => ints(&[1, 10, 9, 0, 1]),
            _ => Value::Nil,
        });
        let l = limiter(&mock);
        let p = Policy::sliding(10, 60_000).unwrap();
        let items = [
            ("rl:{k:1}:key", p),
            ("rl:{ip:1.2.3.4}", Policy::sliding(100, 60_000).unwrap()),
            ("rl:{k:1}:ep:/a", p),
            ("rl:{global}", p),
        ];
        let md = l.check_all_n(&items, 2).await;
        assert_eq!(md.denied, Some(1));
        assert_eq!(md.retry_after(), Some(Duration::from_millis(2_500)));
        let log = mock.log.lock().unwrap().clone();
        let sent: Vec<&Vec<String>> = log.iter().map(|(w, _)| w).collect();
        assert_eq!(
            *sent[1],
            [
                "RL.ALL",
                "2",
                "rl:{k:1}:key",
                "rl:{k:1}:ep:/a",
                "SLIDING",
                "10",
                "60000",
                "SLIDING",
                "10",
                "60000",
                "COST",
                "2"
            ]
        );
        assert_eq!(log[1].1, Some(redis::cluster_routing::get_slot(b"k:1")));
        assert_eq!(
            *sent[2],
            ["RL.SLIDING", "rl:{ip:1.2.3.4}", "100", "60000", "COST", "2"]
        );
        assert_eq!(
            log[2].1,
            Some(redis::cluster_routing::get_slot(b"ip:1.2.3.4"))
        );
        // Every slot was asked at once: the global key's slot too, before any refund.
        assert_eq!(
            *sent[3],
            ["RL.SLIDING", "rl:{global}", "10", "60000", "COST", "2"]
        );
        assert_eq!(log[3].1, Some(redis::cluster_routing::get_slot(b"global")));
        assert_eq!(md.decisions[1].limit, 100);
        assert_eq!(md.decisions[3].remaining, 9);
        let refunds: Vec<&Vec<String>> = sent
            .iter()
            .filter(|w| w[0] == "RL.REFUND")
            .copied()
            .collect();
        assert_eq!(
            refunds.len(),
            3,
            "both keys of the first slot and the global key"
        );
        assert!(refunds.contains(&&vec![
            "RL.REFUND".to_string(),
            "rl:{k:1}:key".into(),
            "SLIDING".into(),
            "10".into(),
            "60000".into(),
            "COST".into(),
            "2".into()
        ]));
        assert!(refunds.iter().any(|w| w[1] == "rl:{global}"));
        assert!(
            !refunds.iter().any(|w| w[1].starts_with("rl:{ip")),
            "the denying slot took nothing"
        );
    }

    /// The slots are asked concurrently: with a server that takes 10 ms per call, a
    /// request over three slots takes 10 ms, not 30.
    #[tokio::test(start_paused = true)]
    async fn slots_are_asked_concurrently() {
        let mock = Mock::new(true, |w| match w[0].as_str() {
            "COMMAND" => caps(true),
            _ => ints(&[1, 10, 9, 0, 1]),
        });
        mock.delay(Duration::from_millis(10));
        let l = limiter(&mock);
        let p = Policy::sliding(10, 60_000).unwrap();
        let items = [("rl:{a}", p), ("rl:{b}", p), ("rl:{c}", p)];
        l.check_all(&items).await; // detects the capabilities
        let start = tokio::time::Instant::now();
        let md = l.check_all(&items).await;
        assert_eq!(start.elapsed(), Duration::from_millis(10));
        assert!(md.decisions.iter().all(|d| d.source == Source::Redis));
    }

    /// A failure in one slot and a denial in another: the denial is the answer, and only
    /// the slot that took is refunded.
    #[tokio::test(start_paused = true)]
    async fn a_denial_wins_over_a_failure_and_the_failed_slot_is_not_refunded() {
        let mock = Mock::new(true, |w| match (w[0].as_str(), w[1].as_str()) {
            ("COMMAND", _) => caps(true),
            ("RL.REFUND", _) => ints(&[1, 10, 10, 0, 0]),
            // Each slot holds one key: its algorithm's own command.
            (_, "rl:{b}") => Value::SimpleString("-ERR boom".into()),
            (_, "rl:{c}") => ints(&[0, 10, 0, 300, 1]),
            _ => ints(&[1, 10, 9, 0, 1]),
        });
        let l = limiter(&mock);
        let p = Policy::sliding(10, 60_000).unwrap();
        let md = l
            .check_all(&[("rl:{a}", p), ("rl:{b}", p), ("rl:{c}", p)])
            .await;
        assert_eq!(md.denied, Some(2));
        let refunds: Vec<Vec<String>> = mock
            .commands()
            .into_iter()
            .filter(|w| w[0] == "RL.REFUND")
            .collect();
        assert_eq!(refunds.len(), 1);
        assert_eq!(refunds[0][1], "rl:{a}");
        assert_eq!(md.retry_after(), Some(Duration::from_millis(300)));
    }

    /// A forced charge over two slots: one RL.ALL ... FORCE per slot, each key its own cost,
    /// each decision back at its key's place in the request.
    #[tokio::test(start_paused = true)]
    async fn every_key_is_one_rl_all_per_slot_answered_in_request_order() {
        let mock = Mock::new(true, |w| match w[0].as_str() {
            "RL.ALL" if w[2] == "rl:{a}:1" => {
                all_reply(0, vec![ints(&[10, 1, 0, 1]), ints(&[10, 2, 0, 1])])
            }
            "RL.ALL" => all_reply(0, vec![ints(&[10, 3, 0, 1])]),
            _ => Value::Nil,
        });
        let l = limiter(&mock);
        let p = Policy::fixed(10, 1_000).unwrap();
        let items = [("rl:{a}:1", &p), ("rl:{b}", &p), ("rl:{a}:2", &p)];
        let forced = l.force_all_units(&items, &[3, 5, 7]).await.unwrap();
        let left: Vec<u64> = forced.iter().map(|d| d.remaining).collect();
        assert_eq!(left, [1, 3, 2]);
        let spec = ["FIXED", "10", "1000"];
        let mut slot_a = vec!["RL.ALL", "2", "rl:{a}:1", "rl:{a}:2"];
        slot_a.extend(spec.iter().chain(&spec));
        slot_a.extend(["COSTS", "3", "7", "FORCE"]);
        let mut slot_b = vec!["RL.ALL", "1", "rl:{b}"];
        slot_b.extend(spec);
        slot_b.extend(["COST", "5", "FORCE"]);
        assert_eq!(mock.commands(), [slot_a, slot_b]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_rl_all_every_key_is_peeked_before_any_is_taken() {
        let mock = Mock::new(false, |w| match w[0].as_str() {
            "COMMAND" => caps(false),
            _ if w[1] == "b" => deny(700),
            _ => allow(),
        });
        let l = limiter(&mock);
        let p = Policy::sliding(10, 1_000).unwrap();
        let md = l.check_all(&[("a", p), ("b", p)]).await;
        assert_eq!(md.denied, Some(1));
        let cmds = mock.commands();
        assert_eq!(cmds.len(), 3);
        assert!(
            cmds[1..].iter().all(|w| w.last().unwrap() == "PEEK"),
            "{cmds:?}"
        );

        mock.clear();
        let md = l.check_all(&[("a", p), ("c", p)]).await;
        assert!(md.allows());
        let cmds = mock.commands();
        assert_eq!(cmds.len(), 4, "two peeks, two takes: {cmds:?}");
        assert_eq!(cmds[2], ["RL.SLIDING", "a", "10", "1000"]);
    }
    /// A booking of one key is its algorithm's own command, as the sans-I/O op sends it: no
    /// capabilities asked, the cost as `COST n`, the reply read as RL.ALL's of one key was
    /// (the key's decision, denied at index 0); the denial goes to the deny cache as before.
    #[tokio::test(start_paused = true)]
    async fn a_check_all_of_one_key_is_its_algorithms_own_command() {
        let mock = Mock::new(false, |w| match w[1].as_str() {
            "ok" => ints(&[1, 5, 2, 0, 1_600]),
            "full" => ints(&[0, 5, 1, 400, 1_800]),
            "never" => ints(&[0, 5, 5, -1, 0]),
            _ => Value::SimpleString("-ERR boom".into()),
        });
        let l = limiter(&mock);
        let p = Policy::gcra(5, 1_000, Some(8)).unwrap();
        let md = l.check_all_units(&[("ok", p)], &[3]).await;
        assert_eq!(md.denied, None);
        assert_eq!(
            (
                md.decisions.len(),
                md.decisions[0].remaining,
                md.decisions[0].limit
            ),
            (1, 2, 5)
        );
        let md = l.check_all_n(&[("full", p)], 4).await;
        assert_eq!(md.denied, Some(0));
        let d = md.decisions[0];
        assert_eq!(
            (d.retry_after(), d.remaining, d.reset_after, d.source),
            (
                Some(Duration::from_millis(400)),
                1,
                Duration::from_millis(1_800),
                Source::Redis
            )
        );
        assert_eq!(md.retry_after(), Some(Duration::from_millis(400)));
        let md = l.check_all(&[("never", p)]).await;
        assert_eq!((md.denied, md.retry_after()), (Some(0), None));
        assert_eq!(
            mock.commands(),
            [
                vec!["RL.GCRA", "ok", "5", "1000", "BURST", "8", "COST", "3"],
                vec!["RL.GCRA", "full", "5", "1000", "BURST", "8", "COST", "4"],
                vec!["RL.GCRA", "never", "5", "1000", "BURST", "8"],
            ]
        );
        mock.clear();
        // The denial is in the deny cache: the same booking is refused without a call.
        let md = l.check_all_n(&[("full", p)], 4).await;
        assert_eq!(md.decisions[0].source, Source::DenyCache);
        assert!(mock.commands().is_empty());
        // A server error goes to the failure mode (fail open by default), as RL.ALL's did.
        let md = l.check_all(&[("error", p)]).await;
        assert!(md.allows());
        assert_ne!(md.decisions[0].source, Source::Redis);
        // A look or a forced booking of one key stays RL.ALL (PEEK, FORCE).
        mock.clear();
        assert!(l.peek_all_units(&[("ok", &p)], &[2]).await.is_err());
        assert!(l.force_all_units(&[("ok", &p)], &[2]).await.is_err());
        let all = |mode: &'static str| {
            let mut w = vec!["RL.ALL", "1", "ok", "GCRA", "5", "1000", "BURST", "8"];
            w.extend(["COST", "2", mode]);
            w
        };
        assert_eq!(mock.commands(), [all("PEEK"), all("FORCE")]);
    }

    /// On the Lua twin the booking of one key is the twin's run of the algorithm's command,
    /// `FCALL rl 1 key RL.<ALG> ...` (one key, so the key's own slot on a cluster).
    #[tokio::test(start_paused = true)]
    async fn on_the_twin_a_booking_of_one_key_calls_its_algorithm() {
        let mock = Mock::new(true, |w| match w[0].as_str() {
            "FCALL" => ints(&[0, 10, 0, 700, 1_000]),
            _ => Value::Nil,
        });
        let l = Limiter::builder()
            .server_impl(ServerImpl::Lua)
            .backend(mock.clone());
        let p = Policy::sliding(10, 1_000).unwrap();
        let md = l.check_all_n(&[("rl:{u:1}", p)], 2).await;
        assert_eq!(
            (md.denied, md.retry_after()),
            (Some(0), Some(Duration::from_millis(700)))
        );
        let log = mock.log.lock().unwrap().clone();
        assert_eq!(
            log,
            [(
                [
                    "FCALL",
                    "rl",
                    "1",
                    "rl:{u:1}",
                    "RL.SLIDING",
                    "10",
                    "1000",
                    "COST",
                    "2"
                ]
                .map(String::from)
                .to_vec(),
                Some(redis::cluster_routing::get_slot(b"u:1"))
            )]
        );
    }
}
