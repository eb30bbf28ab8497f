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
/// How long freed pages wait before going back to the system. mimalloc's default (1 s) only
/// passes when a later free looks: a server that goes quiet after a burst kept it all.
const PURGE_DELAY_MS: std::ffi::c_long = 100;
/// How often an idle server looks for freed pages whose delay has passed.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// For the coordinator, the agent and `dev`: memory freed after a burst (large requests
/// refused or dropped, a backlog drained) is returned within about a second, not only when
/// the next burst happens to free a page.
pub fn give_back_freed_memory() {
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
