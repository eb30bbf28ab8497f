//! `/metrics`, `/healthz` (the process serves) and `/readyz` (it knows a leader and has applied
//! what it knows to be committed, so it can serve clients).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::metrics::Metrics;
use crate::server::{BoxError, Status};

#[derive(Clone)]
struct Http {
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
}

pub async fn serve(
    addr: SocketAddr,
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
) -> Result<SocketAddr, BoxError> {
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Http { status, metrics });
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

async fn metrics_page(State(h): State<Http>) -> String {
    h.metrics.encode()
}

async fn ready(State(h): State<Http>) -> (StatusCode, String) {
    let s = h.status.lock().map(|s| s.clone()).unwrap_or_default();
    if s.started && s.leader != 0 && s.applied + 1000 >= s.commit {
        (
            StatusCode::OK,
            format!(
                "ready: leader {}, term {}, applied {}\n",
                s.leader, s.term, s.applied
            ),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: leader {}, applied {} of committed {}\n",
                s.leader, s.applied, s.commit
            ),
        )
    }
}
