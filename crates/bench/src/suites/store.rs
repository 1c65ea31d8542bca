//! `store`: the packet store. Capture points: `capture --store` against `-w` alone on the
//! same traffic (loss, CPU per packet over all threads, index bytes against packet bytes).
//! Query points, over a store of over 20 GB in a full run: a selective query (one flow of
//! 100k) and a broad one (10% of the traffic) against `tcpdump -r FILTER` over every file,
//! against reading just the matching packets (and just the pages the index picked) with
//! the page cache dropped, and against the disk's own read rate.
//!
//! Why the query store is written from a generated stream (`capture -r - --store`) and not
//! through the lab: the generator's flow schedule holds at most 65,536 flows, and the
//! query points need exactly 100k distinct 5-tuples with known addresses; the capture
//! points measure the live path. Why the page cache is dropped (`echo 3 >
//! /proc/sys/vm/drop_caches`, as root) before every timed query: a store of 20 GB does not
//! fit it anyway, but the last files written would, and would flatter whoever reads them.
//! The tools' own programs are loaded again after the drop, untimed: a query on a running
//! probe finds its binary in memory, and poolcap's (tens of MB) loaded from the disk took
//! most of a one-flow query's time.

use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use poolcap_engine::store::pcapfile::{self, FILE_HEADER};
use poolcap_engine::store::query::Query;
use poolcap_engine::store::select::Selector;
use poolcap_engine::store::{IndexState, Store};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::disk::{check_room, PEER_KIB, POOL, RING_KIB, SUSTAINED_BYTES};
use super::{checks_line, pct, spec, Check, Plan, Scale, Table, Text};
use crate::meta::Meta;
use crate::peer::{Counts, Tool, Traffic};
use crate::point::{Bench, Point, Record, Subject};
use crate::report::{RawLog, Row};
use crate::stats::Spread;

/// For BENCHMARKS.md.
pub const INTRO: &str = "The packet store (`capture --store`, `poolcap query`). Capture \
points: poolcap writing a store against poolcap writing with `-w` alone, same memory, same \
traffic (1514 B at top speed, 64 B at 300k pps, imix at top speed; the generator's 65,536 \
flows): loss, CPU per packet (all threads, the index keeper's included) and index bytes \
against packet bytes. Query points, over a store of over 20 GB (full run) written from a \
generated stream of imix frames over exactly 100k UDP flows: a selective query (one flow) \
and a broad one (10% of the traffic), each against `tcpdump -r FILTER -w /dev/null` over \
every file of the store, against reading just the matching packets' bytes (one read each) \
and just the regions the index picked, all with the page cache dropped first, beside \
poolcap's own start (`--version`), and against the disk's own read rate (`dd iflag=direct`). Read: loss, CPU ratio, index share; query \
seconds and MB read.";

/// Flows of the traffic.
pub const FLOWS: usize = 100_000;
/// Millions of bytes per capture file at the capture points: small enough that the keeper
/// indexes files while the traffic lasts (inside the CPU window), not only at the end.
pub const FILE_MB: u64 = 100;
/// Millions of bytes per capture file of the query store (the default of `--store`).
const QUERY_FILE_MB: u64 = 1000;
/// Bytes of the query store (smoke, quick, full).
const QUERY_BYTES: (f64, f64, f64) = (20e6, 2.5e9, SUSTAINED_BYTES);
/// The flow the selective query asks for.
const ONE_FLOW: usize = 54_321;
/// Subject names.
const WRITE: &str = "poolcap -w";
const STORE: &str = "poolcap --store";
/// Google Stenographer's writer and indexer (a peer; skipped where it is not installed:
/// `scripts/stenotype.sh` builds it).
const STENOTYPE: &str = "stenotype";
const QUERY: &str = "poolcap query";
const SCAN: &str = "tcpdump -r, every file";
const PACKETS: &str = "read the matching packets";
const REGIONS: &str = "read the chosen pages";
/// poolcap's own start and exit (`poolcap --version`, its program loaded): the part of a
/// query's time that is not the store's, reported beside the selective query, where the
/// packets' own reads take a few milliseconds.
const START: &str = "poolcap start (--version)";
/// Point ids of the queries.
const SELECTIVE: &str = "selective: 1 flow of 100k";
const BROAD: &str = "broad: 10% of the traffic";
const DISK: &str = "disk read limit";
/// The query points' ids (run after the capture points, when `--points` picks them).
pub const QUERY_POINTS: [&str; 3] = [DISK, SELECTIVE, BROAD];

/// A capture point's subjects: `-w` alone, then `--store`, with the disk suite's memory;
/// then stenotype with the same memory as its ring (the disk suite's peer buffer).
fn subjects() -> Vec<Subject> {
    let base = || crate::peer::CaptureSpec {
        pool: Some(POOL),
        ..spec(Tool::Poolcap, RING_KIB, true)
    };
    vec![
        Subject::named(WRITE, base()),
        Subject::named(
            STORE,
            crate::peer::CaptureSpec {
                store: Some(FILE_MB),
                ..base()
            },
        ),
        Subject::named(
            STENOTYPE,
            crate::peer::CaptureSpec {
                store: Some(FILE_MB),
                ..spec(Tool::Stenotype, PEER_KIB, true)
            },
        ),
    ]
}

/// The capture points.
pub fn plan(scale: Scale) -> Plan {
    let points: Vec<(&str, Traffic)> = vec![
        (
            "1514B top",
            Traffic::top(1514, scale.pick(20_000, 1_000_000, 2_000_000)),
        ),
        (
            "64B 300k",
            Traffic {
                rate: Some(300_000),
                ..Traffic::top(64, scale.pick(20_000, 1_500_000, 4_500_000))
            },
        ),
        (
            "imix top",
            Traffic::imix(scale.pick(20_000, 1_000_000, 3_000_000)),
        ),
    ];
    let n = scale.pick(1, 3, 3);
    Plan {
        points: points
            .into_iter()
            .take(n)
            .map(|(id, t)| Point::new(id, Traffic { flows: FLOWS, ..t }, subjects()))
            .collect(),
        notes: vec![format!(
            "capture points: `-B {RING_KIB} --pool {},{}` for both subjects; `--store DIR -C \
             {FILE_MB}` (a file every {FILE_MB} MB, each indexed by the keeper thread when \
             closed; the last one at exit, after the CPU window); `--flows {FLOWS}` (the \
             generator's schedule sends 65,536 of them); stenotype: `--blocks {}` (1 MiB ring \
             blocks: the same memory), `--aiops {}`, `--filesize_mb {FILE_MB}`, \
             `--blockage_sec 1`, one thread",
            POOL.0,
            POOL.1,
            PEER_KIB / 1024,
            PEER_KIB / 2048
        )],
    }
}

/// Drops the page cache (as root), so a timed read comes from the disk.
fn drop_caches() -> anyhow::Result<()> {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").context("cannot drop the page cache")
}

/// Drops the page cache, then loads the two tools' programs and libraries again (untimed):
/// a timed query reads its data from the disk, as on a probe that has run for a while,
/// but neither tool pays for loading its own binary (poolcap's is tens of MB).
fn cold_data(exe: &Path) -> anyhow::Result<()> {
    drop_caches()?;
    let _ = Command::new(exe).arg("--version").output();
    let _ = Command::new("tcpdump").arg("--version").output();
    Ok(())
}

/// The flow `i`'s source address and port; every flow goes to 192.0.2.1 port 53.
fn flow(i: usize) -> ([u8; 4], u16) {
    let n = i / 10;
    (
        [10, 1 + (i % 10) as u8, (n >> 8) as u8, n as u8],
        1024 + (i % 60_000) as u16,
    )
}

/// Writes a microsecond pcap stream of imix frames over [`FLOWS`] flows (uniform, seeded)
/// until `bytes` of records are written; returns packets written.
fn write_stream(out: impl Write, bytes: f64) -> std::io::Result<u64> {
    let mut w = BufWriter::with_capacity(1 << 20, out);
    let mut header = Vec::with_capacity(24);
    header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(&65_535u32.to_le_bytes());
    header.extend_from_slice(&1u32.to_le_bytes());
    w.write_all(&header)?;
    let mut rng = SmallRng::seed_from_u64(38);
    let mut frame = [0u8; 1514];
    frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    frame[12..14].copy_from_slice(&[8, 0]);
    let (mut written, mut packets) = (24.0, 0u64);
    let start_s = 1_790_000_000u32;
    while written < bytes {
        let len = match rng.random_range(0..12) {
            0..=6 => 60,
            7..=10 => 590,
            _ => 1514,
        };
        let (src, sport) = flow(rng.random_range(0..FLOWS));
        let ip = &mut frame[14..34];
        ip.copy_from_slice(
            &[0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0]
                .iter()
                .chain(&src)
                .chain(&[192, 0, 2, 1])
                .copied()
                .collect::<Vec<u8>>(),
        );
        ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        frame[34..36].copy_from_slice(&sport.to_be_bytes());
        frame[36..38].copy_from_slice(&53u16.to_be_bytes());
        frame[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
        let us = packets;
        let mut rec = [0u8; 16];
        rec[..4].copy_from_slice(&(start_s + (us / 1_000_000) as u32).to_le_bytes());
        rec[4..8].copy_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        rec[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        w.write_all(&rec)?;
        w.write_all(&frame[..len])?;
        written += (16 + len) as f64;
        packets += 1;
    }
    w.flush()?;
    Ok(packets)
}

/// Writes the query store into `dir` through `poolcap capture -r - --store`.
fn build_store(exe: &Path, dir: &Path, bytes: f64) -> anyhow::Result<u64> {
    let mut child = Command::new(exe)
        .args(["capture", "-q", "-r", "-", "--store"])
        .arg(dir)
        .args(["-C", &QUERY_FILE_MB.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start poolcap capture -r - --store")?;
    let stdin = child.stdin.take().context("no stdin")?;
    let sent = write_stream(stdin, bytes);
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "capture --store failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    sent.context("writing the generated stream")
}

/// Wall seconds of `cmd` (which must succeed), and its standard error.
fn timed(mut cmd: Command) -> anyhow::Result<(f64, String)> {
    let t = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let s = t.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {}", out.status, err.trim());
    }
    Ok((s, err))
}

/// `N packets matched; read B of H bytes in F files` → (N, B).
fn query_line(stderr: &str) -> Option<(f64, f64)> {
    let line = stderr.lines().find(|l| l.contains("packets matched"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    Some((w.first()?.parse().ok()?, w.get(4)?.parse().ok()?))
}

/// One read per range (file, offset, length) with the page cache dropped; seconds.
fn read_ranges(ranges: &[(PathBuf, u64, u64)]) -> anyhow::Result<f64> {
    drop_caches()?;
    let t = Instant::now();
    let mut buf = Vec::new();
    let mut open: Option<(&Path, std::fs::File)> = None;
    for (path, offset, len) in ranges {
        if open.as_ref().is_none_or(|(p, _)| *p != path.as_path()) {
            open = Some((path, std::fs::File::open(path)?));
        }
        let (_, f) = open.as_ref().expect("opened above");
        buf.resize(*len as usize, 0);
        f.read_exact_at(&mut buf, *offset)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// The ranges the index picks for `filter` (what `poolcap query` reads) and, within them,
/// the matching packets (by `matches` on the frame): each as (file, offset, length).
type Ranges = Vec<(PathBuf, u64, u64)>;
fn candidates(
    store: &Store,
    filter: &str,
    matches: impl Fn(&[u8]) -> bool,
) -> anyhow::Result<(Ranges, Ranges)> {
    let selector = Selector::parse(filter);
    let query = Query::default();
    let (mut chosen, mut packets) = (Vec::new(), Vec::new());
    for f in store.files()? {
        let IndexState::Sound(mut index) = IndexState::of(&f) else {
            bail!("{} has no sound index", f.display());
        };
        let ranges = query
            .ranges(&mut index, &selector)
            .with_context(|| format!("{}: index", f.display()))?;
        let Some((header, file)) = pcapfile::open(&f)? else {
            continue;
        };
        let mut records = pcapfile::Records::new(header, file, FILE_HEADER, 0)?;
        for (from, to) in ranges {
            chosen.push((f.clone(), from, to - from));
            records.seek(from, to)?;
            while let Some(r) = records.next_record()? {
                if matches(r.data) {
                    packets.push((f.clone(), r.offset, r.raw.len() as u64));
                }
            }
        }
    }
    Ok((chosen, packets))
}

/// A record of a query subject: its seconds, bytes read and packets matched.
fn record(point: &str, subject: &str, run: usize, values: &[(&str, f64)]) -> Record {
    let mut counts = Counts::default();
    for (k, v) in values {
        counts.extra.insert((*k).to_owned(), *v);
    }
    let mut r = Record::blank("store", point, subject, subject.starts_with("poolcap"), run);
    r.counts = Some(counts);
    r
}

/// The query points (see the module docs): builds the store under the bench's scratch
/// directory, times every subject `runs` times, deletes the store.
pub fn queries(
    b: &Bench,
    scale: Scale,
    runs: usize,
    log: &mut RawLog,
    records: &mut Vec<Record>,
) -> anyhow::Result<()> {
    let bytes = scale.pick(QUERY_BYTES.0, QUERY_BYTES.1, QUERY_BYTES.2);
    check_room(&b.scratch, (bytes * 1.1) as u64)?;
    let dir = b.scratch.join("query.store");
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("store: writing a {:.1} GB query store", bytes / 1e9);
    let result =
        build_store(&b.exe, &dir, bytes).and_then(|_| measure_queries(b, &dir, runs, log, records));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure_queries(
    b: &Bench,
    dir: &Path,
    runs: usize,
    log: &mut RawLog,
    records: &mut Vec<Record>,
) -> anyhow::Result<()> {
    let store = Store::open(dir)?;
    let files = store.files()?;
    let held: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let mut push = |r: Record, log: &mut RawLog| -> anyhow::Result<()> {
        log.append(&r)?;
        records.push(r);
        Ok(())
    };
    // The disk's read rate: the largest file, past the page cache.
    let largest = files
        .iter()
        .max_by_key(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .context("the query store is empty")?;
    for run in 1..=runs {
        let mut dd = Command::new("dd");
        dd.arg(format!("if={}", largest.display())).args([
            "of=/dev/null",
            "bs=4M",
            "iflag=direct",
            "status=none",
        ]);
        let (s, _) = timed(dd)?;
        let len = std::fs::metadata(largest)?.len() as f64;
        push(
            record(
                DISK,
                "dd iflag=direct",
                run,
                &[("query_s", s), ("bytes_read", len)],
            ),
            log,
        )?;
    }
    let (src, sport) = flow(ONE_FLOW);
    let host = format!("{}.{}.{}.{}", src[0], src[1], src[2], src[3]);
    let one = format!("src host {host} and udp src port {sport}");
    let broad = "src net 10.1.0.0/16".to_owned();
    let is_one = |d: &[u8]| d.len() > 36 && d[26..30] == src && d[34..36] == sport.to_be_bytes();
    let (regions, packets) = candidates(&store, &one, is_one)?;
    for (point, filter) in [(SELECTIVE, &one), (BROAD, &broad)] {
        for run in 1..=runs {
            if b.stop.load(std::sync::atomic::Ordering::Relaxed) {
                bail!("interrupted");
            }
            cold_data(&b.exe)?;
            let mut q = Command::new(&b.exe);
            q.args(["query", "-w", "/dev/null"]).arg(dir).arg(filter);
            let (s, err) = timed(q)?;
            let (matched, read) = query_line(&err).context("poolcap query printed no summary")?;
            push(
                record(
                    point,
                    QUERY,
                    run,
                    &[("query_s", s), ("bytes_read", read), ("matched", matched)],
                ),
                log,
            )?;
            cold_data(&b.exe)?;
            let t = Instant::now();
            let mut matched = 0.0;
            for f in &files {
                let out = Command::new("tcpdump")
                    .args(["-n", "-r"])
                    .arg(f)
                    .args(["-w", "/dev/null", "--count", filter])
                    .output()
                    .context("cannot run tcpdump")?;
                if !out.status.success() {
                    bail!(
                        "tcpdump -r failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                matched += String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<f64>().ok())
                    .unwrap_or(0.0);
            }
            let s = t.elapsed().as_secs_f64();
            push(
                record(
                    point,
                    SCAN,
                    run,
                    &[
                        ("query_s", s),
                        ("bytes_read", held as f64),
                        ("matched", matched),
                    ],
                ),
                log,
            )?;
            if point == SELECTIVE {
                let mut version = Command::new(&b.exe);
                version.arg("--version");
                let (s, _) = timed(version)?;
                push(record(point, START, run, &[("query_s", s)]), log)?;
                for (name, ranges) in [(PACKETS, &packets), (REGIONS, &regions)] {
                    let s = read_ranges(ranges)?;
                    let bytes: u64 = ranges.iter().map(|r| r.2).sum();
                    let matched = if name == PACKETS {
                        packets.len() as f64
                    } else {
                        0.0
                    };
                    push(
                        record(
                            point,
                            name,
                            run,
                            &[
                                ("query_s", s),
                                ("bytes_read", bytes as f64),
                                ("matched", matched),
                            ],
                        ),
                        log,
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// The median of `key` of `subject` at `point`.
fn med(rows: &[Row], point: &str, subject: &str, key: &str) -> Option<f64> {
    super::med(rows, |p| p == point, subject, key)
}

/// The capture points' rows.
fn capture_rows(rows: &[Row]) -> Vec<Row> {
    super::rows_where(rows, |r| {
        [WRITE, STORE, STENOTYPE].contains(&r.subject.as_str())
    })
}

/// Summary text.
pub fn text(meta: &Meta, rows: &[Row]) -> Text {
    let capture = Table::new(
        "Capture: --store against -w alone and stenotype",
        capture_rows(rows),
        &[
            "offered",
            "sender_pps",
            "captured",
            "loss",
            "cpu_s_per_mpkt",
            "index_share",
            "mb_per_s",
        ],
        &[],
    );
    let queries = Table::new(
        "Queries (page cache dropped before each)",
        super::rows_where(rows, |r| r.capture.is_none() && r.point != "calibration"),
        &["query_s", "read_mb", "matched"],
        &[],
    );
    let _ = meta;
    let (targets, headline) = targets(rows);
    Text {
        settings: vec![
            "capture points: both subjects are poolcap with the same memory (`-B` ring and \
             pool as the disk suite), writing under /var/tmp with direct I/O; captured = \
             distinct frames found in the file or in the store's files, read back as \
             streams (a frame found twice fails the run)"
                .into(),
            "stenotype (Google Stenographer's writer, built by `scripts/stenotype.sh`): its \
             ring gets poolcap's ring and pool (the disk suite's peer buffer) as 1 MiB \
             blocks, half of them in flight to the disk (`--aiops`); it writes whole ring \
             blocks with O_DIRECT, so captured = the blocks' packet counts, file bytes = \
             its packet files (partly filled blocks included), index share = its leveldb \
             index files against them"
                .into(),
            format!(
                "query store: `poolcap capture -q -r - --store DIR -C {QUERY_FILE_MB}` fed a \
                 generated pcap stream: imix (60/590/1514 B, 7:4:1) over exactly {FLOWS} UDP \
                 flows 10.(1+i mod 10).x.y:1024+(i mod 60000) → 192.0.2.1:53, drawn \
                 uniformly (seeded); selective filter `src host H and udp src port P` (flow \
                 {ONE_FLOW}), broad `src net 10.1.0.0/16` (a tenth of the flows)"
            ),
            "every timed read starts after `sync; echo 3 > /proc/sys/vm/drop_caches` (root), \
             then `poolcap --version` and `tcpdump --version` (untimed: each tool's program is \
             loaded, the store's data is not): \
             `poolcap query DIR FILTER -w /dev/null`; `tcpdump -n -r FILE -w /dev/null --count \
             FILTER` over every file, one after the other; the matching packets read with one \
             pread each (their offsets found beforehand, untimed); the regions the index \
             chose read with one pread each; `poolcap --version` after the selective query \
             (its program loaded: the start and exit every query pays); the disk read limit is \
             `dd iflag=direct bs=4M` of the largest file"
                .into(),
        ],
        tables: vec![capture, queries],
        targets,
        headline,
        ..Text::default()
    }
}

/// Ratio of `key` of --store to -w alone at `point`.
fn store_ratio(rows: &[Row], point: &str, key: &str) -> Option<(f64, f64, f64)> {
    let s = med(rows, point, STORE, key)?;
    let w = med(rows, point, WRITE, key)?;
    (w > 0.0).then(|| (s / w, s, w))
}

fn targets(rows: &[Row]) -> (Vec<String>, String) {
    let points = super::points_of(&capture_rows(rows))
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let mut loss = Vec::new();
    let mut cpu = Vec::new();
    let mut index = Vec::new();
    for p in &points {
        if let (Some(s), Some(w)) = (med(rows, p, STORE, "loss"), med(rows, p, WRITE, "loss")) {
            if w == 0.0 {
                loss.push(Check {
                    point: p.clone(),
                    ok: s == 0.0,
                    detail: format!("--store {} (-w {})", pct(s), pct(w)),
                });
            }
        }
        if let Some((r, s, w)) = store_ratio(rows, p, "cpu_s_per_mpkt") {
            cpu.push(Check {
                point: p.clone(),
                ok: r <= 1.2,
                detail: format!("{s:.3} vs {w:.3} CPU s/Mpkt = {r:.2}×"),
            });
        }
        if let Some(x) = med(rows, p, STORE, "index_share") {
            index.push(Check {
                point: p.clone(),
                ok: !p.starts_with("imix") || x <= 0.05,
                detail: format!(
                    "{}{}",
                    pct(x),
                    if p.starts_with("imix") {
                        ""
                    } else {
                        " (reported)"
                    }
                ),
            });
        }
    }
    let mut peer = Vec::new();
    for p in &points {
        let Some(loss) = med(rows, p, STENOTYPE, "loss") else {
            continue;
        };
        let cpu =
            |s: &str| med(rows, p, s, "cpu_s_per_mpkt").map_or("–".into(), |x| format!("{x:.3}"));
        peer.push(Check {
            point: p.clone(),
            ok: true,
            detail: format!(
                "loss {} (--store {}); CPU {} vs --store {} s/Mpkt; index {} of packet bytes",
                pct(loss),
                med(rows, p, STORE, "loss").map_or("–".into(), pct),
                cpu(STENOTYPE),
                cpu(STORE),
                med(rows, p, STENOTYPE, "index_share").map_or("–".into(), pct),
            ),
        });
    }
    let q = |s: &str, k: &str| med(rows, SELECTIVE, s, k);
    let mut selective = Vec::new();
    if let (Some(query), Some(scan)) = (q(QUERY, "query_s"), q(SCAN, "query_s")) {
        selective.push(Check {
            point: "vs the scan".into(),
            ok: scan / query >= 100.0,
            detail: format!("{query:.3} s vs {scan:.1} s = {:.0}× faster", scan / query),
        });
        if let Some(p) = q(PACKETS, "query_s") {
            let start = q(START, "query_s").map_or(String::new(), |s| {
                format!(" (of which poolcap's start {s:.3} s)")
            });
            selective.push(Check {
                point: "vs reading the matching packets".into(),
                ok: query <= 3.0 * p,
                detail: format!("{query:.3} s{start} vs {p:.3} s = {:.1}×", query / p),
            });
        }
        if let (Some(mb), Some(disk)) = (q(PACKETS, "read_mb"), disk_mb_s(rows)) {
            selective.push(Check {
                point: "vs the matching bytes at the disk's read rate (reported)".into(),
                ok: true,
                detail: format!("{:.2} MB at {disk:.0} MB/s = {:.4} s", mb, mb / disk),
            });
        }
    }
    let mut broad = Vec::new();
    if let (Some(query), Some(scan)) = (
        med(rows, BROAD, QUERY, "query_s"),
        med(rows, BROAD, SCAN, "query_s"),
    ) {
        broad.push(Check {
            point: BROAD.into(),
            ok: query <= scan,
            detail: format!("{query:.2} s vs {scan:.2} s"),
        });
    }
    let held = med(rows, SELECTIVE, SCAN, "read_mb")
        .map_or("–".into(), |mb| format!("{:.1} GB", mb / 1e3));
    let lines = vec![
        checks_line("--store keeps zero loss wherever -w alone is lossless (medians)", &loss),
        checks_line("--store's CPU per packet at most 1.2× -w alone's (medians)", &cpu),
        checks_line("index bytes at most 5% of packet bytes for imix (64 B, 1514 B reported)", &index),
        checks_line("stenotype, same memory and traffic (reported, medians)", &peer),
        checks_line(
            &format!("selective query over {held}: at least 100× faster than the scan, within 3× of reading the matching packets"),
            &selective,
        ),
        checks_line("broad query not slower than the scan", &broad),
    ];
    let ratios: Vec<f64> = points
        .iter()
        .filter_map(|p| store_ratio(rows, p, "cpu_s_per_mpkt").map(|x| x.0))
        .collect();
    let cpu_text = Spread::of(ratios.iter().copied()).map_or("–".into(), |s| {
        format!("worst {:.2}×, median {:.2}×", s.max, s.median)
    });
    let worst_loss = points
        .iter()
        .filter_map(|p| med(rows, p, STORE, "loss"))
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
    let mut headline = format!(
        "--store against -w alone: CPU per packet {cpu_text}; loss worst {}",
        worst_loss.map_or("–".into(), pct),
    );
    if let Some(x) = med(rows, "imix top", STORE, "index_share") {
        headline.push_str(&format!("; index {} of packet bytes for imix", pct(x)));
    }
    if let (Some(query), Some(scan)) = (q(QUERY, "query_s"), q(SCAN, "query_s")) {
        headline.push_str(&format!(
            ". Selective query over {held}: {query:.3} s against the scan's {scan:.1} s ({:.0}×)",
            scan / query
        ));
        if let Some(p) = q(PACKETS, "query_s") {
            headline.push_str(&format!(
                ", {:.1}× the time to read just its packets",
                query / p
            ));
        }
    }
    if let (Some(query), Some(scan)) = (
        med(rows, BROAD, QUERY, "query_s"),
        med(rows, BROAD, SCAN, "query_s"),
    ) {
        headline.push_str(&format!("; broad query {query:.1} s against {scan:.1} s"));
    }
    headline.push('.');
    (lines, headline)
}

/// The disk's read rate (median of the `dd iflag=direct` runs).
fn disk_mb_s(rows: &[Row]) -> Option<f64> {
    let s = med(rows, DISK, "dd iflag=direct", "query_s")?;
    let mb = med(rows, DISK, "dd iflag=direct", "read_mb")?;
    (s > 0.0).then(|| mb / s)
}

/// The store suite (see [`INTRO`]).
pub const DEF: super::SuiteDef = super::SuiteDef::new(
    "Packet store: capture with an index, queries against the scan",
    INTRO,
    |scale, _| plan(scale),
    text,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_stream_has_every_flow_and_reads_back_as_pcap() {
        let mut buf = Vec::new();
        let n = write_stream(&mut buf, 40e6).unwrap();
        let file = poolcap_format::read_bytes(&buf).unwrap();
        let packets = file.packets.len() as u64;
        let seen: std::collections::HashSet<(Vec<u8>, Vec<u8>)> = file
            .packets
            .iter()
            .map(|p| (p.data[26..30].to_vec(), p.data[34..36].to_vec()))
            .collect();
        assert_eq!(packets, n);
        // 108k uniform draws over 100k flows hit 1 - e^-1.08 of them.
        assert!(seen.len() > 64_000, "{} flows", seen.len());
        let all: std::collections::HashSet<([u8; 4], u16)> = (0..FLOWS).map(flow).collect();
        assert_eq!(all.len(), FLOWS, "every flow is its own 5-tuple");
        for (ip, port) in &seen {
            let ip: [u8; 4] = ip[..].try_into().unwrap();
            assert!(all.contains(&(ip, u16::from_be_bytes([port[0], port[1]]))));
        }
        let (src, port) = flow(ONE_FLOW);
        assert_eq!((src, port), ([10, 2, 21, 56], 55_345));
        assert_eq!(flow(10).0[1], 1, "a tenth of the flows in 10.1/16");
    }

    #[test]
    fn the_query_summary_line_parses() {
        assert_eq!(
            query_line("12 packets matched; read 4096 of 99999 bytes in 3 files\n"),
            Some((12.0, 4096.0))
        );
        assert_eq!(query_line("nothing"), None);
    }

    #[test]
    fn capture_points_compare_store_with_write_alone() {
        let q = plan(Scale::Quick).points;
        assert_eq!(q.len(), 3);
        for p in &q {
            assert_eq!(p.traffic.flows, FLOWS);
            let names: Vec<&str> = p.subjects.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, [WRITE, STORE, STENOTYPE]);
            let c: Vec<_> = p
                .subjects
                .iter()
                .map(|s| s.capture.clone().unwrap())
                .collect();
            assert_eq!(c[1].store, Some(FILE_MB));
            assert_eq!(
                (c[0].store, c[0].pool, c[1].pool),
                (None, Some(POOL), Some(POOL))
            );
            // stenotype: a store of files as large, its ring as large as poolcap's ring
            // and pool together.
            assert_eq!(
                (c[2].tool, c[2].write, c[2].store, c[2].buffer_kib),
                (Tool::Stenotype, true, Some(FILE_MB), RING_KIB + 32 * 1024)
            );
        }
        assert!(q
            .iter()
            .any(|p| p.id == "64B 300k" && p.traffic.rate == Some(300_000)));
    }
}
