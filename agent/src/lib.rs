//! The node agent: inventory discovery now; execution and the link to the coordinator follow.

pub mod inventory;
