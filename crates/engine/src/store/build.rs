//! Building a capture file's [`Index`] record by record: from the file on disk
//! ([`Index::build`], for repair and a file a crash left unindexed), or from its regions cut
//! by the capture writer as it copied the records into its write buffers ([`Noter`]),
//! handed over in memory with each write as it lands ([`Written`], the keeper's usual way:
//! only the last region of a file, which no record ended, is read back).
//!
//! Why the writer cuts the regions: the keeper walked the records of the landed writes
//! itself, and each record header's place depended on the one before while the bytes had
//! left the CPU's caches since the capture thread copied them (same core, a 2 MiB write
//! earlier): a miss per packet, about 250 ns of keeper per 1514-byte packet. The writer's
//! copy has the bytes in the cache. It then noted each record's time, length and keys for
//! the keeper to replay (some 25 ns a packet on the writer and 40 on the keeper at 64
//! bytes, BENCHMARKS.md, store); now it cuts the regions and hashes the keys into their
//! signatures itself, and notes each region once, when it ends, so that neither thread
//! does anything per packet but this.
//!
//! Why signatures: the keeper runs beside the capture on the same cores. Its first form
//! put each key in a map of key to regions (84% of `capture -r --store`'s CPU), its second
//! numbered keys through a cache and a map and grouped (key, region) pairs at a file's
//! close, which still cost about 100 ns a packet with a flow per few packets (the map's
//! misses, the grouping's scatter). A key now costs a hash and two bits set in the
//! region's signature, which stays in L1 (see `sig`); a key the region already holds, a
//! lookup in a small table (`sig::Signer`).
//!
//! `Cutter::record` is the one place a record is indexed: whatever else the index learns
//! per record goes there.

use super::index::{
    head_crc, index_path, Cover, Index, IndexError, Region, Saver, HEAD_BYTES, PAGES, PAGE_BYTES,
    REGION_BYTES,
};
use super::keys;
use super::pcapfile::{self, Header, FILE_HEADER, RECORD_HEADER};
use super::sig::{self, ArenaBlocks, SigArena, SigBlock, Signer, Spares, MAX_WORDS};

/// A region cut, with its signature (empty if the link type is not dissected) and where
/// its last record ends. As the cutter gives it, the signature is its signer's words, lent
/// until the next region ends (a signature allocated per region, then noted and freed, was
/// a tenth of a region's cost at 1514 bytes); as read from notes, their little-endian bytes,
/// borrowed, or owned while the region waits for its last bytes to land.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cut<S = Vec<u8>> {
    region: Region,
    sig: S,
    end: u64,
}

/// Bytes of a [`Cut`] in a note before its signature's words: the region (offset, packets,
/// first and last time, page starts), where it ends, and the signature's width.
const CUT_HEAD: usize = 8 + 4 + 8 + 8 + 2 * (PAGES - 1) + 8 + 2;

impl<S: AsRef<[u64]>> Cut<S> {
    /// Appends the cut's note to `out`.
    fn note(&self, out: &mut Vec<u8>) {
        let r = &self.region;
        let mut head = [0u8; CUT_HEAD];
        head[..8].copy_from_slice(&r.offset.to_le_bytes());
        head[8..12].copy_from_slice(&r.packets.to_le_bytes());
        head[12..20].copy_from_slice(&r.first.to_le_bytes());
        head[20..28].copy_from_slice(&r.last.to_le_bytes());
        for (i, at) in r.pages.iter().enumerate() {
            head[28 + 2 * i..30 + 2 * i].copy_from_slice(&at.to_le_bytes());
        }
        head[58..66].copy_from_slice(&self.end.to_le_bytes());
        let sig = self.sig.as_ref();
        head[66..68].copy_from_slice(&(sig.len() as u16).to_le_bytes());
        out.extend_from_slice(&head);
        sig::put_words(sig, out);
    }
}

impl Cut<&[u64]> {
    /// The cut, with its signature's words little-endian in bytes of its own.
    fn owned(&self) -> Cut {
        let mut sig = Vec::with_capacity(8 * self.sig.len());
        sig::put_words(self.sig, &mut sig);
        Cut {
            region: self.region,
            sig,
            end: self.end,
        }
    }
}

impl Cut {
    /// The cut, its signature lent.
    fn borrowed(&self) -> Cut<&[u8]> {
        Cut {
            region: self.region,
            sig: &self.sig,
            end: self.end,
        }
    }
}

impl<'a> Cut<&'a [u8]> {
    /// The cut, with a signature of its own.
    fn owned(&self) -> Cut {
        Cut {
            region: self.region,
            sig: self.sig.to_vec(),
            end: self.end,
        }
    }

    /// The cut noted at the start of `b`, and the bytes after it; `None` if they do not
    /// read as a cut.
    fn read(b: &'a [u8]) -> Option<(Cut<&'a [u8]>, &'a [u8])> {
        let (head, rest) = b.split_first_chunk::<CUT_HEAD>()?;
        let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8"));
        let mut pages = [0u16; PAGES - 1];
        for (i, p) in pages.iter_mut().enumerate() {
            *p = u16::from_le_bytes([head[28 + 2 * i], head[29 + 2 * i]]);
        }
        let region = Region {
            offset: u64_at(0),
            packets: u32::from_le_bytes(head[8..12].try_into().expect("4")),
            first: u64_at(12),
            last: u64_at(20),
            pages,
        };
        let width = usize::from(u16::from_le_bytes([head[66], head[67]]));
        if width > MAX_WORDS || !(width == 0 || width.is_power_of_two()) {
            return None;
        }
        let (sig, rest) = rest.split_at_checked(8 * width)?;
        let end = u64_at(58);
        Some((Cut { region, sig, end }, rest))
    }
}

/// Cuts a capture file's records, in file order, into regions, each with the signature of
/// its keys: the one place a record is indexed, on the writer's side ([`Noter`]) as in a
/// file read through ([`Index::build`]).
#[derive(Clone)]
struct Cutter {
    linktype: u32,
    keyed: bool,
    /// The region being cut.
    open: Option<Region>,
    /// Its signature so far.
    signer: Signer,
    /// The keys of the last record in it that the next may repeat (see `keys::keys_after`).
    last: u128,
    /// Where the last record ends.
    end: u64,
}

impl Cutter {
    fn new(linktype: u32) -> Self {
        Cutter {
            linktype,
            keyed: keys::dissects(linktype),
            open: None,
            signer: Signer::default(),
            last: 0,
            end: FILE_HEADER,
        }
    }

    /// Adds the record at byte `offset` (its record header's) with time `ts_ns` and
    /// captured bytes `data`; gives `ended` the region before, if it starts a new one.
    /// Inlined into the walks of records, the region's end apart (a call per record, and
    /// a region handed back by value per record, cost as much as the bookkeeping).
    #[inline]
    fn record(
        &mut self,
        offset: u64,
        ts_ns: u64,
        data: &[u8],
        ended: &mut impl FnMut(Cut<&[u64]>),
    ) {
        let region = match &mut self.open {
            Some(r) if offset - r.offset < REGION_BYTES => r,
            _ => self.start(offset, ts_ns, ended),
        };
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
        self.end = offset + (RECORD_HEADER + data.len()) as u64;
        if self.keyed {
            let signer = &mut self.signer;
            keys::keys_after(self.linktype, data, &mut self.last, &mut |kind, value| {
                signer.insert(kind, value)
            });
        }
    }

    /// Ends the region being cut, giving it to `ended`, and opens one at `offset`.
    #[inline(never)]
    fn start(
        &mut self,
        offset: u64,
        ts_ns: u64,
        ended: &mut impl FnMut(Cut<&[u64]>),
    ) -> &mut Region {
        if let Some(cut) = self.close() {
            ended(cut);
        }
        self.open.insert(Region {
            offset,
            packets: 0,
            first: ts_ns,
            last: ts_ns,
            pages: [0; PAGES - 1],
        })
    }

    /// Ends the region being cut where the last record ends (at the file's end).
    fn close(&mut self) -> Option<Cut<&[u64]>> {
        let region = self.open.take()?;
        self.last = 0;
        let sig = if self.keyed { self.signer.take() } else { &[] };
        Some(Cut {
            region,
            sig,
            end: self.end,
        })
    }
}

/// An index being built from a capture file's regions, in file order: cut here from its
/// records ([`Builder::record`]), or cut by the writer and noted ([`Written`]).
pub struct Builder {
    cutter: Cutter,
    /// The regions cut, and their signatures from region `sigs_from` on.
    regions: Vec<Region>,
    sigs: SigArena,
    sigs_from: u32,
    packets: u64,
    /// Where the last region cut ends: where the one being cut starts.
    cut_end: u64,
}

impl Builder {
    /// A builder for a capture file of `linktype`.
    pub fn new(linktype: u32) -> Self {
        Builder::with_spares(linktype, Spares::default())
    }

    /// [`Builder::new`], its signatures kept in chunks taken from `spares`.
    fn with_spares(linktype: u32, spares: Spares) -> Self {
        Builder {
            cutter: Cutter::new(linktype),
            regions: Vec::new(),
            sigs: SigArena::with_spares(spares),
            sigs_from: 0,
            packets: 0,
            cut_end: FILE_HEADER,
        }
    }

    /// Indexes the record at byte `offset` (its record header's) with time `ts_ns` and
    /// captured bytes `data`.
    pub fn record(&mut self, offset: u64, ts_ns: u64, data: &[u8]) {
        let mut ended = None;
        self.cutter
            .record(offset, ts_ns, data, &mut |cut| ended = Some(cut.owned()));
        if let Some(cut) = ended {
            let pushed = self.push(&cut.borrowed());
            debug_assert!(pushed, "a region cut here follows the last");
        }
    }

    /// Adds the region `cut`; false if it does not start where the last one ended (or ends
    /// before it starts, or its signature is not the link type's).
    #[must_use]
    fn push(&mut self, cut: &Cut<&[u8]>) -> bool {
        let sound = cut.region.offset == self.cut_end
            && cut.end > cut.region.offset
            && cut.sig.is_empty() != self.cutter.keyed;
        if sound {
            self.packets += u64::from(cut.region.packets);
            self.cut_end = cut.end;
            self.regions.push(cut.region);
            if self.cutter.keyed {
                self.sigs.push_le(cut.sig);
            }
        }
        sound
    }

    /// Where the last record ends.
    fn end(&self) -> u64 {
        if self.cutter.open.is_some() {
            self.cutter.end
        } else {
            self.cut_end
        }
    }

    /// The signature blocks of regions `from` to before `below`, numbered from `from`;
    /// none if not keyed.
    fn signatures(&self, from: u32, below: u32) -> Vec<SigBlock> {
        if !self.cutter.keyed {
            return Vec::new();
        }
        let at = |r: u32| (r - self.sigs_from) as usize;
        ArenaBlocks::new(&self.sigs, at(from), at(below)).build()
    }

    /// The index of a capture file of `file_len` bytes (a record cut short at its end is
    /// not indexed) whose first 4 KiB have the CRC-32 `head_crc`.
    pub fn finish(self, file_len: u64, head_crc: u32) -> Index {
        self.finish_built(file_len, head_crc).into_index()
    }

    /// [`Builder::finish`], the signature blocks left to be made as the index is saved.
    fn finish_built(mut self, file_len: u64, head_crc: u32) -> Built {
        if let Some(cut) = self.cutter.close().map(|c| c.owned()) {
            let pushed = self.push(&cut.borrowed());
            debug_assert!(pushed, "a region cut here follows the last");
        }
        let index = Index {
            signatures: Vec::new(),
            file_len: file_len.max(self.cut_end),
            head_crc,
            linktype: self.cutter.linktype,
            packets: self.packets,
            first: self.regions.iter().map(|r| r.first).min().unwrap_or(0),
            last: self.regions.iter().map(|r| r.last).max().unwrap_or(0),
            keyed: self.cutter.keyed,
            regions: self.regions,
        };
        debug_assert_eq!(self.sigs_from, 0, "a builder finished has every signature");
        Built {
            index,
            sigs: self.sigs,
        }
    }

    /// Regions whole so far: those cut (the one being cut may grow).
    pub fn whole(&self) -> u32 {
        self.regions.len() as u32
    }

    /// A piece of the file being written: the index of its whole regions from region
    /// `from` on, numbered from 0 (each keeps its offset in the file), covering the bytes
    /// from where region `from` starts to where the last whole region ends (its "file
    /// length", see `prefix`). From region 0 it is what [`Builder::finish`] gives for the
    /// file cut there. `None` while no region from `from` on is whole.
    pub fn piece(&self, from: u32, head_crc: u32) -> Option<Index> {
        let whole = self.whole();
        if whole <= from {
            return None;
        }
        let regions = &self.regions[from as usize..];
        Some(Index {
            file_len: self.cut_end,
            head_crc,
            linktype: self.cutter.linktype,
            packets: regions.iter().map(|r| u64::from(r.packets)).sum(),
            first: regions.iter().map(|r| r.first).min().unwrap_or(0),
            last: regions.iter().map(|r| r.last).max().unwrap_or(0),
            keyed: self.cutter.keyed,
            regions: regions.to_vec(),
            signatures: self.signatures(from, whole),
        })
    }

    /// A copy of the builder for [`Builder::piece`]`(from, ..)` elsewhere: without the
    /// signatures of the regions before `from`, which the piece does not read (a copy of
    /// all, and a prefix index of everything fed, each second, grew with the file).
    fn copy_from(&self, from: u32) -> Builder {
        let skip = ((from.max(self.sigs_from) - self.sigs_from) as usize).min(self.sigs.len());
        Builder {
            cutter: Cutter::new(self.cutter.linktype),
            regions: self.regions.clone(),
            sigs: self.sigs.copy_from(skip),
            sigs_from: self.sigs_from + skip as u32,
            packets: self.packets,
            cut_end: self.cut_end,
        }
    }
}

/// A file's index as its builder finished it: without its signature blocks, which are made
/// from the signatures as it is saved (see `sig::ArenaBlocks`).
pub struct Built {
    index: Index,
    sigs: SigArena,
}

impl Built {
    /// Writes the index beside `capture` (see [`Index::save`]) through `saver`; returns its
    /// bytes.
    pub fn save(&self, capture: &std::path::Path, saver: &mut Saver) -> std::io::Result<u64> {
        let blocks = ArenaBlocks::new(&self.sigs, 0, self.sigs.len());
        self.index
            .save_with(&index_path(capture), Cover::Whole, &blocks, saver)
    }

    /// The index, its signature blocks made.
    pub fn into_index(self) -> Index {
        let signatures = ArenaBlocks::new(&self.sigs, 0, self.sigs.len()).build();
        Index {
            signatures,
            ..self.index
        }
    }
}

/// Cuts a pcap file's records into regions from its bytes as the writer copies them into
/// its write buffers (`poolcap_format::Notes`), in order, in runs that end anywhere, and
/// notes each region as it ends, with its signature (`Cut::note`): the keeper only adds
/// the regions up ([`Written`]), and reads the last one back from the file at its close.
/// The file header is not noted (the keeper has it from the first write).
#[derive(Default)]
pub struct Noter {
    /// The file header, once its bytes are in, and the regions cut so far.
    cutter: Option<(Header, Cutter)>,
    /// The header's bytes, or a record not yet copied whole.
    partial: Vec<u8>,
    /// The bytes are not a pcap file: nothing is noted.
    broken: bool,
    /// Where the next record starts.
    at: u64,
}

impl Noter {
    /// Notes the regions ended by the records of the file's next bytes `bytes`, appending
    /// to `out`.
    pub fn note(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut b = bytes;
        let (header, cutter) = match &mut self.cutter {
            Some((h, c)) => (*h, c),
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
                self.at = FILE_HEADER;
                let (h, c) = self.cutter.insert((h, Cutter::new(h.linktype)));
                (*h, c)
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
            cutter.record(self.at, ts, &self.partial[RECORD_HEADER..], &mut |cut| {
                cut.note(out)
            });
            self.at += self.partial.len() as u64;
            self.partial.clear();
        }
        let start = self.at;
        let whole = header.records(b, |at, ts, data| {
            cutter.record(start + at as u64, ts, data, &mut |cut| cut.note(out));
        });
        self.at += whole as u64;
        self.partial.extend_from_slice(&b[whole..]);
    }
}

/// A capture file's index built from the writes that landed, in order, each with its
/// offset in the file and the notes of the regions its records ended ([`Noter`]), from
/// memory. The last region, which no record ended, is read back from the file at its close.
pub struct Written {
    /// Bytes fed so far (where the next write must start).
    fed: u64,
    /// The file's first bytes, for its header and the index's check of them.
    head: Vec<u8>,
    /// The builder, once the file header is fed.
    built: Option<Builder>,
    /// Regions noted whose bytes are not all fed yet (a run of records copied across two
    /// writes is noted with the first).
    pending: std::collections::VecDeque<Cut>,
    /// A write was missed (or the header is not pcap): the file is indexed from disk.
    broken: bool,
    /// Where the builder takes the chunks of its signatures from.
    spares: Spares,
}

impl Default for Written {
    fn default() -> Self {
        Self::new()
    }
}

impl Written {
    /// Nothing fed yet.
    pub fn new() -> Self {
        Written::with_spares(Spares::default())
    }

    /// Nothing fed yet; the signatures are kept in chunks taken from `spares` (the files
    /// before this one gave theirs back).
    pub fn with_spares(spares: Spares) -> Self {
        Written {
            fed: 0,
            head: Vec::with_capacity(HEAD_BYTES),
            built: None,
            pending: std::collections::VecDeque::new(),
            broken: false,
            spares,
        }
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Feeds the write of `len` bytes at offset `at` of the file, its first bytes `head` (at
    /// least those within the file's first [`HEAD_BYTES`]), with the notes of the regions
    /// its records ended (`poolcap_format::Landed::notes`): the next write, or the builder
    /// gives up (a write was missed).
    pub fn land(&mut self, at: u64, len: u64, head: &[u8], mut notes: &[u8]) {
        if self.broken || at != self.fed {
            self.broken = true;
            return;
        }
        self.fed += len;
        if self.head.len() < HEAD_BYTES {
            let n = head.len().min(HEAD_BYTES - self.head.len());
            self.head.extend_from_slice(&head[..n]);
        }
        if self.built.is_none() {
            let Some(raw) = self.head.first_chunk::<{ FILE_HEADER as usize }>() else {
                // Regions noted before the file header landed: not this file's writer.
                self.broken = !notes.is_empty();
                return;
            };
            let Some(header) = Header::parse(*raw) else {
                self.broken = true;
                return;
            };
            self.built = Some(Builder::with_spares(header.linktype, self.spares.clone()));
        }
        let Some(builder) = &mut self.built else {
            return;
        };
        // Regions noted before whose bytes have all landed now, then this write's, in order:
        // one whose bytes have not waits, owned, and so do those after it.
        while let Some(cut) = self.pending.pop_front_if(|c| c.end <= self.fed) {
            if !builder.push(&cut.borrowed()) {
                self.broken = true;
                return;
            }
        }
        while !notes.is_empty() {
            // Not this file's notes: indexed from the file on disk.
            let Some((cut, rest)) = Cut::read(notes) else {
                self.broken = true;
                return;
            };
            if self.pending.is_empty() && cut.end <= self.fed {
                if !builder.push(&cut) {
                    self.broken = true;
                    return;
                }
            } else {
                self.pending.push_back(cut.owned());
            }
            notes = rest;
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

    /// The index of the file, if every byte of its `file_len` was fed and its records end
    /// there; else `None` (it is then built from the file on disk). `tail(from)` reads the
    /// file's bytes from `from` to its end: those of its last region, which no record
    /// ended (a region's bytes at most, once per file).
    pub fn finish(
        self,
        file_len: u64,
        tail: impl FnOnce(u64) -> std::io::Result<Vec<u8>>,
    ) -> Option<Built> {
        if self.broken || self.fed != file_len || !self.pending.is_empty() {
            return None;
        }
        let mut builder = self.built?;
        let from = builder.cut_end;
        let bytes = tail(from).ok()?;
        let header = Header::parse(*self.head.first_chunk::<{ FILE_HEADER as usize }>()?)?;
        header.records(&bytes, |at, ts, data| {
            builder.record(from + at as u64, ts, data)
        });
        if builder.end() != file_len {
            return None;
        }
        Some(builder.finish_built(file_len, crc32fast::hash(&self.head)))
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
        // One saver for every save, as the closer keeps it: what one save left in its
        // buffers is never in the next's bytes.
        let mut saver = Saver::default();
        for (n, cut) in [(3000, false), (0, false), (1, false), (3000, true)] {
            let bytes = sample_file(n, cut);
            let path = dir.path().join(format!("f{n}{cut}"));
            std::fs::write(&path, &bytes).unwrap();
            let from_disk = Index::build(&path).unwrap();
            assert_eq!(from_disk.packets, (n - usize::from(cut)) as u64);
            assert!(n < 3000 || from_disk.regions.len() > 10 && from_disk.signatures.len() == 1);
            // Fed in writes of many sizes, records cut anywhere (within the header too).
            for size in [1, 7, 4096, 100_000] {
                let mut w = Fed::default();
                for (i, chunk) in bytes.chunks(size).enumerate() {
                    w.feed((i * size) as u64, chunk);
                }
                let fed = w.finish(bytes.len() as u64, tail(&bytes));
                // A writer's file ends with a whole record; one that does not is read back.
                assert_eq!(
                    fed.is_none(),
                    cut,
                    "{n} packets, cut {cut}, writes of {size}"
                );
                if let Some(fed) = fed {
                    // Saved straight from the signatures: the bytes of the index built.
                    let beside = dir.path().join(format!("saved{n}-{size}"));
                    fed.save(&beside, &mut saver).unwrap();
                    let saved = std::fs::read(index_path(&beside)).unwrap();
                    assert!(saved == from_disk.encode(), "{n} packets, writes of {size}");
                    assert_eq!(fed.into_index(), from_disk, "{n} packets, writes of {size}");
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
                    w.land((i * size) as u64, chunk.len() as u64, chunk, &notes[i]);
                }
                if let Some(fed) = w.finish(bytes.len() as u64, tail(&bytes)) {
                    assert_eq!(
                        fed.into_index(),
                        from_disk,
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
        let mut w = Fed::default();
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
        let bytes = sample_file(500, false);
        let mut notes = Vec::new();
        Noter::default().note(&bytes, &mut notes);
        let land = |notes: &[u8]| {
            let mut w = Written::new();
            w.land(0, bytes.len() as u64, &bytes, notes);
            w.finish(bytes.len() as u64, tail(&bytes))
                .map(Built::into_index)
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, &bytes).unwrap();
        let whole = Index::build(&path).unwrap();
        assert!(whole.regions.len() > 3);
        assert_eq!(land(&notes), Some(whole));
        // The first region said to start a byte later than the file's first record.
        let mut moved = notes.clone();
        moved[0] ^= 1;
        assert!(land(&moved).is_none());
        // A signature's width that is not a power of two.
        let mut odd = notes.clone();
        odd[CUT_HEAD - 2..CUT_HEAD].copy_from_slice(&3u16.to_le_bytes());
        assert!(land(&odd).is_none());
        // Cut short within the last region's signature.
        assert!(land(&notes[..notes.len() - 1]).is_none());
        // The last region not read back.
        let mut w = Written::new();
        w.land(0, bytes.len() as u64, &bytes, &notes);
        let failed = w.finish(
            bytes.len() as u64,
            |_| Err(std::io::ErrorKind::Other.into()),
        );
        assert!(failed.is_none());
    }

    /// A file's [`Written`] fed its bytes as writes that were not noted: noted here first,
    /// as the writer notes what it copies in, then landed.
    #[derive(Default)]
    pub(crate) struct Fed {
        written: Written,
        noter: Noter,
    }

    impl Fed {
        /// Notes and lands the write of `bytes` at `at`.
        pub(crate) fn feed(&mut self, at: u64, bytes: &[u8]) {
            let mut notes = Vec::new();
            self.noter.note(bytes, &mut notes);
            self.written.land(at, bytes.len() as u64, bytes, &notes);
        }

        /// [`Written::piece`].
        pub(crate) fn piece(&self, from: u32) -> Option<Index> {
            self.written.piece(from)
        }

        /// [`Written::finish`].
        pub(crate) fn finish(
            self,
            file_len: u64,
            tail: impl FnOnce(u64) -> std::io::Result<Vec<u8>>,
        ) -> Option<Built> {
            self.written.finish(file_len, tail)
        }
    }

    /// Reads the bytes of `file` from an offset on, as the keeper reads a file's last region.
    fn tail(file: &[u8]) -> impl FnOnce(u64) -> std::io::Result<Vec<u8>> + '_ {
        move |from| Ok(file[from as usize..].to_vec())
    }

    #[test]
    fn a_missed_or_short_feed_gives_no_index() {
        let bytes = sample_file(500, false);
        let mut w = Fed::default();
        w.feed(0, &bytes[..8192]);
        w.feed(12_288, &bytes[12_288..]);
        assert!(
            w.finish(bytes.len() as u64, tail(&bytes)).is_none(),
            "a write missed"
        );
        let mut w = Fed::default();
        w.feed(0, &bytes[..8192]);
        assert!(
            w.finish(bytes.len() as u64, tail(&bytes)).is_none(),
            "the end missed"
        );
        let mut w = Fed::default();
        w.feed(0, &[0u8; 100]);
        assert!(w.finish(100, tail(&[0u8; 100])).is_none(), "not pcap");
    }
}
