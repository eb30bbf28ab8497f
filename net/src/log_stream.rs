//! Reading a pod's log as the cluster streams it (`Body::Logs`, `Client::stream`): one framed
//! answer after another, each a `Reply::LogChunk`, until the stream ends. The CLI's `allot logs`
//! and the dashboard's log view both read it here.

use allot_common::api::{ApiError, Reply, Response};

/// Why a log stream stopped before its end.
#[derive(Debug)]
pub enum LogStreamError {
    /// The cluster answered with an error (no such log on that node, not allowed, ...).
    Refused(ApiError),
    /// An answer that is no log piece.
    NotALog(Box<Reply>),
    /// The stream broke.
    Broke(String),
    /// What the pieces were handed to failed (a closed terminal).
    Sink(std::io::Error),
}

impl std::fmt::Display for LogStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogStreamError::Refused(e) => write!(f, "{:?}: {}", e.kind, e.message),
            LogStreamError::NotALog(r) => write!(f, "an answer that is no log: {r:?}"),
            LogStreamError::Broke(e) => write!(f, "the log stream broke: {e}"),
            LogStreamError::Sink(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LogStreamError {}

/// Hands each piece of the log, from the stream's `first` answer on, to `piece`, until the
/// stream ends.
pub async fn read_log_stream(
    first: Response,
    rest: &mut quinn::RecvStream,
    mut piece: impl FnMut(Vec<u8>) -> std::io::Result<()>,
) -> Result<(), LogStreamError> {
    let mut frame = first;
    loop {
        match frame {
            Ok(Reply::LogChunk(b)) => piece(b).map_err(LogStreamError::Sink)?,
            Ok(other) => return Err(LogStreamError::NotALog(Box::new(other))),
            Err(e) => return Err(LogStreamError::Refused(e)),
        }
        match crate::wire::read_frame::<_, Response>(rest).await {
            Ok(Some(f)) => frame = f,
            Ok(None) => return Ok(()),
            Err(e) => return Err(LogStreamError::Broke(e.to_string())),
        }
    }
}
