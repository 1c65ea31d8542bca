//! A query: the packets of a store that match a tcpdump filter within a time window, in
//! time order, as one pcap stream.
//!
//! Files are skipped when their time span (from the index) misses the window. The rest are
//! taken in time order, not name order (runs of another process, or of a clock that was set
//! back, may hold older packets under a later name): ordered by their first packet's time
//! (earliest in the file; ties by name), and files whose time spans overlap (two runs into
//! one store at once, a clock set back) are merged packet by packet, each time taking the
//! earliest next matching packet of them (ties: the file ordered first), as `mergecap`
//! merges files. A file's own packets keep their order; the file being written, whose last
//! time is not known yet, is merged with every file that starts after its first packet.
//!
//! In a file with a sound index only the pages of the regions the filter's indexable part
//! selects (`select`) and whose time span meets the window are read (where they cover half
//! or more of the stretch from the first to the last, that stretch in one sequential read);
//! a file without one (the file being written, or one whose index is refused, which is
//! said, by name) is read whole. Every packet read is then tested against the window and the
//! whole filter by libpcap, so the answer is what `tcpdump -r FILTER` gives over the same
//! files.
//!
//! Why files are surveyed by several threads at once, with the blocks of an index and the
//! pages of a file each queued with the kernel together: with the page cache cold, a
//! one-flow query's time is not bytes but reads waited on in turn. Each file needs its
//! index's head and its capture file's first page, a signature column per key and block,
//! then tens of region blocks and as many regions of packets: read one after the other,
//! about 30 reads waited on per file, over 600 for a store of 20 files. Queued together, a
//! file's survey waits on three rounds of reads (head, signature columns, region blocks),
//! the files' surveys overlap, and each file's regions are queued as soon as its survey
//! ends, to be read while the other files are surveyed.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use poolcap_format::LinkType;
use poolcap_sys::pcap_filter::OfflineFilter;

use super::index::{Cover, IndexError, IndexFile, Posting};
use super::pcapfile::{self, FILE_HEADER};
use super::prefix;
use super::select::Selector;
use super::{show_time, IndexState, Store, StoreError};
use crate::capture::filter::{compile_user, FilterError};

/// What to look for.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// A tcpdump expression (None: every packet).
    pub filter: Option<String>,
    /// Packets at or after this time (ns since the epoch).
    pub since: Option<u64>,
    /// Packets before this time (ns since the epoch).
    pub until: Option<u64>,
}

/// What a query did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Packets that matched.
    pub packets: u64,
    /// Capture files opened.
    pub files_read: usize,
    /// Bytes of capture files read.
    pub bytes_read: u64,
    /// Bytes of capture files held.
    pub bytes_held: u64,
    /// Bytes of indexes read.
    pub index_bytes_read: u64,
    /// Files read whole because their index was refused: name and why.
    pub refused: Vec<(PathBuf, String)>,
}

/// A query that cannot be answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The filter does not compile.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// The window misses every packet held.
    #[error("nothing held in that time window: the store holds {0}")]
    Outside(String),
    /// `--since` is not before `--until`.
    #[error("--since ({0}) is not before --until ({1})")]
    EmptyWindow(String, String),
    /// Files that cannot go into one pcap stream.
    #[error("{0} and {1} differ in link type or time precision; query them apart")]
    Mixed(PathBuf, PathBuf),
    /// Reading or writing.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

fn io(what: impl std::fmt::Display) -> impl FnOnce(std::io::Error) -> QueryError {
    move |source| QueryError::Io {
        what: what.to_string(),
        source,
    }
}

/// A file to read, and which parts.
struct Plan {
    path: PathBuf,
    header: pcapfile::Header,
    file: std::fs::File,
    /// Byte ranges to read, in order (all of it for a file without a sound index).
    ranges: Vec<(u64, u64)>,
    /// Its earliest and latest packet time (latest: `u64::MAX` where not known).
    span: (u64, u64),
}

/// What one capture file holds for a query.
#[derive(Default)]
struct Survey {
    /// What to read of it (None: nothing there for the query).
    plan: Option<Plan>,
    /// Its bytes.
    bytes_held: u64,
    /// Bytes of its indexes read.
    index_bytes_read: u64,
    /// Its indexes refused: name and why.
    refused: Vec<(PathBuf, String)>,
    /// The time span of its packets, where it was learned.
    held: Option<(u64, u64)>,
}

/// A plan being read: its next matching packet, copied, so that files can be merged.
struct Cursor {
    records: pcapfile::Records,
    ranges: std::vec::IntoIter<(u64, u64)>,
    name: String,
    /// The next matching packet's time and record (header and bytes), if any.
    head: Option<u64>,
    raw: Vec<u8>,
}

impl Cursor {
    fn new(plan: Plan) -> Result<Cursor, QueryError> {
        let name = plan.path.display().to_string();
        let records =
            pcapfile::Records::new(plan.header, plan.file, FILE_HEADER, 0).map_err(io(&name))?;
        Ok(Cursor {
            records,
            ranges: plan.ranges.into_iter(),
            name,
            head: None,
            raw: Vec::new(),
        })
    }

    /// Reads on to the next packet in the window that the filter takes.
    fn advance(
        &mut self,
        query: &Query,
        filter: Option<&OfflineFilter>,
        outcome: &mut Outcome,
    ) -> Result<(), QueryError> {
        self.head = None;
        loop {
            let Some(r) = self.records.next_record().map_err(io(&self.name))? else {
                let Some((from, to)) = self.ranges.next() else {
                    return Ok(());
                };
                self.records.seek(from, to).map_err(io(&self.name))?;
                continue;
            };
            outcome.bytes_read += r.raw.len() as u64;
            if query.holds(r.ts_ns) && filter.is_none_or(|f| f.matches(r.data, r.wire_len)) {
                self.raw.clear();
                self.raw.extend_from_slice(r.raw);
                self.head = Some(r.ts_ns);
                return Ok(());
            }
        }
    }
}

/// The earliest and latest time of `file`'s records from byte `from` on.
fn span_from(
    header: pcapfile::Header,
    file: &std::fs::File,
    from: u64,
) -> std::io::Result<Option<(u64, u64)>> {
    let mut records = pcapfile::Records::new(header, file.try_clone()?, from, u64::MAX)?;
    let mut span = None;
    while let Some(r) = records.next_record()? {
        span = join(span, Some((r.ts_ns, r.ts_ns)));
    }
    Ok(span)
}

/// The span of both.
fn join(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some((a0, a1)), Some((b0, b1))) => Some((a0.min(b0), a1.max(b1))),
        (x, None) | (None, x) => x,
    }
}

/// Plans in time order, in groups whose time spans overlap (each group is merged).
fn overlapping(mut plans: Vec<Plan>) -> Vec<Vec<Plan>> {
    plans.sort_by(|a, b| a.span.0.cmp(&b.span.0).then_with(|| a.path.cmp(&b.path)));
    let mut groups: Vec<(u64, Vec<Plan>)> = Vec::new();
    for plan in plans {
        match groups.last_mut() {
            Some((reach, group)) if plan.span.0 <= *reach => {
                *reach = (*reach).max(plan.span.1);
                group.push(plan);
            }
            _ => groups.push((plan.span.1, vec![plan])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// Capture files surveyed at once. A survey is three rounds of small reads, each waited on
/// (the index's head with the capture file's first page, the signature columns, the
/// region blocks): files surveyed one after the other wait on every file's rounds in turn, files
/// surveyed together wait on theirs at the same time, the device serving their reads
/// together.
const SURVEYORS: usize = 16;

/// `f` of each of `items`, in their order, computed by up to [`SURVEYORS`] threads at once.
fn each_at_once<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = items.len().min(SURVEYORS);
    if workers <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return done;
                        };
                        done.push((i, f(item)));
                    }
                })
            })
            .collect();
        for h in handles {
            let done = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (i, r) in done {
                out[i] = Some(r);
            }
        }
    });
    out.into_iter()
        .map(|r| r.expect("every item is taken by a worker"))
        .collect()
}

/// What the pieces of a file's prefix index cover: the byte ranges to read there, where
/// that part ends, and its packets' time span.
type Covered = (Vec<(u64, u64)>, u64, Option<(u64, u64)>);

impl Query {
    fn meets(&self, first: u64, last: u64) -> bool {
        self.since.is_none_or(|s| last >= s) && self.until.is_none_or(|u| first < u)
    }

    fn holds(&self, ts: u64) -> bool {
        self.since.is_none_or(|s| ts >= s) && self.until.is_none_or(|u| ts < u)
    }

    /// The ranges of `index`'s file to read: the pages of the regions the filter's keys
    /// point at (all regions where it has none) whose time span meets the window. Where
    /// they cover most of the file, one range from the first to the last: read in large
    /// sequential reads, it costs less than the reads it replaces.
    pub fn ranges(
        &self,
        index: &mut IndexFile,
        selector: &Selector,
    ) -> Result<Vec<(u64, u64)>, IndexError> {
        let chosen: Option<Vec<Posting>> = if index.keyed() {
            let postings = index.postings(&selector.keys())?;
            selector.regions(&postings)
        } else {
            None
        };
        if chosen.is_none() && self.since.is_none() && self.until.is_none() {
            return Ok(vec![(FILE_HEADER, index.file_len())]);
        }
        let numbers: BTreeSet<u32> = match &chosen {
            Some(c) => c.iter().map(|p| p.region).collect(),
            None => (0..index.region_count()).collect(),
        };
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (n, (region, end)) in index.regions(&numbers)? {
            if !self.meets(region.first, region.last) {
                continue;
            }
            let mask = chosen.as_ref().map_or(u16::MAX, |c| {
                c.binary_search_by_key(&n, |p| p.region)
                    .map_or(0, |i| c[i].pages)
            });
            for (from, to) in region.ranges(mask, end) {
                match ranges.last_mut() {
                    Some(last) if last.1 == from => last.1 = to,
                    _ => ranges.push((from, to)),
                }
            }
        }
        let bytes: u64 = ranges.iter().map(|(a, b)| b - a).sum();
        if let (Some(first), Some(last)) = (ranges.first(), ranges.last()) {
            if bytes >= (last.1 - first.0) / 2 {
                return Ok(vec![(first.0, last.1)]);
            }
        }
        Ok(ranges)
    }

    /// The ranges to read of the part of capture file `path` (without an index: being
    /// written, or left so by a crash) that the pieces of its prefix index cover (see
    /// `prefix`), read in order while each is sound and starts where the one before ended:
    /// the pages they select, where that part ends, and its time span. A piece refused is
    /// said in `found`.
    fn pieces(&self, path: &Path, selector: &Selector, found: &mut Survey) -> Covered {
        let (mut ranges, mut end, mut span) = (Vec::<(u64, u64)>::new(), FILE_HEADER, None);
        for at in prefix::pieces(path) {
            let mut read = 0;
            let planned = IndexFile::open_as(&at, path, Cover::Prefix).and_then(|mut p| {
                let first = p.regions(&BTreeSet::from([0]));
                read = p.bytes_read;
                if first?.get(&0).map(|(r, _)| r.offset) != Some(end) {
                    // Not the piece after the one before: the part between, or twice.
                    return Err(IndexError::Mismatch);
                }
                let planned = self.ranges(&mut p, selector);
                read = p.bytes_read;
                Ok((planned?, p.file_len(), (p.packets() > 0).then(|| p.span())))
            });
            found.index_bytes_read += read;
            match planned {
                Ok((planned, len, s)) => {
                    // The part before this piece is not read again.
                    for (from, to) in planned.into_iter().map(|(a, b)| (a.max(end), b)) {
                        match ranges.last_mut() {
                            Some(last) if last.1 == from => last.1 = to,
                            _ if from < to => ranges.push((from, to)),
                            _ => {}
                        }
                    }
                    (end, span) = (len, join(span, s));
                }
                // Deleted since it was listed: the file's index replaced it.
                Err(IndexError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => {
                    found.refused.push((at, e.to_string()));
                    break;
                }
            }
        }
        (ranges, end, span)
    }

    /// What capture file `path` holds for the query (see [`Survey`]): its index read (the
    /// head, then the blocks `selector` needs), or the file itself where it has none.
    fn survey(&self, path: &Path, selector: &Selector) -> Result<Survey, QueryError> {
        let mut found = Survey::default();
        let mut state = IndexState::of(path);
        let Ok(Some((header, file))) = pcapfile::open(path) else {
            // Deleted by retention since it was listed, or not (yet) a pcap file.
            return Ok(found);
        };
        found.bytes_held = file.metadata().map_or(0, |m| m.len());
        let mut indexed = None;
        if let IndexState::Sound(index) = &mut state {
            let span = index.span();
            if index.packets() > 0 {
                found.held = Some(span);
                if !self.meets(span.0, span.1) {
                    found.index_bytes_read += index.bytes_read;
                    return Ok(found);
                }
            }
            let ranges = self.ranges(index, selector);
            found.index_bytes_read += index.bytes_read;
            match ranges {
                Ok(ranges) => indexed = Some((ranges, span)),
                // A block that fails its checksum: the index is not used.
                Err(e) => state = IndexState::Refused(e),
            }
        }
        let (ranges, span) = match (&state, indexed) {
            (_, Some(planned)) => planned,
            _ => {
                if let IndexState::Refused(e) = &state {
                    found.refused.push((path.to_owned(), e.to_string()));
                }
                // The file being written (or one a crash left unindexed): where the pieces
                // of its prefix index cover its first part, the pages they select there,
                // then the rest whole.
                let (mut ranges, end, covered) = match state {
                    IndexState::Missing => self.pieces(path, selector, &mut found),
                    _ => (Vec::new(), FILE_HEADER, None),
                };
                match ranges.last_mut() {
                    Some(last) if last.1 == end => last.1 = u64::MAX,
                    _ => ranges.push((end, u64::MAX)),
                }
                let span = if self.since.is_some() || self.until.is_some() {
                    // Its span decides both whether it is read and what is held: the
                    // prefix index's, and the rest's read from the file.
                    let rest = span_from(header, &file, end).map_err(io(path.display()))?;
                    let Some(span) = join(covered, rest) else {
                        return Ok(found);
                    };
                    found.held = Some(span);
                    if !self.meets(span.0, span.1) {
                        return Ok(found);
                    }
                    span
                } else {
                    // Only its first packet is read now; its last time is not known.
                    let Some(first) =
                        pcapfile::first_time(header, &file).map_err(io(path.display()))?
                    else {
                        return Ok(found);
                    };
                    (first, u64::MAX)
                };
                (ranges, span)
            }
        };
        // Scattered reads are queued with the kernel now, while the other files are
        // surveyed: the device works on many at once (one after the other, each waits
        // its turn, and for a one-flow query the reads, not the bytes, are the cost).
        // The rest of a file being written is read as it comes.
        if ranges.len() > 1 {
            for &(from, to) in ranges.iter().filter(|r| r.1 != u64::MAX) {
                // A hint: if it fails, the reads are only slower.
                let _ = poolcap_sys::readahead::will_need(&file, from, to - from);
            }
        }
        found.plan = Some(Plan {
            path: path.to_owned(),
            header,
            file,
            ranges,
            span,
        });
        Ok(found)
    }

    /// Runs the query over `store`, writing the pcap stream to `out` (None: only count).
    pub fn run(&self, store: &Store, out: Option<&mut dyn Write>) -> Result<Outcome, QueryError> {
        if let (Some(s), Some(u)) = (self.since, self.until) {
            if s >= u {
                return Err(QueryError::EmptyWindow(show_time(s), show_time(u)));
            }
        }
        let selector = self
            .filter
            .as_deref()
            .map_or(Selector::All, Selector::parse);
        // From now on, the keeper saves the pieces of its live files' prefix indexes.
        prefix::want(store.dir());
        let mut outcome = Outcome::default();
        let mut plans = Vec::new();
        let mut held: Option<(u64, u64)> = None;
        for found in each_at_once(&store.files()?, |path| self.survey(path, &selector)) {
            let found = found?;
            outcome.bytes_held += found.bytes_held;
            outcome.index_bytes_read += found.index_bytes_read;
            outcome.refused.extend(found.refused);
            held = join(held, found.held);
            plans.extend(found.plan);
        }
        if self.since.is_some() || self.until.is_some() {
            match held {
                None => return Err(QueryError::Outside("no packets".into())),
                Some((a, b)) if !self.meets(a, b) => {
                    return Err(QueryError::Outside(format!(
                        "{} to {}",
                        show_time(a),
                        show_time(b)
                    )))
                }
                _ => {}
            }
        }
        let Some(first) = plans.first() else {
            if let Some(f) = &self.filter {
                compile_user(f, LinkType::ETHERNET)?;
            }
            return Ok(outcome);
        };
        let header = first.header;
        if let Some(other) = plans
            .iter()
            .find(|p| p.header.raw[..4] != header.raw[..4] || p.header.linktype != header.linktype)
        {
            return Err(QueryError::Mixed(first.path.clone(), other.path.clone()));
        }
        let linktype =
            LinkType::of_file(header.linktype).unwrap_or(LinkType(header.linktype as u16));
        let filter: Option<OfflineFilter> = self
            .filter
            .as_deref()
            .map(|f| compile_user(f, linktype))
            .transpose()?;
        let mut out = out;
        if let Some(o) = out.as_mut() {
            o.write_all(&header.raw).map_err(io("the output"))?;
        }
        for group in overlapping(plans) {
            outcome.files_read += group.len();
            let mut cursors = group
                .into_iter()
                .map(Cursor::new)
                .collect::<Result<Vec<_>, _>>()?;
            for c in &mut cursors {
                c.advance(self, filter.as_ref(), &mut outcome)?;
            }
            // The earliest head; ties go to the cursor ordered first.
            while let Some(c) = cursors
                .iter_mut()
                .filter(|c| c.head.is_some())
                .min_by_key(|c| c.head)
            {
                outcome.packets += 1;
                if let Some(o) = out.as_mut() {
                    o.write_all(&c.raw).map_err(io("the output"))?;
                }
                c.advance(self, filter.as_ref(), &mut outcome)?;
            }
        }
        if let Some(o) = out.as_mut() {
            o.flush().map_err(io("the output"))?;
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::build::tests::Fed;
    use crate::store::index::{index_path, tests::udp_pcap, Index, REGION_BYTES};

    /// Bytes of a record of `udp_pcap(.., 300, ..)`.
    const RECORD: u64 = 16 + 300;

    /// The records `i` of a `udp_pcap(.., 300, ..)` file's `bytes` that `take` takes.
    fn records(bytes: &[u8], take: impl Fn(u32) -> bool) -> Vec<u8> {
        let record = RECORD as usize;
        (0..((bytes.len() - 24) / record) as u32)
            .filter(|&i| take(i))
            .flat_map(|i| {
                let at = 24 + i as usize * record;
                bytes[at..at + record].to_vec()
            })
            .collect()
    }

    /// The pcap stream `q` writes over `store`, and what it did.
    fn answer(q: &Query, store: &Store) -> (Vec<u8>, Outcome) {
        let mut out = Vec::new();
        let outcome = q.run(store, Some(&mut out)).unwrap();
        (out, outcome)
    }

    /// Packet `i`'s flow in [`live_file`].
    fn flow(i: u32) -> u32 {
        (i * 7919) % 1000
    }

    /// A store holding one capture file without an index (as the file being written): its
    /// directory, the store, the file and its bytes, 20,000 packets of 300 bytes over 1,000
    /// flows ([`flow`]).
    fn live_file() -> (tempfile::TempDir, Store, PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let capture = dir.path().join("20261127T160000Z-1-000000000");
        udp_pcap(&capture, 20_000, 300, flow);
        let bytes = std::fs::read(&capture).unwrap();
        (dir, store, capture, bytes)
    }

    #[test]
    fn a_file_being_written_is_read_through_its_prefix_index_and_whole_past_it() {
        let (_dir, store, capture, bytes) = live_file();
        // The keeper was fed the first 4 MB; the file has grown to 6.3 MB since.
        let mut fed = Fed::default();
        fed.feed(0, &bytes[..4_000_000]);
        let prefix = fed.piece(0).unwrap();
        assert!(prefix.file_len > 3_900_000, "{}", prefix.file_len);
        let at = prefix::piece_path(&capture, 0);
        prefix.save_as(&at, Cover::Prefix).unwrap();
        let tail = bytes.len() as u64 - prefix.file_len;
        // Flow 77, and flow 77 between packets 5,000 and 15,000 (at i µs).
        let t = |i: u64| 1_700_000_000_000_000_000 + i * 1000;
        let flow77 = Query {
            filter: Some("src host 10.1.0.77 and udp src port 1101".into()),
            ..Query::default()
        };
        let window = Query {
            since: Some(t(5000)),
            until: Some(t(15_000)),
            ..flow77.clone()
        };
        let cases = [
            (&flow77, records(&bytes, |i| flow(i) == 77)),
            (
                &window,
                records(&bytes, |i| flow(i) == 77 && (5000..15_000).contains(&i)),
            ),
        ];
        for (q, want) in &cases {
            let (out, outcome) = answer(q, &store);
            assert_eq!(&out[24..], &want[..], "{q:?}");
            assert!(outcome.refused.is_empty(), "{:?}", outcome.refused);
            // The regions of the packets in the prefix, and the rest whole (twice with a
            // window: its times are read first).
            let bound = 2 * tail + 20 * (REGION_BYTES + RECORD);
            assert!(
                outcome.bytes_read <= bound && outcome.index_bytes_read > 0,
                "{} > {bound}",
                outcome.bytes_read
            );
        }
        // Refused, said by name, and the file read whole, with the same answer: a damaged
        // prefix index, one of another file, and one put where a closed file's index goes.
        let good = std::fs::read(&at).unwrap();
        let mut damaged = good.clone();
        damaged[40] ^= 1;
        let elsewhere = tempfile::tempdir().unwrap();
        let other = elsewhere.path().join("other");
        udp_pcap(&other, 20_000, 300, |i| i % 7);
        let mut fed = Fed::default();
        fed.feed(0, &std::fs::read(&other).unwrap()[..4_000_000]);
        let foreign = fed.piece(0).unwrap().encode_as(Cover::Prefix);
        for (what, bytes_at, named) in [
            ("damaged", (damaged, at.clone()), &at),
            ("another file's", (foreign, at.clone()), &at),
            (
                "as a closed file's",
                (good.clone(), index_path(&capture)),
                &capture,
            ),
        ] {
            std::fs::remove_file(&at).unwrap();
            std::fs::write(&bytes_at.1, &bytes_at.0).unwrap();
            let (out, outcome) = answer(&flow77, &store);
            assert_eq!(&out[24..], &cases[0].1[..], "{what}");
            assert_eq!(
                outcome.bytes_read,
                bytes.len() as u64 - 24,
                "{what}: read whole"
            );
            assert_eq!(outcome.refused.len(), 1, "{what}");
            assert_eq!(&outcome.refused[0].0, named, "{what}");
            let _ = std::fs::remove_file(index_path(&capture));
            std::fs::write(&at, &good).unwrap();
        }
    }

    #[test]
    fn a_live_files_pieces_are_read_in_order_and_one_out_of_place_is_refused() {
        let (_dir, store, capture, bytes) = live_file();
        // The keeper was fed 2, then 3, then 4 MB, and saved a piece each time.
        let mut fed = Fed::default();
        let (mut from, mut ends) = (0, Vec::new());
        for (k, (a, b)) in [
            (0, 2_000_000),
            (2_000_000, 3_000_000),
            (3_000_000, 4_000_000),
        ]
        .into_iter()
        .enumerate()
        {
            fed.feed(a as u64, &bytes[a..b]);
            let piece = fed.piece(from).unwrap();
            from += piece.regions.len() as u32;
            ends.push(piece.file_len);
            let at = prefix::piece_path(&capture, k as u32);
            piece.save_as(&at, Cover::Prefix).unwrap();
        }
        let q = Query {
            filter: Some("src host 10.1.0.77 and udp src port 1101".into()),
            ..Query::default()
        };
        let want = records(&bytes, |i| flow(i) == 77);
        let (out, outcome) = answer(&q, &store);
        assert_eq!(&out[24..], &want[..]);
        assert!(outcome.refused.is_empty(), "{:?}", outcome.refused);
        let tail = bytes.len() as u64 - ends[2];
        let bound = tail + 20 * (REGION_BYTES + RECORD);
        assert!(
            outcome.bytes_read <= bound,
            "{} > {bound}",
            outcome.bytes_read
        );
        // Piece 1 replaced by piece 2, which does not start where piece 0 ends: refused by
        // name, piece 0 used, and the rest read whole.
        let one = prefix::piece_path(&capture, 1);
        std::fs::copy(prefix::piece_path(&capture, 2), &one).unwrap();
        let (out, outcome) = answer(&q, &store);
        assert_eq!(&out[24..], &want[..]);
        assert_eq!(outcome.refused.len(), 1, "{:?}", outcome.refused);
        assert_eq!(outcome.refused[0].0, one);
        let rest = bytes.len() as u64 - ends[0];
        assert!(
            (rest..rest + bound).contains(&outcome.bytes_read),
            "{} for {rest}",
            outcome.bytes_read
        );
        // Gone, the pieces from the last: none left.
        prefix::remove(&capture);
        assert!(prefix::pieces(&capture).is_empty());
    }

    #[test]
    fn a_one_flow_query_reads_the_regions_of_its_packets_and_a_few_index_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let capture = dir.path().join("20261127T160000Z-1-000000000");
        // 20,000 packets of 300 bytes over 1,000 flows: flow 77's 20 packets lie in 20
        // different 64 KiB regions.
        let flow = |i: u32| (i * 7919) % 1000;
        udp_pcap(&capture, 20_000, 300, flow);
        Index::build(&capture).unwrap().save(&capture).unwrap();
        let q = Query {
            filter: Some("src host 10.1.0.77 and udp src port 1101".into()),
            ..Query::default()
        };
        let (out, outcome) = answer(&q, &store);
        // The answer: flow 77's records, in order, after the file header.
        let bytes = std::fs::read(&capture).unwrap();
        let record = RECORD as usize;
        let want = records(&bytes, |i| flow(i) == 77);
        assert_eq!(outcome.packets, 20);
        assert_eq!(&out[24..], &want[..]);
        // Each packet's region, whole: at most 64 KiB and a record each, out of 97 (a
        // region chosen for no packet of the flow costs one more).
        let bound = 20 * (REGION_BYTES + record as u64);
        assert!(
            outcome.bytes_read <= bound,
            "{} > {bound}",
            outcome.bytes_read
        );
        // The index's head, two signature columns (address, port) and the region blocks
        // named.
        let idx = std::fs::metadata(index_path(&capture)).unwrap().len();
        assert!(
            outcome.index_bytes_read * 4 < idx,
            "{} of {idx}",
            outcome.index_bytes_read
        );
    }
}
