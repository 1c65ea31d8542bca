//! Reading back capture files as poolcap writes them: pcap or pcapng, plain or compressed
//! with `--compress zstd` or `gzip`. The compression is recognised by the file's first bytes,
//! not its name, so a renamed or extension-less file reads the same.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::Context;
use poolcap_format::{CaptureFile, PacketReader};

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Reads and decodes the capture file at `path`.
pub fn read(path: &Path) -> anyhow::Result<CaptureFile> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bytes = decompress(raw).with_context(|| format!("cannot decompress {}", path.display()))?;
    poolcap_format::read_bytes(&bytes).with_context(|| format!("{}", path.display()))
}

/// A reader of the capture file at `path`, packet by packet with one buffer (a file of
/// many GB is never held in memory), decompressing on the way.
pub fn stream(path: &Path) -> anyhow::Result<PacketReader<Box<dyn Read>>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut file = BufReader::with_capacity(1 << 16, file);
    let head = file
        .fill_buf()
        .with_context(|| format!("cannot read {}", path.display()))?;
    let src: Box<dyn Read> = if head.starts_with(&ZSTD_MAGIC) {
        Box::new(zstd::Decoder::with_buffer(file)?)
    } else if head.starts_with(&GZIP_MAGIC) {
        Box::new(flate2::bufread::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    PacketReader::new(src).with_context(|| format!("{}", path.display()))
}

/// The file's contents with any zstd or gzip compression undone.
fn decompress(raw: Vec<u8>) -> std::io::Result<Vec<u8>> {
    let mut plain = Vec::new();
    if raw.starts_with(&ZSTD_MAGIC) {
        zstd::Decoder::new(&raw[..])?.read_to_end(&mut plain)?;
    } else if raw.starts_with(&GZIP_MAGIC) {
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut plain)?;
    } else {
        return Ok(raw);
    }
    Ok(plain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn pcap() -> Vec<u8> {
        let mut w = poolcap_format::CaptureWriter::new(
            Vec::new(),
            poolcap_format::FileFormat::Pcap,
            128,
            "t",
        )
        .expect("header");
        for i in 0..3u8 {
            w.write_packet(u64::from(i) * 1000, &[i; 60], 60)
                .expect("packet");
        }
        w.finish(None).expect("finish")
    }

    #[test]
    fn reads_plain_zstd_and_gzip_whatever_the_name() {
        let plain = pcap();
        let zst = zstd::encode_all(&plain[..], 3).expect("zstd");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).expect("gzip");
        let gz = gz.finish().expect("gzip");
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, bytes) in [("a.pcap", &plain), ("b.pcap", &zst), ("c", &gz)] {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).expect("write");
            let f = read(&p).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert_eq!(f.packets.len(), 3, "{name}");
            assert_eq!(f.packets[2].data, vec![2u8; 60], "{name}");
            let mut s = stream(&p).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let mut streamed = Vec::new();
            while let Some(packet) = s.next_packet().unwrap() {
                streamed.push(packet.data.to_vec());
            }
            let whole: Vec<_> = f.packets.into_iter().map(|p| p.data).collect();
            assert_eq!(streamed, whole, "{name}: streamed");
        }
    }

    #[test]
    fn a_corrupt_compressed_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.pcap.zst");
        std::fs::write(&p, [0x28, 0xb5, 0x2f, 0xfd, 1, 2, 3]).expect("write");
        let e = read(&p).expect_err("corrupt");
        assert!(format!("{e:#}").contains("cannot decompress"), "{e:#}");
        assert!(stream(&p).is_err(), "streamed");
    }
}
