//! The pcap/pcapng reader over arbitrary bytes: it must return packets or an error, never
//! panic, and what it returns must be what a file can hold.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = poolcap_format::read_bytes(data) {
        let stored: usize = file.packets.iter().map(|p| p.data.len()).sum();
        assert!(stored <= data.len(), "more packet bytes than file bytes");
    }
});
