//! The agent's HTTP endpoints: `/metrics`, `/healthz` (the process serves) and `/readyz` (it
//! holds a lease with the cluster). Pod logs are not served here: they go to the cluster over
//! its authenticated API (`crate::logs`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::metrics::AgentMetrics;
use allot_common::BoxError;

#[derive(Clone)]
struct Http {
    metrics: Arc<AgentMetrics>,
}

pub async fn serve(addr: SocketAddr, metrics: Arc<AgentMetrics>) -> Result<SocketAddr, BoxError> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(h): State<Http>| async move { h.metrics.encode() }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Http { metrics });
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
