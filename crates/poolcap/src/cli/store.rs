//! `poolcap store DIR status|repair`: what a packet store holds, and rebuilding the
//! indexes it lacks (see `poolcap_engine::store`); and storing while capturing, shared by
//! `capture`, `probe` and `forward --store DIR` (with `--query-listen`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use poolcap_export::http::{parse_listen_for, Listener, MetricsServer};
use poolcap_format::FileFormat;

use crate::capture::rotate::RotateSpec;
use crate::capture::{CaptureConfig, Output};
use crate::cli::usage;
use crate::store::keeper::{Heard, Keeper, Retention};
use crate::store::{show_time, Store};

/// What to do with the store.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Action {
    /// Time range held, files, bytes, index bytes, packets, files being written, files
    /// without a sound index (other than those being written).
    Status,
    /// Build the index of every file that has none, or a damaged or mismatched one (not of
    /// a file being written: the last of a run whose process is alive).
    Repair,
}

/// Arguments of `poolcap store`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  poolcap store /var/lib/poolcap status
  poolcap store /var/lib/poolcap repair")]
pub struct StoreArgs {
    /// The store directory (`poolcap capture --store DIR`).
    dir: PathBuf,
    /// status or repair.
    #[arg(value_enum)]
    action: Action,
}

/// Runs `poolcap store`.
pub fn run(a: StoreArgs) -> anyhow::Result<()> {
    let store = Store::open(&a.dir).map_err(|e| usage(e.to_string()))?;
    match a.action {
        Action::Status => {
            let s = store.status()?;
            match s.held {
                Some((first, last)) => {
                    println!("held: {} to {}", show_time(first), show_time(last))
                }
                None => println!("held: no packets"),
            }
            println!("files: {}", s.files);
            println!("bytes: {}", s.bytes);
            println!("index bytes: {}", s.index_bytes);
            println!("packets: {}", s.packets);
            println!("being written: {}", s.being_written.len());
            for f in &s.being_written {
                println!(
                    "  {}: no index until closed (queries read it whole)",
                    f.display()
                );
            }
            println!("unindexed: {}", s.unindexed.len());
            for (f, why) in &s.unindexed {
                println!("  {}: {why}", f.display());
            }
        }
        Action::Repair => {
            let done = store.repair()?;
            for (f, why) in &done {
                println!("indexed {} ({why})", f.display());
            }
            println!("{} indexes rebuilt", done.len());
        }
    }
    Ok(())
}

/// `--store DIR` and its options, the same on `capture`, `probe` and `forward`.
#[derive(Debug, Clone, Args)]
pub struct StoreOptions {
    /// Write the packets into a packet store in DIR: rotated pcap files (capture's -C SIZE
    /// each; default a tenth of --store-size, at most 1000 MB), each indexed when closed, the
    /// oldest deleted first to stay within --store-size and --store-keep; query with
    /// `poolcap query DIR`.
    #[arg(long, value_name = "DIR", conflicts_with = "write")]
    pub store: Option<PathBuf>,
    /// With --store: keep capture files and indexes within SIZE bytes (e.g. 500G), deleting
    /// the files whose last packet is oldest first.
    #[arg(long, value_name = "SIZE", requires = "store", value_parser = crate::units::parse_bytes)]
    pub store_size: Option<u64>,
    /// With --store: keep the last DURATION of traffic by the packets' time (e.g. 7d): a
    /// closed file goes once its last packet is older than DURATION before the newest packet
    /// held (a file without a sound index goes by the start time in its name); never the
    /// file being written. A recorded file (-r) of old traffic is kept by its own times.
    #[arg(long, value_name = "DURATION", requires = "store", value_parser = humantime::parse_duration)]
    pub store_keep: Option<Duration>,
    /// With --store: answer `GET /query?filter=F&since=T&until=T` on ADDR with the matching
    /// packets as a pcap stream (PORT or :PORT: loopback; ADDR:PORT, e.g. 0.0.0.0:8080, as
    /// written; no authentication).
    #[arg(long, value_name = "ADDR", requires = "store")]
    pub query_listen: Option<String>,
}

/// A store being set up: its keeper and query server start once the capture has started.
pub struct PendingStore {
    store: Store,
    retention: Retention,
    closed: Heard,
    queries: Option<Listener>,
}

/// A store being written: its keeper, and its query server if --query-listen.
pub struct RunningStore {
    keeper: Keeper,
    _queries: Option<MetricsServer>,
}

/// A store's files: `rotate_mb` (-C), else a tenth of the budget within 1 MB..1000 MB;
/// numbered by a -W ring too large to wrap, so that a run's names sort in time order.
fn rotation(rotate_mb: Option<u64>, budget: Option<u64>) -> RotateSpec {
    let size = rotate_mb.map_or_else(
        || budget.map_or(1_000_000_000, |s| (s / 10).clamp(1_000_000, 1_000_000_000)),
        |m| m.saturating_mul(1_000_000),
    );
    RotateSpec {
        size: Some(size),
        seconds: None,
        files: Some(1_000_000_000),
    }
}

/// Opens (or makes) the store in `dir`, indexes what an earlier run left unindexed, and
/// points `cfg`'s output at it (nanosecond pcap files of `rotate` size, their last batch
/// visible to queries while written, each announced to the keeper once closed).
fn open_store(
    dir: &Path,
    rotate: RotateSpec,
    cfg: &mut CaptureConfig,
) -> anyhow::Result<(Store, Heard)> {
    let store = Store::create(dir).map_err(|e| usage(e.to_string()))?;
    for (f, why) in store.repair()? {
        crate::say!("store: indexed {} ({why})", f.display());
    }
    let (tx, closed) = Keeper::channel();
    cfg.files.rotate = rotate;
    cfg.files.live_tail = true;
    cfg.files.closed = Some(tx);
    cfg.output = Some((Output::File(store.run_template()), FileFormat::PcapNs));
    Ok((store, closed))
}

impl StoreOptions {
    /// If --store is given: binds --query-listen's address (before privileges are dropped:
    /// a port below 1024 needs them), opens DIR (`open_store`) with files of `rotate_mb` (-C)
    /// or `rotation`'s default size, and points `cfg` at it.
    pub fn open(
        &self,
        rotate_mb: Option<u64>,
        cfg: &mut CaptureConfig,
    ) -> anyhow::Result<Option<PendingStore>> {
        let Some(dir) = &self.store else {
            return Ok(None);
        };
        let queries = self
            .query_listen
            .as_deref()
            .map(|a| Listener::bind(parse_listen_for("--query-listen", a)?))
            .transpose()?;
        let retention = Retention {
            size: self.store_size,
            keep: self.store_keep,
        };
        let rotate = rotation(rotate_mb, self.store_size);
        let (store, closed) = open_store(dir, rotate, cfg)?;
        Ok(Some(PendingStore {
            store,
            retention,
            closed,
            queries,
        }))
    }
}

impl PendingStore {
    /// Starts the keeper and the query server (after the engine started: privileges are
    /// dropped by then).
    pub fn start(self) -> anyhow::Result<RunningStore> {
        let queries = self
            .queries
            .map(|l| super::query::serve(l, self.store.dir()))
            .transpose()?;
        if let Some(server) = &queries {
            log::info!("store: queries on http://{}/query", server.addr());
        }
        Ok(RunningStore {
            keeper: Keeper::start(self.store, self.retention, self.closed)?,
            _queries: queries,
        })
    }
}

/// Waits for the keeper to index the last file, and says what it did; the query server
/// stops with it.
pub fn finish(running: Option<RunningStore>) {
    let Some(running) = running else { return };
    let r = running.keeper.finish();
    crate::say!(
        "store: {} files indexed ({} read back from disk; {} index bytes), {} deleted by \
         retention ({} bytes), {} prefix indexes of files being written ({} ms)",
        r.indexed,
        r.read_back,
        r.index_bytes,
        r.deleted,
        r.deleted_bytes,
        r.prefixes,
        r.prefix_time.as_millis()
    );
    for e in &r.errors {
        crate::say!("store: {e}");
    }
}
