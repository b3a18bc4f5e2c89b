//! Test doubles shared by the layers' unit tests: a scripted Redis and a limiter on it.

use std::sync::atomic::AtomicU8;
use std::sync::Mutex;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::limiter::policy::{FailureMode, Policy};
use crate::limiter::Limiter;
use crate::transport::backend::Backend;
use crate::transport::breaker::BreakerConfig;
use crate::transport::command::words;

pub const UP: u8 = 0;
pub const DOWN: u8 = 1;
pub const HANG: u8 = 2;

type Answer = Box<dyn Fn(&[String]) -> Value + Send + Sync>;

/// A scripted Redis: records every command and its slot; answers with `answer` while
/// up, refuses connections while down, never answers while hanging.
pub struct Mock {
    mode: AtomicU8,
    /// How long each answer takes (tests run on paused time).
    delay: Mutex<Duration>,
    cluster: bool,
    pub log: Mutex<Vec<(Vec<String>, Option<u16>)>>,
    answer: Answer,
}

impl Mock {
    pub fn new(
        cluster: bool,
        answer: impl Fn(&[String]) -> Value + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            mode: AtomicU8::new(UP),
            delay: Mutex::new(Duration::ZERO),
            cluster,
            log: Mutex::new(Vec::new()),
            answer: Box::new(answer),
        })
    }

    pub fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Each answer from now on takes `delay`.
    pub fn delay(&self, delay: Duration) {
        *self.delay.lock().unwrap() = delay;
    }

    pub fn commands(&self) -> Vec<Vec<String>> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|(w, _)| w.clone())
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.commands().iter().map(|w| w[0].clone()).collect()
    }

    pub fn clear(&self) {
        self.log.lock().unwrap().clear();
    }
}

impl Backend for Mock {
    fn query<'a>(
        &'a self,
        cmd: &'a Cmd,
        slot: Option<u16>,
    ) -> crate::transport::backend::BoxFuture<'a, redis::RedisResult<Value>> {
        let w = words(cmd);
        self.log.lock().unwrap().push((w.clone(), slot));
        let mode = self.mode.load(Ordering::SeqCst);
        let reply = (self.answer)(&w);
        let delay = *self.delay.lock().unwrap();
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            match mode {
                UP => match reply {
                    Value::SimpleString(e) if e.starts_with('-') => {
                        Err((redis::ErrorKind::ResponseError, "error reply", e).into())
                    }
                    v => Ok(v),
                },
                DOWN => Err(crate::transport::backend::refused()),
                _ => std::future::pending().await,
            }
        })
    }

    fn is_cluster(&self) -> bool {
        self.cluster
    }
}

pub fn ints(v: &[i64]) -> Value {
    Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
}

pub fn allow() -> Value {
    ints(&[1, 10, 9, 0, 1_000])
}

pub fn deny(retry_ms: i64) -> Value {
    ints(&[0, 10, 0, retry_ms, 1_000])
}

/// An RL.ALL reply: `denied` is the 1-based index of the denying key (0: all allowed).
pub fn all_reply(denied: i64, decisions: Vec<Value>) -> Value {
    Value::Array(vec![
        Value::Int(i64::from(denied == 0)),
        Value::Int(denied),
        Value::Array(decisions),
    ])
}

pub fn caps(all: bool) -> Value {
    let entry = |on: bool| if on { Value::Array(vec![]) } else { Value::Nil };
    Value::Array(vec![entry(all), entry(all)])
}

pub fn limiter(mock: &Arc<Mock>) -> Limiter {
    Limiter::builder()
        .server_impl(crate::layers::decider::ServerImpl::Module)
        .timeout(Duration::from_millis(20))
        .breaker(BreakerConfig {
            failure_threshold: 3,
            open_for: Duration::from_millis(500),
        })
        .backend(mock.clone())
}

pub fn policy(mode: FailureMode) -> Policy {
    Policy::sliding(2, 60_000).unwrap().on_failure(mode)
}
