//! Compressed capture files (`--compress zstd[:LEVEL]` or `gzip[:LEVEL]`), written by the
//! file writer thread as it writes. Besides saving disk, the compression level is the
//! papers' real application load (Braun et al.'s packzip): the higher the level, the slower
//! the writer, the fuller the pools.
//!
//! zstd compresses in one background worker of libzstd, as the `zstd` program does by
//! default: the writer hands it input, which libzstd buffers (a few jobs, tens of MB at high
//! levels) while the worker compresses, so a slow level does not stall the writer until
//! those buffers are full. gzip has no such mode and compresses in the writer thread.
//!
//! A compressed stream cannot be cut back to a whole record after a write error, so the
//! whole-record guarantee of uncompressed files does not hold for it; the error says so.

use std::io::{self, Write};

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

/// An output that compresses into another.
pub enum Compressed<W: Write> {
    /// zstd stream.
    Zstd(Option<zstd::Encoder<'static, W>>),
    /// gzip stream.
    Gzip(Option<GzEncoder<W>>),
}

impl<W: Write> Compressed<W> {
    /// Wraps `inner`.
    pub fn new(inner: W, c: Compression) -> io::Result<Self> {
        Ok(match c {
            Compression::Zstd(l) => {
                let mut e = zstd::Encoder::new(inner, l)?;
                e.multithread(1)?;
                Compressed::Zstd(Some(e))
            }
            Compression::Gzip(l) => {
                Compressed::Gzip(Some(GzEncoder::new(inner, flate2::Compression::new(l))))
            }
        })
    }

    fn writer(&mut self) -> io::Result<&mut dyn Write> {
        let closed = || io::Error::other("compressed output already closed");
        Ok(match self {
            Compressed::Zstd(e) => e.as_mut().ok_or_else(closed)?,
            Compressed::Gzip(e) => e.as_mut().ok_or_else(closed)?,
        })
    }
}

impl<W: Write> Write for Compressed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer()?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer()?.flush()
    }
}

impl<W: Write> Output for Compressed<W> {
    fn close(&mut self) -> io::Result<()> {
        let mut inner = match self {
            Compressed::Zstd(e) => match e.take() {
                Some(e) => e.finish()?,
                None => return Ok(()),
            },
            Compressed::Gzip(e) => match e.take() {
                Some(e) => e.finish()?,
                None => return Ok(()),
            },
        };
        inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use poolcap_format::{CaptureWriter, FileFormat};
    use std::io::Read;

    fn compressed_bytes(c: Compression) -> Vec<u8> {
        // Capture the inner Vec through a shared buffer, since close() consumes the encoder.
        let shared = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        struct Sink(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.borrow_mut().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let out = Compressed::new(Sink(shared.clone()), c).unwrap();
        let mut w = CaptureWriter::new(out, FileFormat::Pcapng, 256, "t0").unwrap();
        for i in 0..1000u64 {
            w.write_packet(i * 1000, &[i as u8; 100], 100).unwrap();
        }
        w.finish(None).unwrap();
        let bytes = shared.borrow().clone();
        bytes
    }

    #[test]
    fn compressed_files_decompress_to_a_readable_capture() {
        for c in [Compression::Zstd(3), Compression::Gzip(6)] {
            let z = compressed_bytes(c);
            let mut plain = Vec::new();
            match c {
                Compression::Zstd(_) => {
                    zstd::Decoder::new(&z[..])
                        .unwrap()
                        .read_to_end(&mut plain)
                        .unwrap();
                }
                Compression::Gzip(_) => {
                    flate2::read::GzDecoder::new(&z[..])
                        .read_to_end(&mut plain)
                        .unwrap();
                }
            }
            assert!(
                z.len() < plain.len() / 5,
                "{c:?}: {} of {}",
                z.len(),
                plain.len()
            );
            let f = poolcap_format::read_bytes(&plain).unwrap();
            assert_eq!(f.packets.len(), 1000);
            assert_eq!(f.packets[999].data, vec![231u8; 100]);
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
