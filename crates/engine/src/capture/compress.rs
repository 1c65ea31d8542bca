//! Compressed capture files (`--compress zstd[:LEVEL]` or `gzip[:LEVEL]`), written by the
//! file writer thread as it writes. Besides saving disk, the compression level is the
//! papers' real application load (Braun et al.'s packzip): the higher the level, the slower
//! the writer, the fuller the pools.
//!
//! Why one compressed frame per write batch: a compressed stream cut anywhere (a full disk,
//! a crash) decompresses to a partial record, and nobody can say how many packets it holds.
//! So each batch of whole records the writer hands over becomes one complete zstd frame or
//! gzip member, written out at the batch's end ([`Output::end_batch`]). Concatenated frames
//! and members are one valid stream for `zstd -d`, `gzip -d` and the libraries. After a
//! failed write the file is cut back to the end of its last whole frame, which decompresses
//! to exactly the packets the writer reports. Over a direct-I/O file, frames are written in
//! the background and a failure loses the frames still on their way: the output says where
//! the last frame that landed ends ([`Output::landed`]), in the uncompressed bytes the writer
//! counts. The price: each batch (256 KiB) is compressed
//! on its own, in the writer thread (a libzstd background worker would only make the writer
//! wait at every frame end).

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

use flate2::write::GzEncoder;
use poolcap_format::Output;

/// A compression choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Zstandard at a level (1..=19, negative for faster).
    Zstd(i32),
    /// gzip (deflate) at a level (0..=9).
    Gzip(u32),
}

impl std::str::FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, level) = s.split_once(':').map_or((s, None), |(k, l)| (k, Some(l)));
        let bad = |l: &str| format!("`{l}` is not a compression level");
        match kind {
            "zstd" => {
                let l = level.map_or(Ok(3), |l| l.parse::<i32>().map_err(|_| bad(l)))?;
                if !(-7..=19).contains(&l) {
                    return Err(format!("zstd level {l} is outside -7..19"));
                }
                Ok(Compression::Zstd(l))
            }
            "gzip" => {
                let l = level.map_or(Ok(6), |l| l.parse::<u32>().map_err(|_| bad(l)))?;
                if l > 9 {
                    return Err(format!("gzip level {l} is outside 0..9"));
                }
                Ok(Compression::Gzip(l))
            }
            _ => Err(format!("`{s}`: use zstd[:LEVEL] or gzip[:LEVEL]")),
        }
    }
}

/// How a batch becomes a frame.
enum Codec {
    /// A zstd context, reused for every frame.
    Zstd(zstd::bulk::Compressor<'static>),
    Gzip(flate2::Compression),
}

/// An output that compresses into another, one frame per batch (see the module docs).
pub struct Compressed<W: Output> {
    inner: W,
    codec: Codec,
    /// The current batch, uncompressed.
    plain: Vec<u8>,
    /// The current batch's frame.
    frame: Vec<u8>,
    /// Uncompressed bytes taken in ended batches.
    plain_ended: u64,
    /// Each frame's end in `inner` and in the uncompressed bytes, from the last one `inner`
    /// says landed on (one entry, the last frame's, when `inner` writes as it takes).
    frames: VecDeque<(u64, u64)>,
}

impl<W: Output> Compressed<W> {
    /// Wraps `inner`.
    pub fn new(inner: W, c: Compression) -> io::Result<Self> {
        let codec = match c {
            Compression::Zstd(l) => Codec::Zstd(zstd::bulk::Compressor::new(l)?),
            Compression::Gzip(l) => Codec::Gzip(flate2::Compression::new(l)),
        };
        Ok(Compressed {
            inner,
            codec,
            plain: Vec::new(),
            frame: Vec::new(),
            plain_ended: 0,
            frames: VecDeque::from([(0, 0)]),
        })
    }

    /// The output the frames went to.
    pub fn into_inner(self) -> W {
        self.inner
    }

    fn compress_batch(&mut self) -> io::Result<()> {
        self.frame.clear();
        match &mut self.codec {
            Codec::Zstd(z) => {
                self.frame
                    .reserve(zstd::zstd_safe::compress_bound(self.plain.len()));
                z.compress_to_buffer(&self.plain, &mut self.frame)?;
            }
            Codec::Gzip(level) => {
                let mut e = GzEncoder::new(std::mem::take(&mut self.frame), *level);
                e.write_all(&self.plain)?;
                self.frame = e.finish()?;
            }
        }
        Ok(())
    }
}

/// Takes bytes into the current batch; nothing reaches `inner` before the batch ends.
impl<W: Output> Write for Compressed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.plain.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let n = bufs.iter().map(|b| b.len()).sum();
        self.plain.reserve(n);
        bufs.iter().for_each(|b| self.plain.extend_from_slice(b));
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Output> Output for Compressed<W> {
    /// Cuts `inner` back to the end of the last whole frame at or before `len` (the
    /// writer asks for a batch end, see [`partial_batch_kept`](Output::partial_batch_kept)
    /// and [`landed`](Output::landed)): a compressed stream can end nowhere else.
    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        self.plain.clear();
        let (end, _) = self
            .frames
            .iter()
            .rev()
            .find(|(_, plain)| *plain <= len)
            .copied()
            .unwrap_or((0, 0));
        self.inner.truncate_to(end)
    }

    /// Where the last frame `inner` says landed ends, in uncompressed bytes.
    fn landed(&self) -> Option<u64> {
        let landed = self.inner.landed()?;
        let frame = self.frames.iter().rev().find(|(end, _)| *end <= landed);
        Some(frame.map_or(0, |(_, plain)| *plain))
    }

    fn end_batch(&mut self) -> io::Result<()> {
        if self.plain.is_empty() {
            return Ok(());
        }
        self.compress_batch()?;
        self.inner.write_all(&self.frame)?;
        self.inner.end_batch()?;
        let (end, _) = self.frames.back().copied().unwrap_or((0, 0));
        self.plain_ended += self.plain.len() as u64;
        self.frames
            .push_back((end + self.frame.len() as u64, self.plain_ended));
        let landed = self.inner.landed().unwrap_or(u64::MAX);
        while self.frames.len() > 1 && self.frames[1].0 <= landed {
            self.frames.pop_front();
        }
        self.plain.clear();
        Ok(())
    }

    fn partial_batch_kept(&self, _accepted: usize) -> usize {
        0
    }

    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }

    fn close(&mut self) -> io::Result<()> {
        self.end_batch()?;
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_format::{CaptureWriter, FileFormat, WriteError};
    use std::cell::RefCell;
    use std::io::Read;
    use std::rc::Rc;

    /// A disk that takes `budget` bytes, then fails with ENOSPC; the test keeps a handle on
    /// its bytes.
    struct SmallDisk {
        bytes: Rc<RefCell<Vec<u8>>>,
        budget: usize,
    }

    impl Write for SmallDisk {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let mut bytes = self.bytes.borrow_mut();
            if bytes.len() >= self.budget {
                return Err(io::Error::from_raw_os_error(28));
            }
            let n = b.len().min(self.budget - bytes.len());
            bytes.extend_from_slice(&b[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Output for SmallDisk {
        fn truncate_to(&mut self, len: u64) -> io::Result<()> {
            self.bytes.borrow_mut().truncate(len as usize);
            Ok(())
        }
    }

    fn decompress(c: Compression, z: &[u8]) -> Vec<u8> {
        let mut plain = Vec::new();
        match c {
            Compression::Zstd(_) => zstd::Decoder::new(z)
                .unwrap()
                .read_to_end(&mut plain)
                .unwrap(),
            Compression::Gzip(_) => flate2::read::MultiGzDecoder::new(z)
                .read_to_end(&mut plain)
                .unwrap(),
        };
        plain
    }

    /// Writes 1000 packets of 100 bytes in batches of 64 KiB to a disk of `budget` bytes:
    /// the compressed bytes left and the error, if the disk filled up.
    fn write_compressed(c: Compression, budget: usize) -> (Vec<u8>, Option<WriteError>) {
        let bytes = Rc::new(RefCell::new(Vec::new()));
        let disk = SmallDisk {
            bytes: Rc::clone(&bytes),
            budget,
        };
        let out = Compressed::new(disk, c).unwrap();
        let result = CaptureWriter::new(out, FileFormat::Pcapng, 256, "t0").and_then(|mut w| {
            for i in 0..1000u64 {
                // Payload that compresses, but not to nothing.
                let data: Vec<u8> = (0..100).map(|b| ((i * 7 + b) % 13) as u8).collect();
                w.write_packet(i * 1000, &data, 100)?;
            }
            w.finish(None)
        });
        let kept = bytes.borrow().clone();
        (kept, result.err())
    }

    #[test]
    fn compressed_files_decompress_to_a_readable_capture() {
        for c in [Compression::Zstd(3), Compression::Gzip(6)] {
            let (z, err) = write_compressed(c, usize::MAX);
            assert!(err.is_none(), "{c:?}: {err:?}");
            let plain = decompress(c, &z);
            assert!(
                z.len() < plain.len() / 3,
                "{c:?}: {} of {}",
                z.len(),
                plain.len()
            );
            let f = poolcap_format::read_bytes(&plain).unwrap();
            assert_eq!(f.packets.len(), 1000);
            assert_eq!(f.packets[999].ts_ns, 999_000);
        }
    }

    #[test]
    fn a_full_disk_keeps_whole_frames_that_decompress_to_the_reported_packets() {
        for c in [Compression::Zstd(3), Compression::Gzip(6)] {
            let (full, _) = write_compressed(c, usize::MAX);
            let mut kept_counts = Vec::new();
            for budget in (0..full.len()).step_by(97) {
                let (z, err) = write_compressed(c, budget);
                let err = err.unwrap_or_else(|| panic!("{c:?}: no error at {budget} bytes"));
                let held = err.packets_kept().expect("an I/O error");
                assert!(z.len() <= budget, "{c:?}");
                if z.is_empty() {
                    assert_eq!(held, 0, "{c:?} at {budget}: {err}");
                    continue;
                }
                let f = poolcap_format::read_bytes(&decompress(c, &z))
                    .unwrap_or_else(|e| panic!("{c:?} at {budget} bytes: {e}"));
                assert_eq!(f.packets.len() as u64, held, "{c:?} at {budget}: {err}");
                kept_counts.push(held);
            }
            assert!(
                kept_counts.iter().any(|&n| n > 0 && n < 1000),
                "{c:?}: some budget should cut between frames: {kept_counts:?}"
            );
        }
    }

    #[test]
    fn levels_parse_within_range() {
        assert_eq!("zstd".parse(), Ok(Compression::Zstd(3)));
        assert_eq!("zstd:19".parse(), Ok(Compression::Zstd(19)));
        assert_eq!("gzip:1".parse(), Ok(Compression::Gzip(1)));
        assert!("zstd:30".parse::<Compression>().is_err());
        assert!("gzip:10".parse::<Compression>().is_err());
        assert!("lz4".parse::<Compression>().is_err());
    }
}
