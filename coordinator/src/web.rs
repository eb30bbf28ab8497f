//! The web dashboard: pages (`coordinator/ui/`, built into the binary) and the JSON they read,
//! on the replica's HTTP port. A browser signs in with a ticket from `allot dashboard`
//! (`web_session.rs`) and then holds a session cookie; every read it makes is an API request
//! this replica forwards to the leader as that identity (`Body::OnBehalf`), so the dashboard
//! sees exactly what the CLI would, scoped by the same rules. It only reads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use allot_common::api::{ApiError, Body, ErrorKind, HistoryFilter, Reply, WorkloadFilter};
use allot_common::timefmt::now_ms;
use allot_common::usage::{UsageBy, UsageQuery};
use allot_net::client::Client;
use allot_net::log_stream::{read_log_stream, LogStreamError};
use allot_net::tls::Identity;

use crate::web_session::{Kind, WebSessions};

const INDEX: &str = include_str!("../ui/index.html");
const APP_JS: &str = include_str!("../ui/app.js");
const APP_CSS: &str = include_str!("../ui/app.css");

const COOKIE: &str = "allot_session";
/// The most of a pod's log one page shows: its end.
const LOG_TAIL: usize = 256 * 1024;
/// The most days of usage one chart asks for.
const MAX_DAYS: i64 = 400;

pub(crate) struct Web {
    pub(crate) sessions: Arc<WebSessions>,
    /// The coordinators' addresses, for the connection to the leader.
    addrs: Vec<String>,
    certs: PathBuf,
    id: u64,
    /// One connection to the leader, made on first use and kept.
    client: tokio::sync::Mutex<Option<Client>>,
}

impl Web {
    pub(crate) fn new(
        sessions: Arc<WebSessions>,
        addrs: Vec<String>,
        certs: PathBuf,
        id: u64,
    ) -> Web {
        Web {
            sessions,
            addrs,
            certs,
            id,
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// `body` as `who` would send it, answered by the leader.
    async fn ask(&self, who: &Identity, body: Body) -> Result<Reply, ApiError> {
        let mut guard = self.client.lock().await;
        let client = self.connect(&mut guard)?;
        let r = client.call(on_behalf(who, body)).await;
        match r {
            Ok(r) => r,
            Err(e) => {
                *guard = None;
                Err(ApiError::new(ErrorKind::Unavailable, e.to_string()))
            }
        }
    }

    fn connect<'a>(&self, slot: &'a mut Option<Client>) -> Result<&'a mut Client, ApiError> {
        if slot.is_none() {
            let stem = Identity::Coordinator { id: self.id }.file_stem();
            let c = Client::new(self.addrs.clone(), &self.certs, &stem)
                .map_err(|e| ApiError::new(ErrorKind::Unavailable, e.to_string()))?;
            *slot = Some(c);
        }
        slot.as_mut()
            .ok_or_else(|| ApiError::new(ErrorKind::Unavailable, "no connection"))
    }

    /// The end of a pod's log (at most [`LOG_TAIL`] bytes), from its node through the leader.
    async fn log_tail(&self, who: &Identity, body: Body) -> Result<Vec<u8>, ApiError> {
        let mut guard = self.client.lock().await;
        let client = self.connect(&mut guard)?;
        let unavailable = |e: String| ApiError::new(ErrorKind::Unavailable, e);
        let (frame, mut rest) = client
            .stream(on_behalf(who, body))
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let mut out = Vec::new();
        let read = read_log_stream(frame, &mut rest, |b| {
            out.extend_from_slice(&b);
            if out.len() > LOG_TAIL {
                out.drain(..out.len() - LOG_TAIL);
            }
            Ok(())
        })
        .await;
        match read {
            Ok(()) => Ok(out),
            Err(LogStreamError::Refused(e)) => Err(e),
            Err(e) => Err(unavailable(e.to_string())),
        }
    }
}

/// `body` as `who` sends it, for the leader to answer.
fn on_behalf(who: &Identity, body: Body) -> Body {
    Body::OnBehalf {
        identity: who.uri(),
        body: Box::new(body),
    }
}

pub(crate) fn router(web: Arc<Web>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route(
            "/ui/",
            get(|| async { page(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/app.js",
            get(|| async { page(APP_JS, "text/javascript") }),
        )
        .route("/ui/app.css", get(|| async { page(APP_CSS, "text/css") }))
        .route("/ui/login", get(login))
        .route("/ui/logout", get(logout))
        .route("/ui/api/{view}", get(api))
        .with_state(web)
}

fn page(text: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
            ),
        ],
        text,
    )
        .into_response()
}

async fn login(State(web): State<Arc<Web>>, Query(q): Query<HashMap<String, String>>) -> Response {
    let ticket = q.get("ticket").map(String::as_str).unwrap_or("");
    match web.sessions.verify(ticket, Kind::Ticket, now_ms()) {
        Ok(who) => {
            let (session, _) = web.sessions.issue(&who, Kind::Session, now_ms());
            let cookie = format!(
                "{COOKIE}={session}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={}",
                crate::web_session::SESSION_MS / 1000
            );
            (
                StatusCode::SEE_OTHER,
                [
                    (header::SET_COOKIE, cookie),
                    (header::LOCATION, "/ui/".to_string()),
                ],
            )
                .into_response()
        }
        Err(e) => (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("allot: this login link is not valid: {e}\n"),
        )
            .into_response(),
    }
}

async fn logout() -> Response {
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                format!("{COOKIE}=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"),
            ),
            (header::LOCATION, "/ui/".to_string()),
        ],
    )
        .into_response()
}

/// The session cookie's identity.
fn session(web: &Web, headers: &HeaderMap) -> Result<Identity, String> {
    let token = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
        .ok_or("not signed in: run `allot dashboard` and open the link it prints")?;
    web.sessions.verify(&token, Kind::Session, now_ms())
}

fn json(status: StatusCode, v: serde_json::Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        v.to_string(),
    )
        .into_response()
}

fn error(e: &ApiError) -> Response {
    let status = match e.kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    json(
        status,
        serde_json::json!({ "error": format!("{:?}", e.kind), "message": e.message }),
    )
}

fn invalid(msg: String) -> ApiError {
    ApiError::new(ErrorKind::Invalid, msg)
}

async fn api(
    State(web): State<Arc<Web>>,
    axum::extract::Path(view): axum::extract::Path<String>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let who = match session(&web, &headers) {
        Ok(w) => w,
        Err(e) => {
            return json(
                StatusCode::UNAUTHORIZED,
                serde_json::json!({ "error": "Unauthorized", "message": e }),
            )
        }
    };
    match answer(&web, &who, &view, &q).await {
        Ok(v) => json(StatusCode::OK, v),
        Err(e) => error(&e),
    }
}

/// One view's data, as JSON.
async fn answer(
    web: &Web,
    who: &Identity,
    view: &str,
    q: &HashMap<String, String>,
) -> Result<serde_json::Value, ApiError> {
    let text = |k: &str| q.get(k).filter(|v| !v.is_empty()).cloned();
    let team = text("team");
    let to_json = |r: &Reply| serde_json::to_value(r).map_err(|e| invalid(e.to_string()));
    let body = match view {
        "whoami" => {
            let team = match who {
                Identity::User { team } => Some(team.clone()),
                _ => None,
            };
            return Ok(serde_json::json!({
                "identity": who.to_string(), "role": who.role(), "team": team,
            }));
        }
        "teams" => Body::GetTeams,
        "nodes" => Body::GetNodes,
        "topology" => Body::GetTopology,
        "cohorts" => Body::ListCohorts,
        "cohort-weights" => Body::ListCohortWeights,
        "workloads" => Body::GetWorkloads(WorkloadFilter { team, all: false }),
        "workload" => Body::DescribeWorkload {
            name: text("name").ok_or_else(|| invalid("name= is needed".into()))?,
            team,
        },
        "explain" => Body::Explain {
            name: text("name").ok_or_else(|| invalid("name= is needed".into()))?,
            team,
        },
        "history" => Body::History(HistoryFilter {
            team,
            limit: Some(50),
            ..HistoryFilter::default()
        }),
        "usage" => Body::Usage(usage_query(q, team)?),
        "logs" => {
            let number = |k: &str| -> Result<Option<u32>, ApiError> {
                text(k)
                    .map(|v| {
                        v.parse()
                            .map_err(|_| invalid(format!("{k}={v:?}: expected a number")))
                    })
                    .transpose()
            };
            let body = Body::Logs {
                workload: text("name").ok_or_else(|| invalid("name= is needed".into()))?,
                team,
                node: text("node").ok_or_else(|| invalid("node= is needed".into()))?,
                rank: number("rank")?.unwrap_or(0),
                attempt: number("attempt")?,
                follow: false,
            };
            let bytes = web.log_tail(who, body).await?;
            return Ok(serde_json::json!({ "log": String::from_utf8_lossy(&bytes) }));
        }
        other => {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "no view {other:?}; the views are whoami, teams, nodes, topology, workloads, \
                     workload, explain, history, usage, logs"
                ),
            ))
        }
    };
    let reply = web.ask(who, body).await?;
    to_json(&reply)
}

/// `days=N` (1 to 400, default 14) back from now, grouped `by=day,team` (the CLI's words).
fn usage_query(q: &HashMap<String, String>, team: Option<String>) -> Result<UsageQuery, ApiError> {
    let days: i64 = match q.get("days") {
        Some(d) => d
            .parse()
            .ok()
            .filter(|d| (1..=MAX_DAYS).contains(d))
            .ok_or_else(|| invalid(format!("days={d:?}: expected 1 to {MAX_DAYS}")))?,
        None => 14,
    };
    let by = match q.get("by") {
        Some(b) => b
            .split(',')
            .map(UsageBy::parse)
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?,
        None => vec![UsageBy::Day, UsageBy::Team],
    };
    let until = now_ms();
    Ok(UsageQuery {
        since_ms: until - days * 86_400_000,
        until_ms: until,
        team,
        by,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_queries_say_what_they_take() {
        let q = |pairs: &[(&str, &str)]| {
            let m: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            usage_query(&m, None)
        };
        let d = q(&[]).unwrap();
        assert_eq!(d.until_ms - d.since_ms, 14 * 86_400_000);
        assert_eq!(d.by, vec![UsageBy::Day, UsageBy::Team]);
        assert!(q(&[("days", "0")])
            .unwrap_err()
            .message
            .contains("1 to 400"));
        assert!(q(&[("days", "x")])
            .unwrap_err()
            .message
            .contains("1 to 400"));
        let e = q(&[("by", "day,colour")]).unwrap_err();
        assert!(e.message.contains("colour"), "{}", e.message);
    }
}
