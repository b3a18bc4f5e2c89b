//! Reading configuration from TOML (feature `toml`): one place for the error texts.

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Parses `text` (unknown fields and bad values are [`Error::Config`]), then `validate`s it.
pub(crate) fn parse<T: DeserializeOwned>(
    text: &str,
    validate: impl FnOnce(&T) -> Result<()>,
) -> Result<T> {
    let config: T = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
    validate(&config)?;
    Ok(config)
}

/// The text of the file at `path` (a read error names the file).
pub(crate) fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}
