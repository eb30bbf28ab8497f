//! The coordinator's QUIC side: a sender per peer for raft messages, and every connection that
//! comes in (mutual TLS names who it is): raft streams from peers, and API requests, each on
//! its own stream, read within the caller's budget and answered by `requests.rs` (or, for
//! logs, relayed from the node's agent as they come).

use std::sync::Arc;
use std::time::Duration;

use allot_common::api::{
    ApiError, Body, ErrorKind, LogPiece, LogRequest, Reply, Request, Response,
};
use allot_common::BoxError;
use allot_core::machine::Machine;
use allot_net::tls::{self, Identity};
use allot_net::wire;
use raft::eraftpb::{Message, MessageType};
use tokio::sync::mpsc;

use crate::auth::{node_scope, on_behalf, workload_scope};
use crate::raft_inputs::Input;
use crate::replica::{decode_message, encode_message};
use crate::requests::handle_request;
use crate::shared::Shared;

/// Largest raft message accepted from a peer (snapshots included).
const MAX_PEER_FRAME: usize = wire::MAX_SNAPSHOT + 1024;

pub(crate) async fn peer_sender(
    to: u64,
    addr: String,
    (endpoint, client): (quinn::Endpoint, quinn::ClientConfig),
    mut rx: mpsc::UnboundedReceiver<Message>,
    input: mpsc::UnboundedSender<Input>,
    cluster_id: Option<String>,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        let conn = match connect(&endpoint, &client, &addr).await {
            Ok(c) => c,
            Err(e) => {
                if rx.is_closed() {
                    return;
                }
                tracing::debug!("peer {to} at {addr}: {e}");
                // Raft resends; drop what queued up and tell it about lost snapshots.
                while let Ok(m) = rx.try_recv() {
                    if m.get_msg_type() == MessageType::MsgSnapshot {
                        let _ = input.send(Input::SnapshotStatus(to, false));
                    }
                }
                let _ = input.send(Input::Unreachable(to));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        let mut stream = match conn.open_uni().await {
            Ok(s) => s,
            Err(_) => continue,
        };
        if let Some(id) = &cluster_id {
            let hello = crate::backup::cluster_hello(id);
            if wire::write_frame_bytes_large(&mut stream, &hello)
                .await
                .is_err()
            {
                continue;
            }
        }
        while let Some(m) = rx.recv().await {
            let snap = m.get_msg_type() == MessageType::MsgSnapshot;
            let ok = match encode_message(&m) {
                Ok(b) => wire::write_frame_bytes_large(&mut stream, &b).await.is_ok(),
                Err(_) => false,
            };
            if snap {
                let _ = input.send(Input::SnapshotStatus(to, ok));
            }
            if !ok {
                let _ = input.send(Input::Unreachable(to));
                break;
            }
        }
        if rx.is_closed() {
            return;
        }
    }
}

async fn connect(
    endpoint: &quinn::Endpoint,
    client: &quinn::ClientConfig,
    addr: &str,
) -> Result<quinn::Connection, BoxError> {
    let sock = tokio::net::lookup_host(addr)
        .await?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))?;
    let c = endpoint
        .connect_with(client.clone(), sock, tls::SERVER_NAME)?
        .await?;
    Ok(c)
}

pub(crate) async fn serve_conn(conn: quinn::Connection, shared: Shared) {
    let who = match tls::identity_of(&conn) {
        Ok(i) => i,
        Err(e) => {
            tracing::info!("refused {}: {e}", conn.remote_address());
            conn.close(1u32.into(), b"certificate has no allot identity");
            return;
        }
    };
    let budget = match shared.budgets.connect(&who) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            tracing::warn!(identity = %who, "refused a connection from {}: {e}", conn.remote_address());
            conn.close(wire::CLOSE_OVER_LIMIT.into(), e.as_bytes());
            return;
        }
    };
    loop {
        tokio::select! {
            bi = conn.accept_bi() => {
                let Ok((send, recv)) = bi else { return };
                let shared = shared.clone();
                let who = who.clone();
                let budget = budget.clone();
                tokio::spawn(async move { serve_request(send, recv, who, shared, &budget).await });
            }
            uni = conn.accept_uni() => {
                let Ok(recv) = uni else { return };
                let Identity::Coordinator { id } = who else {
                    conn.close(2u32.into(), b"only coordinators send raft messages");
                    return;
                };
                let shared = shared.clone();
                tokio::spawn(async move { serve_raft(recv, id, shared).await });
            }
        }
    }
}

async fn serve_raft(mut recv: quinn::RecvStream, peer: u64, shared: Shared) {
    if let Some(id) = &shared.cluster_id {
        let first = wire::read_frame_bytes_limited(&mut recv, 1024).await;
        if !matches!(&first, Ok(Some(b)) if *b == crate::backup::cluster_hello(id)) {
            tracing::warn!(
                "coordinator {peer}'s raft stream does not open with this cluster's identity ({id}, restored from a backup): refused; a replica of this cluster is started with --restore and the same file"
            );
            return;
        }
    }
    loop {
        match wire::read_frame_bytes_limited(&mut recv, MAX_PEER_FRAME).await {
            Ok(Some(b)) => match decode_message(&b) {
                Ok(m) if m.from == peer && m.to == shared.id => {
                    if shared.input.send(Input::Raft(m)).is_err() {
                        return;
                    }
                }
                Ok(m) => {
                    tracing::warn!(
                        "coordinator {peer} sent a raft message from {} to {}; dropped",
                        m.from,
                        m.to
                    );
                }
                Err(e) => {
                    tracing::warn!("coordinator {peer} sent an undecodable raft message: {e}");
                    return;
                }
            },
            Ok(None) => return,
            Err(e) => {
                tracing::debug!("raft stream from {peer}: {e}");
                return;
            }
        }
    }
}

async fn serve_request(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    who: Identity,
    shared: Shared,
    budget: &crate::budget::Connection,
) {
    let request = match budget.read_request(&mut recv).await {
        Ok(Some((bytes, reserved))) => {
            let req = wire::decode_request(&bytes).map_err(|e| e.to_string());
            // The request's bytes go before it is handled (a long poll may wait minutes).
            drop((bytes, reserved));
            req.map(Some)
        }
        Ok(None) => Ok(None),
        Err(e) => {
            tracing::debug!(identity = %who, "request dropped: {e}");
            Err(e)
        }
    };
    // A replica's dashboard forwards its browsers' reads as theirs.
    let (request, who) = match request {
        Ok(Some(Request {
            version,
            body: Body::OnBehalf { identity, body },
        })) => match on_behalf(&who, &identity, *body) {
            Ok((body, as_who)) => (Ok(Some(Request { version, body })), as_who),
            Err(e) => return respond(&mut send, &who, Err(e)).await,
        },
        other => (other, who),
    };
    // Logs stream: their handlers own the streams.
    let request = match request {
        Ok(Some(req)) if speaks(&shared, req.version) => match req.body {
            Body::Logs {
                workload,
                team,
                node,
                rank,
                attempt,
                follow,
            } => {
                let req = LogRequest {
                    id: 0,
                    workload_id: None,
                    workload,
                    rank,
                    attempt,
                    follow,
                };
                return serve_logs(send, &node, team, req, &who, &shared).await;
            }
            Body::LogData { node, id } => {
                let delivered = match node_scope(&who, &node, "send logs") {
                    Ok(_) => shared.logs.deliver(id, recv),
                    Err(e) => return respond(&mut send, &who, Err(e)).await,
                };
                if !delivered {
                    let e = ApiError::new(
                        ErrorKind::NotFound,
                        format!("no reader waits for log request {id} (it went, or timed out)"),
                    );
                    return respond(&mut send, &who, Err(e)).await;
                }
                let _ = send.finish();
                return;
            }
            body => Ok(Some(Request {
                version: req.version,
                body,
            })),
        },
        other => other,
    };
    let resp: Response = match request {
        Ok(Some(req)) if !speaks(&shared, req.version) => Err(ApiError::new(
            ErrorKind::Version,
            format!(
                "the request is in protocol version {}, and this coordinator answers versions {} to {}; use a matching allot",
                req.version,
                wire::OLDEST_PROTOCOL_VERSION,
                shared.protocol
            ),
        )),
        Ok(Some(Request {
            body: Body::BackupStream,
            ..
        })) => {
            let r = handle_request(Body::BackupStream, &who, &shared).await;
            return stream_backup(&mut send, &who, r).await;
        }
        Ok(Some(req)) => handle_request(req.body, &who, &shared).await,
        Ok(None) => return,
        Err(e) => Err(ApiError::new(
            ErrorKind::Invalid,
            format!("could not read the request: {e}"),
        )),
    };
    respond(&mut send, &who, resp).await;
}

/// The answer to `Body::BackupStream`: `Reply::BackupStream` with the size, then the bytes in
/// frames of `BACKUP_CHUNK`, so a state of any size travels (one frame carries 16 MiB).
async fn stream_backup(send: &mut quinn::SendStream, who: &Identity, r: Response) {
    let (format, taken_ms, data) = match r {
        Ok(Reply::Backup {
            format,
            taken_ms,
            data,
        }) => (format, taken_ms, data),
        other => return respond(send, who, other).await,
    };
    let head: Response = Ok(Reply::BackupStream {
        format,
        taken_ms,
        size: data.len() as u64,
    });
    if !send_answer(send, who, head).await {
        return;
    }
    if let Err(e) = wire::write_chunks(send, &data, allot_common::api::BACKUP_CHUNK).await {
        tracing::warn!("backup to {who}: {e}");
        return;
    }
    let _ = send.finish();
}

/// Whether this coordinator answers requests in protocol `version`.
fn speaks(shared: &Shared, version: u32) -> bool {
    (wire::OLDEST_PROTOCOL_VERSION..=shared.protocol).contains(&version)
}

/// Asks the coordinator at `addr` which formats it reads: `None` when it cannot be reached,
/// `Some(0)` when it answers with an error (a release from before versioned formats cannot
/// read the question).
pub(crate) async fn probe_format(
    endpoint: &quinn::Endpoint,
    client: &quinn::ClientConfig,
    addr: &str,
) -> Option<u32> {
    let ask = async {
        let conn = connect(endpoint, client, addr).await.ok()?;
        let (mut send, mut recv) = conn.open_bi().await.ok()?;
        let req = Request {
            version: wire::protocol_of(&Body::FormatProbe),
            body: Body::FormatProbe,
        };
        wire::write_frame(&mut send, &req).await.ok()?;
        let _ = send.finish();
        let resp = wire::read_frame::<_, Response>(&mut recv).await.ok()??;
        conn.close(0u32.into(), b"");
        Some(match resp {
            Ok(Reply::Format { reads }) => reads,
            _ => 0,
        })
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .ok()
        .flatten()
}

/// While this replica leads a cluster whose format is below what it reads, asks `peer` every
/// two seconds which formats it reads, and hands the answer to the raft loop.
pub(crate) async fn format_prober(
    peer: u64,
    addr: String,
    (endpoint, client): (quinn::Endpoint, quinn::ClientConfig),
    linked: mpsc::WeakUnboundedSender<Message>,
    shared: Shared,
) {
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The peer left the membership: its sender was dropped.
        if linked.upgrade().is_none() {
            return;
        }
        if !shared.status().wants_formats {
            continue;
        }
        if let Some(reads) = probe_format(&endpoint, &client, &addr).await {
            if shared
                .input
                .send(Input::PeerFormat { peer, reads })
                .is_err()
            {
                return;
            }
        }
    }
}

/// Writes `resp` as the stream's one reply and ends the stream.
async fn respond(send: &mut quinn::SendStream, who: &Identity, resp: Response) {
    if send_answer(send, who, resp).await {
        let _ = send.finish();
    }
}

/// Writes `resp` as one frame; false when it could not be written.
async fn send_answer(send: &mut quinn::SendStream, who: &Identity, resp: Response) -> bool {
    if let Err(e) = &resp {
        if e.kind == ErrorKind::Forbidden {
            // An audit trail: who tried what they may not (a node reporting another's pods, a
            // user touching another team).
            tracing::warn!(identity = %who, "refused: {}", e.message);
        }
    }
    let bytes = match wire::encode(&resp) {
        Ok(b) => b,
        Err(e) => {
            let too_big: Response = Err(ApiError::new(
                ErrorKind::Invalid,
                format!(
                    "the reply does not fit in one frame ({e}); narrow the request (for example get workloads --team T)"
                ),
            ));
            match wire::encode(&too_big) {
                Ok(b) => b,
                Err(_) => return false,
            }
        }
    };
    if let Err(e) = wire::write_frame_bytes(send, &bytes).await {
        tracing::debug!("reply to {who}: {e}");
        return false;
    }
    true
}

/// `allot logs`: checks the reader may read `req.workload`, asks `node`'s agent for the log,
/// and copies its pieces to the reader one at a time until the agent's stream ends, the agent
/// reports an error, or the reader goes.
async fn serve_logs(
    mut send: quinn::SendStream,
    node: &str,
    team: Option<String>,
    req: LogRequest,
    who: &Identity,
    sh: &Shared,
) {
    let pending = async {
        sh.leader_only()?;
        let scope = workload_scope(who, team, "read logs")?;
        let name = req.workload.clone();
        let on = node.to_string();
        // The id of the workload the name resolves to now: its run's logs, not those of an
        // earlier workload of the same name.
        let resolved = Arc::new(std::sync::OnceLock::new());
        let found = resolved.clone();
        // Only the workload's team (or an admin) may read it; a forgotten workload's logs are
        // for admins. Only nodes with an agent keep logs.
        sh.read(Box::new(move |m: &Machine| {
            if m.nodes_meta
                .get(&on)
                .and_then(|n| n.report.as_ref())
                .is_none()
            {
                return Err(ApiError::new(
                    ErrorKind::NotFound,
                    format!("node {on:?} has no agent, so no logs"),
                ));
            }
            match (m.state.find_scoped(&name, scope.as_deref()), scope) {
                (Ok(id), _) => {
                    let _ = found.set(id.0);
                }
                (Err(_), None) => {}
                (Err(e), Some(_)) => return Err(e.into()),
            }
            Ok(Reply::Done)
        }))
        .await?;
        let mut req = req;
        req.workload_id = resolved.get().copied();
        sh.logs
            .request(node, req)
            .map_err(|e| ApiError::new(ErrorKind::LimitExceeded, e))
    };
    let mut pending = match pending.await {
        Ok(p) => p,
        Err(e) => return respond(&mut send, who, Err(e)).await,
    };
    let mut from_agent =
        match tokio::time::timeout(crate::logs::AGENT_ANSWER, &mut pending.stream).await {
            Ok(Ok(s)) => s,
            _ => {
                let e = ApiError::new(
                    ErrorKind::Unavailable,
                    format!(
                        "node {node:?}'s agent did not answer within {} s (is it running and \
                     connected to the cluster?)",
                        crate::logs::AGENT_ANSWER.as_secs()
                    ),
                );
                return respond(&mut send, who, Err(e)).await;
            }
        };
    // Every answer has a first frame: an empty log is one empty piece.
    let mut answered = false;
    let mut ended = false;
    loop {
        let frame = tokio::select! {
            f = wire::read_frame_bytes_limited(&mut from_agent, crate::logs::MAX_PIECE_FRAME) => f,
            // The reader went (Ctrl-C on `logs --follow`): stop, which stops the agent.
            _ = send.stopped() => return,
        };
        let reply: Response = match frame {
            Ok(None) if !answered => {
                ended = true;
                Ok(Reply::LogChunk(Vec::new()))
            }
            Ok(Some(b)) => match wire::decode::<LogPiece>(&b) {
                Ok(Ok(bytes)) => Ok(Reply::LogChunk(bytes)),
                Ok(Err(msg)) => Err(ApiError::new(
                    ErrorKind::NotFound,
                    format!("node {node:?}: {msg}"),
                )),
                Err(e) => Err(ApiError::new(
                    ErrorKind::Unavailable,
                    format!("node {node:?} sent a bad log piece: {e}"),
                )),
            },
            Ok(None) => break,
            Err(e) => Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("node {node:?}'s log stream broke: {e}"),
            )),
        };
        let last = reply.is_err() || ended;
        answered = true;
        let bytes = match wire::encode(&reply) {
            Ok(b) => b,
            Err(_) => return,
        };
        if wire::write_frame_bytes(&mut send, &bytes).await.is_err() || last {
            break;
        }
    }
    let _ = send.finish();
}
