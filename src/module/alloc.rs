use std::alloc::{GlobalAlloc, Layout, System};

use redis_module::raw;

/// Redis's allocator inside the server (so INFO memory and MEMORY USAGE see
/// every byte), the system allocator in unit tests, benches and fuzzers,
/// which link this crate without a server. The choice is made per call but
/// cannot change during a process: Redis sets its pointers before the
/// module allocates anything.
pub struct ModuleAlloc;

unsafe impl GlobalAlloc for ModuleAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match raw::RedisModule_Alloc {
            // Redis's allocator aligns to 16 bytes at most; a size rounded
            // up to the alignment keeps jemalloc's size classes aligned.
            Some(alloc) if layout.align() <= 16 => {
                let size = (layout.size() + layout.align() - 1) & !(layout.align() - 1);
                alloc(size).cast()
            }
            _ => System.alloc(layout),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match raw::RedisModule_Free {
            Some(free) if layout.align() <= 16 => free(ptr.cast()),
            _ => System.dealloc(ptr, layout),
        }
    }
}
