//! Refusals forgotten fleet-wide. Each gateway caches Redis's refusals (the deny cache); when
//! units go back to a key (a refund, a settlement) or the key is reset, the refusal is stale
//! everywhere, not only in the process that gave them back. Those calls publish the key on a
//! channel (`PUBLISH`, on a task of its own: never on a request's path), and every limiter
//! that shares it listens (`SUBSCRIBE` on a connection of its own) and drops the key.
//!
//! Pub/sub rather than a stamp read with each decision: a stamp would add a read to every
//! check, while refunds are rare next to checks, and the deny cache exists so that a flood
//! on a refused key costs Redis nothing. A message lost while a listener reconnects is
//! covered twice: the listener clears its whole cache on every (re)subscription, and a
//! cached refusal never outlives its retry or reset time anyway.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;

use crate::layers::decider::Decider;
use crate::layers::deny_cache::DenyCached;
use crate::transport::backend::TlsFiles;
use crate::transport::Transport;

/// Where a listener connects: a server's URL (a cluster's first seed node: a `PUBLISH`
/// reaches every node of a cluster) and its TLS material.
#[derive(Clone, Debug)]
pub(crate) struct Source {
    pub(crate) url: String,
    pub(crate) tls: Option<TlsFiles>,
}

/// The channel a limiter publishes on, and its listener.
#[derive(Default)]
pub(crate) struct Denials {
    source: Option<Source>,
    channel: OnceLock<String>,
    listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

type Cache = Arc<DenyCached<Box<dyn Decider>>>;

impl Denials {
    pub(crate) fn new(source: Option<Source>) -> Self {
        Self {
            source,
            channel: OnceLock::new(),
            listener: Mutex::new(None),
        }
    }

    /// Listens on `channel` (and publishes there from now on); errors: no server URL (a
    /// limiter on a custom backend) or no tokio runtime.
    pub(crate) fn share(&self, channel: String, cache: Cache) -> crate::Result<()> {
        let source = self.source.clone().ok_or_else(|| {
            crate::Error::Config("sharing refusals needs a limiter built on a URL".to_string())
        })?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| crate::Error::Config("sharing refusals needs a tokio runtime".into()))?;
        if self.channel.set(channel.clone()).is_err() {
            return Ok(()); // already listening
        }
        let task = runtime.spawn(listen(source, channel, cache));
        *self.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        Ok(())
    }

    /// Tells the fleet that `keys` lost their refusals (nothing when not shared).
    pub(crate) fn announce(&self, transport: &Arc<Transport>, keys: &[&str]) {
        let Some(channel) = self.channel.get() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let messages: Vec<redis::Cmd> = keys
            .iter()
            .map(|k| {
                let mut cmd = redis::cmd("PUBLISH");
                cmd.arg(channel).arg(*k);
                cmd
            })
            .collect();
        let transport = transport.clone();
        runtime.spawn(async move {
            for cmd in &messages {
                if let Err(e) = transport.call(cmd, None).await {
                    transport.log_error("PUBLISH", &e);
                    return;
                }
            }
        });
    }
}

impl Drop for Denials {
    fn drop(&mut self) {
        if let Some(task) = self
            .listener
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            task.abort();
        }
    }
}

/// Subscribes and forgets each key published, reconnecting after a second when the
/// connection fails; ends when the limiter is dropped (the task is aborted).
async fn listen(source: Source, channel: String, cache: Cache) {
    let mut warned = false;
    loop {
        match subscribe(&source, &channel).await {
            Ok(pubsub) => {
                // Messages sent while this listener was not subscribed are lost.
                cache.clear();
                if warned {
                    tracing::info!(%channel, "listening for refunds again");
                    warned = false;
                }
                let mut messages = pubsub.into_on_message();
                while let Some(msg) = messages.next().await {
                    if let Ok(key) = msg.get_payload::<String>() {
                        cache.forget(&key);
                    }
                }
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(%channel, error = %e, "cannot listen for the fleet's refunds: cached refusals end at their retry time");
                    warned = true;
                }
                // A refusal (NOPERM) lasts: do not ask the server every second.
                tokio::time::sleep(Duration::from_secs(4)).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn subscribe(source: &Source, channel: &str) -> redis::RedisResult<redis::aio::PubSub> {
    let client = crate::transport::backend::open_client(&source.url, source.tls.as_ref())?;
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    };
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "subscribe").into()),
    }
}
