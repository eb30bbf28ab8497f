//! The node agent: inventory discovery, execution and the link to the coordinator arrive with issue 4.
