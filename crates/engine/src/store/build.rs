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
//! Why it is shaped so: the keeper runs beside the capture on the same cores, and a
//! profile of `capture -r --store` (1M imix packets, 65,536 flows) put 84% of the
//! process's CPU in the keeper, most of it in a `HashMap<Vec<u8>, Vec<u32>>` fed one
//! allocated key per key and packet (SipHash, `memcmp`, `malloc`), the rest in reading
//! the file back. Here a key is one `u64` (kind byte and value; an IPv6 address by its
//! number in this file), found through a small direct-mapped cache in front of the key
//! numbers (protocols, ports and EtherTypes are numbered by their value, addresses by a
//! map): a packet's keys mostly repeat within a region (the EtherType, the protocol, a busy
//! server's address and port), so most cost one probe of the cache. A key's first packet
//! in a region appends one (key number, region, pages) pair, to which its next packets
//! there add their pages; the pairs are grouped by key once, when the file is closed. No
//! per-key state is touched on a cache hit or per pair: with many flows the map's memory
//! misses the CPU's caches, and the keeper's time went to those misses (perf annotate: map
//! probe and a per-key last-region load), so a key evicted from the cache and seen again in
//! a region posts a repeat, dropped at the grouping.
//!
//! [`Builder::record`] is the one place a record is indexed: whatever else the index
//! learns per record goes there.

use std::collections::HashMap;

use super::index::{
    head_crc, Index, IndexError, Posting, Postings, Region, PAGES, PAGE_BYTES, REGION_BYTES,
};
use super::keys;
use super::pcapfile::{self, Header, FILE_HEADER, RECORD_HEADER};

/// A key as one number: its kind byte on top, then its value's bytes (big-endian, up to
/// 4), or for an IPv6 address its number among this file's IPv6 addresses.
type Key = u64;

/// Slots of the key cache (a power of two): 64 KiB, which stays in the core's L2.
const CACHE_SLOTS: usize = 4096;

/// A cache slot: a key, its number, the last region it was seen in through the slot, the
/// pages of that region posted for it through the slot, and where in [`Keys::pairs`] the
/// pair that holds those pages is.
#[derive(Clone, Copy)]
struct Slot {
    key: Key,
    id: u32,
    region: u32,
    pair: u32,
    pages: u16,
}

/// No key has kind 0, so a slot with key 0 is empty.
const EMPTY: Slot = Slot {
    key: 0,
    id: 0,
    region: u32::MAX,
    pair: 0,
    pages: 0,
};

/// A key's packets in a region: (key number, region, the bits of the pages they start in).
type Pair = (u32, u32, u16);

/// The kinds whose values fit 16 bits, in the order of their kind bytes, each with where
/// its values start among the narrow numbers (see [`Keys::seen`]) and how many there are.
const NARROW_KINDS: [(u8, usize, usize); 3] = [
    (keys::PROTO, 0, 256),
    (keys::PORT, 256, 65_536),
    (keys::ETHERTYPE, 256 + 65_536, 65_536),
];

/// Narrow numbers: keys of the kinds whose values fit 16 bits, numbered by value.
const NARROW: usize = 256 + 2 * 65_536;

/// Set on the number of a key numbered by value (a narrow number, see [`Keys::seen`]); the
/// other keys (addresses) are numbered from 0 as they come.
const BY_VALUE: u32 = 1 << 31;

/// The cache slot of a key.
fn slot_of(key: Key) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CACHE_SLOTS.trailing_zeros())) as usize
}

/// The narrow number of a key of a kind whose values fit 16 bits.
fn narrow_slot(key: Key) -> Option<usize> {
    let kind = (key >> 56) as u8;
    let (_, at, values) = NARROW_KINDS.into_iter().find(|k| k.0 == kind)?;
    Some(at + (key as usize & (values - 1)))
}

/// Each key's regions and pages, gathered as [`Pair`]s.
struct Keys {
    /// Which protocols, ports and EtherTypes were seen, a bit per narrow number: their
    /// keys are numbered by value ([`BY_VALUE`]), so a port missing the key cache costs a
    /// bit set in 16 KiB, where looking its number up in a table by value (256 KiB for the
    /// ports) missed the CPU's caches on most packets with a port per flow (perf annotate,
    /// 1514-byte frames over 100k flows: 60% of the keeper's posting). Before that table a
    /// map probe missed twice, the bucket and then its key.
    seen: Box<[u64]>,
    /// Numbers of the other keys (addresses).
    ids: HashMap<Key, u32, foldhash::fast::FixedState>,
    /// Addresses numbered so far.
    count: u32,
    v6: HashMap<[u8; 16], u32, foldhash::fast::FixedState>,
    v6_addrs: Vec<[u8; 16]>,
    pairs: Vec<Pair>,
    cache: Box<[Slot]>,
}

impl Keys {
    fn new() -> Self {
        Keys {
            seen: vec![0; NARROW / 64 + 1].into_boxed_slice(),
            ids: HashMap::default(),
            count: 0,
            v6: HashMap::default(),
            v6_addrs: Vec::new(),
            pairs: Vec::new(),
            cache: vec![EMPTY; CACHE_SLOTS].into_boxed_slice(),
        }
    }

    fn compact(&mut self, kind: u8, value: &[u8]) -> Key {
        let v = if kind == keys::V6 {
            let mut a = [0u8; 16];
            a.copy_from_slice(value);
            let next = self.v6_addrs.len() as u32;
            let n = *self.v6.entry(a).or_insert(next);
            if n == next {
                self.v6_addrs.push(a);
            }
            u64::from(n)
        } else {
            value.iter().fold(0u64, |v, &b| (v << 8) | u64::from(b))
        };
        (u64::from(kind) << 56) | v
    }

    /// Notes that page `page` of `region` holds the start of a packet with the key
    /// (`kind`, `value`).
    fn post(&mut self, kind: u8, value: &[u8], region: u32, page: usize) {
        let key = self.compact(kind, value);
        let at = slot_of(key);
        let bit = 1u16 << page;
        let slot = &mut self.cache[at];
        if slot.key == key && slot.region == region && slot.pages & bit != 0 {
            return;
        }
        if slot.key != key {
            let id = match narrow_slot(key) {
                Some(n) => {
                    self.seen[n / 64] |= 1 << (n % 64);
                    BY_VALUE | n as u32
                }
                None => {
                    let next = self.count;
                    let id = *self.ids.entry(key).or_insert(next);
                    if id == next {
                        self.count += 1;
                    }
                    id
                }
            };
            // The slot's pages were the other key's.
            (slot.key, slot.id, slot.region, slot.pages) = (key, id, region, 0);
        } else if slot.region == region {
            // Another page of the region the slot's pair is of: that pair gets its bit, where
            // a pair per page was most of the pairs with large frames (a record, or three,
            // per page) and most of the grouping's work at a file's close.
            slot.pages |= bit;
            self.pairs[slot.pair as usize].2 |= bit;
            return;
        } else {
            (slot.region, slot.pages) = (region, 0);
        }
        slot.pages |= bit;
        // A key that left the cache and came back within a region posts it again: the
        // pairs of one region are joined when they are grouped.
        slot.pair = u32::try_from(self.pairs.len()).expect("under 4G pairs in a file");
        self.pairs.push((slot.id, region, bit));
    }

    /// The bytes of the key `ordered` gave (`kind`, `value`) as the index holds them: the
    /// kind byte and the value's last bytes (as many as the kind's values have), and how
    /// many there are.
    fn bytes(kind: u8, value: u128) -> ([u8; 17], usize) {
        let width = keys::width(kind);
        let mut b = [0u8; 17];
        b[0] = kind;
        b[1..=width].copy_from_slice(&value.to_be_bytes()[16 - width..]);
        (b, 1 + width)
    }

    /// The keys in order, each with its regions from region `from` to before region
    /// `below` in order, numbered from `from` (keys with none there left out).
    fn postings(&self, from: u32, below: u32) -> Postings {
        // Pairs are posted in region order: those of the regions asked for are a run.
        let end = self.pairs.partition_point(|p| p.1 < below);
        let pairs = &self.pairs[self.pairs[..end].partition_point(|p| p.1 < from)..end];
        // The keys in the order of their bytes (kind byte first), and each key number's
        // rank in it: protocols, ports and EtherTypes read in order from the bits of those
        // seen, the addresses (kind bytes above theirs) sorted after them. Sorting every key
        // was a third of a file's close with a port per flow (perf, 1514-byte frames).
        let mut order: Vec<(u8, u128, u32)> = Vec::with_capacity(self.count as usize);
        for (kind, at, values) in NARROW_KINDS {
            order.extend(
                (at..at + values)
                    .filter(|&n| self.seen[n / 64] & (1 << (n % 64)) != 0)
                    .map(|n| (kind, (n - at) as u128, BY_VALUE | n as u32)),
            );
        }
        let narrow = order.len();
        order.extend(self.ids.iter().map(|(&key, &id)| {
            let (kind, value) = self.ordered(key);
            (kind, value, id)
        }));
        order[narrow..].sort_unstable();
        // Ranks of the narrow numbers, then of the addresses' numbers.
        let mut ranks = vec![0u32; NARROW + self.count as usize];
        let slot = |id: u32| match id & BY_VALUE {
            0 => NARROW + id as usize,
            _ => (id & !BY_VALUE) as usize,
        };
        for (r, &(_, _, id)) in order.iter().enumerate() {
            ranks[slot(id)] = r as u32;
        }
        let rank = |id: u32| ranks[slot(id)] as usize;
        // Group the pairs by rank (each key's regions stay in the order posted, ascending),
        // so that the keys are then read in order: read by key number, in the keys' order,
        // each key's group was a miss of the CPU's caches (perf annotate: most of the time
        // at a file's close, with a key per flow).
        let mut starts = vec![0u32; order.len() + 1];
        for &(id, _, _) in pairs {
            starts[rank(id) + 1] += 1;
        }
        for n in 1..starts.len() {
            starts[n] += starts[n - 1];
        }
        let mut grouped = vec![(0u32, 0u16); pairs.len()];
        let mut at = starts.clone();
        for &(id, region, bit) in pairs {
            let r = rank(id);
            grouped[at[r] as usize] = (region - from, bit);
            at[r] += 1;
        }
        let mut p = Postings::default();
        let mut list: Vec<Posting> = Vec::new();
        for (r, &(kind, value, _)) in order.iter().enumerate() {
            let (start, end) = (starts[r] as usize, starts[r + 1] as usize);
            if start == end {
                continue;
            }
            for &(region, bit) in &grouped[start..end] {
                match list.last_mut() {
                    Some(last) if last.region == region => last.pages |= bit,
                    _ => list.push(Posting { region, pages: bit }),
                }
            }
            let (bytes, len) = Self::bytes(kind, value);
            p.push(&bytes[..len], list.drain(..));
        }
        p
    }

    /// A copy without the pairs before the `start`th (those of the regions before the
    /// piece a copy is made for, see [`Builder::copy_from`]), nor the cache.
    fn copy_from(&self, start: usize) -> Keys {
        Keys {
            seen: self.seen.clone(),
            ids: self.ids.clone(),
            count: self.count,
            v6: self.v6.clone(),
            v6_addrs: self.v6_addrs.clone(),
            pairs: self.pairs[start..].to_vec(),
            cache: Box::default(),
        }
    }

    /// The key as numbers that sort as its bytes do (kind byte, then the value, whose
    /// bytes are of one length per kind, big-endian): sorted without an allocation or a
    /// `memcmp` per comparison, where sorting the keys' bytes was a third of the work at a
    /// file's close (perf, 1514-byte frames over 65,536 flows).
    fn ordered(&self, key: Key) -> (u8, u128) {
        let kind = (key >> 56) as u8;
        let value = match kind {
            keys::V6 => u128::from_be_bytes(self.v6_addrs[(key & 0xffff_ffff) as usize]),
            _ => u128::from(key & 0x00ff_ffff_ffff_ffff),
        };
        (kind, value)
    }
}

/// An index being built from a capture file's records, in file order.
pub struct Builder {
    linktype: u32,
    keyed: bool,
    regions: Vec<Region>,
    packets: u64,
    /// Where the last record ends.
    end: u64,
    keys: Keys,
    /// The region and page the last noted record starts in, and its keys (see
    /// [`Builder::noted`]).
    last_placed: Option<(u32, usize)>,
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
            keys: Keys::new(),
            last_placed: None,
            last: Last::default(),
        }
    }

    /// Indexes the record at byte `offset` (its record header's) with time `ts_ns` and
    /// captured bytes `data`.
    pub fn record(&mut self, offset: u64, ts_ns: u64, data: &[u8]) {
        let (number, page) = self.place(offset, ts_ns, data.len());
        if self.keyed {
            let k = &mut self.keys;
            keys::keys(self.linktype, data, &mut |kind, value| {
                k.post(kind, value, number, page);
            });
        }
    }

    /// Indexes the records noted by a [`Noter`] in `notes` (each its time, captured length
    /// and keys, as [`note_record`] makes them), as [`Builder::record`] indexes them from
    /// their bytes; false if the notes do not read as notes.
    ///
    /// A repeated key is posted only when its record starts in another page (or region)
    /// than the record before: in the same page, the record before posted it there already
    /// (or skipped it for the same reason), and a post of a key in a page it was posted in
    /// adds nothing to the index.
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
            let placed = self.place(self.end, ts, caplen as usize);
            let same_page = self.last_placed == Some(placed);
            self.last_placed = Some(placed);
            let (number, page) = placed;
            let mut n = 0;
            while let [kind, rest @ ..] = keyed {
                if kind & REPEAT != 0 {
                    let Some((bytes, from)) = self.last.get(n, kind & !REPEAT) else {
                        return false;
                    };
                    if !same_page {
                        self.keys.post(kind & !REPEAT, &bytes[from..], number, page);
                    }
                    keyed = rest;
                } else {
                    let Some((value, more)) = rest.split_at_checked(keys::width(*kind)) else {
                        return false;
                    };
                    self.keys.post(*kind, value, number, page);
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
    /// its region: returns the region's number and the page of the region it starts in.
    fn place(&mut self, offset: u64, ts_ns: u64, caplen: usize) -> (u32, usize) {
        let new_region = self
            .regions
            .last()
            .is_none_or(|last| offset - last.offset >= REGION_BYTES);
        if new_region {
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
        (number, page)
    }

    /// The index of a capture file of `file_len` bytes (a record cut short at its end is
    /// not indexed) whose first 4 KiB have the CRC-32 `head_crc`.
    pub fn finish(self, file_len: u64, head_crc: u32) -> Index {
        Index {
            file_len: file_len.max(self.end),
            head_crc,
            linktype: self.linktype,
            packets: self.packets,
            first: self.regions.iter().map(|r| r.first).min().unwrap_or(0),
            last: self.regions.iter().map(|r| r.last).max().unwrap_or(0),
            keyed: self.keyed,
            postings: self.keys.postings(0, u32::MAX),
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
            postings: self.keys.postings(from, whole),
        })
    }

    /// A copy of the builder for [`Builder::piece`]`(from, ..)` elsewhere: without the
    /// pairs of the regions before `from`, which the piece does not read (a copy of all,
    /// and a prefix index of everything fed, each second, grew with the file).
    fn copy_from(&self, from: u32) -> Builder {
        Builder {
            linktype: self.linktype,
            keyed: self.keyed,
            regions: self.regions.clone(),
            packets: self.packets,
            end: self.end,
            keys: self
                .keys
                .copy_from(self.keys.pairs.partition_point(|p| p.1 < from)),
            last_placed: self.last_placed,
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

    /// Two IPv4 addresses whose keys share a cache slot.
    fn colliding_addresses() -> ([u8; 4], [u8; 4]) {
        let mut keys = Keys::new();
        let mut seen: HashMap<usize, [u8; 4]> = HashMap::new();
        for n in 1..=u16::MAX {
            let a = [10, 0, (n >> 8) as u8, n as u8];
            let key = keys.compact(keys::V4, &a);
            let at = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                >> (64 - CACHE_SLOTS.trailing_zeros())) as usize;
            if let Some(&b) = seen.get(&at) {
                return (b, a);
            }
            seen.insert(at, a);
        }
        unreachable!("65535 addresses in 4096 slots collide")
    }

    #[test]
    fn a_key_taking_over_a_cache_slot_gets_every_page_it_starts_in() {
        let (a, b) = colliding_addresses();
        let mut keys = Keys::new();
        // In one region: a in page 1, then b (same slot) in pages 2 and 1.
        keys.post(keys::V4, &a, 0, 1);
        keys.post(keys::V4, &b, 0, 2);
        keys.post(keys::V4, &b, 0, 1);
        // A port (kept by value, not in the cache) the same way, and in the next region.
        for (region, page) in [(0, 2), (0, 1), (0, 2), (1, 0)] {
            keys.post(keys::PORT, &[0, 53], region, page);
        }
        let p = keys.postings(0, u32::MAX);
        let pages = |kind: u8, value: &[u8]| {
            p.get(&[&[kind][..], value].concat())
                .iter()
                .map(|x| (x.region, x.pages))
                .collect::<Vec<_>>()
        };
        assert_eq!(pages(keys::V4, &a), vec![(0, 0b10)]);
        assert_eq!(
            pages(keys::V4, &b),
            vec![(0, 0b110)],
            "b's page 1 is in its mask"
        );
        assert_eq!(pages(keys::PORT, &[0, 53]), vec![(0, 0b110), (1, 0b1)]);
    }

    #[test]
    fn keys_are_ordered_as_their_bytes() {
        let mut keys = Keys::new();
        let mut all = Vec::new();
        for (kind, value) in [
            (keys::PORT, &[0, 53][..]),
            (keys::PORT, &[1, 0][..]),
            (keys::PORT, &[0, 255][..]),
            (keys::PROTO, &[17][..]),
            (keys::PROTO, &[6][..]),
            (keys::ETHERTYPE, &[0x86, 0xdd][..]),
            (keys::V4, &[10, 0, 0, 2][..]),
            (keys::V4, &[9, 255, 255, 255][..]),
            (keys::V6, &[2u8; 16][..]),
            (keys::V6, &[1u8; 16][..]),
            (keys::V6, &[[1u8; 15].as_slice(), &[3]].concat()[..]),
        ] {
            let key = keys.compact(kind, value);
            let (k, v) = keys.ordered(key);
            let (bytes, len) = Keys::bytes(k, v);
            assert_eq!(bytes[..len], [&[kind], value].concat(), "{kind} {value:?}");
            all.push(((k, v), bytes[..len].to_vec()));
        }
        let mut by_number = all.clone();
        by_number.sort_by_key(|(n, _)| *n);
        all.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(by_number, all);
        // Posted in another order, the index holds them in the order of their bytes, each
        // with its region.
        let mut keys = Keys::new();
        for (region, (_, bytes)) in all.iter().enumerate().rev() {
            keys.post(bytes[0], &bytes[1..], region as u32, 0);
        }
        let p = keys.postings(0, u32::MAX);
        let held: Vec<(Vec<u8>, u32)> = p
            .between(&[0], &[0xff; crate::store::index::KEY])
            .map(|(k, list)| (k.to_vec(), list[0].region))
            .collect();
        let want: Vec<(Vec<u8>, u32)> = all
            .iter()
            .enumerate()
            .map(|(region, (_, bytes))| {
                (crate::store::index::padded(bytes).to_vec(), region as u32)
            })
            .collect();
        assert_eq!(held, want);
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
            assert!(n < 3000 || from_disk.regions.len() > 10 && from_disk.postings.len() > 100);
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
            assert!(!want.regions.is_empty() && want.postings.len() > 10, "{i}");
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
            let all = [0u8; crate::store::index::KEY];
            let keys: Vec<Vec<u8>> = want
                .postings
                .between(&all, &[0xff; crate::store::index::KEY])
                .map(|(k, _)| k.to_vec())
                .collect();
            let mut held = 0;
            for key in keys {
                let mine: Vec<Posting> = want
                    .postings
                    .get(&key)
                    .iter()
                    .filter(|p| p.region >= from)
                    .map(|p| Posting {
                        region: p.region - from,
                        ..*p
                    })
                    .collect();
                assert_eq!(piece.postings.get(&key), mine, "{key:?} after write {i}");
                held += usize::from(!mine.is_empty());
            }
            assert_eq!(piece.postings.len(), held, "no key without regions there");
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
