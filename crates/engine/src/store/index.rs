//! One capture file's index: the file cut into regions (runs of whole records of about
//! [`REGION_BYTES`], each with its offset, packet count and first and last time: the coarse
//! time slots), and for each key (see `keys`) the sorted list of regions holding a packet
//! with it. Regions, not packet offsets as Stenographer stores them: a region number costs a
//! byte or two per key, where a 4-byte offset per key and packet would be 20 bytes or more
//! per packet, a third of a 64-byte frame; a selective query still reads only the 64 KiB
//! regions its flow touches, and libpcap then picks the packets out exactly.
//!
//! The file (`NAME.idx` beside capture file `NAME`):
//!
//! ```text
//! magic "PCSTIDX\n" | version u32 | body length u64 | body | CRC-32 of all before it
//! body: capture file length u64, CRC-32 of its first 4 KiB u32, link type u32,
//!       packets u64, first and last time u64 (ns), keyed u8 (0: link type not dissected),
//!       regions u32, each: offset u64, packets u32, first u64, last u64;
//!       keys u32, each: kind u8, value (1, 2, 4 or 16 bytes by kind), count and region
//!       numbers as LEB128 deltas.
//! ```
//!
//! All integers little-endian. An index whose checksum fails, whose version is not this
//! one, or whose capture file no longer has the length and first bytes it was built from is
//! refused ([`IndexError`]), never used.

use std::io::Read;
use std::path::Path;

use super::build::Builder;
use super::keys;
use super::pcapfile::{self, FILE_HEADER};

/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"PCSTIDX\n";
/// Bytes of records after which a region ends (at the next record's start).
pub const REGION_BYTES: u64 = 64 * 1024;
/// Bytes at the start of the capture file the index checks it against.
const HEAD_BYTES: usize = 4096;

/// A run of whole records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Byte offset of its first record.
    pub offset: u64,
    /// Records in it.
    pub packets: u32,
    /// Time of its first and last record (ns).
    pub first: u64,
    /// See `first`.
    pub last: u64,
}

/// A capture file's index (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Bytes of the capture file it was built from.
    pub file_len: u64,
    pub(super) head_crc: u32,
    /// The capture file's link type.
    pub linktype: u32,
    /// Packets in the file.
    pub packets: u64,
    /// Time of the first and last packet (ns; 0 for an empty file).
    pub first: u64,
    /// See `first`.
    pub last: u64,
    /// False when the link type is not dissected: every key query selects every region.
    pub keyed: bool,
    /// The regions, in file order.
    pub regions: Vec<Region>,
    /// Key (kind byte and value) -> sorted region numbers.
    pub postings: Postings,
}

/// Bytes of the longest key (kind and an IPv6 address); shorter keys are padded with
/// zeros, which keeps their order.
const KEY: usize = 17;

/// Keys in order, each with its sorted region numbers, in flat arrays: a query looks keys
/// up by binary search, and loading an index allocates three vectors, not two per key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Postings {
    keys: Vec<[u8; KEY]>,
    /// Where each key's regions end in `regions`.
    ends: Vec<u32>,
    regions: Vec<u32>,
}

fn padded(key: &[u8]) -> [u8; KEY] {
    let mut k = [0u8; KEY];
    let n = key.len().min(KEY);
    k[..n].copy_from_slice(&key[..n]);
    k
}

/// Bytes of a key's value by its kind byte.
fn width(kind: u8) -> Option<usize> {
    match kind {
        keys::PROTO => Some(1),
        keys::PORT | keys::ETHERTYPE => Some(2),
        keys::V4 => Some(4),
        keys::V6 => Some(16),
        _ => None,
    }
}

impl Postings {
    pub(super) fn push(&mut self, key: &[u8], regions: impl IntoIterator<Item = u32>) {
        self.keys.push(padded(key));
        self.regions.extend(regions);
        self.ends.push(self.regions.len() as u32);
    }

    fn list(&self, n: usize) -> &[u32] {
        let start = if n == 0 { 0 } else { self.ends[n - 1] as usize };
        &self.regions[start..self.ends[n] as usize]
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The regions of `key` (kind byte and value; none if absent).
    pub fn get(&self, key: &[u8]) -> &[u32] {
        self.keys
            .binary_search(&padded(key))
            .map_or(&[][..], |n| self.list(n))
    }

    /// Keys from `lo` to `hi` (both included, compared as padded keys), with their regions.
    pub fn between(&self, lo: &[u8], hi: &[u8]) -> impl Iterator<Item = (&[u8], &[u32])> {
        let (lo, hi) = (padded(lo), padded(hi));
        let from = self.keys.partition_point(|k| *k < lo);
        let to = self.keys.partition_point(|k| *k <= hi);
        (from..to.max(from)).map(move |n| (&self.keys[n][..], self.list(n)))
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u32])> {
        (0..self.keys.len()).map(move |n| {
            let k = &self.keys[n];
            (&k[..1 + width(k[0]).unwrap_or(0)], self.list(n))
        })
    }
}

/// Why an index is not used.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Reading it or its capture file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not an index, or cut short.
    #[error("not an index, or cut short")]
    Malformed,
    /// The checksum does not match.
    #[error("damaged (checksum mismatch)")]
    Checksum,
    /// Another format version.
    #[error("index format {0}, this poolcap reads {VERSION}")]
    Version(u32),
    /// Built from another capture file, or from this one before it changed.
    #[error("built from a different capture file (length or first bytes differ)")]
    Mismatch,
    /// The capture file is not pcap.
    #[error("the capture file is not pcap")]
    NotPcap,
}

/// CRC-32 of the first bytes of `path`.
fn head_crc(path: &Path) -> std::io::Result<u32> {
    let mut head = Vec::with_capacity(HEAD_BYTES);
    std::fs::File::open(path)?
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)?;
    Ok(crc32fast::hash(&head))
}

impl Index {
    /// Reads the capture file `path` through and indexes it (see `build`).
    pub fn build(path: &Path) -> Result<Index, IndexError> {
        let (header, file) = pcapfile::open(path)?.ok_or(IndexError::NotPcap)?;
        let mut builder = Builder::new(header.linktype);
        let mut records = pcapfile::Records::new(header, file, FILE_HEADER, u64::MAX)?;
        while let Some(r) = records.next_record()? {
            builder.record(r.offset, r.ts_ns, r.data);
        }
        Ok(builder.finish(std::fs::metadata(path)?.len(), head_crc(path)?))
    }

    /// The index's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.file_len.to_le_bytes());
        b.extend_from_slice(&self.head_crc.to_le_bytes());
        b.extend_from_slice(&self.linktype.to_le_bytes());
        b.extend_from_slice(&self.packets.to_le_bytes());
        b.extend_from_slice(&self.first.to_le_bytes());
        b.extend_from_slice(&self.last.to_le_bytes());
        b.push(u8::from(self.keyed));
        b.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for r in &self.regions {
            b.extend_from_slice(&r.offset.to_le_bytes());
            b.extend_from_slice(&r.packets.to_le_bytes());
            b.extend_from_slice(&r.first.to_le_bytes());
            b.extend_from_slice(&r.last.to_le_bytes());
        }
        b.extend_from_slice(&(self.postings.len() as u32).to_le_bytes());
        for (key, list) in self.postings.iter() {
            b.extend_from_slice(key);
            leb128(&mut b, list.len() as u64);
            let mut prev = 0;
            for &n in list {
                leb128(&mut b, u64::from(n - prev));
                prev = n;
            }
        }
        let mut out = Vec::with_capacity(b.len() + 24);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(&b);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses an index's bytes, checking magic, checksum and version.
    pub fn decode(bytes: &[u8]) -> Result<Index, IndexError> {
        if bytes.len() < 24 || &bytes[..8] != MAGIC {
            return Err(IndexError::Malformed);
        }
        let (content, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(content).to_le_bytes() != crc {
            return Err(IndexError::Checksum);
        }
        let mut c = Cursor(&content[8..]);
        let version = c.u32()?;
        if version != VERSION {
            return Err(IndexError::Version(version));
        }
        if c.u64()? != c.0.len() as u64 {
            return Err(IndexError::Malformed);
        }
        let (file_len, head_crc, linktype) = (c.u64()?, c.u32()?, c.u32()?);
        let (packets, first, last) = (c.u64()?, c.u64()?, c.u64()?);
        let keyed = c.take(1)?[0] != 0;
        let regions = (0..c.u32()?)
            .map(|_| {
                Ok(Region {
                    offset: c.u64()?,
                    packets: c.u32()?,
                    first: c.u64()?,
                    last: c.u64()?,
                })
            })
            .collect::<Result<Vec<_>, IndexError>>()?;
        let mut postings = Postings::default();
        for _ in 0..c.u32()? {
            let kind = c.take(1)?[0];
            let width = width(kind).ok_or(IndexError::Malformed)?;
            let mut key = [0u8; KEY];
            key[0] = kind;
            key[1..=width].copy_from_slice(c.take(width)?);
            if postings.keys.last().is_some_and(|last| *last >= key) {
                return Err(IndexError::Malformed);
            }
            let mut n = 0u64;
            for _ in 0..c.leb128()? {
                n += c.leb128()?;
                if n >= regions.len() as u64 {
                    return Err(IndexError::Malformed);
                }
                postings.regions.push(n as u32);
            }
            postings.keys.push(key);
            postings.ends.push(postings.regions.len() as u32);
        }
        Ok(Index {
            file_len,
            head_crc,
            linktype,
            packets,
            first,
            last,
            keyed,
            regions,
            postings,
        })
    }

    /// Reads the index at `idx` and checks it against its capture file `capture`.
    pub fn load(idx: &Path, capture: &Path) -> Result<Index, IndexError> {
        let index = Index::decode(&std::fs::read(idx)?)?;
        let len = std::fs::metadata(capture)?.len();
        if len != index.file_len || head_crc(capture)? != index.head_crc {
            return Err(IndexError::Mismatch);
        }
        Ok(index)
    }

    /// Writes the index beside `capture` (as `NAME.idx`, through a hidden temporary file
    /// renamed into place, so a reader sees a whole index or none); returns its bytes.
    pub fn save(&self, capture: &Path) -> std::io::Result<u64> {
        let bytes = self.encode();
        let idx = index_path(capture);
        let name = idx.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = idx.with_file_name(format!(".{}.tmp", name.unwrap_or_default()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, &idx)?;
        Ok(bytes.len() as u64)
    }

    /// Byte offset where region `n` ends (the next one's start, or the file's end).
    pub fn region_end(&self, n: usize) -> u64 {
        self.regions.get(n + 1).map_or(self.file_len, |r| r.offset)
    }
}

/// The index file of capture file `capture`.
pub fn index_path(capture: &Path) -> std::path::PathBuf {
    let mut name = capture.file_name().unwrap_or_default().to_os_string();
    name.push(".idx");
    capture.with_file_name(name)
}

fn leb128(b: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            b.push(byte);
            return;
        }
        b.push(byte | 0x80);
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], IndexError> {
        if self.0.len() < n {
            return Err(IndexError::Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, IndexError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, IndexError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn leb128(&mut self) -> Result<u64, IndexError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(IndexError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Index {
        let mut postings = Postings::default();
        postings.push(&[keys::PORT, 0, 80], [0, 2, 300]);
        postings.push(&[keys::V4, 10, 0, 0, 1], [1]);
        Index {
            file_len: 1000,
            head_crc: 7,
            linktype: 1,
            packets: 3,
            first: 5,
            last: 9,
            keyed: true,
            regions: (0..301)
                .map(|i| Region {
                    offset: 24 + i,
                    packets: 1,
                    first: 5,
                    last: 9,
                })
                .collect(),
            postings,
        }
    }

    #[test]
    fn an_index_reads_back_as_written_and_any_flipped_bit_is_refused() {
        let bytes = sample().encode();
        assert_eq!(Index::decode(&bytes).unwrap(), sample());
        for at in [0, 9, 30, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(Index::decode(&bad).is_err(), "byte {at} flipped");
        }
        assert!(Index::decode(&bytes[..bytes.len() - 1]).is_err());
    }
}
