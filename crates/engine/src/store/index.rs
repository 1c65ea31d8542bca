//! One capture file's index: the file cut into regions (runs of whole records of about
//! [`REGION_BYTES`], each with its offset, packet count, first and last time: the coarse
//! time slots, and where the first record starting in each of its 4 KiB pages lies), and
//! for each region a signature of the keys of its packets (see `keys` and `sig`: a small
//! Bloom filter a query tests for its filter's keys). Regions, not packet offsets as
//! Stenographer stores them; signatures, not a list of regions per key as this index held
//! before (format 2): a list cost the keeper a map lookup per address and packet and the
//! closer a sort of every (key, region) pair, more CPU than writing the packets (see
//! `sig`). A selective query still reads only the regions its keys may be in, and libpcap
//! then picks the packets out exactly.
//!
//! The file is laid out so that a query reads only what it needs: a head (the file's
//! summary and a directory of blocks, with one CRC-32 over both), then the regions in
//! blocks of [`REGIONS_PER_BLOCK`], then the signatures in blocks of
//! [`sig::BLOCK_REGIONS`] regions, each stored column by column with a CRC-32 per column;
//! the directory holds each region block's CRC-32 and each signature block's width. A
//! lookup reads the head, then per signature block the one column each key names (a word
//! per region), then only the region blocks of the regions chosen: a few pieces per file,
//! where reading the whole index of a 1 GB file is megabytes.
//!
//! ```text
//! head:      magic "PCSTIDX\n" | version u32 | capture file length u64 |
//!            CRC-32 of its first 4 KiB u32 | link type u32 | packets u64 |
//!            first and last time u64 (ns) | keyed u8 (0: link type not dissected) |
//!            regions u32 | signature blocks u32 (0 if not keyed) |
//!            per region block: CRC-32 u32 |
//!            per signature block: width in words u32 (a power of two) |
//!            CRC-32 of the head before it
//! region:    offset u64, packets u32, first u64, last u64 (ns), and for pages 1 to 15 the
//!            offset in the region of the first record starting in that page, u16 (0: none)
//! signature: per column (width of them): CRC-32 of its words u32, then per region of the
//!            block its word of that column, u64
//! ```
//!
//! All integers little-endian. An index whose head or any block it reads fails its
//! checksum, whose version is not this one, or whose capture file no longer has the length
//! and first bytes it was built from is refused ([`IndexError`]), never used.
//!
//! The file being written gets a prefix index in pieces ([`Cover::Prefix`], saved by the
//! keeper, see `prefix`): each the same format over the whole regions written since the
//! piece before (region numbers from 0, offsets in the capture file), its "capture file
//! length" where the bytes it covers end, under another name (`NAME.prefix.K.idx`) and
//! another magic (`PCSTPRE\n`), so that it is never taken for a closed file's index, by
//! name or by content. Its checks are the same, but the capture file may have grown past
//! it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::sig::{self, Blocks, SigBlock, BLOCK_REGIONS, MAX_WORDS};
use poolcap_format::memory::Memory;

/// The format version this build writes and reads.
pub const VERSION: u32 = 3;
/// Bytes of records after which a region ends (at the next record's start).
pub const REGION_BYTES: u64 = 64 * 1024;
/// The unit a key's page mask points at within a region.
pub const PAGE_BYTES: u64 = 4096;
/// Pages of a region (the last one's records may run past `REGION_BYTES`).
pub const PAGES: usize = (REGION_BYTES / PAGE_BYTES) as usize;
/// Regions per region block.
pub const REGIONS_PER_BLOCK: usize = 64;
/// Bytes at the start of the capture file the index checks it against.
pub const HEAD_BYTES: usize = 4096;
/// Bytes of the head before the directory.
const FIXED: usize = 8 + 4 + 8 + 4 + 4 + 8 + 8 + 8 + 1 + 4 + 4;
/// Bytes of a region in a region block.
const REGION_ENTRY: usize = 8 + 4 + 8 + 8 + 2 * (PAGES - 1);

/// What an index file covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cover {
    /// A closed capture file, whole (`NAME.idx`).
    Whole,
    /// A piece of the first bytes (whole regions) of a capture file being written, or left
    /// unindexed by a crash (`NAME.prefix.K.idx`).
    Prefix,
}

impl Cover {
    fn magic(self) -> &'static [u8; 8] {
        match self {
            Cover::Whole => b"PCSTIDX\n",
            Cover::Prefix => b"PCSTPRE\n",
        }
    }
}

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
    /// For pages 1 to 15: the offset in the region of the first record starting in it
    /// (0: none starts there; page 0's is the region's start).
    pub pages: [u16; PAGES - 1],
}

impl Region {
    /// Where, relative to the region, the first record starting in page `p` lies.
    fn page_start(&self, p: usize) -> Option<u64> {
        match p {
            0 => Some(0),
            _ => Some(u64::from(self.pages[p - 1])).filter(|&at| at != 0),
        }
    }

    /// The byte ranges holding the records that start in the pages of `mask` (a region
    /// ending at `end`), adjacent ones joined.
    pub fn ranges(&self, mask: u16, end: u64) -> Vec<(u64, u64)> {
        let starts: Vec<(usize, u64)> = (0..PAGES)
            .filter_map(|p| self.page_start(p).map(|at| (p, self.offset + at)))
            .collect();
        let mut out: Vec<(u64, u64)> = Vec::new();
        for (i, &(p, from)) in starts.iter().enumerate() {
            if mask & (1 << p) == 0 {
                continue;
            }
            let to = starts.get(i + 1).map_or(end, |&(_, at)| at);
            match out.last_mut() {
                Some(last) if last.1 == from => last.1 = to,
                _ => out.push((from, to)),
            }
        }
        out
    }
}

/// One region a key may be found in, and the pages of it where its packets may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posting {
    /// The region's number.
    pub region: u32,
    /// Bit `p`: a packet with the key starts in page `p` of the region.
    pub pages: u16,
}

/// A capture file's index, whole (see the module docs): built, written, read back whole
/// by tests and retention; queries read it in pieces through [`IndexFile`].
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
    /// The regions' signatures, [`sig::BLOCK_REGIONS`] to a block (none if not keyed).
    pub signatures: Vec<SigBlock>,
}

/// Every page of a region.
pub const ALL_PAGES: u16 = u16::MAX;

/// Bytes of the longest key (kind and an IPv6 address); shorter keys are padded with
/// zeros, which keeps their order.
pub const KEY: usize = 17;

/// The keys a lookup asked for, in order, each with the regions that may hold it, in flat
/// arrays ([`IndexFile::postings`], [`Index::postings`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Postings {
    keys: Vec<[u8; KEY]>,
    /// Where each key's postings end in `postings`.
    ends: Vec<u32>,
    postings: Vec<Posting>,
}

/// `key` zero-padded to [`KEY`] bytes.
pub fn padded(key: &[u8]) -> [u8; KEY] {
    let mut k = [0u8; KEY];
    let n = key.len().min(KEY);
    k[..n].copy_from_slice(&key[..n]);
    k
}

impl Postings {
    pub(super) fn push(&mut self, key: &[u8], postings: impl IntoIterator<Item = Posting>) {
        self.keys.push(padded(key));
        self.postings.extend(postings);
        self.ends.push(self.postings.len() as u32);
    }

    fn list(&self, n: usize) -> &[Posting] {
        let start = if n == 0 { 0 } else { self.ends[n - 1] as usize };
        &self.postings[start..self.ends[n] as usize]
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The postings of `key` (kind byte and value; none if absent).
    pub fn get(&self, key: &[u8]) -> &[Posting] {
        self.keys
            .binary_search(&padded(key))
            .map_or(&[][..], |n| self.list(n))
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
pub(super) fn head_crc(path: &Path) -> std::io::Result<u32> {
    let mut head = Vec::with_capacity(HEAD_BYTES);
    File::open(path)?
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)?;
    Ok(crc32fast::hash(&head))
}

/// Bytes an index is saved through at a time (see [`Index::save_with`]): a huge page (see
/// `sig::SigArena` for why).
const SAVE_BYTES: usize = poolcap_format::memory::HUGE_PAGE;

/// Alignment of a direct write's memory, offset and length.
const SAVE_ALIGN: usize = 4096;

/// An index file being written in order through one buffer of [`SAVE_BYTES`], with
/// direct I/O (`align` 4096: the buffer's memory, offsets and lengths aligned, the file
/// cut to its length at the end) or through the page cache (`align` 1). A write's error is
/// kept and returned by [`SaveBuffer::finish`].
struct SaveBuffer<'a> {
    file: File,
    align: usize,
    mem: &'a mut Memory,
    len: usize,
    error: Option<std::io::Error>,
}

impl<'a> SaveBuffer<'a> {
    /// Writing `file` through `mem` (made the first time).
    fn new(file: File, align: usize, mem: &'a mut Memory) -> Self {
        if mem.len() < SAVE_BYTES {
            *mem = Memory::new(SAVE_BYTES);
        }
        SaveBuffer {
            file,
            align,
            mem,
            len: 0,
            error: None,
        }
    }

    /// Appends `bytes`, writing each full buffer.
    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = bytes.len().min(SAVE_BYTES - self.len);
            self.mem[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            (self.len, bytes) = (self.len + n, &bytes[n..]);
            if self.len == SAVE_BYTES {
                self.write(SAVE_BYTES);
                self.len = 0;
            }
        }
    }

    /// Writes the buffer's first `n` bytes, unless a write failed before.
    fn write(&mut self, n: usize) {
        if self.error.is_none() {
            if let Err(e) = self.file.write_all(&self.mem[..n]) {
                self.error = Some(e);
            }
        }
    }

    /// Writes what is left (padded to the alignment) and cuts the file to `len` bytes.
    fn finish(mut self, len: u64) -> std::io::Result<()> {
        let n = self.len.next_multiple_of(self.align);
        self.mem[self.len..n].fill(0);
        self.write(n);
        match self.error.take() {
            Some(e) => Err(e),
            None => self.file.set_len(len),
        }
    }
}

/// The memory an index is saved through, kept from one save to the next by a thread that
/// saves many (the store's closer). Why: made anew for each save, the save buffer and the
/// encoding's (then a whole signature block, up to 4 MiB) were memory new to the process,
/// faulted and zeroed a page at a time: 1,830 of the closer's 1,877 page faults and some
/// 150 of its 380 samples (3M frames of 64 bytes, three files, perf at 10 kHz).
#[derive(Default)]
pub struct Saver {
    /// The buffer written from ([`SaveBuffer`]), made at the first save.
    mem: Memory,
    /// The head and regions, encoded.
    head: Vec<u8>,
    /// The signature blocks' parts, encoded (see `sig::Blocks::encode`).
    part: Memory,
}

impl Index {
    /// The index's bytes (see the module docs).
    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(Cover::Whole)
    }

    /// The index's bytes as an index of `cover`.
    pub(crate) fn encode_as(&self, cover: Cover) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len(self.signatures.as_slice()));
        self.encode_into(cover, &mut out);
        out
    }

    /// Bytes of the index's head: its fixed part, a CRC-32 per region block, a width per
    /// signature block, and its own CRC-32.
    fn head_len(&self, blocks: &(impl Blocks + ?Sized)) -> usize {
        FIXED + 4 * (self.regions.len().div_ceil(REGIONS_PER_BLOCK) + blocks.count()) + 4
    }

    /// Bytes of the index's encoding with the signature blocks `blocks`.
    fn encoded_len(&self, blocks: &(impl Blocks + ?Sized)) -> usize {
        let sigs: u64 = (0..blocks.count())
            .map(|n| {
                let (width, regions) = blocks.shape(n);
                u64::from(width) * SigBlock::column_bytes(regions)
            })
            .sum();
        self.head_len(blocks) + self.regions.len() * REGION_ENTRY + sigs as usize
    }

    /// Appends the index's bytes as an index of `cover` to `out`.
    fn encode_into(&self, cover: Cover, out: &mut Vec<u8>) {
        let blocks = self.signatures.as_slice();
        let (mut head, mut scratch) = (Vec::new(), Memory::default());
        let mut put = |p: &[u8]| out.extend_from_slice(p);
        self.encode_parts(cover, blocks, &mut head, &mut scratch, &mut put);
    }

    /// The index's bytes as an index of `cover`, given to `part` in order: the head with
    /// the region blocks (the head made after them: its directory holds their CRC-32s),
    /// then each signature block, so that no more than one block's bytes are made at a
    /// time beside the destination.
    fn encode_parts(
        &self,
        cover: Cover,
        blocks: &(impl Blocks + ?Sized),
        out: &mut Vec<u8>,
        scratch: &mut Memory,
        part: &mut impl FnMut(&[u8]),
    ) {
        let head_len = self.head_len(blocks);
        out.clear();
        out.resize(head_len, 0);
        let mut crcs = Vec::with_capacity(self.regions.len().div_ceil(REGIONS_PER_BLOCK));
        for chunk in self.regions.chunks(REGIONS_PER_BLOCK) {
            let at = out.len();
            for r in chunk {
                out.extend_from_slice(&r.offset.to_le_bytes());
                out.extend_from_slice(&r.packets.to_le_bytes());
                out.extend_from_slice(&r.first.to_le_bytes());
                out.extend_from_slice(&r.last.to_le_bytes());
                for at in r.pages {
                    out.extend_from_slice(&at.to_le_bytes());
                }
            }
            crcs.push(crc32fast::hash(&out[at..]));
        }
        let mut head = Vec::with_capacity(head_len);
        head.extend_from_slice(cover.magic());
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&self.file_len.to_le_bytes());
        head.extend_from_slice(&self.head_crc.to_le_bytes());
        head.extend_from_slice(&self.linktype.to_le_bytes());
        head.extend_from_slice(&self.packets.to_le_bytes());
        head.extend_from_slice(&self.first.to_le_bytes());
        head.extend_from_slice(&self.last.to_le_bytes());
        head.push(u8::from(self.keyed));
        head.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
        head.extend_from_slice(&(blocks.count() as u32).to_le_bytes());
        for crc in crcs {
            head.extend_from_slice(&crc.to_le_bytes());
        }
        for n in 0..blocks.count() {
            head.extend_from_slice(&blocks.shape(n).0.to_le_bytes());
        }
        let crc = crc32fast::hash(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        out[..head_len].copy_from_slice(&head);
        part(out);
        for n in 0..blocks.count() {
            blocks.encode(n, scratch, part);
        }
    }

    /// Parses an index's bytes, checking magic, version and every checksum.
    pub fn decode(bytes: &[u8]) -> Result<Index, IndexError> {
        Index::decode_as(bytes, Cover::Whole)
    }

    /// [`Index::decode`] for an index of `cover`.
    fn decode_as(bytes: &[u8], cover: Cover) -> Result<Index, IndexError> {
        let head = Head::parse(bytes, cover)?;
        if bytes.len() as u64 != head.blocks_end() {
            return Err(IndexError::Malformed);
        }
        let block = |(from, to): (u64, u64)| &bytes[from as usize..to as usize];
        let mut regions = Vec::with_capacity(head.regions as usize);
        for n in 0..head.region_crcs.len() {
            regions.extend(head.region_block(n, block(head.region_span(n)))?);
        }
        let signatures = (0..head.sig_widths.len())
            .map(|n| head.sig_block(n, block(head.sig_span(n))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Index {
            file_len: head.file_len,
            head_crc: head.head_crc,
            linktype: head.linktype,
            packets: head.packets,
            first: head.first,
            last: head.last,
            keyed: head.keyed,
            regions,
            signatures,
        })
    }

    /// The regions whose signatures may hold each of `keys` (kind byte and value), every
    /// page of each: what [`IndexFile::postings`] reads from the file.
    pub fn postings(&self, keys: &[Vec<u8>]) -> Postings {
        let widths: Vec<u32> = self.signatures.iter().map(|b| b.width).collect();
        lookup(keys, &widths, |b, c| {
            Ok(self.signatures[b].column(c).to_vec())
        })
        .expect("columns in memory")
    }

    /// Writes the index beside `capture` (as `NAME.idx`, through a hidden temporary file
    /// renamed into place, so a reader sees a whole index or none); returns its bytes.
    pub fn save(&self, capture: &Path) -> std::io::Result<u64> {
        self.save_as(&index_path(capture), Cover::Whole)
    }

    /// [`Index::save`] as the index file `idx` of `cover` (a prefix index's piece, see
    /// `prefix`).
    ///
    /// Written with direct I/O (`O_DIRECT`, from a buffer aligned for it, the file cut to
    /// its length after), where the file system takes it: through the page cache, a
    /// closed file's index (3 MB per 100 MB of 64-byte frames) was a third of the closer's
    /// time in the kernel's copy into fresh page-cache pages, as the capture files were
    /// before they were written direct.
    pub fn save_as(&self, idx: &Path, cover: Cover) -> std::io::Result<u64> {
        self.save_with(
            idx,
            cover,
            self.signatures.as_slice(),
            &mut Saver::default(),
        )
    }

    /// [`Index::save_as`] with the signature blocks `blocks` (the index's own are not
    /// read): each encoded when its turn comes and written through one aligned buffer of
    /// [`SAVE_BYTES`], so that saving takes little memory beside the signatures (a whole
    /// index encoded at once was 3 MB per 100 MB of 64-byte frames of memory new to the
    /// process, a fault per page), both kept in `saver` for the next save.
    pub(crate) fn save_with(
        &self,
        idx: &Path,
        cover: Cover,
        blocks: &(impl Blocks + ?Sized),
        saver: &mut Saver,
    ) -> std::io::Result<u64> {
        let len = self.encoded_len(blocks);
        let name = idx.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = idx.with_file_name(format!(".{}.tmp", name.unwrap_or_default()));
        let mut write = |direct: bool| {
            let mut open = std::fs::OpenOptions::new();
            open.write(true).create(true).truncate(true);
            if direct {
                open.custom_flags(libc::O_DIRECT);
            }
            let align = if direct { SAVE_ALIGN } else { 1 };
            let mut out = SaveBuffer::new(open.open(&tmp)?, align, &mut saver.mem);
            let (head, scratch) = (&mut saver.head, &mut saver.part);
            self.encode_parts(cover, blocks, head, scratch, &mut |part| out.put(part));
            out.finish(len as u64)
        };
        match write(true) {
            // No direct I/O here (tmpfs, some FUSE file systems): through the page cache.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => write(false)?,
            done => done?,
        }
        std::fs::rename(&tmp, idx)?;
        Ok(len as u64)
    }

    /// Byte offset where region `n` ends (the next one's start, or the file's end).
    pub fn region_end(&self, n: usize) -> u64 {
        self.regions.get(n + 1).map_or(self.file_len, |r| r.offset)
    }
}

/// An index's head: its summary and block directory (see the module docs).
#[derive(Debug)]
struct Head {
    file_len: u64,
    head_crc: u32,
    linktype: u32,
    packets: u64,
    first: u64,
    last: u64,
    keyed: bool,
    regions: u32,
    region_crcs: Vec<u32>,
    /// Per signature block: its width in words.
    sig_widths: Vec<u32>,
    /// Where signature block n starts (n = signature blocks: where they end).
    sig_starts: Vec<u64>,
    /// Bytes of the head, its CRC included.
    len: u64,
}

impl Head {
    /// Bytes of the head of an index whose fixed part is `fixed`, or an error.
    fn len_of(fixed: &[u8], cover: Cover) -> Result<u64, IndexError> {
        if fixed.len() < FIXED || &fixed[..8] != cover.magic() {
            return Err(IndexError::Malformed);
        }
        let mut c = Cursor(&fixed[8..FIXED]);
        let version = c.u32()?;
        if version != VERSION {
            return Err(IndexError::Version(version));
        }
        c.take(8 + 4 + 4 + 8 + 8 + 8 + 1)?;
        let (regions, sig_blocks) = (u64::from(c.u32()?), u64::from(c.u32()?));
        let region_blocks = regions.div_ceil(REGIONS_PER_BLOCK as u64);
        Ok(FIXED as u64 + (region_blocks + sig_blocks) * 4 + 4)
    }

    /// The most bytes the head of an index of `size` bytes may take: a CRC per region
    /// block and a width per signature block, where every block but the last of each kind
    /// holds at least [`REGIONS_PER_BLOCK`] or [`BLOCK_REGIONS`] regions.
    fn most(size: u64) -> u64 {
        let region_blocks = size / (REGIONS_PER_BLOCK * REGION_ENTRY) as u64 + 1;
        let sig_blocks = size / (BLOCK_REGIONS * REGION_ENTRY) as u64 + 1;
        (FIXED as u64 + (region_blocks + sig_blocks) * 4 + 4).min(size)
    }

    /// Parses the head at the start of `bytes` (which may go on past it).
    fn parse(bytes: &[u8], cover: Cover) -> Result<Head, IndexError> {
        let len = Head::len_of(bytes, cover)?;
        if (bytes.len() as u64) < len {
            return Err(IndexError::Malformed);
        }
        let (content, crc) = bytes[..len as usize].split_at(len as usize - 4);
        if crc32fast::hash(content).to_le_bytes() != crc {
            return Err(IndexError::Checksum);
        }
        let mut c = Cursor(&content[12..]);
        let (file_len, head_crc, linktype) = (c.u64()?, c.u32()?, c.u32()?);
        let (packets, first, last) = (c.u64()?, c.u64()?, c.u64()?);
        let keyed = c.take(1)?[0] != 0;
        let (regions, sig_blocks) = (c.u32()?, c.u32()?);
        let region_crcs = (0..(regions as usize).div_ceil(REGIONS_PER_BLOCK))
            .map(|_| c.u32())
            .collect::<Result<Vec<_>, _>>()?;
        // A keyed file has a signature block per BLOCK_REGIONS regions, another none.
        let blocks = if keyed {
            (regions as usize).div_ceil(BLOCK_REGIONS)
        } else {
            0
        };
        if sig_blocks as usize != blocks {
            return Err(IndexError::Malformed);
        }
        let mut at = len + u64::from(regions) * REGION_ENTRY as u64;
        let mut sig_starts = vec![at];
        let mut sig_widths = Vec::with_capacity(blocks);
        for n in 0..blocks {
            let width = c.u32()?;
            if !width.is_power_of_two() || width as usize > MAX_WORDS {
                return Err(IndexError::Malformed);
            }
            sig_widths.push(width);
            at += u64::from(width) * SigBlock::column_bytes(block_regions(regions, n));
            sig_starts.push(at);
        }
        Ok(Head {
            file_len,
            head_crc,
            linktype,
            packets,
            first,
            last,
            keyed,
            regions,
            region_crcs,
            sig_widths,
            sig_starts,
            len,
        })
    }

    /// Where the blocks end: the index's length.
    fn blocks_end(&self) -> u64 {
        *self
            .sig_starts
            .last()
            .expect("one more than the signature blocks")
    }

    /// Bytes of region block `n` in the index: from, to.
    fn region_span(&self, n: usize) -> (u64, u64) {
        let first = (n * REGIONS_PER_BLOCK) as u64;
        let last = (first + REGIONS_PER_BLOCK as u64).min(u64::from(self.regions));
        let at = |r: u64| self.len + r * REGION_ENTRY as u64;
        (at(first), at(last))
    }

    /// Bytes of signature block `n` in the index: from, to.
    fn sig_span(&self, n: usize) -> (u64, u64) {
        (self.sig_starts[n], self.sig_starts[n + 1])
    }

    /// Bytes of column `c` of signature block `n` in the index: from, to.
    fn column_span(&self, n: usize, c: usize) -> (u64, u64) {
        let bytes = SigBlock::column_bytes(block_regions(self.regions, n));
        let from = self.sig_starts[n] + c as u64 * bytes;
        (from, from + bytes)
    }

    /// The regions of region block `n`, whose bytes are `b`.
    fn region_block(&self, n: usize, b: &[u8]) -> Result<Vec<Region>, IndexError> {
        if crc32fast::hash(b) != self.region_crcs[n] {
            return Err(IndexError::Checksum);
        }
        let mut c = Cursor(b);
        let mut out = Vec::with_capacity(b.len() / REGION_ENTRY);
        while !c.0.is_empty() {
            let mut r = Region {
                offset: c.u64()?,
                packets: c.u32()?,
                first: c.u64()?,
                last: c.u64()?,
                pages: [0; PAGES - 1],
            };
            for at in &mut r.pages {
                *at = c.u16()?;
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Signature block `n`, whose bytes are `b`, every column's checksum checked.
    fn sig_block(&self, n: usize, b: &[u8]) -> Result<SigBlock, IndexError> {
        let regions = block_regions(self.regions, n);
        let mut columns = Vec::with_capacity(b.len() / 8);
        for col in b.chunks(SigBlock::column_bytes(regions) as usize) {
            columns.extend(SigBlock::decode_column(col).ok_or(IndexError::Checksum)?);
        }
        Ok(SigBlock {
            width: self.sig_widths[n],
            regions,
            columns,
        })
    }
}

/// Regions in signature block `n` of a file of `regions` regions.
fn block_regions(regions: u32, n: usize) -> u32 {
    (regions as usize - n * BLOCK_REGIONS).min(BLOCK_REGIONS) as u32
}

/// The postings of `keys` (sorted, each once): for each, every region whose signature may
/// hold it, all its pages, from the signature blocks of `widths` whose columns `column`
/// gives (block, column).
fn lookup(
    keys: &[Vec<u8>],
    widths: &[u32],
    mut column: impl FnMut(usize, usize) -> Result<Vec<u64>, IndexError>,
) -> Result<Postings, IndexError> {
    // In the order of their padded bytes, which [`Postings::get`] searches: keys of one
    // kind have one length, so their bytes sort alike.
    let mut keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut read: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
    let mut postings = Postings::default();
    for key in keys {
        let h = sig::hash(key[0], &key[1..]);
        let mut list = Vec::new();
        for (b, &width) in widths.iter().enumerate() {
            let c = h as usize & (width as usize - 1);
            let words = match read.entry((b, c)) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(column(b, c)?),
            };
            let first = (b * BLOCK_REGIONS) as u32;
            list.extend(sig::holding(words, h).map(|r| Posting {
                region: first + r,
                pages: ALL_PAGES,
            }));
        }
        postings.push(key, list);
    }
    Ok(postings)
}

/// A capture file's index on disk, read in pieces: its head when opened, then the key and
/// region blocks a query asks for (see the module docs).
#[derive(Debug)]
pub struct IndexFile {
    file: File,
    cover: Cover,
    head: Head,
    /// Bytes of the index read so far.
    pub bytes_read: u64,
}

impl IndexFile {
    /// Opens the index at `idx`, reads its head and checks it against its capture file
    /// `capture`.
    pub fn open(idx: &Path, capture: &Path) -> Result<IndexFile, IndexError> {
        IndexFile::open_as(idx, capture, Cover::Whole)
    }

    /// [`IndexFile::open`] for an index of `cover`: a prefix index checks that the capture
    /// file still begins with the bytes it was built from and is at least as long as the
    /// part it covers.
    pub fn open_as(idx: &Path, capture: &Path, cover: Cover) -> Result<IndexFile, IndexError> {
        let file = File::open(idx)?;
        let size = file.metadata()?.len();
        // The head and the capture file's first page (checked below) are queued with the
        // kernel together, so that a cold lookup waits for them once, not three times in
        // turn. Hints: if one fails, the reads are only slower.
        let _ = poolcap_sys::readahead::will_need(&file, 0, Head::most(size));
        if let Ok(c) = File::open(capture) {
            let _ = poolcap_sys::readahead::will_need(&c, 0, HEAD_BYTES as u64);
        }
        // One read for a small head; the rest of a larger directory in a second one.
        let mut bytes = vec![0u8; size.min(4096) as usize];
        file.read_exact_at(&mut bytes, 0)?;
        let len = Head::len_of(&bytes, cover)?;
        if len > size {
            return Err(IndexError::Malformed);
        }
        let read = bytes.len();
        if len > read as u64 {
            bytes.resize(len as usize, 0);
            file.read_exact_at(&mut bytes[read..], read as u64)?;
        }
        let head = Head::parse(&bytes, cover)?;
        if head.blocks_end() != size {
            return Err(IndexError::Malformed);
        }
        let capture_len = std::fs::metadata(capture)?.len();
        let fits = match cover {
            Cover::Whole => capture_len == head.file_len,
            Cover::Prefix => capture_len >= head.file_len,
        };
        if !fits || head_crc(capture)? != head.head_crc {
            return Err(IndexError::Mismatch);
        }
        Ok(IndexFile {
            file,
            cover,
            bytes_read: bytes.len() as u64,
            head,
        })
    }

    /// Reads every block and checks it (for `status` and `repair`: a query checks only the
    /// blocks it reads).
    pub fn verify(&mut self) -> Result<(), IndexError> {
        let bytes = self.read(0, self.head.blocks_end())?;
        Index::decode_as(&bytes, self.cover).map(|_| ())
    }

    /// Bytes of the capture file it was built from (for a prefix index: the bytes it
    /// covers, where its last region ends).
    pub fn file_len(&self) -> u64 {
        self.head.file_len
    }

    /// Packets in the file.
    pub fn packets(&self) -> u64 {
        self.head.packets
    }

    /// Time of the first and last packet (ns; 0 for an empty file).
    pub fn span(&self) -> (u64, u64) {
        (self.head.first, self.head.last)
    }

    /// False when the link type is not dissected: every key query selects every region.
    pub fn keyed(&self) -> bool {
        self.head.keyed
    }

    /// Number of regions.
    pub fn region_count(&self) -> u32 {
        self.head.regions
    }

    /// Reads the bytes from `from` to `to` of the index.
    fn read(&mut self, from: u64, to: u64) -> Result<Vec<u8>, IndexError> {
        let mut b = vec![0u8; (to - from) as usize];
        self.file.read_exact_at(&mut b, from)?;
        self.bytes_read += b.len() as u64;
        Ok(b)
    }

    /// Each of `spans` (from, to) of the index, with its start, in order. Where there are
    /// several, all are queued with the kernel first: the device then reads them together,
    /// where one after the other each read waits for the last (a one-flow lookup in a large
    /// file names tens of region blocks, each a read of its own).
    fn read_spans(&mut self, spans: &[(u64, u64)]) -> Result<Vec<(u64, Vec<u8>)>, IndexError> {
        if spans.len() > 1 {
            for &(from, to) in spans {
                // A hint: if it fails, the reads are only slower.
                let _ = poolcap_sys::readahead::will_need(&self.file, from, to - from);
            }
        }
        spans
            .iter()
            .map(|&(from, to)| Ok((from, self.read(from, to)?)))
            .collect()
    }

    /// The regions whose signatures may hold each of `keys` (kind byte and value), every
    /// page of each, reading per signature block the columns the keys name, queued with
    /// the kernel together.
    pub fn postings(&mut self, keys: &[Vec<u8>]) -> Result<Postings, IndexError> {
        let widths = self.head.sig_widths.clone();
        let columns: BTreeSet<(usize, usize)> = keys
            .iter()
            .flat_map(|k| {
                let h = sig::hash(k[0], &k[1..]);
                widths
                    .iter()
                    .enumerate()
                    .map(move |(b, &w)| (b, h as usize & (w as usize - 1)))
            })
            .collect();
        let spans: Vec<(u64, u64)> = columns
            .iter()
            .map(|&(b, c)| self.head.column_span(b, c))
            .collect();
        let mut got: BTreeMap<(usize, usize), Vec<u8>> = columns
            .into_iter()
            .zip(self.read_spans(&spans)?.into_iter().map(|(_, b)| b))
            .collect();
        lookup(keys, &widths, |b, c| {
            let bytes = got.remove(&(b, c)).ok_or(IndexError::Malformed)?;
            SigBlock::decode_column(&bytes).ok_or(IndexError::Checksum)
        })
    }

    /// Regions `numbers` and each one's end (the next region's offset, or the file's
    /// end), reading only the region blocks that hold them.
    pub fn regions(
        &mut self,
        numbers: &BTreeSet<u32>,
    ) -> Result<BTreeMap<u32, (Region, u64)>, IndexError> {
        let count = self.head.regions;
        let wanted: BTreeSet<usize> = numbers
            .iter()
            .filter(|&&n| n < count)
            .flat_map(|&n| [n, (n + 1).min(count - 1)])
            .map(|n| n as usize / REGIONS_PER_BLOCK)
            .collect();
        let runs = runs(&wanted);
        let spans: Vec<(u64, u64)> = runs
            .iter()
            .map(|run| {
                (
                    self.head.region_span(run.0).0,
                    self.head.region_span(run.1).1,
                )
            })
            .collect();
        let mut got: BTreeMap<u32, Region> = BTreeMap::new();
        for (run, (from, bytes)) in runs.into_iter().zip(self.read_spans(&spans)?) {
            for n in run.0..=run.1 {
                let (a, b) = self.head.region_span(n);
                let block = &bytes[(a - from) as usize..(b - from) as usize];
                let first = (n * REGIONS_PER_BLOCK) as u32;
                for (i, r) in self.head.region_block(n, block)?.into_iter().enumerate() {
                    // Only the regions asked for and those after them (their ends).
                    let at = first + i as u32;
                    if numbers.contains(&at)
                        || at.checked_sub(1).is_some_and(|p| numbers.contains(&p))
                    {
                        got.insert(at, r);
                    }
                }
            }
        }
        let mut out = BTreeMap::new();
        for &n in numbers.iter().filter(|&&n| n < count) {
            let end = if n + 1 == count {
                self.head.file_len
            } else {
                got[&(n + 1)].offset
            };
            out.insert(n, (got[&n], end));
        }
        Ok(out)
    }
}

/// Runs of consecutive numbers in `set`, as (first, last).
fn runs(set: &BTreeSet<usize>) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &n in set {
        match out.last_mut() {
            Some(run) if run.1 + 1 == n => run.1 = n,
            _ => out.push((n, n)),
        }
    }
    out
}

/// The index file of capture file `capture`.
pub fn index_path(capture: &Path) -> std::path::PathBuf {
    let mut name = capture.file_name().unwrap_or_default().to_os_string();
    name.push(".idx");
    capture.with_file_name(name)
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

    fn u16(&mut self) -> Result<u16, IndexError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
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
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::keys;
    use crate::store::pcapfile::{self, FILE_HEADER};

    /// Writes a nanosecond pcap of `n` Ethernet/IPv4/UDP frames of `size` bytes, packet `i`
    /// from 10.1.(f/256).(f%256):(1024+f) (f = `flow(i)`) to 192.0.2.1:53, at time i µs.
    pub(crate) fn udp_pcap(path: &Path, n: u32, size: usize, flow: impl Fn(u32) -> u32) {
        let mut b = Vec::new();
        b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        b.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&65535u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for i in 0..n {
            let f = flow(i);
            let len = size.max(42);
            let mut frame = vec![0u8; len];
            frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            frame[14] = 0x45;
            frame[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
            frame[22] = 64;
            frame[23] = 17;
            frame[26..30].copy_from_slice(&[10, 1, (f >> 8) as u8, f as u8]);
            frame[30..34].copy_from_slice(&[192, 0, 2, 1]);
            frame[34..36].copy_from_slice(&(1024 + f as u16).to_be_bytes());
            frame[36..38].copy_from_slice(&53u16.to_be_bytes());
            frame[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
            let ns = u64::from(i) * 1000;
            b.extend_from_slice(&((1_700_000_000 + ns / 1_000_000_000) as u32).to_le_bytes());
            b.extend_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
            b.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            b.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            b.extend_from_slice(&frame);
        }
        std::fs::write(path, b).unwrap();
    }

    /// A capture file of 6,000 packets over 1,500 flows (111 regions) and its index, saved
    /// beside it.
    fn sample(dir: &Path) -> (std::path::PathBuf, Index) {
        let capture = dir.join("f");
        udp_pcap(&capture, 6000, 1200, |i| (i * 7919) % 1500);
        let index = Index::build(&capture).unwrap();
        index.save(&capture).unwrap();
        (capture, index)
    }

    fn v4(f: u32) -> Vec<u8> {
        vec![keys::V4, 10, 1, (f >> 8) as u8, f as u8]
    }

    fn port(p: u16) -> Vec<u8> {
        [&[keys::PORT][..], &p.to_be_bytes()].concat()
    }

    /// What lookups answer: one address's postings, some ports', and the regions those
    /// name.
    fn answers(file: &mut IndexFile) -> Result<String, IndexError> {
        let one = file.postings(&[v4(77)])?;
        let ports = file.postings(&(0x400..0x440).map(port).collect::<Vec<_>>())?;
        let numbers: BTreeSet<u32> = one.get(&v4(77)).iter().map(|p| p.region).collect();
        let regions = file.regions(&numbers)?;
        Ok(format!("{:?} {:?} {regions:?}", one.get(&v4(77)), ports))
    }

    #[test]
    fn an_index_reads_back_as_written_and_any_flipped_bit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_, index) = sample(dir.path());
        let bytes = index.encode();
        let head = Head::parse(&bytes, Cover::Whole).unwrap();
        assert!(
            head.sig_widths.len() == 1 && head.region_crcs.len() > 1,
            "{head:?}"
        );
        assert_eq!(Index::decode(&bytes).unwrap(), index);
        // A bit of every byte (each of the eight in turn).
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 1 << (at % 8);
            assert!(Index::decode(&bad).is_err(), "byte {at} flipped");
        }
        assert!(Index::decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn the_head_lies_within_the_bound_hinted_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        for (n, size, flows) in [(1, 60, 1), (6000, 1200, 1500), (20_000, 64, 20_000)] {
            let capture = dir.path().join(format!("f{n}"));
            udp_pcap(&capture, n, size, |i| (i * 7919) % flows);
            let bytes = Index::build(&capture).unwrap().encode();
            let len = Head::parse(&bytes, Cover::Whole).unwrap().len;
            let most = Head::most(bytes.len() as u64);
            assert!(
                len <= most && most <= bytes.len() as u64,
                "{n} packets: head {len}, bound {most}, index {}",
                bytes.len()
            );
        }
    }

    #[test]
    fn a_flipped_bit_in_any_block_is_refused_by_a_lookup_or_changes_no_answer() {
        let dir = tempfile::tempdir().unwrap();
        let (capture, _) = sample(dir.path());
        let idx = index_path(&capture);
        let good = std::fs::read(&idx).unwrap();
        let truth = answers(&mut IndexFile::open(&idx, &capture).unwrap()).unwrap();
        let (mut refused, mut same) = (0, 0);
        let writer = std::fs::OpenOptions::new().write(true).open(&idx).unwrap();
        for at in 0..good.len() {
            if at > 0 {
                writer
                    .write_all_at(&good[at - 1..at], at as u64 - 1)
                    .unwrap();
            }
            writer
                .write_all_at(&[good[at] ^ (1 << (at % 8))], at as u64)
                .unwrap();
            match IndexFile::open(&idx, &capture).and_then(|mut f| answers(&mut f)) {
                Err(_) => refused += 1,
                Ok(a) => {
                    assert_eq!(a, truth, "byte {at} flipped changed an answer");
                    same += 1;
                }
            }
        }
        // Flips in the head and the blocks read are refused, the others are never read.
        assert!(refused > 0 && same > 0, "{refused} refused, {same} unread");
    }

    #[test]
    fn a_one_key_lookup_reads_the_head_and_a_few_blocks_not_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let (capture, index) = sample(dir.path());
        let idx = index_path(&capture);
        let mut file = IndexFile::open(&idx, &capture).unwrap();
        let postings = file.postings(&[v4(77)]).unwrap();
        let list = postings.get(&v4(77)).to_vec();
        assert_eq!(list, index.postings(&[v4(77)]).get(&v4(77)));
        assert!(list.len() >= 4, "the flow's 4 packets' regions: {list:?}");
        let numbers: BTreeSet<u32> = list.iter().map(|p| p.region).collect();
        let regions = file.regions(&numbers).unwrap();
        for (n, (r, end)) in &regions {
            assert_eq!(*r, index.regions[*n as usize]);
            assert_eq!(*end, index.region_end(*n as usize));
        }
        let size = std::fs::metadata(&idx).unwrap().len();
        let head = Head::parse(&index.encode(), Cover::Whole).unwrap().len;
        // The head (read in 4 KiB), one column of the one signature block and the region
        // blocks (two).
        let column = SigBlock::column_bytes(index.regions.len() as u32);
        let bound = head.max(4096) + column + 2 * (REGIONS_PER_BLOCK * REGION_ENTRY) as u64;
        assert!(file.bytes_read <= bound, "{} > {bound}", file.bytes_read);
        assert!(file.bytes_read * 2 < size, "{} of {size}", file.bytes_read);
    }

    #[test]
    fn lookups_span_signature_blocks_and_number_regions_across_them() {
        // 2,500 regions (three signature blocks, the last partial), region r holding port r.
        let dir = tempfile::tempdir().unwrap();
        let capture = dir.path().join("f");
        let regions = 2500u32;
        let file_len = u64::from(regions) * REGION_BYTES;
        File::create(&capture).unwrap().set_len(file_len).unwrap();
        let mut signer = sig::Signer::default();
        let sigs: Vec<Box<[u64]>> = (0..regions)
            .map(|r| {
                signer.insert(keys::PORT, &(r as u16).to_be_bytes());
                signer.take().into()
            })
            .collect();
        let index = Index {
            file_len,
            head_crc: head_crc(&capture).unwrap(),
            linktype: 1,
            packets: u64::from(regions),
            first: 0,
            last: 0,
            keyed: true,
            regions: (0..regions)
                .map(|r| Region {
                    offset: u64::from(r) * REGION_BYTES,
                    packets: 1,
                    first: 0,
                    last: 0,
                    pages: [0; PAGES - 1],
                })
                .collect(),
            signatures: sigs.chunks(BLOCK_REGIONS).map(SigBlock::build).collect(),
        };
        assert_eq!(index.signatures.len(), 3);
        index.save(&capture).unwrap();
        assert_eq!(Index::decode(&index.encode()).unwrap(), index);
        let mut file = IndexFile::open(&index_path(&capture), &capture).unwrap();
        let wanted: Vec<Vec<u8>> = [0, 1023, 1024, 2047, 2048, 2499].map(port).to_vec();
        let postings = file.postings(&wanted).unwrap();
        for (key, r) in wanted.iter().zip([0, 1023, 1024, 2047, 2048, 2499]) {
            let found: Vec<u32> = postings.get(key).iter().map(|p| p.region).collect();
            assert!(found.contains(&r) && found.len() < 10, "{key:?}: {found:?}");
            assert_eq!(
                postings.get(key),
                index.postings(std::slice::from_ref(key)).get(key)
            );
        }
    }

    #[test]
    fn a_pages_range_holds_exactly_the_records_starting_in_those_pages() {
        let dir = tempfile::tempdir().unwrap();
        let (capture, index) = sample(dir.path());
        let (header, file) = pcapfile::open(&capture).unwrap().unwrap();
        let mut records = pcapfile::Records::new(header, file, FILE_HEADER, 0).unwrap();
        for (n, r) in index.regions.iter().enumerate().take(5) {
            for p in 0..PAGES {
                let mut seen = Vec::new();
                for (from, to) in r.ranges(1 << p, index.region_end(n)) {
                    records.seek(from, to).unwrap();
                    while let Some(rec) = records.next_record().unwrap() {
                        seen.push(rec.offset);
                    }
                }
                let page = |o: u64| (o - r.offset) / PAGE_BYTES;
                assert!(!seen.is_empty() && seen.iter().all(|&o| page(o) == p as u64));
            }
        }
    }
}
