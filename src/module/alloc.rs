use std::alloc::{GlobalAlloc, Layout, System};

use redis_module::raw;

/// Redis's allocator inside the server (so INFO memory and MEMORY USAGE see
/// every byte), the system allocator in unit tests, benches and fuzzers,
/// which link this crate without a server. The choice is made per call but
/// cannot change during a process: Redis sets its pointers before the
/// module allocates anything.
pub struct ModuleAlloc;

/// What `RedisModule_Alloc` guarantees on every server build: Redis's
/// zmalloc puts an 8-byte size header in front of each block where the
/// allocator cannot report sizes (libc malloc on some builds), so a block
/// may be aligned to 8 bytes only.
const SERVER_ALIGN: usize = 8;

unsafe impl GlobalAlloc for ModuleAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match raw::RedisModule_Alloc {
            Some(alloc) => aligned_alloc(layout, |size| alloc(size).cast()),
            None => System.alloc(layout),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match raw::RedisModule_Free {
            Some(free) => aligned_free(ptr, layout, |block| free(block.cast())),
            None => System.dealloc(ptr, layout),
        }
    }
}

/// A block for `layout` from an allocator that aligns to [`SERVER_ALIGN`]:
/// as it is, or, for a larger alignment, with room to align it and the
/// underlying block's address stored just before the aligned one.
unsafe fn aligned_alloc(layout: Layout, alloc: impl FnOnce(usize) -> *mut u8) -> *mut u8 {
    if layout.align() <= SERVER_ALIGN {
        return alloc(layout.size());
    }
    let Some(size) = layout.size().checked_add(layout.align()) else { return std::ptr::null_mut() };
    let block = alloc(size);
    if block.is_null() {
        return block;
    }
    // At least one word past the block's start, and at most `align` bytes
    // (the block is 8-aligned, the alignment a larger power of two).
    let offset = layout.align() - (block as usize & (layout.align() - 1));
    let aligned = block.add(offset);
    aligned.cast::<*mut u8>().sub(1).write(block);
    aligned
}

unsafe fn aligned_free(ptr: *mut u8, layout: Layout, free: impl FnOnce(*mut u8)) {
    if layout.align() <= SERVER_ALIGN {
        free(ptr);
    } else {
        free(ptr.cast::<*mut u8>().sub(1).read());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks aligned to 8 bytes and no more, as zmalloc's with a size
    /// header are.
    fn header_alloc(size: usize) -> *mut u8 {
        // SAFETY: a 16-aligned block with 8 bytes in front of what we hand out.
        unsafe { System.alloc(Layout::from_size_align(size + 8, 16).unwrap()).add(8) }
    }

    fn header_free(ptr: *mut u8, size: usize) {
        // SAFETY: the block header_alloc made for `size`.
        unsafe { System.dealloc(ptr.sub(8), Layout::from_size_align(size + 8, 16).unwrap()) }
    }

    #[test]
    fn blocks_are_aligned_as_asked_over_an_allocator_aligned_to_8() {
        for (size, align) in [(8, 8), (16, 16), (48, 16), (24, 32), (1, 64), (100, 128)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            let mut underlying = 0;
            // SAFETY: the block is written within its size and freed once.
            unsafe {
                let ptr = aligned_alloc(layout, |n| {
                    underlying = n;
                    header_alloc(n)
                });
                assert_eq!(ptr as usize % align, 0, "size {size}, align {align}");
                std::ptr::write_bytes(ptr, 0xAB, size);
                aligned_free(ptr, layout, |block| header_free(block, underlying));
            }
        }
    }
}
