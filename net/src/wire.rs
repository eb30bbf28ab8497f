//! The wire format of every network message allot sends.
//!
//! All encoding and decoding of messages lives in this module, so that the codec can be replaced
//! by touching one file. Messages are serde types encoded with bincode 2 (standard config,
//! variable-length integers) and always decoded under a size limit of [`MAX_FRAME`] bytes.
//!
//! On a stream, each message is one frame: a 4-byte big-endian length followed by that many bytes
//! of payload. The length is checked against [`MAX_FRAME`] before anything is read or allocated
//! for the payload, and the payload buffer only grows as bytes actually arrive, so a peer cannot
//! make us reserve memory it does not send.
//!
//! Rules for message types (bincode is not self-describing):
//! - no `#[serde(tag = ...)]`, `#[serde(untagged)]`, `#[serde(flatten)]` or
//!   `skip_serializing_if`, and no `serde_json::Value`: they need `deserialize_any` or change the
//!   field layout, and fail to decode;
//! - no recursive types (`enum Tree { Node(Box<Tree>) }`): decoding has no depth limit, so a hostile
//!   frame of nested variants could exhaust the stack.

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The QUIC close code a coordinator sends when a new connection would pass one of its limits
/// (connections per certificate, or in all); the close reason names the limit. Clients report
/// it at once instead of retrying.
pub const CLOSE_OVER_LIMIT: u32 = 3;

/// The newest version of the request protocol. A client sends each request in the oldest
/// version that has it (`protocol_of`), so that it can talk to a coordinator of the release
/// before during an upgrade; a coordinator answers every version from
/// `OLDEST_PROTOCOL_VERSION` to its own. Version 3 added `Body::FormatProbe` and
/// `Body::RemoveNode`; version 4 compute quotas with GPU partitions (layout 1 of
/// `allot_common::layout`); version 5 the gang scheduling requests; version 6
/// `Body::BackupStream`; version 7 node reports with topology levels (layout 2) and submits
/// that ask for a topology level; version 8 `Body::AddMember`, `Body::RemoveMember` and the cohort requests (`SetCohort`,
/// `DeleteCohort`, `SetTeamCohort`, `ListCohorts`); version 9 `Body::SetCohortWeight`; version
/// 10 `Body::ListCohortWeights`.
pub const PROTOCOL_VERSION: u32 = 10;

/// The oldest request protocol a coordinator of this release answers (the release before's).
pub const OLDEST_PROTOCOL_VERSION: u32 = 2;

/// The protocol version a request is sent in: the one that introduced it.
pub fn protocol_of(body: &allot_common::api::Body) -> u32 {
    use allot_common::api::Body;
    match body {
        Body::CreateComputeQuota(input) | Body::UpdateComputeQuota { input, .. }
            if input.config.has_partitions() =>
        {
            4
        }
        Body::ReportNode(r) if !r.topology.is_empty() => 7,
        Body::Submit(input) | Body::SubmitArray { input, .. }
            if allot_common::topology::asks(&input.spec.labels) =>
        {
            7
        }
        Body::SubmitBatch(inputs)
            if inputs
                .iter()
                .any(|i| allot_common::topology::asks(&i.spec.labels)) =>
        {
            7
        }
        Body::BackupStream => 6,
        Body::AddMember { .. }
        | Body::RemoveMember { .. }
        | Body::SetCohort(_)
        | Body::DeleteCohort { .. }
        | Body::SetTeamCohort { .. }
        | Body::ListCohorts => 8,
        Body::SetCohortWeight { .. } => 9,
        Body::ListCohortWeights => 10,
        Body::GetTopology | Body::GetMembers => 7,
        Body::SetGangScheduling(_) | Body::GetGangScheduling => 5,
        Body::FormatProbe | Body::RemoveNode { .. } | Body::Backup => 3,
        Body::OnBehalf { body, .. } => protocol_of(body),
        _ => OLDEST_PROTOCOL_VERSION,
    }
}

/// The layout of the shared types (`allot_common::layout`) in request protocol `version`.
pub fn layout_of_protocol(version: u32) -> u32 {
    match version {
        0..=3 => 0,
        4..=6 => allot_common::layout::PARTITIONS,
        _ => allot_common::layout::TOPOLOGY,
    }
}

/// A request's bytes, its body in the layout of its protocol version.
pub fn encode_request(req: &allot_common::api::Request) -> Result<Vec<u8>, WireError> {
    allot_common::layout::scoped(layout_of_protocol(req.version), || encode(req))
}

/// The request in `b`, read in the layout of the protocol version it starts with.
pub fn decode_request(b: &[u8]) -> Result<allot_common::api::Request, WireError> {
    // The version is the request's first field.
    let version = bincode::serde::decode_from_slice::<u32, _>(b, config())
        .map(|(v, _)| v)
        .unwrap_or(PROTOCOL_VERSION);
    allot_common::layout::scoped(layout_of_protocol(version), || decode(b))
}

/// Largest frame payload accepted or sent, in bytes (16 MiB).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// ALPN protocol id of allot's QUIC connections.
pub const ALPN: &[u8] = b"allot/1";

/// Bytes of the length prefix in front of every frame.
const LEN_BYTES: usize = 4;

/// Initial capacity of a frame buffer; it grows as bytes arrive.
const INITIAL_READ_CAPACITY: usize = 64 * 1024;

/// Errors from encoding, decoding, reading or writing messages.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A frame's length prefix is above [`MAX_FRAME`].
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes", max = MAX_FRAME)]
    FrameTooLarge { len: u64 },
    /// A message encodes to more than [`MAX_FRAME`] bytes.
    #[error(
        "a {type_name} message encodes to {len} bytes, more than the maximum frame of {max} bytes",
        max = MAX_FRAME
    )]
    MessageTooLarge { type_name: String, len: usize },
    /// A message could not be encoded.
    #[error("could not encode a {type_name} message: {message}")]
    Encode { type_name: String, message: String },
    /// Bytes could not be decoded as the expected message type.
    #[error("could not decode a {type_name} message: {message}")]
    Decode { type_name: String, message: String },
    /// A message decoded without consuming all bytes of its frame.
    #[error("trailing {trailing} bytes after a {type_name} message of {used} bytes")]
    TrailingBytes {
        type_name: String,
        used: usize,
        trailing: usize,
    },
    /// The stream ended inside the 4-byte length prefix.
    #[error("stream ended after {got} of the {LEN_BYTES} bytes of a frame length")]
    TruncatedLength { got: usize },
    /// The stream ended inside a frame's payload.
    #[error("stream ended after {got} of the {expected} bytes of a frame")]
    TruncatedFrame { expected: usize, got: usize },
    /// Reading or writing the stream failed. The message includes the causes (for a QUIC stream,
    /// why the connection was lost).
    #[error("i/o error on the stream: {}", error_chain(.0))]
    Io(std::io::Error),
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> Self {
        WireError::Io(e)
    }
}

/// `e` and its causes, joined by ": ".
fn error_chain(e: &std::io::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// `std::any::type_name` without module paths: `alloc::vec::Vec<allot::Msg>` becomes `Vec<Msg>`.
fn type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let mut out = String::with_capacity(full.len());
    let mut path = String::new();
    let flush = |path: &mut String, out: &mut String| {
        out.push_str(path.rsplit("::").next().unwrap_or(path.as_str()));
        path.clear();
    };
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            path.push(c);
        } else {
            flush(&mut path, &mut out);
            out.push(c);
        }
    }
    flush(&mut path, &mut out);
    out
}

fn encode_with<T: Serialize + ?Sized, C: bincode::config::Config>(
    v: &T,
    cfg: C,
) -> Result<Vec<u8>, WireError> {
    bincode::serde::encode_to_vec(v, cfg).map_err(|e| WireError::Encode {
        type_name: type_name::<T>(),
        message: e.to_string(),
    })
}

/// Decodes one value from exactly `b` under `cfg`'s limit; bytes left over are an error.
fn decode_with<T: DeserializeOwned, C: bincode::config::Config>(
    b: &[u8],
    cfg: C,
) -> Result<T, WireError> {
    let (value, used) =
        bincode::serde::decode_from_slice::<T, _>(b, cfg).map_err(|e| WireError::Decode {
            type_name: type_name::<T>(),
            message: e.to_string(),
        })?;
    if used != b.len() {
        return Err(WireError::TrailingBytes {
            type_name: type_name::<T>(),
            used,
            trailing: b.len().saturating_sub(used),
        });
    }
    Ok(value)
}

/// Encodes a message into its payload bytes (no length prefix).
pub fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, WireError> {
    let bytes = encode_with(v, config())?;
    if bytes.len() > MAX_FRAME {
        return Err(WireError::MessageTooLarge {
            type_name: type_name::<T>(),
            len: bytes.len(),
        });
    }
    Ok(bytes)
}

/// Decodes one message from exactly `b`; bytes left over are an error.
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> Result<T, WireError> {
    if b.len() > MAX_FRAME {
        return Err(WireError::FrameTooLarge {
            len: b.len() as u64,
        });
    }
    decode_with(b, config())
}

/// Largest snapshot of the replicated state (snapshots travel between coordinators only).
pub const MAX_SNAPSHOT: usize = 1 << 30;

fn snapshot_config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_SNAPSHOT>()
}

/// Encodes a snapshot of the replicated state (same format, larger limit).
pub fn encode_snapshot<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, WireError> {
    encode_with(v, snapshot_config())
}

/// Decodes a snapshot written by `encode_snapshot`.
pub fn decode_snapshot<T: DeserializeOwned>(b: &[u8]) -> Result<T, WireError> {
    decode_with(b, snapshot_config())
}

/// Reads one frame of at most `limit` bytes (for coordinator-to-coordinator traffic, whose
/// snapshots can exceed `MAX_FRAME`).
pub async fn read_frame_bytes_limited<R>(
    r: &mut R,
    limit: usize,
) -> Result<Option<Vec<u8>>, WireError>
where
    R: AsyncRead + Unpin,
{
    let mut len_buf = [0u8; LEN_BYTES];
    let mut got = 0;
    while got < LEN_BYTES {
        let n = r.read(&mut len_buf[got..]).await?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(WireError::TruncatedLength { got })
            };
        }
        got += n;
    }
    let len = u32::from_be_bytes(len_buf) as usize;
    if len > limit {
        return Err(WireError::FrameTooLarge { len: len as u64 });
    }
    let mut payload = Vec::with_capacity(len.min(INITIAL_READ_CAPACITY));
    (&mut *r).take(len as u64).read_to_end(&mut payload).await?;
    if payload.len() != len {
        return Err(WireError::TruncatedFrame {
            expected: len,
            got: payload.len(),
        });
    }
    Ok(Some(payload))
}

/// Writes one frame of raw bytes of any size up to `u32::MAX` (see `read_frame_bytes_limited`).
pub async fn write_frame_bytes_large<W>(w: &mut W, payload: &[u8]) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
{
    let len = u32::try_from(payload.len()).map_err(|_| WireError::FrameTooLarge {
        len: payload.len() as u64,
    })?;
    if payload.len() <= 64 * 1024 {
        // One write, so a small message (a raft append or ack) leaves in one QUIC packet
        // rather than a 4-byte packet for the length and another for the bytes.
        let mut frame = Vec::with_capacity(LEN_BYTES + payload.len());
        frame.extend_from_slice(&len.to_be_bytes());
        frame.extend_from_slice(payload);
        w.write_all(&frame).await?;
    } else {
        w.write_all(&len.to_be_bytes()).await?;
        w.write_all(payload).await?;
    }
    w.flush().await?;
    Ok(())
}

/// Writes `v` as one frame (length prefix and payload) and flushes the writer.
pub async fn write_frame<W, T>(w: &mut W, v: &T) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
    T: Serialize + ?Sized,
{
    let payload = encode(v)?;
    write_frame_bytes(w, &payload).await
}

/// Writes `data` as frames of at most `chunk` bytes (an answer too large for one frame, such as
/// a backup, after a first frame that announces its size).
pub async fn write_chunks<W>(w: &mut W, data: &[u8], chunk: usize) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
{
    for c in data.chunks(chunk.clamp(1, MAX_FRAME)) {
        write_frame_bytes(w, c).await?;
    }
    Ok(())
}

/// Reads exactly `size` bytes written by `write_chunks` (frames of at most `chunk`), handing
/// each frame to `sink`; a stream that ends early or sends more is an error.
pub async fn read_chunks<R>(
    r: &mut R,
    size: u64,
    chunk: usize,
    mut sink: impl FnMut(&[u8]),
) -> Result<(), WireError>
where
    R: AsyncRead + Unpin,
{
    let mut got = 0u64;
    while got < size {
        let Some(c) = read_frame_bytes_limited(r, chunk.clamp(1, MAX_FRAME)).await? else {
            return Err(WireError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the stream ended after {got} of {size} bytes"),
            )));
        };
        got += c.len() as u64;
        if got > size {
            return Err(WireError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("more than the {size} bytes announced"),
            )));
        }
        sink(&c);
    }
    Ok(())
}

/// Reads one frame and decodes it as `T`. Returns `Ok(None)` when the stream ends cleanly before
/// the first byte of a frame.
pub async fn read_frame<R, T>(r: &mut R) -> Result<Option<T>, WireError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    match read_frame_bytes(r).await? {
        Some(payload) => decode(&payload).map(Some),
        None => Ok(None),
    }
}

/// Writes `payload` as one frame (length prefix and bytes, for example a raft protobuf message)
/// and flushes the writer.
pub async fn write_frame_bytes<W>(w: &mut W, payload: &[u8]) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
{
    if payload.len() > MAX_FRAME {
        return Err(WireError::FrameTooLarge {
            len: payload.len() as u64,
        });
    }
    // The check above keeps the length within u32 (MAX_FRAME < u32::MAX).
    let len = payload.len() as u32;
    let mut frame = Vec::with_capacity(LEN_BYTES + payload.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame).await?;
    w.flush().await?;
    Ok(())
}

/// Reads one frame's payload bytes. Returns `Ok(None)` when the stream ends cleanly before the
/// first byte of a frame; a stream that ends inside a frame is an error.
pub async fn read_frame_bytes<R>(r: &mut R) -> Result<Option<Vec<u8>>, WireError>
where
    R: AsyncRead + Unpin,
{
    read_frame_bytes_limited(r, MAX_FRAME).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Inner {
        id: u64,
        name: String,
        weights: Vec<f64>,
        flag: Option<bool>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Ping,
        Hello { version: u32, node: String },
        Batch(Vec<Inner>),
        Map(BTreeMap<String, (i64, char)>),
        Pair(Inner, Option<Box<Inner>>),
        Bytes(Vec<u8>),
    }

    fn sample() -> Msg {
        Msg::Pair(
            Inner {
                id: 7,
                name: "gpu-1".into(),
                weights: vec![1.5, -0.25],
                flag: Some(true),
            },
            Some(Box::new(Inner {
                id: u64::MAX,
                name: String::new(),
                weights: vec![],
                flag: None,
            })),
        )
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("tokio runtime")
    }

    #[test]
    fn encode_decode_round_trip() {
        for m in [
            Msg::Ping,
            Msg::Hello {
                version: PROTOCOL_VERSION,
                node: "gpu-1".into(),
            },
            sample(),
            Msg::Map(BTreeMap::from([("a".into(), (-3, 'é'))])),
            Msg::Bytes(vec![0; 1000]),
        ] {
            let bytes = encode(&m).unwrap();
            assert_eq!(decode::<Msg>(&bytes).unwrap(), m);
        }
    }

    #[tokio::test]
    async fn frame_round_trip_and_clean_eof() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &sample()).await.unwrap();
        write_frame(&mut buf, &Msg::Ping).await.unwrap();
        write_frame_bytes(&mut buf, b"raw raft bytes")
            .await
            .unwrap();
        write_frame_bytes(&mut buf, b"").await.unwrap();
        let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
        assert_eq!(len, encode(&sample()).unwrap().len());

        let mut r = buf.as_slice();
        assert_eq!(read_frame::<_, Msg>(&mut r).await.unwrap(), Some(sample()));
        assert_eq!(read_frame::<_, Msg>(&mut r).await.unwrap(), Some(Msg::Ping));
        assert_eq!(
            read_frame_bytes(&mut r).await.unwrap().as_deref(),
            Some(&b"raw raft bytes"[..])
        );
        assert_eq!(read_frame_bytes(&mut r).await.unwrap(), Some(Vec::new()));
        assert_eq!(read_frame::<_, Msg>(&mut r).await.unwrap(), None);
        assert_eq!(read_frame_bytes(&mut r).await.unwrap(), None);
    }

    #[tokio::test]
    async fn frame_over_a_duplex_stream() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for i in 0..20u64 {
                write_frame(
                    &mut a,
                    &Msg::Batch(vec![Inner {
                        id: i,
                        name: "x".repeat(100),
                        weights: vec![],
                        flag: None,
                    }]),
                )
                .await
                .unwrap();
            }
        });
        for i in 0..20u64 {
            match read_frame::<_, Msg>(&mut b).await.unwrap() {
                Some(Msg::Batch(v)) => assert_eq!(v[0].id, i),
                other => panic!("unexpected {other:?}"),
            }
        }
        writer.await.unwrap();
        assert_eq!(read_frame::<_, Msg>(&mut b).await.unwrap(), None);
    }

    #[tokio::test]
    async fn oversized_length_is_refused_before_reading_the_payload() {
        let mut input = Vec::new();
        input.extend_from_slice(&20_000_000u32.to_be_bytes());
        input.extend_from_slice(b"payload that must stay unread");
        let mut r = input.as_slice();
        let err = read_frame_bytes(&mut r).await.unwrap_err();
        assert!(matches!(err, WireError::FrameTooLarge { len: 20_000_000 }));
        assert_eq!(
            err.to_string(),
            "frame of 20000000 bytes exceeds the maximum of 16777216 bytes"
        );
        // Nothing after the length prefix was consumed, so nothing was buffered for it.
        assert_eq!(r, b"payload that must stay unread");

        let mut r: &[u8] = &u32::MAX.to_be_bytes();
        assert!(matches!(
            read_frame::<_, Msg>(&mut r).await,
            Err(WireError::FrameTooLarge { .. })
        ));

        // Exactly MAX_FRAME is allowed as a length; a payload that is not there is truncated.
        let mut input = (MAX_FRAME as u32).to_be_bytes().to_vec();
        input.extend_from_slice(&[1, 2, 3]);
        let mut r = input.as_slice();
        let err = read_frame_bytes(&mut r).await.unwrap_err();
        assert!(
            matches!(err, WireError::TruncatedFrame { expected, got: 3 } if expected == MAX_FRAME)
        );
    }

    #[tokio::test]
    async fn oversized_payload_is_refused_when_writing() {
        let big = vec![0u8; MAX_FRAME + 1];
        let mut out = Vec::new();
        assert!(matches!(
            write_frame_bytes(&mut out, &big).await,
            Err(WireError::FrameTooLarge { .. })
        ));
        assert!(matches!(
            write_frame(&mut out, &Msg::Bytes(big)).await,
            Err(WireError::MessageTooLarge { .. })
        ));
        assert!(out.is_empty());
    }

    #[tokio::test]
    async fn truncated_frames_are_errors() {
        let mut buf = Vec::new();
        write_frame(&mut buf, &sample()).await.unwrap();
        for cut in 1..buf.len() {
            let mut r = &buf[..cut];
            let err = read_frame::<_, Msg>(&mut r).await.unwrap_err();
            if cut < 4 {
                assert!(matches!(err, WireError::TruncatedLength { got } if got == cut));
                assert_eq!(
                    err.to_string(),
                    format!("stream ended after {cut} of the 4 bytes of a frame length")
                );
            } else {
                assert!(
                    matches!(err, WireError::TruncatedFrame { expected, got } if expected == buf.len() - 4 && got == cut - 4),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let err = decode::<Msg>(&[0xff, 0xff, 0xff]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("could not decode a Msg message: "),
            "{err}"
        );
        // A vector claiming far more elements than the limit allows.
        let mut huge = vec![5u8, 0xfd];
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            decode::<Msg>(&huge),
            Err(WireError::Decode { .. })
        ));
        // Invalid UTF-8 in a string, invalid char, invalid bool.
        assert!(decode::<String>(&[2, 0xc3, 0x28]).is_err());
        assert!(decode::<char>(&[0xfb, 0x00, 0xd8]).is_err());
        assert!(decode::<bool>(&[2]).is_err());
        assert!(decode::<Msg>(&[]).is_err());
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut bytes = encode(&Msg::Ping).unwrap();
        bytes.extend_from_slice(&[1, 2, 3]);
        let err = decode::<Msg>(&bytes).unwrap_err();
        assert!(matches!(err, WireError::TrailingBytes { trailing: 3, .. }));
        assert_eq!(
            err.to_string(),
            "trailing 3 bytes after a Msg message of 1 bytes"
        );
    }

    #[test]
    fn io_errors_show_their_causes() {
        #[derive(Debug, thiserror::Error)]
        #[error("connection lost")]
        struct Lost(#[source] std::io::Error);
        let inner = std::io::Error::other("peer sent no certificates");
        let err = WireError::from(std::io::Error::other(Lost(inner)));
        assert_eq!(
            err.to_string(),
            "i/o error on the stream: connection lost: peer sent no certificates"
        );
    }

    #[test]
    fn type_names_drop_module_paths() {
        assert_eq!(type_name::<Msg>(), "Msg");
        assert_eq!(type_name::<Vec<Option<Msg>>>(), "Vec<Option<Msg>>");
        assert_eq!(type_name::<(u8, String)>(), "(u8, String)");
    }

    fn arb_inner() -> impl Strategy<Value = Inner> {
        (
            any::<u64>(),
            ".{0,8}",
            prop::collection::vec(any::<f64>(), 0..4),
            any::<Option<bool>>(),
        )
            .prop_map(|(id, name, weights, flag)| Inner {
                id,
                name,
                weights,
                flag,
            })
    }

    fn arb_msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            Just(Msg::Ping),
            (any::<u32>(), ".{0,8}").prop_map(|(version, node)| Msg::Hello { version, node }),
            prop::collection::vec(arb_inner(), 0..3).prop_map(Msg::Batch),
            prop::collection::btree_map(".{0,4}", any::<(i64, char)>(), 0..3).prop_map(Msg::Map),
            (arb_inner(), prop::option::of(arb_inner()))
                .prop_map(|(a, b)| Msg::Pair(a, b.map(Box::new))),
            prop::collection::vec(any::<u8>(), 0..16).prop_map(Msg::Bytes),
        ]
    }

    #[tokio::test]
    async fn chunks_carry_more_than_a_frame_and_a_short_or_long_stream_is_refused() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut buf = Vec::new();
        write_chunks(&mut buf, &data, 4096).await.unwrap();
        let mut got = Vec::new();
        let mut frames = 0;
        read_chunks(&mut buf.as_slice(), 10_000, 4096, |c| {
            frames += 1;
            got.extend_from_slice(c);
        })
        .await
        .unwrap();
        assert_eq!((got, frames), (data, 3));
        let e = read_chunks(&mut buf.as_slice(), 20_000, 4096, |_| {})
            .await
            .unwrap_err();
        assert!(e.to_string().contains("after 10000 of 20000 bytes"), "{e}");
        let e = read_chunks(&mut buf.as_slice(), 5_000, 4096, |_| {})
            .await
            .unwrap_err();
        assert!(e.to_string().contains("more than the 5000 bytes"), "{e}");
        // A frame above the chunk is refused before it is read.
        assert!(read_chunks(&mut buf.as_slice(), 10_000, 100, |_| {})
            .await
            .is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode::<Msg>(&bytes);
            let _ = decode::<Vec<Msg>>(&bytes);
            let _ = decode::<(Inner, Option<Msg>)>(&bytes);
            let mut r = bytes.as_slice();
            let _ = rt().block_on(read_frame::<_, Msg>(&mut r));
        }

        #[test]
        fn mutated_messages_never_panic(m in arb_msg(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut bytes = encode(&m).unwrap();
            let i = at.index(bytes.len());
            bytes[i] = byte;
            let _ = decode::<Msg>(&bytes);
        }

        #[test]
        fn arbitrary_messages_round_trip(m in arb_msg()) {
            let bytes = encode(&m).unwrap();
            let back = decode::<Msg>(&bytes).unwrap();
            // NaN != NaN, so compare the encodings.
            prop_assert_eq!(encode(&back).unwrap(), bytes);
        }
    }
}
