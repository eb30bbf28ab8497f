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

/// The form [`check_host_port`] accepts, for error messages.
pub const HOST_PORT_FORM: &str =
    "HOST:PORT with a host name, IPv4 address or [IPv6] address and a port 1..=65535 \
     (for example ctl-1.example.internal:7400, 10.0.0.1:7400 or [fd00::1]:7400)";

/// Checks that `addr` is HOST:PORT: a non-empty host (a name, an IPv4 address, or an IPv6
/// address in brackets) and a port 1..=65535. Nothing is resolved, so names that only exist
/// later (a StatefulSet pod's DNS name) pass. On refusal, says what is wrong with it.
pub fn check_host_port(addr: &str) -> Result<(), String> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err("it has no :PORT".into());
    };
    match port.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => {}
        Ok(p) => return Err(format!("port {p} is outside 1..=65535")),
        Err(_) => return Err(format!("port {port:?} is not a number 1..=65535")),
    }
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    if let Some(inner) = host.strip_prefix('[') {
        return match inner.strip_suffix(']') {
            Some(ip) if ip.parse::<std::net::Ipv6Addr>().is_ok() => Ok(()),
            _ => Err(format!("{host:?} is not an IPv6 address in brackets")),
        };
    }
    if let Some((scheme, _)) = host.split_once("://") {
        return Err(format!("write no {scheme}:// before the host"));
    }
    if host.parse::<std::net::Ipv6Addr>().is_ok() {
        return Err(format!(
            "an IPv6 address needs brackets, as in [{host}]:{port}"
        ));
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-._".contains(*c)))
    {
        return Err(format!(
            "host {host:?} has the character {c:?}; a host is letters, digits, '-', '.' and '_'"
        ));
    }
    if host.chars().all(|c| c.is_ascii_digit() || c == '.')
        && host.parse::<std::net::Ipv4Addr>().is_err()
    {
        return Err(format!("host {host:?} is not an IPv4 address"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_accepts_names_and_addresses_without_resolving() {
        for ok in [
            "coordinator-0.allot:7000",
            "allot-coordinator-0.allot-coordinator-peers.ns.svc:7400",
            "10.0.0.1:7400",
            "[::1]:7400",
            "[fd00::2]:65535",
            "localhost:1",
            "no-such-host.invalid:7400",
        ] {
            assert_eq!(check_host_port(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn host_port_refusals_say_why() {
        for (bad, why) in [
            ("ctl-1", "no :PORT"),
            ("ctl-1:", "\"\" is not a number 1..=65535"),
            ("ctl-1:74OO", "\"74OO\" is not a number 1..=65535"),
            ("ctl-1:0", "port 0 is outside 1..=65535"),
            ("ctl-1:65536", "port 65536 is outside 1..=65535"),
            (":7400", "host is empty"),
            ("::1:7400", "needs brackets, as in [::1]:7400"),
            ("[::zz]:7400", "\"[::zz]\" is not an IPv6 address"),
            ("http://ctl-1:7400", "write no http:// before the host"),
            ("ctl/1:7400", "host \"ctl/1\" has the character '/'"),
            ("ctl 1:7400", "character ' '"),
            ("10.0.0.300:7400", "\"10.0.0.300\" is not an IPv4 address"),
        ] {
            let e = check_host_port(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
