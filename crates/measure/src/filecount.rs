//! What a tool really wrote: the whole packets in a capture file (pcap or pcapng, plain or
//! compressed), counted as a stream, and the distinct generator frames among them.
//!
//! Why distinct frames: a capture that writes a ring block twice (poolcap did, when its
//! writer fell a whole ring behind, fixed in bd1c79f) has more packets in its file than it
//! captured, and counting packets took the copies for captures: loss understated. A frame
//! the generator tagged is counted once however often it is in the file (`Frames`), and
//! its copies are reported as duplicates; untagged frames (a replayed capture) count as
//! they are.
//!
//! Why a stream and not `poolcap_format::read_bytes`: the disk suite writes files of several
//! GB (and one of over 20 GB), which must not be read into memory to be counted. The file
//! goes through a bounded buffer (`poolcap_format::PacketReader`), decompressed on the way
//! when it was written compressed; timestamps are kept only when asked for (frame spacing).

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use poolcap_format::{PacketReader, ReadError};
use poolcap_gen::seqcheck::SeqChecker;

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

/// The frames of one or more files (a store's files are one capture), told apart by their
/// generator tags: see the module docs.
#[derive(Debug, Default)]
pub struct Frames {
    seq: SeqChecker,
}

impl Frames {
    /// Frames seen once or more: each tagged frame once, each untagged one as seen.
    pub fn distinct(&self) -> u64 {
        let tagged: u64 = self.seq.reports(None).iter().map(|r| r.unique).sum();
        tagged + self.seq.untagged()
    }

    /// Tagged frames seen again after their first time.
    pub fn duplicates(&self) -> u64 {
        self.seq.reports(None).iter().map(|r| r.duplicates).sum()
    }
}

/// What a store directory (poolcap's `--store`, or a peer's such as stenotype's) holds after
/// a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreHeld {
    /// Whole packets in its packet files.
    pub packets: u64,
    /// Distinct frames among them.
    pub distinct: u64,
    /// Frames in them more than once (see [`Frames`]).
    pub duplicates: u64,
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
/// was written with `compress` (`zstd:L` or `gzip:L`), and shows each to `frames`. A file
/// that ends inside a record counts its whole packets: tcpdump writing into a pipe that is
/// full when it is stopped leaves half a record behind.
pub fn count_file(
    path: &Path,
    compress: Option<&str>,
    timestamps: bool,
    frames: &mut Frames,
) -> anyhow::Result<FileCount> {
    let file = std::fs::File::open(path)?;
    let bytes = file.metadata()?.len();
    let reader = std::io::BufReader::with_capacity(BUFFER, file);
    let mut count = match compress {
        None => count_stream(reader, timestamps, frames),
        Some(c) => match peer::compressor(c)?.0 {
            "gzip" => count_stream(
                flate2::read::MultiGzDecoder::new(reader),
                timestamps,
                frames,
            ),
            _ => count_stream(
                zstd::stream::Decoder::with_buffer(reader)?,
                timestamps,
                frames,
            ),
        },
    }?;
    count.bytes = bytes;
    Ok(count)
}

/// Counts the whole packets of a pcap or pcapng stream (poolcap-format's streaming reader,
/// the decoder `poolcap check` and every reader of poolcap's own use).
fn count_stream(r: impl Read, timestamps: bool, frames: &mut Frames) -> anyhow::Result<FileCount> {
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
                frames.seq.observe(p.data);
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
            let f = count_file(&plain, None, true, &mut Frames::default()).unwrap();
            assert_eq!((f.packets, f.truncated), (2000, false), "{format:?}");
            assert_eq!(f.bytes, bytes.len() as u64);
            assert_eq!(f.ts_ns[1] - f.ts_ns[0], 1000, "{format:?}");
            assert_eq!(f.ts_ns[0], 1_000_000_000, "{format:?}");
            std::fs::write(&plain, &bytes[..bytes.len() - 10]).unwrap();
            let f = count_file(&plain, None, false, &mut Frames::default()).unwrap();
            assert_eq!((f.packets, f.truncated), (1999, true), "{format:?}");

            let z = dir.path().join("x.zst");
            std::fs::write(&z, zstd::stream::encode_all(&bytes[..], 1).unwrap()).unwrap();
            assert_eq!(
                count_file(&z, Some("zstd:1"), false, &mut Frames::default())
                    .unwrap()
                    .packets,
                2000
            );
            let g = dir.path().join("x.gz");
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(&bytes).unwrap();
            std::fs::write(&g, enc.finish().unwrap()).unwrap();
            assert_eq!(
                count_file(&g, Some("gzip:1"), false, &mut Frames::default())
                    .unwrap()
                    .packets,
                2000
            );
        }
        let bad = dir.path().join("bad");
        std::fs::write(&bad, b"nonsense, not a capture file").unwrap();
        assert!(count_file(&bad, None, false, &mut Frames::default()).is_err());
        std::fs::write(&bad, b"").unwrap();
        assert!(
            count_file(&bad, None, false, &mut Frames::default())
                .unwrap()
                .truncated
        );
    }

    #[test]
    fn a_frame_written_twice_counts_once_and_as_a_duplicate_across_files() {
        use poolcap_gen::frame::{FlowAddr, FrameTemplate};
        let t = FrameTemplate::new(
            &FlowAddr {
                src_mac: [2, 0, 0, 0, 0, 1],
                dst_mac: [2, 0, 0, 0, 0, 2],
                src_ip: [10, 0, 0, 1].into(),
                dst_ip: [10, 0, 0, 2].into(),
                src_port: 1,
                dst_port: 2,
            },
            128,
            7,
        );
        let file = |seqs: &[u64], untagged: usize| {
            let mut w = CaptureWriter::new(Vec::new(), FileFormat::Pcap, 262_144, "t").unwrap();
            for &s in seqs {
                let mut f = vec![0; 128];
                t.stamp_into(&mut f, s);
                w.write_packet(1, &f, 128).unwrap();
            }
            for _ in 0..untagged {
                w.write_packet(1, &[0u8; 60], 60).unwrap();
            }
            w.finish(None).unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        // The second file repeats seqs 2 and 3 of the first, as a block written twice.
        std::fs::write(&a, file(&[0, 1, 2, 3], 2)).unwrap();
        std::fs::write(&b, file(&[2, 3, 4, 5, 5], 1)).unwrap();
        let mut frames = Frames::default();
        let packets = count_file(&a, None, false, &mut frames).unwrap().packets
            + count_file(&b, None, false, &mut frames).unwrap().packets;
        assert_eq!(packets, 6 + 6);
        assert_eq!(frames.duplicates(), 3);
        assert_eq!(
            frames.distinct(),
            6 + 3,
            "six tagged frames, three untagged"
        );
    }
}
