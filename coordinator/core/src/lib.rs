//! allot's core: the deterministic state machine and scheduler.
//!
//! Sans-I/O: commands and the current time go in, events and plans come out. Nothing here reads
//! a clock, spawns a thread, touches the network or iterates a hash map. The coordinator (Raft,
//! storage, QUIC) and `allot simulate` drive the same code.

pub(crate) mod census;
pub mod chunked;
pub mod cohort_commands;
pub mod cohort_tree;
pub mod conditions;
pub mod config_commands;
pub mod cycle_cache;
pub mod decision;
pub mod domains;
pub mod explain;
pub mod ids;
pub mod invariants;
pub mod job_records;
pub mod jobs;
pub mod machine;
pub mod nodes;
pub mod plan;
pub mod pods_ready;
pub mod preemption;
pub mod protection;
pub mod quota;
pub mod readiness;
pub mod reads;
pub mod recorded;
pub mod scheduler;
pub mod shapes;
pub mod state;
#[cfg(test)]
pub(crate) mod test_cluster;
pub mod texts;
pub mod topology;
pub(crate) mod tree_order;
pub mod usage;
pub mod usage_report;
pub mod verdict;
pub mod views;
pub(crate) mod witness;
pub mod working;

pub use ids::{FlavorId, FrId, NodeId, ResId, TeamId, WlId};
pub use plan::{Plan, PreemptReason};
pub use scheduler::schedule;
pub use state::{verify, Admission, Event, State, StateError, Time, WlState, Workload};
