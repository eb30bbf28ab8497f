//! allot's network: the wire framing of requests, replies and snapshots (`wire`), TLS and the
//! cluster's certificate authority (`tls`), and the API client (`client`). The domain types
//! these carry live in `allot-common`, which holds no I/O crate; the core depends on that one
//! only.

pub mod client;
pub mod log_stream;
pub mod tls;
pub mod wire;
