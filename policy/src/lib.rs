//! The redis-rl policy engine: one owner of the configuration, the rules and the keys,
//! asked by every front end (rl-gateway, the tower/axum middleware, the Python ASGI
//! middleware, forward auth) so the same TOML gives the same keys, decisions, headers
//! and error texts everywhere. No I/O: text in, plans and responses out.
//!
//! Per request: [`Engine::admit`] (the API key, the client, access lists: maybe a 400 or
//! 403), the front end finds the key's tier, [`Engine::plan`] (every key and window the
//! request is limited on: the dimensions, then the matching [`Rule`]s), the front end
//! decides the plan in one atomic call (`RL.ALL`), and [`render`] writes the decision.
//!
//! ```
//! use redis_rl_policy::{Config, Engine, Request};
//! let config = Config::from_toml(r#"
//! [[rules]]
//! name = "login"
//! paths = ["/login"]
//! methods = ["POST"]
//! key = ["ip"]
//! limits = ["5/minute", "100/day"]
//! "#).unwrap();
//! let engine = Engine::new(config, &[]).unwrap();
//! let headers: Vec<(String, Vec<u8>)> = vec![];
//! let req = Request { method: "POST", path: "/login/", host: None, headers: &headers,
//!     peer: Some("192.0.2.1".parse().unwrap()), route: None };
//! let redis_rl_policy::Admission::Limit(id) = engine.admit(&req, "r1") else { panic!() };
//! let plan = engine.plan(&req, &id, None);
//! let keys: Vec<&str> = plan.items.iter().map(|i| i.key.as_str()).collect();
//! assert_eq!(keys, ["rl:{ip:192.0.2.1}", "rl:{ip:192.0.2.1}:ep:/login", "rl:{global}",
//!     "rl:{ip:192.0.2.1}:r:login:1m", "rl:{ip:192.0.2.1}:r:login:1d"]);
//! ```

mod access;
mod ban;
mod cost;
mod debt;
pub mod delay;
mod engine;
mod explain;
mod identity;
mod key_digest;
mod key_part;
mod limit;
mod load;
mod path;
mod rate;
mod render;
mod rule;
mod schema;
mod text;
mod window_text;

pub use access::{Access, AccessList};
pub use ban::{
    ban_index_key, ban_index_member, parse_ban_index_member, render_ban, top_key, Ban, BanKeys,
    BanTarget, BAN_INDEX_MAX, DEFAULT_FORGET_MS, DEFAULT_MAX_FOR_MS, TOP_ENTRIES, TOP_MINUTES,
};
pub use cost::{bad_cost, Adjust, Booking, CostFrom, SettleFrom, SettleOutcome, MAX_HEADER_COST};
pub use debt::{debt_hold_ms, forgets_debt, DEBT_HOLD_MAX_MS};
pub use engine::{Admission, Engine, Headers, Identity, Plan, PlanItem, Request, UNMATCHED};
pub use identity::{
    api_key, canonical_net, client_ip, client_network, is_key_text, request_id, tenant_id, KeyError,
};
pub use key_digest::{KeyDigest, MIN_SECRET_BYTES};
pub use key_part::escape_key_part;
pub use limit::{
    nominal_ms, parse_limit, parse_limit_per, window_label, FailureModeName, InvalidLimit,
    LimitSpec, Per,
};
pub use load::{ConfigError, FieldError};
pub use path::{normalize_path, Template};
pub use rate::{Rate, RateOverride, Window};
/// The algorithm a configuration names (`algorithm = "sliding"`): the core's registry's.
pub use redis_rl_core::Kind;
pub use render::{
    bad_request, ceil_secs, forbidden, policy_field, render, reported_index, Outcome, Rendered,
    Response, Verdict,
};
pub use rule::{KeyPart, Rule};
pub use schema::{
    default_endpoint, default_global, default_ip, default_tiers, AccessConfig, Config, Dimension,
    FleetSettings, LeaseSettings, TierLimits,
};
