//! The rate limit service's refusals towards the top offenders (`GET /top`): queued and
//! written as the proxy's are ([`redis_rl_client::offenders`]: off the request's path, a
//! bounded queue, one script per policy and second), under the gateway's live `key_prefix`.

use std::sync::{Arc, Mutex};

use redis_rl_client::offenders::{Offenders, Refusal};
use redis_rl_client::Limiter;

/// The queue of the key prefix in use (a reload that changes the prefix starts a new one;
/// the old one writes what it holds and ends).
pub struct TopOffenders {
    limiter: Limiter,
    queue: Mutex<Option<(String, Arc<Offenders>)>>,
}

impl TopOffenders {
    pub fn new(limiter: Limiter) -> Self {
        Self {
            limiter,
            queue: Mutex::new(None),
        }
    }

    /// Queues `refusals` under `prefix`; never waits.
    pub fn record(&self, prefix: &str, refusals: Vec<redis_rl_flow::Refusal>) {
        if refusals.is_empty() {
            return;
        }
        let queue = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            match queue.as_ref() {
                Some((p, q)) if p == prefix => q.clone(),
                _ => {
                    let q = Arc::new(Offenders::new(self.limiter.clone(), prefix));
                    *queue = Some((prefix.to_owned(), q.clone()));
                    q
                }
            }
        };
        for r in refusals {
            queue.record(Refusal {
                policy: r.policy,
                subject: r.subject,
                ban: r.ban,
            });
        }
    }
}
