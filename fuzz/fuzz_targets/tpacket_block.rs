//! The TPACKET_V3 block walker over synthetic blocks: any bytes as a block (header first).
//! Every packet it yields lies inside the block, and it yields at most `num_pkts` of them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolcap_sys::rx_ring::block_packets;

fuzz_target!(|block: &[u8]| {
    let claimed = block
        .get(12..16)
        .map_or(0, |w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    let range = block.as_ptr_range();
    let mut n = 0u64;
    for p in block_packets(block) {
        let inner = p.data.as_ptr_range();
        assert!(range.start <= inner.start && inner.end <= range.end);
        n += 1;
    }
    assert!(n <= u64::from(claimed));
});
