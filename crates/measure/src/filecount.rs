//! What a tool really wrote: the whole packets in a capture file (pcap or pcapng, plain or
//! compressed), counted as a stream.
//!
//! Why a stream and not `poolcap_format::read_bytes`: the disk suite writes files of several
//! GB (and one of over 20 GB), which must not be read into memory to be counted. The file
//! goes through a bounded buffer (`poolcap_format::PacketReader`), decompressed on the way
//! when it was written compressed; timestamps are kept only when asked for (frame spacing).

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use poolcap_format::{PacketReader, ReadError};

use super::peer;

/// What a written capture file holds.
#[derive(Debug, Clone, Default)]
pub struct FileCount {
    /// Whole packets in it.
    pub packets: u64,
    /// Their timestamps in nanoseconds, when asked for (empty when the file was cut inside a
    /// record).
    pub ts_ns: Vec<u64>,
    /// Whether the file ends inside a record (a tool stopped in the middle of a write).
    pub truncated: bool,
    /// Size of the file on disk (compressed, if it was written compressed).
    pub bytes: u64,
}

/// What a store directory (poolcap's `--store`, or a peer's such as stenotype's) holds after
/// a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreHeld {
    /// Whole packets in its packet files.
    pub packets: u64,
    /// Bytes of its packet files on disk.
    pub bytes: u64,
    /// A packet file ends inside a record or block, or was never closed.
    pub truncated: bool,
    /// Bytes of its index files.
    pub index_bytes: u64,
}

/// Read buffer: larger than any record (snap length at most 256 KiB).
const BUFFER: usize = 1 << 20;

/// Counts the whole packets of the capture file at `path`, decompressing it first when it
/// was written with `compress` (`zstd:L` or `gzip:L`). A file that ends inside a record
/// counts its whole packets: tcpdump writing into a pipe that is full when it is stopped
/// leaves half a record behind.
pub fn count_file(
    path: &Path,
    compress: Option<&str>,
    timestamps: bool,
) -> anyhow::Result<FileCount> {
    let file = std::fs::File::open(path)?;
    let bytes = file.metadata()?.len();
    let reader = std::io::BufReader::with_capacity(BUFFER, file);
    let mut count = match compress {
        None => count_stream(reader, timestamps),
        Some(c) => match peer::compressor(c)?.0 {
            "gzip" => count_stream(flate2::read::MultiGzDecoder::new(reader), timestamps),
            _ => count_stream(zstd::stream::Decoder::with_buffer(reader)?, timestamps),
        },
    }?;
    count.bytes = bytes;
    Ok(count)
}

/// Counts the whole packets of a pcap or pcapng stream (poolcap-format's streaming reader,
/// the decoder `poolcap check` and every reader of poolcap's own use).
fn count_stream(r: impl Read, timestamps: bool) -> anyhow::Result<FileCount> {
    let mut reader = match PacketReader::new(r) {
        Ok(r) => r,
        Err(ReadError::Truncated { .. }) => {
            return Ok(FileCount {
                truncated: true,
                ..FileCount::default()
            })
        }
        Err(e) => bail!("{e}"),
    };
    let mut c = FileCount::default();
    loop {
        match reader.next_packet() {
            Ok(Some(p)) => {
                c.packets += 1;
                if timestamps {
                    c.ts_ns.push(p.ts_ns);
                }
            }
            Ok(None) => break,
            Err(ReadError::Truncated { .. }) => {
                c.truncated = true;
                c.ts_ns.clear();
                break;
            }
            Err(e) => return Err(e).with_context(|| format!("after {} packets", c.packets)),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_format::{CaptureWriter, FileFormat};
    use std::io::Write as _;

    /// A file with `n` 1514-byte records, the i-th stamped at i µs.
    fn capture(format: FileFormat, n: u64) -> Vec<u8> {
        let mut w = CaptureWriter::new(Vec::new(), format, 262_144, "t").unwrap();
        for i in 0..n {
            w.write_packet(1_000_000_000 + i * 1000, &[7u8; 1514], 1514)
                .unwrap();
        }
        w.finish(None).unwrap()
    }

    #[test]
    fn counts_plain_cut_and_compressed_files_as_streams() {
        let dir = tempfile::tempdir().unwrap();
        for format in [FileFormat::Pcap, FileFormat::PcapNs, FileFormat::Pcapng] {
            // More than the read buffer, so the reader refills.
            let bytes = capture(format, 2000);
            let plain = dir.path().join("x");
            std::fs::write(&plain, &bytes).unwrap();
            let f = count_file(&plain, None, true).unwrap();
            assert_eq!((f.packets, f.truncated), (2000, false), "{format:?}");
            assert_eq!(f.bytes, bytes.len() as u64);
            assert_eq!(f.ts_ns[1] - f.ts_ns[0], 1000, "{format:?}");
            assert_eq!(f.ts_ns[0], 1_000_000_000, "{format:?}");
            std::fs::write(&plain, &bytes[..bytes.len() - 10]).unwrap();
            let f = count_file(&plain, None, false).unwrap();
            assert_eq!((f.packets, f.truncated), (1999, true), "{format:?}");

            let z = dir.path().join("x.zst");
            std::fs::write(&z, zstd::stream::encode_all(&bytes[..], 1).unwrap()).unwrap();
            assert_eq!(count_file(&z, Some("zstd:1"), false).unwrap().packets, 2000);
            let g = dir.path().join("x.gz");
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(&bytes).unwrap();
            std::fs::write(&g, enc.finish().unwrap()).unwrap();
            assert_eq!(count_file(&g, Some("gzip:1"), false).unwrap().packets, 2000);
        }
        let bad = dir.path().join("bad");
        std::fs::write(&bad, b"nonsense, not a capture file").unwrap();
        assert!(count_file(&bad, None, false).is_err());
        std::fs::write(&bad, b"").unwrap();
        assert!(count_file(&bad, None, false).unwrap().truncated);
    }
}
