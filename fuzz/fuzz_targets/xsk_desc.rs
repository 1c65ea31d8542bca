//! AF_XDP RX descriptors against the UMEM: whatever address and length a descriptor holds,
//! the packet and metadata spans lie inside one frame of the UMEM, or there is none.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolcap_sys::xsk::{meta_span, packet_span};

fuzz_target!(|input: (u64, u32, u32, u32)| {
    let (addr, len, frame_size, frames) = input;
    let umem_len = (frame_size as usize).saturating_mul((frames % 65_536) as usize);
    if let Some(span) = packet_span(addr, len, frame_size, umem_len) {
        let fs = frame_size as usize;
        assert!(span.end <= umem_len && span.len() <= len as usize);
        if !span.is_empty() {
            assert_eq!(span.start / fs, (span.end - 1) / fs, "crosses a frame");
        }
    }
    if let Some(span) = meta_span(addr, frame_size, umem_len) {
        let fs = frame_size as usize;
        assert!(span.end <= umem_len && span.len() == 8);
        assert_eq!(span.start / fs, (span.end - 1) / fs, "crosses a frame");
    }
});
