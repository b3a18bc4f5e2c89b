//! `Query`: a command of the module that no limiter layer decides on (`RL.STATE`), sent as
//! the module's where it is loaded, else the Lua twin's, with the same switch to the twin
//! and `EVAL` after `NOSCRIPT` as an [`crate::op::Op`] (the shared layers' wire); the
//! circuit breaker counts its outages. The same `start`/`feed`/`fail` shape, so the limiter
//! drives it the same way.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use serde_json::Value as Json;

use redis_rl_client::breaker::Permit;

use redis_rl_client::sansio::Layers;

use crate::core::Core;

/// One command in progress; its reply as the client gave it.
#[napi]
pub struct Query {
    layers: Arc<Layers>,
    module: Vec<String>,
    reply: Option<Json>,
}

impl Query {
    pub(crate) fn new(layers: Arc<Layers>, module: Vec<String>) -> Self {
        Self {
            layers,
            module,
            reply: None,
        }
    }
}

#[napi]
impl Query {
    /// `RL.STATE key` through `core`'s route: the key's limiter state, or `null` when it
    /// holds none.
    #[napi(factory)]
    pub fn state(core: &Core, key: String) -> Result<Self> {
        if key.is_empty() {
            return Err(Error::new(Status::InvalidArg, "key must not be empty"));
        }
        Ok(Self::new(
            core.layers.clone(),
            vec!["RL.STATE".to_string(), key],
        ))
    }

    /// The command to send (the breaker open: throws, nothing is sent).
    #[napi]
    pub fn start(&self) -> Result<Option<Vec<String>>> {
        if self.layers.breaker().permit() == Permit::Reject {
            return Err(Error::new(
                Status::GenericFailure,
                "the circuit breaker is open: Redis was not called",
            ));
        }
        Ok(Some(self.layers.encode(self.module.clone())))
    }

    /// The reply to the command last sent: `null` (done).
    #[napi(ts_args_type = "reply: unknown")]
    pub fn feed(&mut self, reply: Json) -> Option<Vec<String>> {
        self.layers.breaker().on_success();
        self.reply = Some(reply);
        None
    }

    /// The error the command last sent got (`outage`: no answer): the next command (the
    /// twin, `EVAL`), else throws it.
    #[napi]
    pub fn fail(&mut self, message: String, outage: bool) -> Result<Option<Vec<String>>> {
        if !outage {
            if let Some(next) = self.layers.retry(&self.module, &message) {
                return Ok(Some(next));
            }
        } else {
            self.layers.breaker().on_failure();
        }
        Err(Error::new(Status::GenericFailure, message))
    }

    /// The reply (`null` before one).
    #[napi(ts_return_type = "unknown")]
    pub fn reply(&self) -> Json {
        self.reply.clone().unwrap_or(Json::Null)
    }
}
