//! Capture files compressed whole (`poolcap capture --compress zstd|gzip`, `gzip
//! trace.pcap`) read as the plain file they hold. The compression is recognised by the
//! first bytes, not a name, so a renamed file and standard input read the same; one place
//! for every reader of capture files (`capture -r`, `probe -r`, `check`, replay).

use std::io::{self, Read};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// `src` with any zstd or gzip compression undone (read as a stream, never whole); the
/// decompressor's errors say which it is (`zstd: ...`). Reads the first bytes of `src` to
/// tell, however few each read returns.
pub fn decompressed<'a>(mut src: impl Read + Send + 'a) -> io::Result<Box<dyn Read + Send + 'a>> {
    let mut head = [0; 4];
    let mut n = 0;
    while n < head.len() {
        match src.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let magic = &head[..n];
    let whole = io::Cursor::new(head).take(n as u64).chain(src);
    Ok(if magic.starts_with(&ZSTD_MAGIC) {
        Box::new(Named {
            what: "zstd",
            inner: zstd::Decoder::new(whole)?,
        })
    } else if magic.starts_with(&GZIP_MAGIC) {
        Box::new(Named {
            what: "gzip",
            inner: flate2::read::MultiGzDecoder::new(whole),
        })
    } else {
        Box::new(whole)
    })
}

/// A decompressor whose errors are prefixed with its name.
struct Named<R> {
    what: &'static str,
    inner: R,
}

impl<R: Read> Read for Named<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner
            .read(buf)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.what)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// One byte per read: the magic is still recognised.
    struct ByteAtATime<'a>(&'a [u8]);

    impl Read for ByteAtATime<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn undone(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        decompressed(ByteAtATime(bytes))?.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn plain_zstd_and_gzip_come_out_plain_whatever_the_read_sizes() {
        let plain: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let zst = zstd::encode_all(&plain[..], 3).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        for (what, bytes) in [("plain", &plain), ("zstd", &zst), ("gzip", &gz)] {
            assert_eq!(undone(bytes).unwrap(), plain, "{what}");
        }
        // Shorter than any magic: passed on as it is.
        assert_eq!(undone(&[0x28, 0xb5]).unwrap(), [0x28, 0xb5]);
        assert!(undone(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_corrupt_stream_names_its_compression() {
        let e = undone(&[0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]).unwrap_err();
        assert!(e.to_string().starts_with("zstd: "), "{e}");
        let e = undone(&[0x1f, 0x8b, 0, 0, 0, 0]).unwrap_err();
        assert!(e.to_string().starts_with("gzip: "), "{e}");
    }
}
