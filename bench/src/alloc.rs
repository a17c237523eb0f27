//! Heap allocations of this process, counted by a global allocator around the system one (issue 21 asks for
//! "allocations per cycle before and after"). One relaxed atomic add per allocation, paid by every contender alike.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// The system allocator, counting.
pub(crate) struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed (the heap a structure holds: the renewal curve's bytes per guard).
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

fn grow(by: usize) {
    LIVE_BYTES.fetch_add(i64::try_from(by).unwrap_or(i64::MAX), Ordering::Relaxed);
}

fn shrink(by: usize) {
    LIVE_BYTES.fetch_sub(i64::try_from(by).unwrap_or(i64::MAX), Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; counting touches no memory the
// allocator hands out.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        grow(layout.size());
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        grow(layout.size());
        // SAFETY: forwarded as received.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A growth is an allocation the code asked for (a `Vec` or `String` outgrowing its capacity).
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        shrink(layout.size());
        grow(new_size);
        // SAFETY: forwarded as received.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations (and reallocations) so far, by every thread of this process.
pub(crate) fn count() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Heap bytes allocated and not yet freed, by every thread of this process.
pub(crate) fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::Relaxed)
}
