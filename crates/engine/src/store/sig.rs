//! Region signatures: for each region of a capture file, a small Bloom filter of the keys
//! of its packets (see `keys`), which a query tests for the keys of its filter.
//!
//! Why a filter per region and not a list of regions per key (the index's format 2,
//! Stenographer's way with packet offsets instead of regions): the lists cost the keeper a
//! map lookup per address and packet and the closer a sort of every (key, region) pair,
//! about 100 ns a packet with a flow per few packets (64-byte frames over 100k flows,
//! BENCHMARKS.md, store), more than writing the packet; setting two bits of a word of a 4
//! KiB signature costs a hash and at worst a miss to L2 (the packet copies evict it from L1:
//! perf at 64 B, about 8 ns a key). What a filter gives up: a query may
//! read a region that holds none of its keys (a false positive, about 2% of the regions
//! per key tested, far fewer for `and`), never miss one; libpcap decides every packet read
//! anyway. Pages within a region are not told apart: a region chosen is read whole.
//!
//! The filter is blocked: a key sets two bits of one 64-bit word, the word chosen by the
//! low bits of its hash, so a lookup reads one word per region and key. While a region is
//! built its signature is [`MAX_WORDS`] words; when it ends it is folded (word `i` OR-ed
//! into word `i mod w`) to the narrowest power-of-two width `w` that keeps about a sixth of
//! its bits set, which is still exact for every key inserted (a key's word is its hash mod
//! the width). A file's signatures are stored in blocks of [`BLOCK_REGIONS`] regions of one
//! width (the median of theirs: a narrower region's words repeated, a wider one folded
//! further), column by column: a query for a key reads, per block, the one column its hash
//! names (a CRC-32 and a word per region), a few KiB, not the block.
//!
//! Besides the keys `keys` gives, each address is inserted as its /16 and /24 prefixes
//! (IPv4) and /32 and /64 (IPv6), under kinds of their own, so that `net` can be looked up.

use super::keys;
use poolcap_format::memory::Memory;

/// Words of a region's signature while it is built, the widest a stored one may be: 4 KiB,
/// small beside the core's L1 and L2.
pub const MAX_WORDS: usize = 512;

/// Regions per signature block: 64 MiB of capture file, a column of 8 KiB.
pub const BLOCK_REGIONS: usize = 1024;

/// Bits of a folded signature per bit set: about a sixth set, a false positive per key
/// tested in about 2% of the regions.
const SPREAD: usize = 6;

/// Kind byte of the derived keys: an IPv4 address's first 16 bits.
pub const V4_16: u8 = 0x41;
/// An IPv4 address's first 24 bits.
pub const V4_24: u8 = 0x42;
/// An IPv6 address's first 32 bits.
pub const V6_32: u8 = 0x61;
/// An IPv6 address's first 64 bits.
pub const V6_64: u8 = 0x62;

/// The hash of the key (`kind`, `value`), `value` at most 16 bytes: part of the format
/// (stored signatures are tested with it). Its value's first 8 bytes as a number, tagged
/// with the kind and length, the next 8 multiplied in, through SplitMix64's finalizer: two
/// multiplies for all but IPv6 addresses. It runs for every new key of every packet on the
/// capture thread: a copy of the value into a buffer (a call of `memcpy`) and five
/// multiplies took 14% of the thread at 64 B (perf).
pub fn hash(kind: u8, value: &[u8]) -> u64 {
    let (head, tail) = value.split_at(value.len().min(8));
    // The kind and length above the value's bytes (in their lowest byte for 8).
    let tag = (u64::from(kind) << 8) | value.len() as u64;
    // At most 8 bytes each: the numbers fit 64 bits.
    let mut x = keys::number(head) as u64 ^ tag.rotate_left(8 * head.len() as u32 % 64);
    if !tail.is_empty() {
        x ^= (keys::number(tail) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The two bits a key of hash `h` sets in its word.
fn bits(h: u64) -> u64 {
    (1 << ((h >> 40) & 63)) | (1 << ((h >> 46) & 63))
}

/// The key of `kind` and `value`, and the keys derived from it (see [`derived`]), each
/// given to `each` as (kind, value).
#[cfg(test)]
pub fn with_derived(kind: u8, value: &[u8], each: &mut impl FnMut(u8, &[u8])) {
    each(kind, value);
    derived(kind, value, each);
}

/// The keys derived from the key of `kind` and `value` (an address's prefixes), each
/// given to `each` as (kind, value).
fn derived(kind: u8, value: &[u8], each: &mut impl FnMut(u8, &[u8])) {
    match kind {
        keys::V4 if value.len() == 4 => {
            each(V4_16, &value[..2]);
            each(V4_24, &value[..3]);
        }
        keys::V6 if value.len() == 16 => {
            each(V6_32, &value[..4]);
            each(V6_64, &value[..8]);
        }
        _ => {}
    }
}

/// Entries of a signer's table of the keys it has inserted into the region (see
/// [`Signer`]).
const SEEN: usize = 128;

/// The signature of the region being built, and a table of keys inserted into it.
///
/// Why the table: most keys of a packet are in the region already (its hosts, the server's
/// port, the protocol), and a key's hash, with an address's two prefixes, was most of the
/// capture thread's cost of the store (perf at 64 B). A key is looked up in a direct-mapped
/// table of the `SEEN` (128) keys inserted since the region began, one multiply and a
/// compare; only one not found is hashed and inserted (with its prefixes), and replaces its
/// slot's key. A key evicted is inserted again (setting bits already set): the table
/// decides only how often a key is hashed, never whether it is in the signature.
#[derive(Clone)]
pub struct Signer {
    words: Box<[u64]>,
    /// Keys inserted since the region began, by [`Signer::slot`] (see [`Signer::fresh`]);
    /// 0 is empty.
    seen: Box<[u64; SEEN]>,
    /// The last region's signature, folded (see [`Signer::take`]): one buffer for all.
    folded: Vec<u64>,
}

impl Default for Signer {
    fn default() -> Self {
        Signer {
            words: vec![0; MAX_WORDS].into_boxed_slice(),
            seen: Box::new([0; SEEN]),
            folded: Vec::with_capacity(MAX_WORDS),
        }
    }
}

impl Signer {
    /// Inserts the key (`kind`, `value`) and the keys derived from it (an address's
    /// prefixes, see the module docs) unless the region's table holds it. Inlined where the
    /// keys are given (a call per key, with its registers saved, cost more than the lookup).
    #[inline]
    pub fn insert(&mut self, kind: u8, value: &[u8]) {
        let code = Signer::code(kind, value);
        if !self.fresh(code) {
            return;
        }
        if matches!(kind, keys::V4 | keys::V6) {
            self.insert_address(code, kind, value);
        } else {
            self.set(code, kind, value);
        }
    }

    /// Inserts the address (`kind`, `value`), coded `code`, not in the table, and those of
    /// its prefixes that are not.
    #[inline(never)]
    fn insert_address(&mut self, code: u64, kind: u8, value: &[u8]) {
        self.set(code, kind, value);
        derived(kind, value, &mut |k, v| {
            let code = Signer::code(k, v);
            if self.fresh(code) {
                self.set(code, k, v);
            }
        });
    }

    /// The key (`kind`, `value`) in a word: if its value has at most 6 bytes, its kind,
    /// length and value (kinds are below 0x80, so the top bit is clear); else its hash with
    /// the top bit set (two keys of one hash set the same bits: bit 63 picks neither a word
    /// nor a bit).
    #[inline]
    fn code(kind: u8, value: &[u8]) -> u64 {
        if value.len() <= 6 {
            (u64::from(kind) << 56) | ((value.len() as u64) << 48) | keys::number(value) as u64
        } else {
            hash(kind, value) | 1 << 63
        }
    }

    /// Whether the key coded `code` ([`Signer::code`]) is not in the table; it is from now
    /// on.
    #[inline]
    fn fresh(&mut self, code: u64) -> bool {
        let slot = &mut self.seen[Signer::slot(code)];
        // Stored only when new: a store on every hit made the next packet's lookup of the
        // same slot wait for it.
        if *slot == code {
            return false;
        }
        *slot = code;
        true
    }

    /// Sets the bits of the key (`kind`, `value`) coded `code`: a long key's code is its
    /// hash already (bit 63 aside, which no word or bit depends on).
    #[inline]
    fn set(&mut self, code: u64, kind: u8, value: &[u8]) {
        let h = if code >> 63 == 0 {
            hash(kind, value)
        } else {
            code
        };
        self.words[h as usize & (MAX_WORDS - 1)] |= bits(h);
    }

    /// The table's slot for a key coded `code`: its top bits after a multiply.
    fn slot(code: u64) -> usize {
        (code.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SEEN.trailing_zeros())) as usize
    }

    /// The region's signature, folded (see the module docs), until the next call; the
    /// signer starts over empty.
    pub fn take(&mut self) -> &[u64] {
        let ones: usize = self.words.iter().map(|w| w.count_ones() as usize).sum();
        let width = (ones * SPREAD)
            .div_ceil(64)
            .next_power_of_two()
            .clamp(1, MAX_WORDS);
        fold_into(&self.words, width, &mut self.folded);
        self.words.fill(0);
        self.seen.fill(0);
        &self.folded
    }
}

/// `sig` at `width` words (powers of two) into `out`, emptied first: folded when narrower,
/// repeated when wider. Folded a slice of `width` words at a time, which the
/// compiler makes vector ORs of (a word at a time, each OR waited for the one before).
fn fold_into(sig: &[u64], width: usize, out: &mut Vec<u64>) {
    out.clear();
    if width >= sig.len() {
        out.extend((0..width).map(|i| sig[i & (sig.len() - 1)]));
    } else {
        out.extend_from_slice(&sig[..width]);
        for chunk in sig[width..].chunks_exact(width) {
            for (o, w) in out.iter_mut().zip(chunk) {
                *o |= w;
            }
        }
    }
}

/// The signatures of up to [`BLOCK_REGIONS`] consecutive regions at one width, column by
/// column: word `w` of region `r` is `columns[w * regions + r]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigBlock {
    /// Words per signature (a power of two).
    pub width: u32,
    /// Regions in the block.
    pub regions: u32,
    /// The words, column by column.
    pub columns: Vec<u64>,
}

impl SigBlock {
    /// The block of `sigs` (each a power-of-two width), at the median of their widths.
    pub fn build<S: Words>(sigs: &[S]) -> SigBlock {
        let width = median_width(sigs);
        let folded = folded(sigs, width);
        // Column by column, so that the writes run in order: region by region, a word to
        // each column was a miss of the caches per word (the closer's time at 64 B).
        let mut columns = Vec::with_capacity(width * sigs.len());
        for w in 0..width {
            columns.extend(column(sigs, &folded, w));
        }
        SigBlock {
            width: width as u32,
            regions: sigs.len() as u32,
            columns,
        }
    }

    /// The column a key of hash `h` is in.
    pub fn column_of(&self, h: u64) -> usize {
        h as usize & (self.width as usize - 1)
    }

    /// Bytes of one column as stored: its CRC-32, then its words.
    pub fn column_bytes(regions: u32) -> u64 {
        4 + 8 * u64::from(regions)
    }

    /// Appends the block's bytes (each column as [`SigBlock::column_bytes`] says).
    pub fn encode(&self, out: &mut Vec<u8>) {
        for col in self.columns.chunks(self.regions.max(1) as usize) {
            let start = out.len() + 4;
            out.extend_from_slice(&[0; 4]);
            put_words(col, out);
            let crc = crc32fast::hash(&out[start..]);
            out[start - 4..start].copy_from_slice(&crc.to_le_bytes());
        }
    }

    /// The words of a column from its stored bytes; `None` if its checksum fails.
    pub fn decode_column(b: &[u8]) -> Option<Vec<u64>> {
        let (crc, words) = b.split_first_chunk::<4>()?;
        if crc32fast::hash(words) != u32::from_le_bytes(*crc) || words.len() % 8 != 0 {
            return None;
        }
        Some(
            words
                .chunks_exact(8)
                .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
                .collect(),
        )
    }

    /// The column `c`'s words.
    pub fn column(&self, c: usize) -> &[u64] {
        let n = self.regions as usize;
        &self.columns[c * n..(c + 1) * n]
    }
}

/// A region's signature as [`SigBlock::build`] reads it: its width and its words.
pub trait Words {
    /// Words (a power of two).
    fn words(&self) -> usize;
    /// Word `i`.
    fn word(&self, i: usize) -> u64;
}

#[cfg(test)]
impl Words for Box<[u64]> {
    fn words(&self) -> usize {
        self.len()
    }
    fn word(&self, i: usize) -> u64 {
        self[i]
    }
}

/// A signature's words as stored and noted: little-endian, 8 bytes each.
#[derive(Debug, Clone, Copy)]
pub struct Le<'a>(pub &'a [u8]);

impl Words for Le<'_> {
    fn words(&self) -> usize {
        self.0.len() / 8
    }
    fn word(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.0[8 * i..8 * i + 8].try_into().expect("8 bytes"))
    }
}

/// The median of the widths of `sigs`: a block's width.
fn median_width<S: Words>(sigs: &[S]) -> usize {
    let mut widths: Vec<usize> = sigs.iter().map(|s| s.words()).collect();
    widths.sort_unstable();
    widths.get(widths.len() / 2).copied().unwrap_or(1)
}

/// Those of `sigs` wider than `width`, folded to it (the others are read repeated).
fn folded<S: Words>(sigs: &[S], width: usize) -> Vec<Option<Vec<u64>>> {
    sigs.iter()
        .map(|s| {
            (s.words() > width).then(|| {
                let words: Vec<u64> = (0..s.words()).map(|i| s.word(i)).collect();
                let mut out = Vec::with_capacity(width);
                fold_into(&words, width, &mut out);
                out
            })
        })
        .collect()
}

/// Column `w` of the block of `sigs`, those wider folded as `folded`.
fn column<'a, S: Words>(
    sigs: &'a [S],
    folded: &'a [Option<Vec<u64>>],
    w: usize,
) -> impl Iterator<Item = u64> + 'a {
    sigs.iter().zip(folded).map(move |(s, f)| match f {
        Some(f) => f[w],
        None => s.word(w & (s.words() - 1)),
    })
}

/// An index's signature blocks as it is encoded: built ([`SigBlock`]s, as read or as a
/// query has them), or made one at a time from a builder's signatures ([`ArenaBlocks`]).
pub trait Blocks {
    /// Blocks.
    fn count(&self) -> usize;
    /// Block `n`'s width and regions.
    fn shape(&self, n: usize) -> (u32, u32);
    /// Gives block `n`'s bytes (as [`SigBlock::encode`]) to `part` in order, in one part
    /// or more, each made in `scratch` where it takes one (made or grown as needed).
    fn encode(&self, n: usize, scratch: &mut Memory, part: &mut impl FnMut(&[u8]));
}

impl Blocks for [SigBlock] {
    fn count(&self) -> usize {
        self.len()
    }
    fn shape(&self, n: usize) -> (u32, u32) {
        (self[n].width, self[n].regions)
    }
    fn encode(&self, n: usize, _: &mut Memory, part: &mut impl FnMut(&[u8])) {
        let mut out = Vec::new();
        self[n].encode(&mut out);
        part(&out);
    }
}

/// The signature blocks of a builder's signatures, each encoded straight from them when
/// the index is saved. Why: a closed file's blocks built whole, then its index encoded
/// whole, were two more copies of its signatures in memory new to the process (3 MB per
/// 100 MB of 64-byte frames each, a fault per page; on the lab's VMs fresh memory is
/// zeroed at about 1 GB/s).
pub struct ArenaBlocks<'a> {
    sigs: Vec<Le<'a>>,
    widths: Vec<usize>,
}

impl<'a> ArenaBlocks<'a> {
    /// The blocks of signatures `from` to before `to` of `arena`.
    pub fn new(arena: &'a SigArena, from: usize, to: usize) -> Self {
        let sigs: Vec<Le> = (from..to).map(|i| arena.get(i)).collect();
        let widths = sigs.chunks(BLOCK_REGIONS).map(median_width).collect();
        ArenaBlocks { sigs, widths }
    }

    /// The blocks, built.
    pub fn build(&self) -> Vec<SigBlock> {
        self.sigs
            .chunks(BLOCK_REGIONS)
            .map(SigBlock::build)
            .collect()
    }

    fn block(&self, n: usize) -> &[Le<'a>] {
        let from = n * BLOCK_REGIONS;
        &self.sigs[from..(from + BLOCK_REGIONS).min(self.sigs.len())]
    }
}

impl Blocks for ArenaBlocks<'_> {
    fn count(&self) -> usize {
        self.widths.len()
    }
    fn shape(&self, n: usize) -> (u32, u32) {
        (self.widths[n] as u32, self.block(n).len() as u32)
    }
    fn encode(&self, n: usize, scratch: &mut Memory, part: &mut impl FnMut(&[u8])) {
        let (sigs, width) = (self.block(n), self.widths[n]);
        let folded = folded(sigs, width);
        // A transpose 64 columns at a time (512 KiB of a full block, which stays in the
        // core's L2 to be checksummed and given on), in tiles of 8 signatures: 512 bytes
        // read in a row from each, 64 written in a row to each column (a cache line).
        // Column by column, each word read was a miss from memory (the keeper wrote the
        // signatures long before, a few KiB apart: 20 ns a word, perf at 64 B); in tiles
        // of 64 signatures, the 64 lines written at once, a column (8 KiB and 4 bytes)
        // apart, fell in a few of L1's sets, and the block made whole (4 MiB) was read
        // back from memory to be checksummed and copied: 2.3 GB/s, now 4.4 to 5.0 (3,000
        // signatures of 2 and 4 KiB, warm, on the lab's VMs).
        const COLUMNS: usize = 64;
        const TILE: usize = 8;
        let col_bytes = SigBlock::column_bytes(sigs.len() as u32) as usize;
        let most = COLUMNS.min(width) * col_bytes;
        if scratch.len() < most {
            // In huge pages, as the arena (see `SigArena`): written again at each save.
            *scratch = Memory::new(most.next_multiple_of(poolcap_format::memory::HUGE_PAGE));
        }
        for first in (0..width).step_by(COLUMNS) {
            let columns = first..(first + COLUMNS).min(width);
            // Every byte written below: a CRC and a word per region, for each column.
            let out = &mut scratch[..columns.len() * col_bytes];
            for (t, (tile, fs)) in sigs.chunks(TILE).zip(folded.chunks(TILE)).enumerate() {
                let row = 4 + 8 * TILE * t;
                for (c, w) in columns.clone().enumerate() {
                    let at = c * col_bytes + row;
                    let to = &mut out[at..at + 8 * tile.len()];
                    for ((to, s), f) in to.chunks_exact_mut(8).zip(tile).zip(fs) {
                        match f {
                            Some(f) => to.copy_from_slice(&f[w].to_le_bytes()),
                            None => {
                                let from = 8 * (w & (s.words() - 1));
                                to.copy_from_slice(&s.0[from..from + 8]);
                            }
                        }
                    }
                }
            }
            for col in out.chunks_exact_mut(col_bytes) {
                let (crc, words) = col.split_at_mut(4);
                crc.copy_from_slice(&crc32fast::hash(words).to_le_bytes());
            }
            part(&*out);
        }
    }
}

/// Bytes of a chunk of a [`SigArena`]: 512 signatures of the widest, a huge page.
const ARENA_CHUNK: usize = poolcap_format::memory::HUGE_PAGE;

/// The signatures of a file's regions, one after another, as the index builder keeps them
/// until the file closes: little-endian words (as noted, so a noted one is copied in whole)
/// in chunks of 2 MiB.
///
/// Why not a box per region: at 64-byte frames a 100 MB file has some 1,500 regions and 3
/// MB of signatures, and the keeper's allocator grew its heap for them a page at a time
/// (an `mprotect` and a fault each: 171 of the keeper's 224 samples in the kernel, perf at
/// 10 kHz, 3M frames at 300k pps); and every word was parsed from the notes on the way in.
/// Each chunk is a huge page where the kernel has them (`poolcap_format::memory`), and goes
/// to the arena's [`Spares`] when it is dropped, for the next file's arena. Why huge: on
/// the lab's VMs a small page not written for a second or two costs a trap to the host at
/// its next write (16 MB written after 2 s idle: 0.24-0.30 GB/s in small pages, 8.2-8.4 in
/// huge ones, 6-10 either way when written just before), and an arena's pages are each
/// written once per file: in small pages the keeper's copies into them ran at 0.33 GB/s,
/// most of its 6-9 ns a packet at 64 bytes.
#[derive(Debug, Default)]
pub struct SigArena {
    chunks: Vec<Memory>,
    /// Bytes of the last chunk in use.
    used: usize,
    /// Each signature's chunk, and where its bytes start and end in it.
    at: Vec<(u32, u32, u32)>,
    spares: Spares,
}

/// Most chunks [`Spares`] keeps: 32 MiB, the signatures of 1 GB of 64-byte frames.
const SPARE_CHUNKS: usize = 16;

/// Chunks of the arenas of files indexed and dropped, taken by the arenas of the next
/// files (shared by the keeper, whose arenas take them, and the closer, which drops them).
///
/// Why: every chunk made anew is memory new to the process, faulted and zeroed on the
/// keeper as the signatures are copied in (some 3 MB per 100 MB of 64-byte frames). A
/// chunk taken again holds a file's old signatures, which the arena never reads: it reads
/// only what it wrote (`SigArena::at`).
#[derive(Debug, Clone, Default)]
pub struct Spares(std::sync::Arc<std::sync::Mutex<Vec<Memory>>>);

impl Spares {
    /// A spare chunk, or a new one.
    fn take(&self) -> Memory {
        let spare = self.0.lock().ok().and_then(|mut s| s.pop());
        spare.unwrap_or_else(|| Memory::new(ARENA_CHUNK))
    }

    /// Keeps `chunks`, as many as there is room for.
    fn give(&self, chunks: impl Iterator<Item = Memory>) {
        if let Ok(mut s) = self.0.lock() {
            let room = SPARE_CHUNKS.saturating_sub(s.len());
            s.extend(chunks.take(room));
        }
    }

    /// Chunks kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().map_or(0, |s| s.len())
    }
}

impl Drop for SigArena {
    fn drop(&mut self) {
        self.spares.give(self.chunks.drain(..));
    }
}

impl SigArena {
    /// An empty arena whose chunks are taken from and given back to `spares`.
    pub fn with_spares(spares: Spares) -> Self {
        SigArena {
            chunks: Vec::new(),
            used: 0,
            at: Vec::new(),
            spares,
        }
    }

    /// Signatures held.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Adds the signature whose little-endian words are `le`.
    pub fn push_le(&mut self, le: &[u8]) {
        self.room(le.len()).copy_from_slice(le);
    }

    /// Adds the signature `words`.
    pub fn push_words(&mut self, words: &[u64]) {
        let room = self.room(8 * words.len());
        for (to, w) in room.chunks_exact_mut(8).zip(words) {
            to.copy_from_slice(&w.to_le_bytes());
        }
    }

    /// The next signature's `n` bytes, in the last chunk or a new one.
    fn room(&mut self, n: usize) -> &mut [u8] {
        debug_assert!(n <= ARENA_CHUNK, "a signature is at most {MAX_WORDS} words");
        if self.chunks.is_empty() || self.used + n > ARENA_CHUNK {
            self.chunks.push(self.spares.take());
            self.used = 0;
        }
        let (chunk, from) = (self.chunks.len() - 1, self.used);
        self.used += n;
        self.at.push((chunk as u32, from as u32, self.used as u32));
        &mut self.chunks[chunk][from..from + n]
    }

    /// Signature `i`.
    pub fn get(&self, i: usize) -> Le<'_> {
        let (chunk, from, to) = self.at[i];
        Le(&self.chunks[chunk as usize][from as usize..to as usize])
    }

    /// A copy of the signatures from `first` on.
    pub fn copy_from(&self, first: usize) -> SigArena {
        let mut copy = SigArena::with_spares(self.spares.clone());
        for i in first..self.len() {
            copy.push_le(self.get(i).0);
        }
        copy
    }
}

/// Appends `words`, little-endian. In one resize and a loop the compiler makes a copy of:
/// a word at a time, each append reloaded the vector's length after the store before it
/// (perf, `Cut::note` on the capture thread).
pub fn put_words(words: &[u64], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + 8 * words.len(), 0);
    for (to, w) in out[start..].chunks_exact_mut(8).zip(words) {
        to.copy_from_slice(&w.to_le_bytes());
    }
}

/// The regions (numbers within the block) of `column` (the one a key of hash `h` is in)
/// whose signature may hold the key.
pub fn holding(column: &[u64], h: u64) -> impl Iterator<Item = u32> + '_ {
    let b = bits(h);
    column
        .iter()
        .enumerate()
        .filter(move |(_, &w)| w & b == b)
        .map(|(r, _)| r as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> [u8; 4] {
        (0x0a00_0000 + i).to_be_bytes()
    }

    #[test]
    fn every_key_inserted_is_found_and_few_others_are() {
        let mut s = Signer::default();
        let mut sigs: Vec<Box<[u64]>> = Vec::new();
        // Regions of 300 addresses each (and their prefixes), all different.
        for r in 0..50u32 {
            for i in 0..300 {
                s.insert(keys::V4, &key(r * 300 + i));
            }
            sigs.push(s.take().into());
        }
        let block = SigBlock::build(&sigs);
        assert!(block.width < MAX_WORDS as u32, "folded: {}", block.width);
        let regions_of = |kind: u8, v: &[u8]| -> Vec<u32> {
            let h = hash(kind, v);
            holding(block.column(block.column_of(h)), h).collect()
        };
        let mut false_hits = 0;
        for r in 0..50u32 {
            for i in 0..300 {
                let got = regions_of(keys::V4, &key(r * 300 + i));
                assert!(got.contains(&r), "key {i} of region {r}");
                false_hits += got.len() - 1;
            }
        }
        // About 2% per region tested, 49 others per key.
        let rate = false_hits as f64 / (15_000.0 * 49.0);
        assert!(rate < 0.04, "false positive rate {rate}");
        // A prefix key finds the regions of its addresses: 10.0.0.0/24 is in region 0.
        assert!(regions_of(V4_24, &[10, 0, 0]).contains(&0));
        assert!(regions_of(V4_16, &[10, 0]).len() == 50);
    }

    /// Whether the folded signature `sig` may hold the key (`kind`, `value`).
    fn holds(sig: &[u64], kind: u8, value: &[u8]) -> bool {
        let h = hash(kind, value);
        sig[h as usize & (sig.len() - 1)] & bits(h) == bits(h)
    }

    #[test]
    fn the_table_of_keys_inserted_skips_none_in_any_region() {
        let mut s = Signer::default();
        // Keys drawn from a pool larger than the table, so they evict each other, with
        // repeats; IPv6 addresses (looked up by their hash) among them.
        let mut seed = 11u64;
        let mut keys = Vec::new();
        for _ in 0..3000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let i = (seed >> 33) % 700;
            keys.push(match i % 3 {
                0 => (keys::V4, key(i as u32).to_vec()),
                1 => (keys::PORT, (i as u16).to_be_bytes().to_vec()),
                _ => (
                    keys::V6,
                    [[0x20, 1].as_slice(), &[0; 10], &key(i as u32)].concat(),
                ),
            });
        }
        // Three regions, the second with the last keys of the first, which its table
        // holds: a key the table held in the region before is inserted again.
        for region in [&keys[..1000], &keys[950..1000], &keys[1000..]] {
            for (kind, value) in region {
                s.insert(*kind, value);
            }
            let sig = s.take().to_vec();
            for (kind, value) in region {
                with_derived(*kind, value, &mut |k, v| {
                    assert!(holds(&sig, k, v), "{k} {v:?}");
                });
            }
        }
    }

    #[test]
    fn an_arena_takes_the_chunks_of_one_dropped_and_reads_only_its_own_signatures() {
        let spares = Spares::default();
        let sig = |i: u64| vec![i; MAX_WORDS];
        let mut first = SigArena::with_spares(spares.clone());
        for i in 0..3 * ARENA_CHUNK as u64 / (8 * MAX_WORDS as u64) {
            first.push_words(&sig(i));
        }
        let chunks: Vec<*const u8> = first.chunks.iter().map(|c| c.as_ptr()).collect();
        assert_eq!(chunks.len(), 3);
        drop(first);
        assert_eq!(spares.len(), 3, "every chunk given back");
        let mut next = SigArena::with_spares(spares.clone());
        next.push_words(&[7, 7]);
        next.push_words(&sig(9));
        assert!(
            chunks.contains(&next.chunks[0].as_ptr()),
            "a chunk taken again"
        );
        assert_eq!(spares.len(), 2);
        assert_eq!(next.len(), 2);
        assert_eq!(next.get(0).0, [7u8, 0, 0, 0, 0, 0, 0, 0].repeat(2));
        assert_eq!((0..MAX_WORDS).map(|i| next.get(1).word(i)).max(), Some(9));
        assert_eq!((0..MAX_WORDS).map(|i| next.get(1).word(i)).min(), Some(9));
        // No more than SPARE_CHUNKS kept, however many arenas drop theirs.
        let many: Vec<SigArena> = (0..2 * SPARE_CHUNKS)
            .map(|_| {
                let mut a = SigArena::with_spares(spares.clone());
                a.push_words(&[1]);
                a
            })
            .collect();
        assert_eq!(spares.len(), 0);
        drop(many);
        assert_eq!(spares.len(), SPARE_CHUNKS);
    }

    #[test]
    fn blocks_fold_and_repeat_to_one_width_and_read_back_by_column() {
        let mut s = Signer::default();
        s.insert(keys::PORT, &[0, 53]);
        let narrow: Box<[u64]> = s.take().into();
        for i in 0..2000u32 {
            s.insert(keys::V4, &key(i));
        }
        let wide: Box<[u64]> = s.take().into();
        assert!(narrow.len() < wide.len());
        let block = SigBlock::build(&[narrow.clone(), wide, narrow.clone()]);
        assert_eq!(block.width as usize, narrow.len(), "the median width");
        let h = hash(keys::PORT, &[0, 53]);
        let mut bytes = Vec::new();
        block.encode(&mut bytes);
        let col = SigBlock::column_bytes(3) as usize;
        assert_eq!(bytes.len(), col * block.width as usize);
        let c = block.column_of(h);
        let words = SigBlock::decode_column(&bytes[c * col..(c + 1) * col]).expect("crc");
        assert_eq!(words, block.column(c));
        let found: Vec<u32> = holding(&words, h).collect();
        assert!(found.contains(&0) && found.contains(&2), "{found:?}");
        bytes[c * col + 5] ^= 1;
        assert_eq!(
            SigBlock::decode_column(&bytes[c * col..(c + 1) * col]),
            None
        );
    }
}
