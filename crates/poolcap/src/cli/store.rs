//! `poolcap store DIR status|repair`: what a packet store holds, and rebuilding the
//! indexes it lacks (see `poolcap_engine::store`); and storing while capturing, shared by
//! `capture`, `probe` and `forward --store DIR`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use poolcap_format::FileFormat;

use crate::capture::rotate::RotateSpec;
use crate::capture::{CaptureConfig, Output};
use crate::cli::usage;
use crate::store::keeper::{Heard, Keeper, Retention};
use crate::store::{show_time, Store};

/// What to do with the store.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Action {
    /// Time range held, files, bytes, index bytes, packets, files without a sound index.
    Status,
    /// Build the index of every file that has none, or a damaged or mismatched one.
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

/// `--store DIR`, `--store-size`, `--store-keep` on `probe` and `forward` (`capture` has
/// the same three, beside its -C).
#[derive(Debug, Clone, Args)]
pub struct StoreOptions {
    /// Also write the packets into a packet store in DIR (as `capture --store`: rotated pcap
    /// files of a tenth of --store-size, at most 1000 MB, each indexed when closed, the
    /// oldest deleted first); query with `poolcap query DIR`.
    #[arg(long, value_name = "DIR", conflicts_with = "write")]
    pub store: Option<PathBuf>,
    /// With --store: keep capture files and indexes within SIZE bytes (e.g. 500G).
    #[arg(long, value_name = "SIZE", requires = "store", value_parser = crate::units::parse_bytes)]
    pub store_size: Option<u64>,
    /// With --store: keep the last DURATION of traffic (e.g. 7d).
    #[arg(long, value_name = "DURATION", requires = "store", value_parser = humantime::parse_duration)]
    pub store_keep: Option<Duration>,
}

/// A store being set up: its keeper starts once the capture has started.
pub struct PendingStore {
    store: Store,
    retention: Retention,
    closed: Heard,
}

/// A store's files: `rotate_mb` (-C), else a tenth of the budget within 1 MB..1000 MB;
/// numbered by a -W ring too large to wrap, so that a run's names sort in time order.
pub fn rotation(rotate_mb: Option<u64>, budget: Option<u64>) -> RotateSpec {
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
pub fn open_store(
    dir: &Path,
    retention: Retention,
    rotate: RotateSpec,
    cfg: &mut CaptureConfig,
) -> anyhow::Result<PendingStore> {
    let store = Store::create(dir).map_err(|e| usage(e.to_string()))?;
    for (f, why) in store.repair()? {
        crate::say!("store: indexed {} ({why})", f.display());
    }
    let (tx, closed) = Keeper::channel();
    cfg.files.rotate = rotate;
    cfg.files.live_tail = true;
    cfg.files.closed = Some(tx);
    cfg.output = Some((Output::File(store.run_template()), FileFormat::PcapNs));
    Ok(PendingStore {
        store,
        retention,
        closed,
    })
}

impl StoreOptions {
    /// [`open_store`] with these options, if --store is given.
    pub fn open(&self, cfg: &mut CaptureConfig) -> anyhow::Result<Option<PendingStore>> {
        let Some(dir) = &self.store else {
            return Ok(None);
        };
        let retention = Retention {
            size: self.store_size,
            keep: self.store_keep,
        };
        let rotate = rotation(None, self.store_size);
        open_store(dir, retention, rotate, cfg).map(Some)
    }
}

impl PendingStore {
    /// Starts the keeper (after the engine started: privileges are dropped by then).
    pub fn start(self) -> anyhow::Result<Keeper> {
        Ok(Keeper::start(self.store, self.retention, self.closed)?)
    }
}

/// Waits for the keeper to index the last file, and says what it did.
pub fn finish(keeper: Option<Keeper>) {
    let Some(k) = keeper else { return };
    let r = k.finish();
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
