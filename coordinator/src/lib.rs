pub use allot_core;
