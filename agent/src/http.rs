//! The agent's HTTP endpoints: `/metrics`, `/healthz` (the process serves), `/readyz` (it holds
//! a lease with the cluster), and `/logs/{workload}?rank=N&attempt=M` for `allot logs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::agent::BoxError;
use crate::metrics::AgentMetrics;

#[derive(Clone)]
struct Http {
    data_dir: PathBuf,
    metrics: Arc<AgentMetrics>,
}

pub async fn serve(
    addr: SocketAddr,
    data_dir: PathBuf,
    metrics: Arc<AgentMetrics>,
) -> Result<SocketAddr, BoxError> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(h): State<Http>| async move { h.metrics.encode() }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/logs/{workload}", get(logs))
        .with_state(Http { data_dir, metrics });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("could not listen for HTTP on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!("http server stopped: {e}");
        }
    });
    Ok(local)
}

async fn ready(State(h): State<Http>) -> (StatusCode, String) {
    match h.metrics.lease_left() {
        Some(l) if l > 0.0 => (StatusCode::OK, format!("ready: lease {l:.1}s left\n")),
        Some(l) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: the lease ran out {:.1}s ago\n", -l),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no coordinator has answered yet\n".into(),
        ),
    }
}

async fn logs(
    State(h): State<Http>,
    Path(workload): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> (StatusCode, String) {
    let (rank, attempt) = match (number(&q, "rank"), number(&q, "attempt")) {
        (Ok(r), Ok(a)) => (r.unwrap_or(0), a),
        (Err(e), _) | (_, Err(e)) => return (StatusCode::BAD_REQUEST, e),
    };
    match crate::executor::find_log(&h.data_dir, &workload, rank, attempt) {
        Some(p) => match tokio::fs::read(&p).await {
            Ok(b) => (StatusCode::OK, String::from_utf8_lossy(&b).into_owned()),
            Err(e) => (StatusCode::NOT_FOUND, format!("{}: {e}\n", p.display())),
        },
        None => (
            StatusCode::NOT_FOUND,
            format!("no log for {workload} rank {rank} on this node\n"),
        ),
    }
}

/// The query parameter `key` as a u32, if given; else an error naming the value and what is
/// accepted.
fn number(q: &BTreeMap<String, String>, key: &str) -> Result<Option<u32>, String> {
    match q.get(key) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            format!(
                "{key} {v:?} is not accepted: use a whole number from 0 to {}\n",
                u32::MAX
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_numbers_are_echoed_with_the_accepted_range() {
        let q: BTreeMap<String, String> = [("rank", "3"), ("attempt", "x1"), ("n", "-1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(number(&q, "rank"), Ok(Some(3)));
        assert_eq!(number(&q, "missing"), Ok(None));
        for (key, value) in [("attempt", "x1"), ("n", "-1")] {
            let e = number(&q, key).unwrap_err();
            assert!(
                e.contains(&format!("{key} {value:?}"))
                    && e.contains("whole number from 0 to 4294967295"),
                "{e}"
            );
        }
        let q = BTreeMap::from([("rank".to_string(), "4294967296".to_string())]);
        let e = number(&q, "rank").unwrap_err();
        assert!(
            e.contains("\"4294967296\"") && e.contains("4294967295"),
            "{e}"
        );
    }
}
