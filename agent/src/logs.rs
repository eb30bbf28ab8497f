//! Serving pod logs to the cluster: the agent long-polls its coordinator for log requests and
//! answers each on a stream of its own, in pieces of [`LOG_CHUNK`] bytes (so memory stays
//! bounded whatever the log's size), following the file while the pod runs when asked. At most
//! [`MAX_READERS`] logs are streamed at once. Who may read what is decided by the coordinator,
//! which checks the reader's certificate; the agent answers only its own coordinator.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use allot_common::api::{Body, LogPiece, LogRequest, Reply, LOG_CHUNK};
use allot_net::client::Client;
use allot_net::wire;
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;

use crate::executor::find_log;
use crate::shim::EXIT_FILE;

/// Logs streamed at once by one agent.
pub const MAX_READERS: usize = 16;
/// How often a followed log is read again once it has no new bytes.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// Runs for the agent's life: takes the log requests for `node` and streams each answer.
pub async fn serve(node: String, mut client: Client, data_dir: PathBuf) {
    let readers = Arc::new(Semaphore::new(MAX_READERS));
    let mut backoff = Duration::from_millis(200);
    loop {
        let poll = client.call(Body::LogPoll {
            node: node.clone(),
            wait_ms: 5_000,
        });
        let requests = match tokio::time::timeout(Duration::from_secs(8), poll).await {
            Ok(Ok(Ok(Reply::LogRequests(r)))) => {
                backoff = Duration::from_millis(200);
                r
            }
            Ok(Ok(Ok(other))) => {
                tracing::warn!("unexpected answer to a log poll: {other:?}");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            Ok(Ok(Err(e))) => {
                tracing::warn!("log poll refused: {e}");
                tokio::time::sleep(Duration::from_secs(5)).await;
                continue;
            }
            Ok(Err(e)) => {
                tracing::debug!("log poll: {e}");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
            Err(_) => {
                client.reset();
                continue;
            }
        };
        // The requests are held by the coordinator that answered: answer there.
        let Some(addr) = client.answered_by().map(str::to_string) else {
            continue;
        };
        for r in requests {
            let body = Body::LogData {
                node: node.clone(),
                id: r.id,
            };
            match client.send_stream(&addr, &body).await {
                Ok(send) => {
                    let (dir, readers) = (data_dir.clone(), readers.clone());
                    tokio::spawn(async move { stream_log(send, r, &dir, &readers).await });
                }
                Err(e) => tracing::warn!("answering log request {}: {e}", r.id),
            }
        }
    }
}

async fn piece(send: &mut quinn::SendStream, p: &LogPiece) -> bool {
    wire::write_frame(send, p).await.is_ok()
}

/// Whether the pod whose log is at `path` has ended: its exit record is written, or its
/// directory is gone (the log was moved to the archive).
fn ended(path: &Path) -> bool {
    match path.parent() {
        Some(dir) => !dir.exists() || dir.join(EXIT_FILE).exists(),
        None => true,
    }
}

async fn stream_log(
    mut send: quinn::SendStream,
    r: LogRequest,
    data_dir: &Path,
    readers: &Arc<Semaphore>,
) {
    let Ok(_permit) = readers.clone().try_acquire_owned() else {
        let msg = format!("this agent streams {MAX_READERS} logs at once, its limit; try again");
        piece(&mut send, &Err(msg)).await;
        let _ = send.finish();
        return;
    };
    let Some(path) = find_log(data_dir, &r.workload, r.workload_id, r.rank, r.attempt) else {
        let which = r
            .attempt
            .map(|a| format!(" attempt {a}"))
            .unwrap_or_default();
        let msg = format!(
            "no log for {} rank {}{which} on this node",
            r.workload, r.rank
        );
        piece(&mut send, &Err(msg)).await;
        let _ = send.finish();
        return;
    };
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => {
            piece(&mut send, &Err(format!("{}: {e}", path.display()))).await;
            let _ = send.finish();
            return;
        }
    };
    let mut buf = vec![0u8; LOG_CHUNK];
    loop {
        match file.read(&mut buf).await {
            Ok(0) => {
                // Read what was written before the pod ended, then stop.
                if !r.follow || ended(&path) {
                    match file.read(&mut buf).await {
                        Ok(n) if n > 0 => {
                            if !piece(&mut send, &Ok(buf[..n].to_vec())).await {
                                return;
                            }
                            continue;
                        }
                        _ => break,
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(FOLLOW_EVERY) => {}
                    // The reader went: stop following.
                    _ = send.stopped() => return,
                }
            }
            Ok(n) => {
                if !piece(&mut send, &Ok(buf[..n].to_vec())).await {
                    return;
                }
            }
            Err(e) => {
                piece(&mut send, &Err(format!("{}: {e}", path.display()))).await;
                break;
            }
        }
    }
    let _ = send.finish();
}
