//! The node agent: inventory discovery (`inventory`), pods as processes under shims
//! (`executor`, `shim`), and the link to the coordinator cluster with reconciliation (`agent`).

pub mod agent;
pub mod executor;
pub mod http;
pub mod inventory;
pub mod metrics;
pub mod shim;
