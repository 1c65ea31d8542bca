//! The pcap/pcapng reader over arbitrary bytes: it must return packets or an error, never
//! panic, and what it returns must be what a file can hold. The streaming reader, fed the
//! same bytes in small reads, must return the same packets and the same error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolcap_format::{read_bytes, PacketReader};

/// Hands out at most 7 bytes per read, so records straddle refills.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(7).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = read_bytes(data);
    if let Ok(file) = &whole {
        let stored: usize = file.packets.iter().map(|p| p.data.len()).sum();
        assert!(stored <= data.len(), "more packet bytes than file bytes");
    }
    let mut streamed = Vec::new();
    let end = match PacketReader::new(Trickle(data)) {
        Err(e) => Err(e.to_string()),
        Ok(mut r) => loop {
            match r.next_packet() {
                Ok(Some(p)) => streamed.push((p.ts_ns, p.data.to_vec(), p.orig_len)),
                Ok(None) => break Ok(()),
                Err(e) => break Err(e.to_string()),
            }
        },
    };
    match whole {
        Ok(file) => {
            assert_eq!(end, Ok(()), "the stream failed where the whole file read");
            let want: Vec<_> = file
                .packets
                .into_iter()
                .map(|p| (p.ts_ns, p.data, p.orig_len))
                .collect();
            assert_eq!(streamed, want);
        }
        Err(e) => assert_eq!(end, Err(e.to_string()), "the same error"),
    }
});
