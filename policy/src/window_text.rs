//! The texts of a policy's windows, written once when the configuration is loaded: its
//! name, its key suffix and its entry in `RateLimit-Policy` depend on the policy alone,
//! never on the request, so planning and rendering a request copy them instead of
//! formatting them again.

use std::sync::Arc;

use crate::limit::LimitSpec;
use crate::render::window_secs;
use crate::text::push_u64;

/// What a client is shown of a window: `q` and `w` of `RateLimit-Policy`, computed once
/// (the core computes a quota with 128-bit arithmetic, and a response reads it for every
/// item, twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shown {
    /// The quota ([`LimitSpec::quota`]).
    pub(crate) quota: u64,
    /// Its window in whole seconds, at least 1 ([`window_secs`]).
    pub(crate) window_secs: u64,
}

impl Shown {
    pub(crate) fn of(spec: &LimitSpec) -> Self {
        Self {
            quota: spec.quota(),
            window_secs: window_secs(spec),
        }
    }
}

/// One window of a policy, as every plan item of it names it.
#[derive(Clone, Debug)]
pub(crate) struct WindowText {
    /// The policy's name in `RateLimit-Policy`: the label (a dimension's or a rule's name),
    /// or `label-w` when the rate has several windows (`api_key-1s`).
    pub(crate) name: String,
    /// What the window adds to the policy's key: `:w` when the rate has several windows,
    /// else nothing.
    pub(crate) key_suffix: String,
    /// The window's entry in `RateLimit-Policy` (`"api_key-1s";q=10;w=1`), shared by every
    /// plan item of it.
    pub(crate) policy: Arc<str>,
    /// Its quota and window as shown.
    pub(crate) shown: Shown,
}

impl WindowText {
    /// The texts of each of `specs`, the windows of the policy `label`.
    pub(crate) fn of_rate(label: &str, specs: &[LimitSpec]) -> Vec<Self> {
        let several = specs.len() > 1;
        specs
            .iter()
            .map(|spec| {
                let (name, key_suffix) = if several {
                    let w = spec.label();
                    (format!("{label}-{w}"), format!(":{w}"))
                } else {
                    (label.to_owned(), String::new())
                };
                let shown = Shown::of(spec);
                let mut policy = format!("\"{name}\";q=");
                push_u64(&mut policy, shown.quota);
                policy.push_str(";w=");
                push_u64(&mut policy, shown.window_secs);
                Self {
                    name,
                    key_suffix,
                    policy: policy.into(),
                    shown,
                }
            })
            .collect()
    }
}
