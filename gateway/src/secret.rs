//! The gateway's secret (`--secret-file`): the key of settlement tokens and of the API-key
//! digests the admin endpoints show. Read once at start.

use std::path::Path;

/// Fewer bytes than this are refused: a short secret can be guessed offline from one token.
pub const MIN_SECRET_BYTES: usize = 32;

/// The secret in `path` (surrounding whitespace ignored, so a trailing newline is harmless),
/// or `None` without the flag.
pub fn load(path: Option<&Path>) -> Result<Option<Vec<u8>>, String> {
    let Some(path) = path else {
        return Ok(None);
    };
    let bytes = crate::files::read_bounded(path)
        .map_err(|e| format!("--secret-file {}: {e}", path.display()))?;
    let secret = bytes.trim_ascii().to_vec();
    if secret.len() < MIN_SECRET_BYTES {
        return Err(format!(
            "--secret-file {}: {} bytes, at least {MIN_SECRET_BYTES} needed (e.g. head -c 48 /dev/urandom | base64)",
            path.display(),
            secret.len()
        ));
    }
    Ok(Some(secret))
}
