//! `allot dashboard`: asks a coordinator for a one-time login ticket, with this user's
//! certificate, and prints the link that signs a browser in to that coordinator's dashboard.

use allot_common::api::{Body, Reply};
use allot_net::client::Client;
use anyhow::{bail, Context};

use super::api;

pub async fn login(c: &mut Client, address: Option<String>) -> anyhow::Result<String> {
    let Reply::WebTicket {
        ticket,
        http,
        expires_ms,
    } = api(c.call(Body::WebTicket).await)?
    else {
        bail!("unexpected answer to a dashboard login");
    };
    let base = match address {
        Some(a) => a,
        None => reachable(&http, c.answered_by())?,
    };
    let secs = (expires_ms - allot_common::timefmt::now_ms()).max(0) / 1000;
    Ok(format!(
        "http://{base}/ui/login?ticket={ticket}\n\
         (open it within {secs}s; it signs one browser in for 12 hours)"
    ))
}

/// The coordinator's HTTP address as a browser here can reach it: where it listens on every
/// interface, the host this CLI reached it at.
fn reachable(http: &str, answered_by: Option<&str>) -> anyhow::Result<String> {
    let addr: std::net::SocketAddr = http
        .parse()
        .with_context(|| format!("the coordinator named its HTTP address {http:?}"))?;
    if !addr.ip().is_unspecified() {
        return Ok(http.to_string());
    }
    let host = answered_by
        .and_then(|a| a.rsplit_once(':').map(|(h, _)| h.to_string()))
        .unwrap_or_else(|| "127.0.0.1".into());
    Ok(format!("{host}:{}", addr.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_address_takes_the_host_that_answered() {
        assert_eq!(
            reachable("0.0.0.0:9400", Some("coord-1.example:7000")).unwrap(),
            "coord-1.example:9400"
        );
        assert_eq!(
            reachable("[::]:9400", Some("[fd00::1]:7000")).unwrap(),
            "[fd00::1]:9400"
        );
        assert_eq!(
            reachable("10.0.0.5:9400", Some("coord:7000")).unwrap(),
            "10.0.0.5:9400"
        );
        assert!(reachable("nonsense", None).is_err());
    }
}
