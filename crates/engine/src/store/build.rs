//! Building a capture file's [`Index`] record by record: from the file on disk
//! ([`Index::build`], for repair and a file a crash left unindexed), or from notes of its
//! records made by the capture writer as it copied them into its write buffers ([`Noter`]),
//! handed over in memory with each write as it lands ([`Written`], the keeper's usual way:
//! no file is read back).
//!
//! Why notes: the keeper walked the records of the landed writes itself, and each record
//! header's place depended on the one before while the bytes had left the CPU's caches
//! since the capture thread copied them (same core, a 2 MiB write earlier): a miss per
//! packet, about 250 ns of keeper per 1514-byte packet against 55-65 ns indexing a file read
//! through. The writer's copy has the bytes in the cache; the notes it makes there (each
//! record's time, length and keys) are read by the keeper in order, without a miss per
//! packet.
//!
//! Why signatures: the keeper runs beside the capture on the same cores. Its first form
//! put each key in a map of key to regions (84% of `capture -r --store`'s CPU), its second
//! numbered keys through a cache and a map and grouped (key, region) pairs at a file's
//! close, which still cost about 100 ns a packet with a flow per few packets (the map's
//! misses, the grouping's scatter). A key now costs a hash and two bits set in the
//! region's signature, which stays in L1 (see `sig`); a key repeated from the record
//! before in the same region costs nothing.
//!
//! [`Builder::record`] is the one place a record is indexed: whatever else the index
//! learns per record goes there.

use super::index::{head_crc, Index, IndexError, Region, PAGES, PAGE_BYTES, REGION_BYTES};
use super::keys;
use super::pcapfile::{self, Header, FILE_HEADER, RECORD_HEADER};
use super::sig::{SigBlock, Signer, BLOCK_REGIONS};

/// An index being built from a capture file's records, in file order.
pub struct Builder {
    linktype: u32,
    keyed: bool,
    regions: Vec<Region>,
    packets: u64,
    /// Where the last record ends.
    end: u64,
    /// The signature of the last region, being built.
    signer: Signer,
    /// The signatures of the regions before it, from region `sigs_from` on.
    sigs: Vec<Box<[u64]>>,
    sigs_from: u32,
    /// The region the last noted record is in, and its keys (see [`Builder::noted`]).
    last_region: Option<u32>,
    last: Last,
}

impl Builder {
    /// A builder for a capture file of `linktype`.
    pub fn new(linktype: u32) -> Self {
        Builder {
            linktype,
            keyed: keys::dissects(linktype),
            regions: Vec::new(),
            packets: 0,
            end: FILE_HEADER,
            signer: Signer::default(),
            sigs: Vec::new(),
            sigs_from: 0,
            last_region: None,
            last: Last::default(),
        }
    }

    /// Indexes the record at byte `offset` (its record header's) with time `ts_ns` and
    /// captured bytes `data`.
    pub fn record(&mut self, offset: u64, ts_ns: u64, data: &[u8]) {
        self.place(offset, ts_ns, data.len());
        if self.keyed {
            let signer = &mut self.signer;
            keys::keys(self.linktype, data, &mut |kind, value| {
                signer.insert(kind, value)
            });
        }
    }

    /// Indexes the records noted by a [`Noter`] in `notes` (each its time, captured length
    /// and keys, as [`note_record`] makes them), as [`Builder::record`] indexes them from
    /// their bytes; false if the notes do not read as notes.
    ///
    /// A repeated key is inserted only when its record is in another region than the
    /// record before: in the same region, the record before inserted it already (or
    /// skipped it for the same reason).
    #[must_use]
    fn noted(&mut self, mut notes: &[u8]) -> bool {
        while let Some((&[t0, t1, t2, t3, t4, t5, t6, t7, c0, c1, c2, c3, k], rest)) =
            notes.split_first_chunk::<13>()
        {
            let ts = u64::from_le_bytes([t0, t1, t2, t3, t4, t5, t6, t7]);
            let caplen = u32::from_le_bytes([c0, c1, c2, c3]);
            let Some((mut keyed, more)) = rest.split_at_checked(usize::from(k)) else {
                return false;
            };
            let region = self.place(self.end, ts, caplen as usize);
            let same_region = self.last_region == Some(region);
            self.last_region = Some(region);
            let mut n = 0;
            while let [kind, rest @ ..] = keyed {
                if kind & REPEAT != 0 {
                    let Some((bytes, from)) = self.last.get(n, kind & !REPEAT) else {
                        return false;
                    };
                    if !same_region {
                        self.signer.insert(kind & !REPEAT, &bytes[from..]);
                    }
                    keyed = rest;
                } else {
                    let Some((value, more)) = rest.split_at_checked(keys::width(*kind)) else {
                        return false;
                    };
                    self.signer.insert(*kind, value);
                    self.last.set(n, *kind, self::number(value));
                    keyed = more;
                }
                n += 1;
            }
            self.last.len = n;
            notes = more;
        }
        notes.is_empty()
    }

    /// Places the record at byte `offset` with time `ts_ns` and `caplen` bytes captured in
    /// its region (the region before ends, with its signature, where a new one starts):
    /// returns the region's number.
    fn place(&mut self, offset: u64, ts_ns: u64, caplen: usize) -> u32 {
        let new_region = self
            .regions
            .last()
            .is_none_or(|last| offset - last.offset >= REGION_BYTES);
        if new_region {
            if !self.regions.is_empty() && self.keyed {
                self.sigs.push(self.signer.take());
            }
            self.regions.push(Region {
                offset,
                packets: 0,
                first: ts_ns,
                last: ts_ns,
                pages: [0; PAGES - 1],
            });
        }
        let number = (self.regions.len() - 1) as u32;
        let region = self.regions.last_mut().expect("pushed above");
        // The page of the region this record starts in; the first record starting in a
        // page is where a read of that page begins.
        let within = offset - region.offset;
        let page = (within / PAGE_BYTES) as usize;
        if page > 0 && region.pages[page - 1] == 0 {
            region.pages[page - 1] = within as u16;
        }
        region.packets += 1;
        region.first = region.first.min(ts_ns);
        region.last = region.last.max(ts_ns);
        self.packets += 1;
        self.end = offset + (RECORD_HEADER + caplen) as u64;
        number
    }

    /// The signature blocks of regions `from` to before `below`, numbered from `from`
    /// (the last region's signature: `last`, when it is among them); none if not keyed.
    fn signatures(&self, from: u32, below: u32, last: Option<Box<[u64]>>) -> Vec<SigBlock> {
        if !self.keyed {
            return Vec::new();
        }
        let at = |r: u32| (r - self.sigs_from) as usize;
        let closed = &self.sigs[at(from)..at(below).min(self.sigs.len())];
        let all: Vec<Box<[u64]>> = closed.iter().cloned().chain(last).collect();
        all.chunks(BLOCK_REGIONS).map(SigBlock::build).collect()
    }

    /// The index of a capture file of `file_len` bytes (a record cut short at its end is
    /// not indexed) whose first 4 KiB have the CRC-32 `head_crc`.
    pub fn finish(mut self, file_len: u64, head_crc: u32) -> Index {
        let last = (!self.regions.is_empty()).then(|| self.signer.take());
        let regions = self.regions.len() as u32;
        Index {
            signatures: self.signatures(0, regions, last),
            file_len: file_len.max(self.end),
            head_crc,
            linktype: self.linktype,
            packets: self.packets,
            first: self.regions.iter().map(|r| r.first).min().unwrap_or(0),
            last: self.regions.iter().map(|r| r.last).max().unwrap_or(0),
            keyed: self.keyed,
            regions: self.regions,
        }
    }

    /// Regions whole so far: all but the last, which may grow.
    pub fn whole(&self) -> u32 {
        self.regions.len().saturating_sub(1) as u32
    }

    /// A piece of the file being written: the index of its whole regions from region
    /// `from` on, numbered from 0 (each keeps its offset in the file), covering the bytes
    /// from where region `from` starts to where the last region starts (its "file length",
    /// see `prefix`). From region 0 it is what [`Builder::finish`] gives for the file cut
    /// where the last region starts. `None` while no region from `from` on is whole.
    pub fn piece(&self, from: u32, head_crc: u32) -> Option<Index> {
        let whole = self.whole();
        if whole <= from {
            return None;
        }
        let regions = &self.regions[from as usize..whole as usize];
        Some(Index {
            file_len: self.regions[whole as usize].offset,
            head_crc,
            linktype: self.linktype,
            packets: regions.iter().map(|r| u64::from(r.packets)).sum(),
            first: regions.iter().map(|r| r.first).min().unwrap_or(0),
            last: regions.iter().map(|r| r.last).max().unwrap_or(0),
            keyed: self.keyed,
            regions: regions.to_vec(),
            signatures: self.signatures(from, whole, None),
        })
    }

    /// A copy of the builder for [`Builder::piece`]`(from, ..)` elsewhere: without the
    /// signatures of the regions before `from`, which the piece does not read (a copy of
    /// all, and a prefix index of everything fed, each second, grew with the file).
    fn copy_from(&self, from: u32) -> Builder {
        let skip = (from.max(self.sigs_from) - self.sigs_from) as usize;
        Builder {
            linktype: self.linktype,
            keyed: self.keyed,
            regions: self.regions.clone(),
            packets: self.packets,
            end: self.end,
            signer: Signer::default(),
            sigs: self.sigs[skip.min(self.sigs.len())..].to_vec(),
            sigs_from: self.sigs_from + skip as u32,
            last_region: self.last_region,
            last: self.last,
        }
    }
}

/// Notes a pcap file's records from its bytes as the writer copies them into its write
/// buffers (`poolcap_format::Notes`), in order, in runs that end anywhere: for each record
/// whole, its time, captured length and keys (`note_record`). The file header is not
/// noted (the keeper has it from the first write).
#[derive(Default)]
pub struct Noter {
    /// The file header, once its bytes are in.
    header: Option<Header>,
    /// The header's bytes, or a record not yet copied whole.
    partial: Vec<u8>,
    /// The bytes are not a pcap file: nothing is noted.
    broken: bool,
    /// The keys of the record noted last.
    last: Last,
}

impl Noter {
    /// Notes the records of the file's next bytes `bytes`, appending to `out`.
    pub fn note(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut b = bytes;
        let header = match self.header {
            Some(h) => h,
            None if self.broken => return,
            None => {
                let n = b.len().min(FILE_HEADER as usize - self.partial.len());
                self.partial.extend_from_slice(&b[..n]);
                b = &b[n..];
                if self.partial.len() < FILE_HEADER as usize {
                    return;
                }
                let mut raw = [0u8; FILE_HEADER as usize];
                raw.copy_from_slice(&self.partial);
                self.partial.clear();
                let Some(h) = Header::parse(raw) else {
                    self.broken = true;
                    return;
                };
                *self.header.insert(h)
            }
        };
        // A record begun in an earlier run: complete it from this one.
        if !self.partial.is_empty() {
            let need = |p: &[u8]| {
                if p.len() < RECORD_HEADER {
                    RECORD_HEADER
                } else {
                    RECORD_HEADER + header.record(p).1 as usize
                }
            };
            while self.partial.len() < need(&self.partial) && !b.is_empty() {
                let n = b.len().min(need(&self.partial) - self.partial.len());
                self.partial.extend_from_slice(&b[..n]);
                b = &b[n..];
            }
            if self.partial.len() < need(&self.partial) {
                return;
            }
            let (ts, _) = header.record(&self.partial);
            note_record(
                &header,
                ts,
                &self.partial[RECORD_HEADER..],
                out,
                &mut self.last,
            );
            self.partial.clear();
        }
        while b.len() >= RECORD_HEADER {
            let (ts, caplen) = header.record(b);
            let len = RECORD_HEADER + caplen as usize;
            if b.len() < len {
                break;
            }
            note_record(&header, ts, &b[RECORD_HEADER..len], out, &mut self.last);
            b = &b[len..];
        }
        self.partial.extend_from_slice(b);
    }
}

/// Appends the note of a record with time `ts_ns` and captured bytes `data` to `out`: the
/// time (8 bytes), the captured length (4), the length of its keys (1), and its keys as
/// [`keys::keys`] gives them, each its kind byte and value (of the kind's width), or, where
/// the record before had the same key at the same place, the kind byte with [`REPEAT`]
/// set and no value (`last` holds that record's keys). Most keys repeat (a flow's
/// addresses, its protocol, the EtherType): the notes are half as long, and the keeper
/// posts a repeated key only when the record starts a page the one before did not start
/// in ([`Builder::noted`]), where posting each key of each record was most of its time.
fn note_record(header: &Header, ts_ns: u64, data: &[u8], out: &mut Vec<u8>, last: &mut Last) {
    // Made on the stack and appended once: a `Vec` push per key byte, each checking the
    // capacity, was a third of the note's time (perf, 64-byte frames over 100k flows).
    let mut note = [0u8; NOTE_MAX];
    note[..8].copy_from_slice(&ts_ns.to_le_bytes());
    note[8..12].copy_from_slice(&(data.len() as u32).to_le_bytes());
    let mut len = 13;
    let mut n = 0;
    if keys::dissects(header.linktype) {
        keys::keys(header.linktype, data, &mut |kind, value| {
            let number = number(value);
            if last.repeats(n, kind, number) {
                note[len] = kind | REPEAT;
                len += 1;
            } else {
                note[len] = kind;
                note[len + 1..len + 1 + value.len()].copy_from_slice(value);
                len += 1 + value.len();
                last.set(n, kind, number);
            }
            n += 1;
        });
    }
    last.len = n;
    // At most 3 EtherTypes, 2 IPv6 addresses, 8 protocols and 2 ports: 65 bytes of keys.
    note[12] = u8::try_from(len - 13).expect("a record has under 256 key bytes");
    out.extend_from_slice(&note[..len]);
}

/// Bytes of a record's note at most: its time, length and key count (13), and its keys
/// (see [`note_record`]).
const NOTE_MAX: usize = 13 + 65;

/// Set on a key's kind byte in a note: the key of the record before at this place.
const REPEAT: u8 = 0x80;

/// The keys of the record noted last, by their place in its note (at most the first
/// [`Last::KEYS`]), each its kind and its value as a number (compared as one, where
/// comparing the bytes was a call of `memcmp` per key on the capture thread).
#[derive(Clone, Copy, Default)]
struct Last {
    keys: [(u8, u128); Last::KEYS],
    len: usize,
}

impl Last {
    /// Keys of a record held (more than a record has: see [`note_record`]).
    const KEYS: usize = 16;

    /// Whether the key at place `n` is (`kind`, `value`), the value as a [`number`].
    fn repeats(&self, n: usize, kind: u8, value: u128) -> bool {
        n < self.len.min(Last::KEYS) && self.keys[n] == (kind, value)
    }

    /// Holds (`kind`, `value`) as the key at place `n`, the value as a [`number`].
    fn set(&mut self, n: usize, kind: u8, value: u128) {
        if let Some(k) = self.keys.get_mut(n) {
            *k = (kind, value);
        }
    }

    /// The value of the key of kind `kind` at place `n`, if that is the key there.
    fn get(&self, n: usize, kind: u8) -> Option<([u8; 16], usize)> {
        let k = self.keys[..self.len.min(Last::KEYS)].get(n)?;
        let width = keys::width(kind);
        (k.0 == kind).then(|| (k.1.to_be_bytes(), 16 - width))
    }
}

/// A key's value (1, 2, 4 or 16 bytes) as a number.
fn number(value: &[u8]) -> u128 {
    match *value {
        [a] => u128::from(a),
        [a, b] => u128::from(u16::from_be_bytes([a, b])),
        [a, b, c, d] => u128::from(u32::from_be_bytes([a, b, c, d])),
        _ => value.iter().fold(0, |v, &b| (v << 8) | u128::from(b)),
    }
}

/// Bytes at the start of a capture file its index checks it against (see `index`).
const HEAD_BYTES: usize = 4096;

/// A capture file's index built from the writes that landed, in order, each with its
/// offset in the file and the notes of its records ([`Noter`]), from memory; writes lent
/// without notes are noted here.
pub struct Written {
    /// Notes the writes lent without notes, and holds their notes.
    noter: Noter,
    noted: Vec<u8>,
    /// Bytes fed so far (where the next write must start).
    fed: u64,
    /// The file's first bytes, for its header and the index's check of them.
    head: Vec<u8>,
    /// The builder, once the file header is fed.
    built: Option<Builder>,
    /// A write was missed (or the header is not pcap): the file is indexed from disk.
    broken: bool,
    /// Whether the writes came with the writer's notes (`land`) or were noted here
    /// (`feed`): a note's repeated keys are those of the record its own noter noted before
    /// it, so notes of two noters in one file would read keys of the wrong record.
    by_writer: Option<bool>,
}

impl Default for Written {
    fn default() -> Self {
        Self::new()
    }
}

impl Written {
    /// Nothing fed yet.
    pub fn new() -> Self {
        Written {
            noter: Noter::default(),
            noted: Vec::new(),
            fed: 0,
            head: Vec::with_capacity(HEAD_BYTES),
            built: None,
            broken: false,
            by_writer: None,
        }
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Feeds the file's bytes `bytes` at offset `at`, not noted by the writer: notes them
    /// here, then as [`Written::land`].
    pub fn feed(&mut self, at: u64, bytes: &[u8]) {
        let mut noted = std::mem::take(&mut self.noted);
        noted.clear();
        self.noter.note(bytes, &mut noted);
        self.take(at, bytes, &noted, false);
        self.noted = noted;
    }

    /// Feeds the write of the file's bytes `bytes` at offset `at`, with the notes of the
    /// records copied into it (`poolcap_format::Landed::notes`): the next write, or the
    /// builder gives up (a write was missed, or one before came without notes).
    pub fn land(&mut self, at: u64, bytes: &[u8], notes: &[u8]) {
        self.take(at, bytes, notes, true);
    }

    /// [`Written::land`] of notes made by the writer's noter (`by_writer`) or this one's.
    fn take(&mut self, at: u64, bytes: &[u8], notes: &[u8], by_writer: bool) {
        if *self.by_writer.get_or_insert(by_writer) != by_writer {
            self.broken = true;
        }
        if self.broken || at != self.fed {
            self.broken = true;
            return;
        }
        self.fed += bytes.len() as u64;
        if self.head.len() < HEAD_BYTES {
            let n = bytes.len().min(HEAD_BYTES - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
        }
        if self.built.is_none() {
            let Some(raw) = self.head.first_chunk::<{ FILE_HEADER as usize }>() else {
                // Records noted before the file header landed: not this file's writer.
                self.broken = !notes.is_empty();
                return;
            };
            let Some(header) = Header::parse(*raw) else {
                self.broken = true;
                return;
            };
            self.built = Some(Builder::new(header.linktype));
        }
        let Some(builder) = &mut self.built else {
            return;
        };
        if !builder.noted(notes) {
            // Not this file's notes: indexed from the file on disk.
            self.broken = true;
        }
    }

    /// The piece from region `from` of the file being written (see [`Builder::piece`]), if
    /// every byte so far was fed and a region from `from` on is whole.
    pub fn piece(&self, from: u32) -> Option<Index> {
        let (builder, head_crc) = self.snapshot(from)?;
        builder.piece(from, head_crc)
    }

    /// A copy of the builder so far for its piece from region `from`, and the CRC-32 of the
    /// file's first bytes, to build the piece elsewhere while this one is fed on; `None`
    /// while every byte was not fed or the file's first 4 KiB are not in.
    pub fn snapshot(&self, from: u32) -> Option<(Builder, u32)> {
        if self.broken || self.head.len() < HEAD_BYTES {
            return None;
        }
        let builder = self.built.as_ref()?;
        Some((builder.copy_from(from), crc32fast::hash(&self.head)))
    }

    /// The index of the file, if every byte of its `file_len` was fed and its records,
    /// noted, end there; else `None` (it is then built from the file on disk).
    pub fn finish(self, file_len: u64) -> Option<Index> {
        if self.broken || self.fed != file_len {
            return None;
        }
        let builder = self.built?;
        if builder.end != file_len {
            return None;
        }
        Some(builder.finish(file_len, crc32fast::hash(&self.head)))
    }
}

impl Index {
    /// Reads the capture file `path` through and indexes it, as the keeper indexes a file
    /// from its written bytes (here, beside the builder, so that the index's format does not
    /// depend on how it is built).
    pub fn build(path: &std::path::Path) -> Result<Index, IndexError> {
        let (header, file) = pcapfile::open(path)?.ok_or(IndexError::NotPcap)?;
        let mut builder = Builder::new(header.linktype);
        let mut records = pcapfile::Records::new(header, file, FILE_HEADER, u64::MAX)?;
        while let Some(r) = records.next_record()? {
            builder.record(r.offset, r.ts_ns, r.data);
        }
        Ok(builder.finish(std::fs::metadata(path)?.len(), head_crc(path)?))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::sig;
    use std::collections::{BTreeMap, BTreeSet};

    /// Each key of the packets of the capture file `path` (its index `index`), with the
    /// regions holding a packet with it.
    fn keys_by_region(path: &std::path::Path, index: &Index) -> BTreeMap<Vec<u8>, BTreeSet<u32>> {
        let (header, file) = pcapfile::open(path).unwrap().unwrap();
        let mut records = pcapfile::Records::new(header, file, FILE_HEADER, u64::MAX).unwrap();
        let mut out: BTreeMap<Vec<u8>, BTreeSet<u32>> = BTreeMap::new();
        while let Some(r) = records.next_record().unwrap() {
            let region = index.regions.partition_point(|g| g.offset <= r.offset) as u32 - 1;
            keys::keys(header.linktype, r.data, &mut |kind, value| {
                sig::with_derived(kind, value, &mut |k, v| {
                    out.entry([&[k], v].concat()).or_default().insert(region);
                });
            });
        }
        out
    }

    #[test]
    fn every_key_of_a_packet_finds_its_region_and_few_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, sample_file(20_000, false)).unwrap();
        let index = Index::build(&path).unwrap();
        let truth = keys_by_region(&path, &index);
        let keys: Vec<Vec<u8>> = truth.keys().cloned().collect();
        let postings = index.postings(&keys);
        let (mut extra, mut tested) = (0, 0);
        for (key, regions) in &truth {
            let found: BTreeSet<u32> = postings.get(key).iter().map(|p| p.region).collect();
            assert!(
                found.is_superset(regions),
                "{key:?}: {found:?} misses some of {regions:?}"
            );
            extra += found.len() - regions.len();
            tested += index.regions.len() - regions.len();
        }
        // About 2% of the regions without a key are read for it.
        let rate = extra as f64 / tested as f64;
        assert!(
            rate < 0.05 && index.regions.len() > 100,
            "{rate} over {} regions",
            index.regions.len()
        );
    }

    /// A pcap file (nanoseconds) of `n` frames of mixed sizes over many flows, some IPv6,
    /// some tagged, some ARP, one cut short at the end when `cut`.
    pub(crate) fn sample_file(n: usize, cut: bool) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        f.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&65535u32.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        let mut seed = 7u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..n {
            let r = rnd();
            let mut frame = vec![2u8; 12];
            match r % 10 {
                0 => {
                    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
                    for b in 0..32u64 {
                        frame.push(((r >> (b % 8)) as u8) & 3);
                    }
                    frame.extend_from_slice(&[(r >> 9) as u8, 1, 0, 53, 0, 8, 0, 0]);
                }
                1 => {
                    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
                    frame.extend_from_slice(&[2; 6]);
                    frame.extend_from_slice(&[10, 0, (r >> 8) as u8 & 7, 1]);
                    frame.extend_from_slice(&[0; 6]);
                    frame.extend_from_slice(&[10, 0, 0, 2]);
                }
                v => {
                    if v == 2 {
                        frame.extend_from_slice(&[0x81, 0, 0, 5]);
                    }
                    let proto = if r & 0x100 == 0 { 17 } else { 6 };
                    frame.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 40, 0, 0, 0, 0, 64, proto]);
                    frame.extend_from_slice(&[0, 0, 10, (r >> 12) as u8 % 9, (r >> 20) as u8, 1]);
                    frame.extend_from_slice(&[192, 0, 2, 1]);
                    frame.extend_from_slice(&((1024 + (r >> 28) % 3000) as u16).to_be_bytes());
                    frame.extend_from_slice(&[0, 53, 0, 8, 0, 0]);
                }
            }
            frame.resize([60, 590, 1514][(r >> 40) as usize % 3].max(frame.len()), 0);
            let ts = 1_700_000_000_000_000_000u64 + i as u64 * 1000 + (r >> 50) % 5000;
            f.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
            f.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
            f.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            f.extend_from_slice(&(frame.len() as u32).to_le_bytes());
            f.extend_from_slice(&frame);
        }
        if cut {
            f.truncate(f.len() - 100);
        }
        f
    }

    #[test]
    fn an_index_built_from_the_written_bytes_is_the_one_built_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        for (n, cut) in [(0, false), (1, false), (3000, false), (3000, true)] {
            let bytes = sample_file(n, cut);
            let path = dir.path().join(format!("f{n}{cut}"));
            std::fs::write(&path, &bytes).unwrap();
            let from_disk = Index::build(&path).unwrap();
            assert_eq!(from_disk.packets, (n - usize::from(cut)) as u64);
            assert!(n < 3000 || from_disk.regions.len() > 10 && from_disk.signatures.len() == 1);
            // Fed in writes of many sizes, records cut anywhere (within the header too).
            for size in [1, 7, 4096, 100_000] {
                let mut w = Written::new();
                for (i, chunk) in bytes.chunks(size).enumerate() {
                    w.feed((i * size) as u64, chunk);
                }
                let fed = w.finish(bytes.len() as u64);
                // A writer's file ends with a whole record; one that does not is read back.
                assert_eq!(
                    fed.is_none(),
                    cut,
                    "{n} packets, cut {cut}, writes of {size}"
                );
                if let Some(fed) = fed {
                    assert_eq!(fed, from_disk, "{n} packets, writes of {size}");
                }
            }
            // Noted by the writer in runs of one size, each run's notes lent with the write
            // its first byte went into, the writes of another size.
            for (run, size) in [(1, 4096), (5000, 4096), (100_000, 4096), (4096, 100_000)] {
                let mut noter = Noter::default();
                let mut notes = vec![Vec::new(); bytes.len().div_ceil(size)];
                for (i, chunk) in bytes.chunks(run).enumerate() {
                    noter.note(chunk, &mut notes[i * run / size]);
                }
                let mut w = Written::new();
                for (i, chunk) in bytes.chunks(size).enumerate() {
                    w.land((i * size) as u64, chunk, &notes[i]);
                }
                if let Some(fed) = w.finish(bytes.len() as u64) {
                    assert_eq!(
                        fed, from_disk,
                        "{n} packets, runs of {run}, writes of {size}"
                    );
                } else {
                    assert!(cut, "{n} packets, runs of {run}, writes of {size}");
                }
            }
        }
    }

    #[test]
    fn pieces_are_the_index_of_the_file_cut_where_its_last_region_starts_in_parts() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = sample_file(3000, false);
        let mut w = Written::new();
        assert!(w.piece(0).is_none(), "nothing fed");
        let (mut pieces, mut from) = (0, 0u32);
        for (i, chunk) in bytes.chunks(100_000).enumerate() {
            w.feed((i * 100_000) as u64, chunk);
            // From region 0, the index of the file cut where the last region starts.
            let Some(prefix) = w.piece(0) else { continue };
            let cut = dir.path().join(format!("cut{i}"));
            std::fs::write(&cut, &bytes[..prefix.file_len as usize]).unwrap();
            let want = Index::build(&cut).unwrap();
            assert!(
                !want.regions.is_empty() && !want.signatures.is_empty(),
                "{i}"
            );
            assert_eq!(prefix, want, "after write {i}");
            // From where the last piece ended: that index's regions from there, each key's
            // regions from there numbered from it.
            let Some(piece) = w.piece(from) else {
                assert_eq!(
                    from as usize,
                    want.regions.len(),
                    "none only when none is new"
                );
                continue;
            };
            let regions = &want.regions[from as usize..];
            assert_eq!(piece.regions, regions, "after write {i}");
            assert_eq!(piece.file_len, want.file_len);
            let packets: u64 = regions.iter().map(|r| u64::from(r.packets)).sum();
            assert_eq!(piece.packets, packets);
            assert_eq!(piece.first, regions.iter().map(|r| r.first).min().unwrap());
            // Every key of the packets of its regions is found there.
            let truth = keys_by_region(&cut, &want);
            let keys: Vec<Vec<u8>> = truth.keys().cloned().collect();
            let found = piece.postings(&keys);
            for (key, regions) in &truth {
                let here: BTreeSet<u32> = found.get(key).iter().map(|p| p.region + from).collect();
                let want: BTreeSet<u32> = regions.range(from..).copied().collect();
                assert!(here.is_superset(&want), "{key:?} after write {i}");
            }
            from += piece.regions.len() as u32;
            pieces += 1;
        }
        assert!(pieces > 5, "{pieces} pieces");
        // A missed write ends the pieces.
        w.feed(1, &bytes[..10]);
        assert!(w.piece(0).is_none());
    }

    #[test]
    fn notes_that_do_not_read_as_notes_give_no_index() {
        let bytes = sample_file(50, false);
        let mut notes = Vec::new();
        Noter::default().note(&bytes, &mut notes);
        let land = |notes: &[u8]| {
            let mut w = Written::new();
            w.land(0, &bytes, notes);
            w.finish(bytes.len() as u64)
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(land(&notes), Some(Index::build(&path).unwrap()));
        // The first record's first key said to repeat the record before's: there is none.
        let mut first_repeats = notes.clone();
        first_repeats[13] |= REPEAT;
        assert!(land(&first_repeats).is_none());
        // Cut short within the last record's keys.
        assert!(land(&notes[..notes.len() - 1]).is_none());
    }

    #[test]
    fn writes_noted_by_the_writer_and_here_in_one_file_give_no_index() {
        let bytes = sample_file(500, false);
        let mut notes = Vec::new();
        Noter::default().note(&bytes[..8192], &mut notes);
        let mut w = Written::new();
        w.land(0, &bytes[..8192], &notes);
        w.feed(8192, &bytes[8192..]);
        assert!(w.finish(bytes.len() as u64).is_none());
    }

    #[test]
    fn a_missed_or_short_feed_gives_no_index() {
        let bytes = sample_file(500, false);
        let mut w = Written::new();
        w.feed(0, &bytes[..8192]);
        w.feed(12_288, &bytes[12_288..]);
        assert!(w.finish(bytes.len() as u64).is_none(), "a write missed");
        let mut w = Written::new();
        w.feed(0, &bytes[..8192]);
        assert!(w.finish(bytes.len() as u64).is_none(), "the end missed");
        let mut w = Written::new();
        w.feed(0, &[0u8; 100]);
        assert!(w.finish(100).is_none(), "not pcap");
    }
}
