//! The packet store: a directory of rotated capture files, each with an index beside it,
//! pruned oldest first, and queried by tcpdump filter and time window.
//!
//! How the others do it, and what was taken:
//!
//! * Stenographer (Google) writes each thread's packets to files of at most 4 GB rotated
//!   every minute, and beside each an index (a leveldb SSTable) with one key per
//!   (attribute, packet offset): IP protocol, ports, IPv4 and IPv6 addresses. A query
//!   (a small BPF subset) picks files by time from their names, unites and intersects the
//!   offset sets of its primitives, seeks to each packet. The index is written by a
//!   separate thread at rotation, off the capture path; the server deletes the oldest files
//!   when the disk fills.
//! * n2disk (ntop) writes pcap files with a timeline (files by time, in a directory tree)
//!   and an optional flow index per file; `npcapextract` takes a time window and a BPF
//!   filter, uses the index to pick blocks, and runs the filter over them.
//! * Arkime keeps, per session, the list of packet positions (file number and offset) in
//!   Elasticsearch, with the session's metadata; extraction reads those positions.
//!
//! poolcap's choice: files stay plain pcap written by the capture's own writer and
//! rotation (any tool reads them, no new write path to make lossless); the index is
//! Stenographer's attributes, not per packet but per 64 KiB region of the file (n2disk's
//! blocks): each region's signature, a small Bloom filter of its keys (`sig`), which costs
//! the capture a hash and two bits set per key where a list of regions per key cost a map
//! lookup and a sort per key and packet, plus each region's time span as the timeline, in
//! checksummed blocks a query reads only as it needs them (see `index`); it is built per
//! file by a thread beside the capture from what the writer noted of its writes as they
//! land (`keeper`, `build`), so no file is read back but its last region. The writer cuts
//! the regions and hashes each record's keys into its region's signature as it copies the
//! record in (`build::Noter`), while its bytes are in the cache, and notes each region as
//! it ends; the keeper adds the regions up: walking the written buffers later missed the
//! cache on every record, and replaying per-record notes cost the keeper more than the
//! writer. A query uses the index only for the
//! parts of the filter it understands (`select`) and always lets libpcap decide on every
//! packet read, so the index can make a query faster, never wrong. The file being written
//! has a prefix index of what the keeper was fed so far, saved in pieces every second or
//! so (`prefix`): queries use it for that part and read the rest whole (the writer makes
//! its last batch visible once the file is quiet,
//! `poolcap_format::DirectFile::with_live_tail`).
//! Arkime's per-session positions need a database and a session table in the capture
//! path; not taken.
//!
//! Layout of a store directory:
//!
//! ```text
//! DIR/poolcap-store.json                    marker: {"format": 1}
//! DIR/20261127T160000Z-12345-000000000      capture file (pcap, nanoseconds)
//! DIR/20261127T160000Z-12345-000000000.idx  its index
//! DIR/20261127T160000Z-12345-000000001      the file being written
//! DIR/20261127T160000Z-12345-000000001.prefix.0.idx  the index of its first regions, in
//! DIR/20261127T160000Z-12345-000000001.prefix.1.idx  pieces (see `prefix`)
//! ```
//!
//! File names sort in the order of their run's start (UTC), the process and the file's
//! number; queries order files by their packets' time instead (see `query`), since two
//! runs may overlap and a clock may be set back.

pub mod build;
pub mod index;
pub mod keeper;
pub mod keys;
pub mod pcapfile;
pub mod prefix;
pub mod query;
pub mod retention;
pub mod select;
pub mod sig;

use std::path::{Path, PathBuf};

use index::{index_path, Index, IndexError, IndexFile};

/// The marker file that makes a directory a store.
pub const MARKER: &str = "poolcap-store.json";
/// The store format this build writes and reads.
pub const FORMAT: u32 = 1;

/// A store that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No marker.
    #[error("{0} is not a poolcap store (no {MARKER} in it)")]
    NotAStore(PathBuf),
    /// A marker of another format.
    #[error(
        "{dir} was written by a newer poolcap (store format {found}; this one reads {FORMAT})"
    )]
    Newer {
        /// The directory.
        dir: PathBuf,
        /// Its format.
        found: u64,
    },
    /// A marker that does not parse.
    #[error("{0}: the {MARKER} marker is damaged")]
    BadMarker(PathBuf),
    /// The file system.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

fn io(what: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        what: what.display().to_string(),
        source,
    }
}

/// A store directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// What is known of one capture file's index.
#[derive(Debug)]
pub enum IndexState {
    /// A sound index (its head read; its blocks are read as a query needs them).
    Sound(IndexFile),
    /// No index (the file being written, or one closed by a crash).
    Missing,
    /// An index that is not used, and why.
    Refused(IndexError),
}

impl IndexState {
    /// The state of capture file `capture`'s index.
    pub fn of(capture: &Path) -> IndexState {
        let idx = index_path(capture);
        if !idx.exists() {
            return IndexState::Missing;
        }
        match IndexFile::open(&idx, capture) {
            Ok(i) => IndexState::Sound(i),
            Err(e) => IndexState::Refused(e),
        }
    }

    /// The state of capture file `capture`'s index, every block of it checked.
    pub fn verified(capture: &Path) -> IndexState {
        match IndexState::of(capture) {
            IndexState::Sound(mut i) => match i.verify() {
                Ok(()) => IndexState::Sound(i),
                Err(e) => IndexState::Refused(e),
            },
            other => other,
        }
    }
}

/// What `status` reports.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Status {
    /// Capture files.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Index bytes.
    pub index_bytes: u64,
    /// Packets held.
    pub packets: u64,
    /// First and last packet time (ns), if any packet is held.
    pub held: Option<(u64, u64)>,
    /// Files without a sound index (read whole by queries), with why; not those being
    /// written.
    pub unindexed: Vec<(PathBuf, String)>,
    /// Files being written (see [`being_written`]): no index yet, read whole by queries.
    pub being_written: Vec<PathBuf>,
}

/// Whether capture file `f` of `files` (the store's, by name) is being written: it has no
/// index, it is the last file of its run (`START-PID-`), and that run's process is alive.
/// Such a file is left to its writer's keeper: `repair` does not index it, `status` does
/// not call it unindexed. (A crashed run's PID taken by another process makes its last file
/// look written: queries read it whole, which is never wrong, until that process ends.)
pub fn being_written(f: &Path, files: &[PathBuf]) -> bool {
    let Some(name) = f.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let Some((run, _)) = name.rsplit_once('-') else {
        return false;
    };
    let Some(pid) = run.split('-').nth(1).and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    let last_of_run = !files.iter().any(|g| {
        g.as_path() > f
            && g.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(run) && n.as_bytes().get(run.len()) == Some(&b'-'))
    });
    last_of_run && !index_path(f).exists() && Path::new(&format!("/proc/{pid}")).exists()
}

/// One file's packets and time span, from its index or by reading it.
pub fn file_span(capture: &Path, state: &IndexState) -> std::io::Result<(u64, Option<(u64, u64)>)> {
    if let IndexState::Sound(i) = state {
        return Ok((i.packets(), (i.packets() > 0).then_some(i.span())));
    }
    let Some((header, file)) = pcapfile::open(capture)? else {
        return Ok((0, None));
    };
    let mut records = pcapfile::Records::new(header, file, pcapfile::FILE_HEADER, u64::MAX)?;
    let (mut packets, mut span) = (0, None::<(u64, u64)>);
    while let Some(r) = records.next_record()? {
        packets += 1;
        span = Some(span.map_or((r.ts_ns, r.ts_ns), |(a, b)| {
            (a.min(r.ts_ns), b.max(r.ts_ns))
        }));
    }
    Ok((packets, span))
}

impl Store {
    /// Opens an existing store.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        let marker = dir.join(MARKER);
        let text = match std::fs::read_to_string(&marker) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotAStore(dir.to_owned()))
            }
            Err(e) => return Err(io(&marker)(e)),
        };
        let found = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64))
            .ok_or_else(|| StoreError::BadMarker(dir.to_owned()))?;
        if found != u64::from(FORMAT) {
            return Err(StoreError::Newer {
                dir: dir.to_owned(),
                found,
            });
        }
        Ok(Store {
            dir: dir.to_owned(),
        })
    }

    /// Opens the store in `dir`, making the directory a store first if it is new or empty.
    pub fn create(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        if !dir.join(MARKER).exists() {
            let empty = std::fs::read_dir(dir).map_err(io(dir))?.next().is_none();
            if !empty {
                return Err(StoreError::NotAStore(dir.to_owned()));
            }
            let marker = dir.join(MARKER);
            std::fs::write(&marker, format!("{{\"format\": {FORMAT}}}\n")).map_err(io(&marker))?;
        }
        Store::open(dir)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The capture files, by name (names without a dot, not hidden).
    pub fn files(&self) -> Result<Vec<PathBuf>, StoreError> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map_err(io(&self.dir))?
            .filter_map(Result::ok)
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                !name.contains('.') && e.file_type().is_ok_and(|t| t.is_file())
            })
            .map(|e| e.path())
            .collect();
        files.sort();
        Ok(files)
    }

    /// The name template of a capture run starting now: files are this plus a 9-digit
    /// number (the rotation's `-W` ring, too large to wrap).
    pub fn run_template(&self) -> PathBuf {
        // 2026-11-27T16:00:00Z -> 20261127T160000Z
        let stamp: String = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        self.dir.join(format!("{stamp}-{}-", std::process::id()))
    }

    /// What the store holds.
    pub fn status(&self) -> Result<Status, StoreError> {
        let mut s = Status::default();
        let files = self.files()?;
        for f in files.iter().cloned() {
            let state = IndexState::verified(&f);
            let (packets, span) = match file_span(&f, &state) {
                Ok(s) => s,
                // Deleted by retention since it was listed.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&f)(e)),
            };
            s.files += 1;
            s.bytes += std::fs::metadata(&f).map_or(0, |m| m.len());
            s.index_bytes += std::fs::metadata(index_path(&f)).map_or(0, |m| m.len());
            s.packets += packets;
            if let Some((a, b)) = span {
                s.held = Some(s.held.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
            }
            match state {
                IndexState::Sound(_) => {}
                IndexState::Missing if being_written(&f, &files) => s.being_written.push(f),
                IndexState::Missing => s.unindexed.push((f, "no index".into())),
                IndexState::Refused(e) => s.unindexed.push((f, e.to_string())),
            }
        }
        Ok(s)
    }

    /// Builds the index of every capture file without a sound one, except files being
    /// written; returns each file indexed with why it was (missing, or the refused index's
    /// fault).
    pub fn repair(&self) -> Result<Vec<(PathBuf, String)>, StoreError> {
        let mut done = Vec::new();
        let files = self.files()?;
        for f in files.iter().cloned() {
            let why = match IndexState::verified(&f) {
                IndexState::Sound(_) => continue,
                IndexState::Missing if being_written(&f, &files) => continue,
                IndexState::Missing => "no index".to_string(),
                IndexState::Refused(e) => e.to_string(),
            };
            let index = Index::build(&f).map_err(|e| StoreError::Io {
                what: f.display().to_string(),
                source: std::io::Error::other(e.to_string()),
            })?;
            index.save(&f).map_err(io(&f))?;
            prefix::remove(&f);
            done.push((f, why));
        }
        Ok(done)
    }
}

/// The time (ns) in a capture file's name (`20261127T160000Z-PID-N`: its run's start, see
/// [`Store::run_template`]), if it is a store's name.
pub fn name_time(capture: &Path) -> Option<u64> {
    let name = capture.file_name()?.to_str()?;
    let s = name.split('-').next()?.as_bytes();
    if s.len() != 16 || s[8] != b'T' || s[15] != b'Z' {
        return None;
    }
    let d = |r: std::ops::Range<usize>| std::str::from_utf8(&s[r]).ok();
    let rfc = format!(
        "{}-{}-{}T{}:{}:{}Z",
        d(0..4)?,
        d(4..6)?,
        d(6..8)?,
        d(9..11)?,
        d(11..13)?,
        d(13..15)?
    );
    let t = humantime::parse_rfc3339(&rfc).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as u64)
}

/// A time (ns since the epoch) as RFC 3339 in UTC, `2026-11-27T16:00:00.000000000Z`.
pub fn show_time(ns: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns);
    humantime::format_rfc3339_nanos(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_names_time_is_its_runs_start() {
        let t = name_time(Path::new("/s/20261127T160000Z-12345-000000003"));
        assert_eq!(t, Some(1_795_795_200 * 1_000_000_000));
        assert_eq!(name_time(Path::new("/s/notes")), None);
        assert_eq!(
            name_time(Path::new("/s/20261327T160000Z-1-000000000")),
            None
        );
    }

    #[test]
    fn the_last_file_of_a_live_run_is_being_written_and_not_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let sample = build::tests::sample_file(500, false);
        // This process's run (alive), and a run whose process is gone (PIDs stop at 2^22).
        let live = format!("20261127T160000Z-{}-", std::process::id());
        let names = [
            format!("{live}000000000"),
            format!("{live}000000001"),
            "20261127T150000Z-4194305-000000000".to_string(),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), &sample).unwrap();
        }
        let s = store.status().unwrap();
        assert_eq!(s.being_written, [dir.path().join(&names[1])]);
        let unindexed: Vec<PathBuf> = s.unindexed.into_iter().map(|(f, _)| f).collect();
        assert_eq!(
            unindexed,
            [dir.path().join(&names[2]), dir.path().join(&names[0])]
        );
        assert_eq!((s.files, s.packets), (3, 1500));
        // Repair indexes the closed file and the dead run's last, not the one written.
        assert_eq!(store.repair().unwrap().len(), 2);
        let s = store.status().unwrap();
        assert_eq!((s.unindexed.len(), s.being_written.len()), (0, 1));
    }
}
