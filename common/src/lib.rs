//! Domain types shared by every part of allot: resources and quantities, the instance catalog,
//! teams and quotas, the cluster policy, workloads, and the HyperPod input forms.

pub mod api;
pub mod array;
pub mod auto_resume;
pub mod catalog;
pub mod hyperpod;
pub mod image;
pub mod kubernetes;
pub mod layout;
pub mod mig;
pub mod names;
pub mod pods_ready;
pub mod policy;
pub mod quota;
pub mod recorded;
pub mod resource;
pub mod timefmt;
pub mod topology;
pub mod usage;
pub mod workload;

/// The one boxed error of the servers' shells (coordinator and agent).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub use catalog::{Catalog, InstanceType};
pub use policy::{ClusterPolicy, FairSharingStrategy, PriorityClass, Stability};
pub use quota::{CohortSpec, FlavorQuota, ResourceGroup, ResourceQuota, TeamSpec};
pub use resource::{ResourceName, Resources};
pub use workload::{PodSet, PriorityRef, WorkloadSpec};
