//! Memory for large buffers filled at speed: anonymous mappings whose whole 2 MiB
//! stretches the kernel backs with huge pages where it has them (transparent huge pages,
//! `MADV_HUGEPAGE`, as advice: a kernel without them gives pages of 4 KiB).
//!
//! Why: memory new to the process is a fault per page, zeroed by the kernel on the thread
//! that first writes it. The direct writer's buffers made while the device stalls (see
//! `direct`) are filled at the capture's rate on the capture thread: in pages of 4 KiB
//! that was 8% of the thread over a 20 GB run at 1.6 GB/s, most of it during the stalls,
//! when the ring has the least room. 1 GiB faulted in 2 MiB at a time, each unmapped before
//! the next, took 0.25 s in pages of 4 KiB here, 0.04 s in huge pages; and a direct write
//! from a huge page pins one page, not 512. 20 GB of 1514-byte frames at 1.0 Mpps with 256
//! MiB of stall buffers (tool and sender pinned as in the bench): in pages of 4 KiB 3 of 3
//! runs lost frames (51k to 882k, each run filling the 256 MiB), in huge pages 2 of 3 (7k,
//! 438k).
//!
//! Also for memory kept and written again seconds later (the packet store's signatures and
//! the buffers its indexes are saved through): on the lab's VMs a small page not written
//! for a second or two costs a trap to the host at its next write (16 MB written again
//! after 2 s: 0.24-0.30 GB/s in small pages, 8.2-8.4 GB/s in huge ones). How fast a huge
//! page new to the process zeroes varies there (from slower than its 512 small ones to
//! 4.6 GB/s against 0.37): memory from here is best kept and used again.

/// The size of a huge page.
pub const HUGE_PAGE: usize = 2 << 20;

/// A fixed number of bytes, zeroed, page-aligned (so fit for direct I/O); empty by default.
#[derive(Default)]
pub struct Memory(Option<memmap2::MmapMut>);

impl Memory {
    /// At least `len` bytes. The mapping is a whole number of huge pages long, so that the
    /// kernel places it on a huge page's boundary; the whole huge pages within `len` are
    /// advised huge, the rest (a write buffer's padding, rarely written) is in pages of 4
    /// KiB; every page is faulted in only when first written.
    ///
    /// # Panics
    ///
    /// When the kernel refuses the mapping, as a `Vec` that cannot allocate aborts.
    pub fn new(len: usize) -> Memory {
        let map = memmap2::MmapOptions::new()
            .len(len.max(1).next_multiple_of(HUGE_PAGE))
            .map_anon()
            .unwrap_or_else(|e| panic!("no memory for a buffer of {len} bytes: {e}"));
        let whole = len / HUGE_PAGE * HUGE_PAGE;
        if whole > 0 {
            // Advice only: without transparent huge pages the pages are small.
            let _ = map.advise_range(memmap2::Advice::HugePage, 0, whole);
        }
        Memory(Some(map))
    }

    /// Bytes held (the mapping's length, whole huge pages; 0 when empty).
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    /// Whether no memory is mapped.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").field("len", &self.len()).finish()
    }
}

impl std::ops::Deref for Memory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl std::ops::DerefMut for Memory {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_zeroed_aligned_and_whole_huge_pages_long() {
        let mut m = Memory::new(HUGE_PAGE + 10);
        assert_eq!(m.len(), 2 * HUGE_PAGE);
        assert_eq!(m.as_ptr().align_offset(4096), 0);
        assert!(m.iter().all(|&b| b == 0));
        m[HUGE_PAGE + 9] = 7;
        assert_eq!(m[HUGE_PAGE + 9], 7);
        let empty = Memory::default();
        assert!(empty.is_empty());
        assert_eq!(empty.len(), 0);
        assert_eq!(&*empty, &[] as &[u8]);
    }
}
