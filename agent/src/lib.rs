//! The node agent: inventory discovery (`inventory`), pods as processes under shims
//! (`executor`, `shim`) or as containers from images (`containerd`), the link to the coordinator cluster with reconciliation (`agent`), and
//! pod logs served to the cluster (`logs`).

pub mod agent;
pub mod containerd;
pub mod executor;
pub mod http;
pub mod inventory;
pub mod logs;
pub mod metrics;
pub mod pod_dir;
pub mod reconcile;
pub mod shim;
