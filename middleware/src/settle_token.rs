//! Settlement tokens: a report of a response's actual cost (forward auth's
//! `POST /.rl/settle`) comes from outside the process, so it must prove which reservation
//! it settles. The check that reserved the units answers a token (the `rl-settle-token`
//! response header, for the proxy to hand to the upstream); the report presents it.
//!
//! A token is signed (HMAC-SHA256 with the configured secret), so it names the reservation
//! itself: its keys, the units reserved on each, an expiry and a random nonce. Checking one
//! costs no Redis call on the check path; the report spends it once (`SET NX` of the nonce
//! under the key prefix, expiring with the token). A report without a valid, unspent token
//! is refused, and a valid one moves at most its own reservation: only the keys it names,
//! at most the units reserved on each given back.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use redis_rl_client::limiter::Limiter;

/// The response header of a check carrying the token, and the report's header presenting it.
pub const SETTLE_TOKEN: &str = "rl-settle-token";

/// How long a token can be spent by default: long enough for a slow upstream (an LLM
/// completion) to answer and report.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(600);

type HmacSha256 = Hmac<Sha256>;

/// The signing secret and lifetime of the tokens (one per process; a fleet whose gateways
/// may settle each other's reservations shares the secret).
#[derive(Clone)]
pub struct SettleTokens {
    /// HMAC's key: one block, the derived key zero-padded (as HMAC pads a short key).
    key: Arc<hmac::digest::Key<HmacSha256>>,
    ttl: Duration,
}

impl std::fmt::Debug for SettleTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettleTokens")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// What a token says: the reservation it may settle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Expiry, Unix milliseconds.
    #[serde(rename = "e")]
    pub expires_ms: u64,
    /// Random, so that two reservations of the same keys are two tokens.
    #[serde(rename = "n")]
    pub nonce: String,
    /// Each key and the units reserved on it in Redis (0: nothing taken there).
    #[serde(rename = "k")]
    pub items: Vec<(String, u64)>,
}

/// Why a report's token was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// The report carries no token.
    Missing,
    /// Not a token of this format.
    Malformed,
    /// Signed with another secret, or altered.
    BadSignature,
    /// Past its expiry.
    Expired,
}

impl TokenError {
    /// The problem body's detail.
    pub fn detail(&self) -> &'static str {
        match self {
            Self::Missing => {
                "a settlement needs the rl-settle-token of the check that reserved the units"
            }
            Self::Malformed => "the rl-settle-token is malformed",
            Self::BadSignature => {
                "the rl-settle-token was not issued by this fleet (bad signature)"
            }
            Self::Expired => "the rl-settle-token has expired",
        }
    }
}

impl SettleTokens {
    /// Tokens signed with `secret` (any length; at least 32 random bytes advised).
    pub fn new(secret: &[u8], ttl: Duration) -> Self {
        // A key of its own, derived from the secret: the secret may sign other things.
        let derived = Sha256::new()
            .chain_update(b"redis-rl settle token v1\0")
            .chain_update(secret)
            .finalize();
        let mut key = hmac::digest::Key::<HmacSha256>::default();
        for (k, d) in key.iter_mut().zip(derived) {
            *k = d;
        }
        Self {
            key: Arc::new(key),
            ttl,
        }
    }

    /// Tokens signed with a secret made up for this process: only this process can check
    /// them (a fleet behind one load balancer needs a shared secret).
    pub fn random(ttl: Duration) -> Self {
        // Two v4 UUIDs: 244 bits from the thread's CSPRNG (seeded by the OS).
        let mut secret = Vec::with_capacity(32);
        secret.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        secret.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self::new(&secret, ttl)
    }

    /// How long a token lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as KeyInit>::new(&self.key)
    }

    /// A token for `items` (key, units reserved in Redis), valid from `now_ms` for the ttl.
    pub fn issue(&self, items: Vec<(String, u64)>, now_ms: u64) -> String {
        let reservation = Reservation {
            expires_ms: now_ms
                .saturating_add(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)),
            nonce: uuid::Uuid::new_v4().simple().to_string(),
            items,
        };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&reservation).unwrap_or_default());
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// The reservation `token` names, if this fleet signed it and it has not expired at
    /// `now_ms`.
    pub fn verify(&self, token: Option<&str>, now_ms: u64) -> Result<Reservation, TokenError> {
        let token = token.map(str::trim).filter(|t| !t.is_empty());
        let (payload, tag) = token
            .ok_or(TokenError::Missing)?
            .split_once('.')
            .ok_or(TokenError::Malformed)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError::Malformed)?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        // Constant time: the tag is not guessable a byte at a time.
        mac.verify_slice(&tag)
            .map_err(|_| TokenError::BadSignature)?;
        let json = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let reservation: Reservation =
            serde_json::from_slice(&json).map_err(|_| TokenError::Malformed)?;
        if now_ms >= reservation.expires_ms {
            return Err(TokenError::Expired);
        }
        Ok(reservation)
    }
}

/// Spends `reservation` once: `SET <prefix>:settled:<nonce> 1 NX PX <until expiry>`. True
/// when this call spent it, false when it was spent before; `Err` when Redis did not
/// answer (the report is then refused: better a reservation that stands than one settled
/// twice).
pub async fn spend(
    limiter: &Limiter,
    prefix: &str,
    reservation: &Reservation,
    now_ms: u64,
) -> redis_rl_client::Result<bool> {
    let key = format!("{prefix}:settled:{}", reservation.nonce);
    let ttl_ms = reservation.expires_ms.saturating_sub(now_ms).max(1);
    let mut cmd = redis::cmd("SET");
    cmd.arg(&key).arg(1).arg("NX").arg("PX").arg(ttl_ms);
    let v = limiter.query(&cmd, limiter.slot_of(&key)).await?;
    Ok(matches!(v, redis::Value::Okay) || matches!(&v, redis::Value::SimpleString(s) if s == "OK"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_reservation_and_nothing_else_passes() {
        let t = SettleTokens::new(b"0123456789abcdef0123456789abcdef", Duration::from_secs(60));
        let token = t.issue(vec![("rl:tokens:k1".to_owned(), 100)], 1_000);
        let r = t.verify(Some(&token), 2_000).unwrap();
        assert_eq!(r.items, [("rl:tokens:k1".to_owned(), 100)]);
        assert_eq!(r.expires_ms, 61_000);
        assert_ne!(
            r.nonce,
            t.verify(Some(&t.issue(vec![], 1_000)), 2_000)
                .unwrap()
                .nonce
        );
        assert_eq!(t.verify(Some(&token), 61_000), Err(TokenError::Expired));
        assert_eq!(t.verify(None, 2_000), Err(TokenError::Missing));
        assert_eq!(t.verify(Some("nodot"), 2_000), Err(TokenError::Malformed));
        let other = SettleTokens::new(
            b"another secret of the same length!",
            Duration::from_secs(60),
        );
        assert_eq!(
            other.verify(Some(&token), 2_000),
            Err(TokenError::BadSignature)
        );
        // A payload changed to name more units (or another key) no longer matches its tag.
        let (_, tag) = token.split_once('.').unwrap();
        let forged = URL_SAFE_NO_PAD.encode(
            serde_json::to_vec(&Reservation {
                expires_ms: 61_000,
                nonce: r.nonce.clone(),
                items: vec![("rl:tokens:victim".to_owned(), 1_000_000)],
            })
            .unwrap(),
        );
        assert_eq!(
            t.verify(Some(&format!("{forged}.{tag}")), 2_000),
            Err(TokenError::BadSignature)
        );
    }
}
