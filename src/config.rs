//! What `allot coordinator` and `allot agent` share in reading their settings: a YAML config
//! file with the flags' keys, and the `--http` address.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{anyhow, Context};
use serde::de::DeserializeOwned;

/// The config file's settings, or the defaults when no file was given.
pub fn load<T: DeserializeOwned + Default>(path: Option<&Path>) -> anyhow::Result<T> {
    let Some(p) = path else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("cannot read config file {}", p.display()))?;
    serde_saphyr::from_str(&text).map_err(|e| anyhow!("config file {}: {e}", p.display()))
}

/// `--http`: HOST:PORT, or "off" (or empty) for none; unset means 127.0.0.1:`default_port`.
pub fn http_addr(value: Option<&str>, default_port: u16) -> anyhow::Result<Option<SocketAddr>> {
    match value {
        Some("off") | Some("") => Ok(None),
        Some(s) => s
            .parse::<SocketAddr>()
            .map(Some)
            .map_err(|_| anyhow!("--http {s:?} is not HOST:PORT or \"off\"")),
        None => Ok(Some(SocketAddr::from(([127, 0, 0, 1], default_port)))),
    }
}
