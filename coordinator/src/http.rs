//! `/metrics`, `/healthz` (the process serves and its raft loop is going round) and `/readyz`
//! (it knows a leader and has applied what it knows to be committed, so it can serve clients),
//! and the web dashboard under `/ui/` (`web.rs`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;
use crate::raft_inputs::{Input, Status};
use allot_common::BoxError;

#[derive(Clone)]
struct Http {
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
    /// The raft loop, which brings the gauges up to date when asked.
    raft: mpsc::UnboundedSender<Input>,
}

/// How long `/metrics` waits for the raft loop to refresh the gauges before it serves the
/// values it last had (a stalled loop must not stall the scrape too).
const REFRESH_WAIT: Duration = Duration::from_secs(1);

pub(crate) async fn serve(
    addr: SocketAddr,
    status: Arc<Mutex<Status>>,
    metrics: Arc<Metrics>,
    raft: mpsc::UnboundedSender<Input>,
    web: Option<Arc<crate::web::Web>>,
) -> Result<SocketAddr, BoxError> {
    let mut app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready))
        .with_state(Http {
            status,
            metrics,
            raft,
        });
    if let Some(web) = web {
        app = app.merge(crate::web::router(web));
    }
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

/// The raft loop goes round at least once a tick; a snapshot or a journal fold can hold it for
/// a while, but not this long.
pub const STALLED_AFTER: Duration = Duration::from_secs(10);

async fn healthz(State(h): State<Http>) -> (StatusCode, String) {
    let s = h.status.lock().map(|s| s.clone()).unwrap_or_default();
    health(&s, Instant::now())
}

/// `/healthz`: fails once the raft loop has not gone round for [`STALLED_AFTER`].
fn health(s: &Status, now: Instant) -> (StatusCode, String) {
    match s.beat.map(|beat| now.saturating_duration_since(beat)) {
        Some(quiet) if quiet > STALLED_AFTER => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stalled: the raft loop has not gone round for {:.1}s (the limit is {}s)\n",
                quiet.as_secs_f64(),
                STALLED_AFTER.as_secs()
            ),
        ),
        Some(_) => (StatusCode::OK, "ok\n".into()),
        None => (StatusCode::OK, "ok: starting\n".into()),
    }
}

async fn metrics_page(State(h): State<Http>) -> String {
    let (tx, rx) = oneshot::channel();
    if h.raft.send(Input::RefreshMetrics(tx)).is_ok() {
        let _ = tokio::time::timeout(REFRESH_WAIT, rx).await;
    }
    h.metrics.encode()
}

async fn ready(State(h): State<Http>) -> (StatusCode, String) {
    let s = h.status.lock().map(|s| s.clone()).unwrap_or_default();
    if let Some(why) = &s.disk_wait {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        );
    }
    if s.beat.is_some() && s.leader != 0 && s.applied + 1000 >= s.commit {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_fails_once_the_raft_loop_stops_going_round() {
        let now = Instant::now();
        let mut s = Status::default();
        assert_eq!(health(&s, now).0, StatusCode::OK);
        s.beat = Some(now);
        assert_eq!(health(&s, now + Duration::from_secs(1)).0, StatusCode::OK);
        let (code, text) = health(&s, now + STALLED_AFTER + Duration::from_secs(2));
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            text.contains("12.0s") && text.contains("limit is 10s"),
            "{text}"
        );
    }
}
