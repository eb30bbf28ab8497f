//! The allocator, and how the long-running roles give freed memory back to the system.

use std::time::Duration;

// The scheduler allocates and frees many small, short-lived values per cycle (candidate
// lists, trial assignments, shared texts); glibc's allocator spent a fifth of a large
// simulation in malloc, free and consolidation.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_e` (the same in v2 and v3); the Rust
/// bindings name only some options.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// How long freed pages wait before going back to the system: a second, mimalloc's default.
/// The delay passes only when a later free or the collect below looks, so a server that goes
/// quiet after a burst still gives its memory back within about two seconds. Shorter (100 ms,
/// as once set here) gave pages back in the middle of a burst of submits, and the next
/// allocations faulted them in again, zeroed: the durable admission rate fell by a third.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;
/// How often an idle server looks for freed pages whose delay has passed.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// For the coordinator, the agent and `dev`: memory freed after a burst (large requests
/// refused or dropped, a backlog drained) is returned within about a second, not only when
/// the next burst happens to free a page.
pub fn give_back_freed_memory() {
    no_transparent_huge_pages();
    // SAFETY: sets one integer option, which mimalloc reads atomically; any value is valid.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    let looker = std::thread::Builder::new()
        .name("allot-memory".into())
        .spawn(|| loop {
            std::thread::sleep(LOOK_EVERY);
            // SAFETY: a non-forcing collect of this thread's heap, which also purges the
            // shared arenas' expired pages; it takes no pointers.
            unsafe { libmimalloc_sys::mi_collect(false) };
        });
    if let Err(e) = looker {
        tracing::warn!("freed memory goes back to the system only as mimalloc's own frees look: cannot start its thread: {e}");
    }
}

/// mimalloc asks the kernel for transparent huge pages on its arenas (`MADV_HUGEPAGE`). A
/// server's heap grows as workloads arrive and its freed pages go back after a second, so
/// each new 2 MiB page was faulted in and zeroed whole: half of a coordinator's CPU time went
/// to the kernel zeroing pages under `allot bench`, and the durable admission rate fell from
/// about 55,000 to 33,000 a second (issue 56). The servers turn huge pages off for their
/// process; `simulate`, one large heap that never gives back, keeps them (2 % faster with).
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE sets one flag of this process; it takes no pointers.
        let r = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
        if r != 0 {
            tracing::debug!(
                "transparent huge pages stay on: prctl(PR_SET_THP_DISABLE) failed: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}
