//! What a request books and how it is settled: a rule's units per request (`cost =
//! "header:<name>"`, else 1), where its actual cost is read after the response (`settle =
//! "response-header:<name>"`, the response's header or trailer), and the difference to give
//! back or to take. No I/O: the front ends read the headers and call Redis.

use std::fmt;

use serde::{Deserialize, Deserializer};

use crate::engine::{Engine, Headers, Plan, Request};
use crate::render::{problem, Response};
use crate::rule::is_token;

/// The largest cost a header may ask for: the server's largest cost (`rl.max-cost`'s
/// default and ceiling), so a reservation the server would refuse is a 400 here.
pub const MAX_HEADER_COST: u64 = 1_000_000_000_000_000;

/// `cost = "header:<name>"`: the units a request of the rule reserves, from a request header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostFrom {
    /// The header, in lower case.
    pub header: String,
}

/// `settle = "response-header:<name>"`: the actual units, from the upstream's response
/// header or trailer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleFrom {
    /// The header (or trailer), in lower case.
    pub header: String,
}

fn header_named(text: &str, prefix: &str, field: &str) -> Result<String, String> {
    match text.strip_prefix(prefix) {
        Some(name) if is_token(name) => Ok(name.to_ascii_lowercase()),
        Some(name) => Err(format!("{field}: {name:?} is not a valid header name")),
        None => Err(format!(
            "{field}: expected \"{prefix}<name>\", got {text:?}"
        )),
    }
}

impl<'de> Deserialize<'de> for CostFrom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        header_named(&text, "header:", "cost")
            .map(|header| CostFrom { header })
            .map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for SettleFrom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        header_named(&text, "response-header:", "settle")
            .map(|header| SettleFrom { header })
            .map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for CostFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "header:{}", self.header)
    }
}

impl fmt::Display for SettleFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "response-header:{}", self.header)
    }
}

/// What one request books, per plan item (same order as [`Plan::items`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Booking {
    /// The units reserved on each item (1 unless its rule takes them from a header).
    pub units: Vec<u64>,
    /// Where each item's actual cost is read after the response (`None`: never settled).
    pub settle: Vec<Option<String>>,
}

/// What to do with one item's reservation once the response is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adjust {
    /// Nothing: not settled, exact, or the actual cost could not be read.
    Keep,
    /// Give back this many units (`RL.REFUND`).
    Refund(u64),
    /// Take this many more units, even over the limit (`FORCE`).
    Charge(u64),
}

/// How a reservation was settled, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleOutcome {
    /// The actual cost equals the reservation.
    Exact,
    /// Less was used: the rest goes back.
    Refund,
    /// More was used: the excess is taken.
    Charge,
    /// The header (or trailer) was absent: the reservation stands.
    Missing,
    /// The header was not an integer in `0..=MAX_HEADER_COST`: the reservation stands.
    Invalid,
}

impl SettleOutcome {
    /// The metric label.
    pub const fn name(self) -> &'static str {
        match self {
            SettleOutcome::Exact => "exact",
            SettleOutcome::Refund => "refund",
            SettleOutcome::Charge => "charge",
            SettleOutcome::Missing => "missing",
            SettleOutcome::Invalid => "invalid",
        }
    }
}

/// A header's value as a cost: one value (or equal repeats), plain ASCII digits, no sign,
/// within `0..=MAX_HEADER_COST`.
fn units_of(values: &[&[u8]]) -> Option<u64> {
    let first = values.first()?;
    if values.iter().any(|v| v.trim_ascii() != first.trim_ascii()) {
        return None;
    }
    let text = std::str::from_utf8(first.trim_ascii()).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().filter(|n| *n <= MAX_HEADER_COST)
}

impl Booking {
    /// True when some item is settled after the response.
    pub fn settles(&self) -> bool {
        self.settle.iter().any(Option::is_some)
    }

    /// True when every item reserves the same units (one atomic call can take them all).
    pub fn uniform(&self) -> Option<u64> {
        let first = *self.units.first().unwrap_or(&1);
        self.units.iter().all(|u| *u == first).then_some(first)
    }

    /// Each item's adjustment, the actual cost read from `headers` (the response's headers,
    /// or its trailers), and per settled header what happened.
    pub fn settlement(&self, headers: &dyn Headers) -> (Vec<Adjust>, Vec<(String, SettleOutcome)>) {
        let mut outcomes: Vec<(String, SettleOutcome)> = Vec::new();
        let adjust = self
            .settle
            .iter()
            .zip(&self.units)
            .map(|(header, &reserved)| {
                let Some(header) = header else {
                    return Adjust::Keep;
                };
                let values = headers.get_all(header);
                let (adjust, outcome) = match units_of(&values) {
                    None if values.is_empty() => (Adjust::Keep, SettleOutcome::Missing),
                    None => (Adjust::Keep, SettleOutcome::Invalid),
                    Some(actual) if actual < reserved => {
                        (Adjust::Refund(reserved - actual), SettleOutcome::Refund)
                    }
                    Some(actual) if actual > reserved => {
                        (Adjust::Charge(actual - reserved), SettleOutcome::Charge)
                    }
                    Some(_) => (Adjust::Keep, SettleOutcome::Exact),
                };
                if !outcomes.iter().any(|(h, _)| h == header) {
                    outcomes.push((header.clone(), outcome));
                }
                adjust
            })
            .collect();
        (adjust, outcomes)
    }
}

impl Engine {
    /// What `req` books on each item of its `plan`: a rule with `cost = "header:<name>"`
    /// reserves the header's value (1 without the header), every other item 1. A header
    /// that is not one positive integer up to [`MAX_HEADER_COST`] is refused with 400
    /// (nothing is taken).
    pub fn booking(
        &self,
        req: &Request<'_>,
        plan: &Plan,
        request_id: &str,
    ) -> Result<Booking, Response> {
        let mut booking = Booking {
            units: Vec::with_capacity(plan.items.len()),
            settle: Vec::with_capacity(plan.items.len()),
        };
        for item in &plan.items {
            let rule = match item.dimension {
                Some(_) => None,
                None => self
                    .rules
                    .iter()
                    .map(|(r, _)| r)
                    .find(|r| r.name == item.label),
            };
            let units = match rule.and_then(|r| r.cost.as_ref()) {
                None => 1,
                Some(from) => {
                    let values = req.headers.get_all(&from.header);
                    if values.is_empty() {
                        1
                    } else {
                        match units_of(&values).filter(|n| *n > 0) {
                            Some(n) => n,
                            None => return Err(bad_cost(&from.header, request_id)),
                        }
                    }
                }
            };
            booking.units.push(units);
            booking.settle.push(
                rule.and_then(|r| r.settle.as_ref())
                    .map(|s| s.header.clone()),
            );
        }
        Ok(booking)
    }
}

/// 400: the cost header is not one positive integer within bounds.
pub fn bad_cost(header: &str, request_id: &str) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": format!(
            "header {header} must be one positive integer up to {MAX_HEADER_COST}"
        ),
        "request_id": request_id,
    });
    problem(400, body, request_id)
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
