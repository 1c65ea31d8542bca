//! A query: the packets of a store that match a tcpdump filter within a time window, in
//! time order, as one pcap stream.
//!
//! Files are taken oldest first and skipped when their time span (from the index) misses
//! the window. In a file with a sound index only the regions the filter's indexable part
//! selects (`select`) and whose time span meets the window are read; a file without one
//! (the file being written, or one whose index is refused, which is said, by name) is read
//! whole. Every packet read is then tested against the window and the whole filter by
//! libpcap, so the answer is what `tcpdump -r FILTER` gives over the same files.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use poolcap_format::LinkType;
use poolcap_sys::pcap_filter::OfflineFilter;

use super::index::Index;
use super::pcapfile::{self, FILE_HEADER};
use super::select::Selector;
use super::{file_span, show_time, IndexState, Store, StoreError};
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
}

impl Query {
    fn meets(&self, first: u64, last: u64) -> bool {
        self.since.is_none_or(|s| last >= s) && self.until.is_none_or(|u| first < u)
    }

    fn holds(&self, ts: u64) -> bool {
        self.since.is_none_or(|s| ts >= s) && self.until.is_none_or(|u| ts < u)
    }

    /// The ranges of `index`'s file to read.
    fn ranges(&self, index: &Index, selector: &Selector) -> Vec<(u64, u64)> {
        let chosen: Option<BTreeSet<u32>> = selector.regions(index);
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (n, r) in index.regions.iter().enumerate() {
            if !self.meets(r.first, r.last)
                || chosen.as_ref().is_some_and(|c| !c.contains(&(n as u32)))
            {
                continue;
            }
            let (from, to) = (r.offset, index.region_end(n));
            match ranges.last_mut() {
                Some(last) if last.1 == from => last.1 = to,
                _ => ranges.push((from, to)),
            }
        }
        ranges
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
        let mut outcome = Outcome::default();
        let mut plans = Vec::new();
        let mut held: Option<(u64, u64)> = None;
        for path in store.files()? {
            let state = IndexState::of(&path);
            let Ok(Some((header, file))) = pcapfile::open(&path) else {
                // Deleted by retention since it was listed, or not (yet) a pcap file.
                continue;
            };
            let len = file.metadata().map_or(0, |m| m.len());
            outcome.bytes_held += len;
            let ranges = match &state {
                IndexState::Sound(index) => {
                    if index.packets > 0 {
                        let span = (index.first, index.last);
                        held = Some(held.map_or(span, |(a, b)| (a.min(span.0), b.max(span.1))));
                        if !self.meets(index.first, index.last) {
                            continue;
                        }
                    }
                    self.ranges(index, &selector)
                }
                IndexState::Missing | IndexState::Refused(_) => {
                    if let IndexState::Refused(e) = &state {
                        outcome.refused.push((path.clone(), e.to_string()));
                    }
                    if self.since.is_some() || self.until.is_some() {
                        // Its span decides both whether it is read and what is held.
                        let (_, span) = file_span(&path, &state).map_err(io(path.display()))?;
                        let Some(span) = span else { continue };
                        held = Some(held.map_or(span, |(a, b)| (a.min(span.0), b.max(span.1))));
                        if !self.meets(span.0, span.1) {
                            continue;
                        }
                    }
                    vec![(FILE_HEADER, u64::MAX)]
                }
            };
            plans.push(Plan {
                path,
                header,
                file,
                ranges,
            });
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
        for plan in plans {
            outcome.files_read += 1;
            let name = plan.path.display().to_string();
            let mut records = pcapfile::Records::new(plan.header, plan.file, FILE_HEADER, 0)
                .map_err(io(&name))?;
            for (from, to) in plan.ranges {
                records.seek(from, to).map_err(io(&name))?;
                while let Some(r) = records.next_record().map_err(io(&name))? {
                    outcome.bytes_read += r.raw.len() as u64;
                    if !self.holds(r.ts_ns)
                        || filter
                            .as_ref()
                            .is_some_and(|f| !f.matches(r.data, r.wire_len))
                    {
                        continue;
                    }
                    outcome.packets += 1;
                    if let Some(o) = out.as_mut() {
                        o.write_all(r.raw).map_err(io("the output"))?;
                    }
                }
            }
        }
        if let Some(o) = out.as_mut() {
            o.flush().map_err(io("the output"))?;
        }
        Ok(outcome)
    }
}
