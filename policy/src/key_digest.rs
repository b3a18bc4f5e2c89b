//! How an API key appears in Redis keys, logs and the admin endpoints: a 16-hex-digit
//! digest, computed here for every front end so that they all name a key's counters alike.
//!
//! With a secret (`api_key_digest_secret_file`, or rl-gateway's `--secret-file`) the digest
//! is HMAC-SHA256 under a key derived from the secret: whoever reads the key names cannot
//! test guesses of API keys against them. Without one it is the key's plain SHA-256, as
//! before secrets existed, so that key names stay the same across an upgrade: a guessable
//! API key ("bob") is then recognisable in `/top`, and the front ends warn at start.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Fewer bytes than this are refused: a short secret can be found offline from one digest.
pub const MIN_SECRET_BYTES: usize = 32;

/// What the digest key is derived with: the same secret may key other things (rl-gateway's
/// settlement tokens), and each use gets a key of its own.
const LABEL: &[u8] = b"redis-rl api-key digest v1";

/// The digest of API keys: keyed with a secret, or the unkeyed SHA-256.
#[derive(Clone)]
pub struct KeyDigest {
    mac: Option<HmacSha256>,
}

impl std::fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyDigest")
            .field("keyed", &self.is_keyed())
            .finish()
    }
}

impl KeyDigest {
    /// The unkeyed digest (the first 8 bytes of SHA-256): anyone can compute it.
    pub const fn unkeyed() -> Self {
        Self { mac: None }
    }

    /// The digest keyed with `secret` (surrounding whitespace ignored); `Err` names why a
    /// secret is refused (fewer than [`MIN_SECRET_BYTES`] bytes).
    pub fn keyed(secret: &[u8]) -> Result<Self, String> {
        let secret = secret.trim_ascii();
        if secret.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "{} bytes, at least {MIN_SECRET_BYTES} needed (e.g. head -c 48 /dev/urandom | base64)",
                secret.len()
            ));
        }
        // HMAC(secret, label): a subkey only this use has (the raw secret keys nothing).
        let subkey = new_mac(secret)?.chain_update(LABEL).finalize().into_bytes();
        Ok(Self {
            mac: Some(new_mac(&subkey)?),
        })
    }

    /// The digest keyed with the secret in `path`, read once (the engine's one read).
    pub fn from_file(path: &str) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        Self::keyed(&bytes).map_err(|e| format!("{path}: {e}"))
    }

    /// Whether a secret keys the digest.
    pub fn is_keyed(&self) -> bool {
        self.mac.is_some()
    }

    /// The 16 hex digits naming `api_key`.
    pub fn of(&self, api_key: &str) -> String {
        match &self.mac {
            Some(mac) => {
                let mut mac = mac.clone();
                mac.update(api_key.as_bytes());
                hex16(&mac.finalize().into_bytes())
            }
            None => hex16(&Sha256::digest(api_key.as_bytes())),
        }
    }
}

fn new_mac(key: &[u8]) -> Result<HmacSha256, String> {
    // HMAC takes keys of any length: this never fails, but is not unwrapped.
    <HmacSha256 as Mac>::new_from_slice(key).map_err(|e| format!("the secret cannot key HMAC: {e}"))
}

fn hex16(digest: &[u8]) -> String {
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn unkeyed_is_the_plain_sha256() {
        // The key names of every release before secrets: must never change.
        assert_eq!(KeyDigest::unkeyed().of("bob"), "81b637d8fcd2c6da");
        assert_eq!(KeyDigest::unkeyed().of("bob"), crate::tenant_id("bob"));
    }

    #[test]
    fn keyed_differs_per_secret_and_is_stable() {
        let a = KeyDigest::keyed(SECRET).unwrap();
        let b = KeyDigest::keyed(b"another secret of at least 32 bytes!").unwrap();
        assert_ne!(a.of("bob"), KeyDigest::unkeyed().of("bob"));
        assert_ne!(a.of("bob"), b.of("bob"));
        assert_eq!(a.of("bob"), a.of("bob"));
        assert_eq!(a.of("bob").len(), 16);
        // Surrounding whitespace (a trailing newline in the file) is not part of the secret.
        let padded = [SECRET, b"\n"].concat();
        assert_eq!(KeyDigest::keyed(&padded).unwrap().of("bob"), a.of("bob"));
        // A frozen value: a change of derivation would rename every key of a deployment.
        // Computed apart (Python's hmac: HMAC(HMAC(secret, label), key)).
        assert_eq!(a.of("bob"), "4eb40ca3aff1ae55");
    }

    #[test]
    fn short_secrets_are_refused() {
        let e = KeyDigest::keyed(b"  short  \n").unwrap_err();
        assert!(e.contains("5 bytes, at least 32"), "{e}");
    }
}
