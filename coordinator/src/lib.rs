//! The allot coordinator around the pure core: raft-rs driven through its Ready loop
//! (`replica`), the durable log (`raftlog`), and the server that puts them on the network.

pub mod admin_requests;
pub mod agent_requests;
pub mod auth;
pub mod backup;
pub mod budget;
pub mod config_text;
pub mod connections;
pub mod format;
pub mod http;
pub mod journal;
pub mod leader;
pub mod logs;
pub mod members;
pub mod metrics;
pub mod node;
pub mod peer_links;
pub mod priority;
pub mod raft_inputs;
pub mod raft_loop;
pub mod raftlog;
pub mod replica;
pub mod requests;
pub mod route;
pub mod server;
pub mod shared;
pub mod snapshot_compat;
pub mod user_requests;
pub mod web;
pub mod web_session;
