//! Which layout of the shared types this thread encodes and decodes.
//!
//! Log entries, snapshots and API requests are bincode, which is not self-describing: a field
//! added to a type changes the bytes of everything that holds it. A type that gained a field
//! keeps reading and writing its earlier layout while the code that decodes or encodes bytes
//! of an earlier format or protocol says so ([`scoped`]); everywhere else the newest layout is
//! used. The format (log and snapshots) and protocol (requests) tables say which layout each
//! version has.
//!
//! | layout | what changed |
//! |---|---|
//! | 0 | (every type as first released) |
//! | 1 | `ComputeQuotaResource::accelerator_partition` (GPU partitions in compute quotas) |
//! | 2 | `NodeReport::topology` and the core's `Node::topology` (network topology levels) |

use std::cell::Cell;

/// The newest layout.
pub const CURRENT: u32 = 2;

/// The layout with `ComputeQuotaResource::accelerator_partition`.
pub const PARTITIONS: u32 = 1;

/// The layout with nodes' topology (`NodeReport::topology`).
pub const TOPOLOGY: u32 = 2;

thread_local! {
    static LAYOUT: Cell<u32> = const { Cell::new(CURRENT) };
}

/// Runs `f` with this thread encoding and decoding in `layout`, then restores the one before
/// (also when `f` panics).
pub fn scoped<R>(layout: u32, f: impl FnOnce() -> R) -> R {
    struct Restore(u32);
    impl Drop for Restore {
        fn drop(&mut self) {
            LAYOUT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LAYOUT.with(|l| l.replace(layout.min(CURRENT))));
    f()
}

/// The layout this thread encodes and decodes in now.
pub fn current() -> u32 {
    LAYOUT.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_sets_and_restores() {
        assert_eq!(current(), CURRENT);
        let inner = scoped(0, || (current(), scoped(1, current), current()));
        assert_eq!(scoped(TOPOLOGY + 5, current), CURRENT);
        assert_eq!(inner, (0, 1, 0));
        assert_eq!(current(), CURRENT);
        let _ = std::panic::catch_unwind(|| scoped(0, || panic!("restores anyway")));
        assert_eq!(current(), CURRENT);
    }
}
