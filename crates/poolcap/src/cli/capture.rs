//! `poolcap capture`: tcpdump habits (`-i -w -s -c -B -n -q`, filter last) over the pool
//! engine, with the engine's own knobs as long options.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use poolcap_format::FileFormat;
use poolcap_sys::rx_ring::RingGeometry;
use poolcap_sys::socket::FanoutMode;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};

use crate::capture::backend::{block_size, BackendConfig, BackendKind};
use crate::capture::needs::{Doing, Needs};
use crate::capture::policy::{parse_buddy_groups, PolicySpec};
use crate::capture::pool::PoolSize;
use crate::capture::queue::WaitStrategy;
use crate::capture::rotate::RotateSpec;
use crate::capture::savefile::{FileIo, FileOptions, Fsync};
use crate::capture::{CaptureConfig, CaptureReport, Engine, Input, Output};
use crate::cli::launch::{engine_error, Launch};
use crate::cli::usage;
use crate::{netdev, units};
use poolcap_sys::xsk::ZeroCopy;

/// Default cells per chunk (M).
pub const DEFAULT_CELLS: usize = 256;
/// Default chunks per queue (R): with 2 KB cells, 256 x 64 x 2048 = 32 MiB per queue.
pub const DEFAULT_CHUNKS: usize = 64;

/// Arguments of `poolcap capture`.
#[derive(Debug, Args)]
#[command(
    after_help = "Every packet ends in one counter: captured, dropped by the kernel (ring full), \
dropped by the pool (no free chunk) or filtered. Memory: queues x R x M x cell bytes for the pools \
(cell = 2048 bytes for MTU 1500) plus queues x -B for the kernel rings.

Examples:
  poolcap capture -i eth0 -w out.pcapng udp port 53
  poolcap capture -i eth0 --queues 2 --pool 256,64 --workers 2 --load 1000 --duration 10s
  poolcap capture -i eth0 -w - | tcpdump -r -
  poolcap capture -r in.pcapng.zst -w out.pcapng --load 1000 tcp"
)]
pub struct CaptureArgs {
    /// Interface to capture on; `any` captures on every interface at once (Linux cooked
    /// v2 headers: each packet names its interface and direction).
    #[arg(
        short = 'i',
        long = "interface",
        required_unless_present_any = ["list_interfaces", "read", "config"]
    )]
    iface: Option<String>,
    /// Read options from a TOML FILE: keys are the long option names (`interface`,
    /// `snaplen`, `stats-json`; `write`, `count`, `buffer`, `rotate-size`, `rotate-seconds`,
    /// `rotate-files`, `post-rotate` for -w -c -B -C -G -W -z; `filter`); the command line
    /// wins over the file; an unknown key is an error.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// List the interfaces to capture on (in this network namespace), then exit.
    #[arg(short = 'D', long)]
    list_interfaces: bool,
    /// Read packets from a pcap/pcapng FILE (plain, .gz or .zst; `-` for standard input)
    /// instead of an interface, through the same pipeline; no privileges needed.
    #[arg(short = 'r', conflicts_with_all = ["iface", "backend", "queues"])]
    read: Option<PathBuf>,
    /// With -r: replay at X times the recorded pace (default: as fast as possible).
    #[arg(long, requires = "read", value_parser = parse_speed)]
    speed: Option<f64>,
    /// --store DIR, --store-size, --store-keep, --query-listen.
    #[command(flatten)]
    store: super::store::StoreOptions,
    /// Write packets to FILE (`-` for standard output). Without it packets are printed one
    /// line each when standard output is a terminal (or with --print), else only counted.
    #[arg(short = 'w')]
    write: Option<PathBuf>,
    /// Print one line per packet on standard output (time, addresses, ports, protocol,
    /// length, as tcpdump -q -n), also when it is not a terminal.
    #[arg(long, conflicts_with_all = ["write", "store"])]
    print: bool,
    /// File format: pcapng (nanosecond), pcap (microsecond) or pcap-ns. Default: from -w's
    /// name (.pcap and .cap: pcap; .pcapng: pcapng; also before .gz or .zst), else pcapng.
    #[arg(long, value_enum, conflicts_with = "store")]
    format: Option<FileFormat>,
    /// Packet-buffered output: each packet is in the file or pipe as soon as the writer
    /// takes it, not when a write batch fills (for `-w - | tcpdump -r -`).
    #[arg(short = 'U', long = "packet-buffered")]
    packet_buffered: bool,
    /// Bytes to keep of each packet (0: 262144, as tcpdump).
    #[arg(short = 's', long = "snaplen", default_value = "262144", value_parser = parse_snaplen)]
    snaplen: u32,
    /// Don't put the interface into promiscuous mode (tcpdump's -p). Without it each
    /// capture socket asks for it while it is open (ignored with -i any, as libpcap does).
    #[arg(short = 'p', long = "no-promiscuous-mode")]
    no_promiscuous: bool,
    /// Stop after this many packets.
    #[arg(short = 'c', value_parser = units::parse_count)]
    count: Option<u64>,
    /// Kernel ring per queue, in KiB as tcpdump's -B (or with a unit: 16M).
    #[arg(short = 'B', default_value = "4096", value_parser = parse_kib)]
    buffer: u64,
    /// Don't resolve addresses: accepted as tcpdump's -n and does nothing, as poolcap never
    /// resolves.
    #[arg(short = 'n')]
    numeric: bool,
    /// Quiet: no status line while running.
    #[arg(short = 'q')]
    quiet: bool,
    /// Stop after this long (e.g. 10s).
    #[arg(long, value_parser = units::parse_duration)]
    duration: Option<Duration>,
    /// Receive queues to capture with (fanout sockets). Default: the interface's rx queues.
    #[arg(long)]
    queues: Option<usize>,
    /// How the kernel spreads packets over the queues' sockets.
    #[arg(long, default_value = "hash", value_enum)]
    fanout: FanoutMode,
    /// Pool per queue as M,R: R chunks of M packet cells.
    #[arg(long, default_value = "256,64", value_parser = units::parse_pool)]
    pool: (usize, usize),
    /// Worker threads (default: one per queue).
    #[arg(long)]
    workers: Option<usize>,
    /// Synthetic analysis load: x-loop iterations per packet.
    #[arg(long, default_value_t = 0)]
    load: u32,
    /// Process packets where they lie in the kernel ring, in the capture thread, with no
    /// pool and no workers: the plain AF_PACKET fanout reader (as Suricata and Zeek use it),
    /// kept as a baseline. Not with -w.
    #[arg(long, conflicts_with = "write")]
    inplace: bool,
    /// How capture threads wait for the kernel: poll, busy or adaptive.
    #[arg(long, default_value = "poll", value_enum)]
    wait: WaitStrategy,
    /// CPUs to pin capture threads and then workers to, round robin (e.g. 0,1).
    #[arg(long, value_delimiter = ',')]
    cpus: Option<Vec<usize>>,
    /// Offload policy: basic (every chunk processed by its own queue's workers), buddy:T
    /// (past T% backlog, chunks go to the least-loaded buddy under T%; this can reorder
    /// packets of one flow across workers, the file stays in timestamp order) or
    /// congestion:HIGH,LOW (stop taking packets from the kernel at HIGH% backlog until LOW%).
    #[arg(long, default_value = "basic")]
    offload: PolicySpec,
    /// Buddy groups as queue lists, e.g. `0,1;2,3` (default: all queues form one group).
    #[arg(long)]
    buddy_groups: Option<String>,
    /// Compress the file as it is written: zstd[:LEVEL] (default 3) or gzip[:LEVEL]
    /// (default 6). The level is also a real per-packet application load.
    #[arg(long, requires = "write", conflicts_with = "store")]
    compress: Option<crate::capture::compress::Compression>,
    // Output files: rotation, post-rotate command and durability (tcpdump's -C -G -W -z).
    /// Before writing a packet, start a new file if the current one is larger than SIZE
    /// millions of bytes (1,000,000 bytes, as tcpdump). Files after the first are named
    /// FILE1, FILE2, ...
    #[arg(short = 'C', value_name = "SIZE", value_parser = parse_positive::<u64>)]
    rotate_size: Option<u64>,
    /// Start a new file every SECONDS (on the first packet after); FILE is expanded by
    /// strftime(3), e.g. -w 'cap-%Y%m%d-%H%M%S.pcapng'.
    #[arg(short = 'G', value_name = "SECONDS", value_parser = parse_positive::<u64>, conflicts_with = "store")]
    rotate_seconds: Option<u64>,
    /// With -C: a ring of COUNT files FILE0.. (the oldest is overwritten); with -G alone:
    /// stop after COUNT files.
    #[arg(short = 'W', value_name = "COUNT", value_parser = parse_positive::<u32>, conflicts_with = "store")]
    rotate_files: Option<u32>,
    /// Run `COMMAND FILE` on each closed file (not through a shell), e.g. -z gzip.
    #[arg(short = 'z', value_name = "COMMAND")]
    post_rotate: Option<std::ffi::OsString>,
    /// Make files durable: never (the kernel writes back), rotate (fsync each file as it
    /// is closed) or interval:MS (also every MS milliseconds).
    #[arg(long, default_value = "never")]
    fsync: Fsync,
    /// Files are written with direct I/O (O_DIRECT, past the page cache) by default, or
    /// buffered where the file system refuses it (the start line says which). --direct:
    /// fail instead of falling back. pcapng and compressed files: each write is padded to
    /// 4 KiB with a block readers skip. pcap: the bytes past a write's last 4 KiB block wait
    /// for the next write, so after kill -9 the last record is cut short (as with tcpdump
    /// -w). With -U files are written buffered.
    #[arg(long, conflicts_with = "buffered")]
    direct: bool,
    /// Write files through the page cache (as tcpdump does) instead of with direct I/O.
    #[arg(long)]
    buffered: bool,
    /// Capture backend: af_packet (TPACKET_V3 fanout, works everywhere, leaves the host
    /// stack alone), af_xdp (the UMEM is the pool; takes the frames away from the host stack;
    /// needs native XDP) or auto (af_xdp where it works, af_packet otherwise).
    #[arg(long, value_enum)]
    backend: Option<BackendKind>,
    /// AF_XDP zero-copy: auto (where the driver supports it), required (fail otherwise), off.
    #[arg(long, default_value = "auto", value_enum)]
    zero_copy: ZeroCopy,
    /// Replace an XDP program someone else attached to the interface.
    #[arg(long)]
    force: bool,
    /// Write the final accounting as one JSON object to FILE (opened before capturing).
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Run as USER (and its groups) once everything is open, with no capabilities left.
    /// Default for root: the `poolcap` user if it exists, else root; `-Z root` stays root.
    #[arg(short = 'Z', long = "relinquish-privileges", value_name = "USER")]
    user: Option<String>,
    #[command(flatten)]
    export: crate::cli::export::MetricsArgs,
    /// Filter expression (tcpdump syntax), after the options.
    #[arg(trailing_var_arg = true)]
    filter: Vec<String>,
}

fn parse_positive<T: std::str::FromStr + Default + PartialOrd>(s: &str) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err(format!("`{s}` is not a whole number of at least 1")),
    }
}

/// Whether `cmd` names a program that can be run: a path, or a name found in PATH.
fn runnable(cmd: &std::ffi::OsStr) -> bool {
    let is_file = |p: &std::path::Path| p.is_file();
    if std::path::Path::new(cmd).components().count() > 1 {
        return is_file(std::path::Path::new(cmd));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| is_file(&d.join(cmd))))
}

/// `--direct`, `--buffered` or neither.
fn file_io(a: &CaptureArgs) -> FileIo {
    match (a.direct, a.buffered) {
        (true, _) => FileIo::Direct,
        (_, true) => FileIo::Buffered,
        _ => FileIo::Auto,
    }
}

/// The output files' options, checked against -w.
fn file_options(a: &CaptureArgs) -> anyhow::Result<FileOptions> {
    if a.store.store.is_some() {
        return Ok(FileOptions {
            fsync: a.fsync,
            io: file_io(a),
            packet_buffered: a.packet_buffered,
            ..FileOptions::default()
        });
    }
    let rotate = RotateSpec {
        size: a.rotate_size.map(|m| m.saturating_mul(1_000_000)),
        seconds: a.rotate_seconds,
        files: a.rotate_files,
    };
    let to_file = a.write.as_ref().is_some_and(|w| w.as_os_str() != "-");
    if rotate.rotates() && !to_file {
        return Err(usage("-C and -G rotate files: give -w FILE (not -)"));
    }
    if !rotate.rotates() && (a.rotate_files.is_some() || a.post_rotate.is_some()) {
        return Err(usage("-W and -z work with -C or -G"));
    }
    if let Some(cmd) = &a.post_rotate {
        if !runnable(cmd) {
            return Err(usage(format!(
                "-z: no program `{}` to run",
                cmd.to_string_lossy()
            )));
        }
    }
    if let (Some(_), Some(w)) = (a.rotate_seconds, &a.write) {
        if poolcap_sys::time::strftime_local(&w.to_string_lossy(), 0).is_none() {
            return Err(usage(format!(
                "-G: strftime cannot expand the file name `{}`",
                w.display()
            )));
        }
    }
    if a.fsync != Fsync::Never && !to_file {
        return Err(usage("--fsync needs -w FILE (not -)"));
    }
    let io = file_io(a);
    if a.direct && a.packet_buffered {
        return Err(usage(
            "-U and --direct: a direct write covers whole 4 KiB blocks, not each packet",
        ));
    }
    if io != FileIo::Auto && !to_file {
        let flag = if a.direct { "--direct" } else { "--buffered" };
        return Err(usage(format!(
            "{flag} needs -w FILE (not -: standard output is buffered)"
        )));
    }
    if a.packet_buffered && a.write.is_none() {
        return Err(usage(
            "-U makes -w's output packet-buffered: give -w FILE or -w -",
        ));
    }
    Ok(FileOptions {
        rotate,
        post_rotate: a.post_rotate.clone(),
        fsync: a.fsync,
        io,
        packet_buffered: a.packet_buffered,
        closed: None,
        live_tail: false,
    })
}

pub fn parse_kib(s: &str) -> Result<u64, String> {
    if s.chars().all(|c| c.is_ascii_digit()) {
        return s
            .parse::<u64>()
            .map(|k| k * 1024)
            .map_err(|e| e.to_string());
    }
    units::parse_bytes(s)
}

/// tcpdump's `-s`: 0 means the largest, 262144.
fn parse_snaplen(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Ok(262_144),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a number of bytes")),
    }
}

/// The format `-w FILE` asks for by its name: `.pcap`/`.cap` pcap, `.pcapng`/`.ntar`
/// pcapng, looking through a `.gz`, `.zst` or `.zstd` suffix; None for other names.
pub(crate) fn format_of_name(path: &Path) -> Option<FileFormat> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let name = [".gz", ".zst", ".zstd"]
        .iter()
        .find_map(|c| name.strip_suffix(c))
        .unwrap_or(&name);
    match Path::new(name).extension()?.to_str()? {
        "pcap" | "cap" => Some(FileFormat::Pcap),
        "pcapng" | "ntar" => Some(FileFormat::Pcapng),
        _ => None,
    }
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}`: give a speed factor above 0, e.g. 1 or 2.5")),
    }
}

/// Checks the thread counts a capture or forward asks for and sizes its kernel ring from
/// `-B` (4 ms block retire): the limits both commands share.
pub(crate) fn engine_limits(
    queues: Option<usize>,
    workers: Option<usize>,
    buffer: u64,
) -> anyhow::Result<RingGeometry> {
    if workers == Some(0) {
        return Err(usage("--workers must be at least 1"));
    }
    if queues == Some(0) || queues.is_some_and(|q| q > 64) {
        return Err(usage("--queues must be between 1 and 64"));
    }
    let block = block_size(buffer);
    let blocks = (buffer / u64::from(block)).max(2);
    if blocks > 1 << 16 {
        return Err(usage("-B: kernel ring too large"));
    }
    Ok(RingGeometry {
        block_size: block,
        block_nr: blocks as u32,
        retire_timeout_ms: 4,
    })
}

pub(crate) fn config(a: &CaptureArgs) -> anyhow::Result<CaptureConfig> {
    if a.snaplen == 0 {
        return Err(usage("-s: the snaplen must be at least 1"));
    }
    let backend = a.backend.unwrap_or(BackendKind::AfPacket);
    if a.inplace && backend != BackendKind::AfPacket {
        return Err(usage(
            "--inplace is the plain AF_PACKET reader: use it with --backend af_packet",
        ));
    }
    if a.count == Some(0) {
        return Err(usage("-c: the packet count must be at least 1"));
    }
    let ring = engine_limits(a.queues, a.workers, a.buffer)?;
    let (input, iface) = match (&a.read, &a.iface) {
        (Some(path), _) => (
            Input::File {
                path: path.clone(),
                speed: a.speed,
            },
            path.file_name()
                .map_or_else(|| "stdin".to_string(), |n| n.to_string_lossy().into_owned()),
        ),
        (None, Some(i)) => (Input::Live, i.clone()),
        (None, None) => return Err(usage("give -i INTERFACE or -r FILE")),
    };
    let queues = match input {
        Input::Live => a.queues.unwrap_or_else(|| netdev::rx_queues(&iface)),
        _ => 1,
    };
    // A cell holds the largest frame the link carries (plus a VLAN tag), within the snaplen;
    // on every interface, the largest of their MTUs but loopback's (64 KiB; longer frames
    // are cut to the cell, their length on the wire kept).
    let mtu = if iface == crate::capture::linktype::ANY {
        netdev::largest_mtu_but_loopback()
    } else {
        netdev::mtu(&iface).unwrap_or(1500)
    };
    let frame = (mtu + 14 + 4).div_ceil(64) * 64;
    let cell_size = frame.max(2048).min(a.snaplen as usize).max(64);
    let filter = (!a.filter.is_empty()).then(|| a.filter.join(" "));
    let buddy_groups = match &a.buddy_groups {
        Some(g) => {
            parse_buddy_groups(g, queues).map_err(|e| usage(format!("--buddy-groups: {e}")))?
        }
        None => vec![(0..queues).collect()],
    };
    Ok(CaptureConfig {
        input,
        iface,
        queues,
        fanout: a.fanout,
        pool: PoolSize {
            cells: a.pool.0,
            chunks: a.pool.1,
            cell_size,
        },
        workers: a.workers.unwrap_or(queues),
        load: a.load,
        in_place: a.inplace,
        wait: a.wait,
        snaplen: a.snaplen,
        ring,
        filter,
        output: None,
        compress: a.compress,
        files: file_options(a)?,
        count: a.count,
        duration: a.duration,
        cpus: a.cpus.clone(),
        seal_after: Duration::from_millis(2),
        policy: a.offload.clone(),
        backend: BackendConfig {
            kind: backend,
            zero_copy: a.zero_copy,
            force: a.force,
        },
        buddy_groups,
        status_every: (!a.quiet && !prints(a)).then_some(Duration::from_secs(1)),
        probe: None,
        promiscuous: !a.no_promiscuous,
        stats_request: None,
    })
}

/// Whether packets are printed: asked for, or nothing written and a terminal to print on.
fn prints(a: &CaptureArgs) -> bool {
    use std::io::IsTerminal;
    a.print || (a.write.is_none() && a.store.store.is_none() && std::io::stdout().is_terminal())
}

/// The format packets are written in: `--format`, else -w's name, else pcapng.
fn file_format(a: &CaptureArgs) -> FileFormat {
    a.format
        .or_else(|| a.write.as_deref().and_then(format_of_name))
        .unwrap_or(FileFormat::Pcapng)
}

/// Prints the accounting (to stderr, as tcpdump does, so `-w -` stays clean; a closed stderr
/// loses only the text, never the statistics file).
pub fn print_report(r: &CaptureReport) {
    crate::say!(
        "{} packets captured ({} bytes) in {:.2} s",
        r.captured,
        r.bytes,
        r.seconds
    );
    crate::say!(
        "{} packets dropped by kernel ({} ring freezes)",
        r.dropped_kernel,
        r.freezes
    );
    crate::say!("{} packets dropped by pool", r.dropped_pool);
    crate::say!("{} packets filtered", r.filtered);
    if r.dropped_nic > 0 {
        crate::say!(
            "{} packets dropped by the interface before the kernel ring (its rx_dropped, \
             rx_missed_errors and rx_fifo_errors: every receiver's, not only this capture's)",
            r.dropped_nic
        );
    }
    if r.not_taken > 0 {
        crate::say!(
            "{} packets not taken (left in the kernel: received after the stop or past -c)",
            r.not_taken
        );
    }
    if r.written > 0 || r.not_written > 0 {
        crate::say!(
            "{} packets written, {} not written",
            r.written,
            r.not_written
        );
    }
    if r.queues.len() > 1 {
        for q in &r.queues {
            crate::say!(
                "  queue {}: captured {} dropped kernel {} pool {} filtered {} peak pool {} chunks; offloaded out {} in {}; paused {} ms",
                q.queue,
                q.captured,
                q.dropped_kernel,
                q.dropped_pool,
                q.filtered,
                q.pool_peak_chunks,
                q.offloaded_out,
                q.offloaded_in,
                q.paused_ms
            );
        }
    }
    crate::say!(
        "cpu {:.3} s user {:.3} s system; {:.4} wait syscalls per packet",
        r.cpu_user,
        r.cpu_system,
        r.syscalls_per_packet
    );
}

/// Runs `poolcap capture`.
pub fn run(args: CaptureArgs) -> anyhow::Result<()> {
    // -n does nothing; --config was read with the command line (cli::parse).
    let _ = (args.numeric, &args.config);
    if args.list_interfaces {
        return super::ifaces::print();
    }
    let mut cfg = config(&args)?;
    let mut launched = Launch {
        needs: Needs::of(&cfg),
        doing: Doing::Capturing,
        user: args.user.as_deref(),
        stats_json: args.stats_json.as_deref(),
        metrics: &args.export,
        // SIGHUP too: a capture in a closed terminal or an ended ssh session stops as cleanly.
        stop_on: &[SIGINT, SIGTERM, SIGHUP],
    }
    .prepare()?;
    let pending_store = set_output(&args, &mut cfg)?;
    // SIGUSR1 prints the accounting so far, as tcpdump does.
    cfg.stats_request = Some(crate::cli::flag_on(&[SIGUSR1])?);
    let warning = crate::cli::predict::capture_warning(&cfg, (0, 0));
    let (iface, snaplen, queues, pool) = (cfg.iface.clone(), cfg.snaplen, cfg.queues, cfg.pool);
    let started = Engine::start(cfg, launched.stop(), |out| {
        let owned: Vec<&Path> = out.into_iter().chain(args.store.store.as_deref()).collect();
        launched.drop_privileges(&owned)
    });
    let engine = launched.opened(started.map_err(engine_error))?;
    launched.wake(&engine);
    crate::cli::ring_on(&[SIGUSR1], &engine);
    // After the engine started: privileges are dropped by then.
    let store = pending_store.map(|p| p.start()).transpose()?;
    announce(&args, &engine, &iface, snaplen, queues, pool);
    let _metrics = launched
        .take_metrics()
        .map(|m| crate::cli::export::serve_metrics(m, &engine, args.write.is_some(), Vec::new()))
        .transpose()?;
    if let Some(w) = &warning {
        log::warn!("{w}");
    }
    launched.ready();
    let report = engine.run();
    print_report(&report);
    launched.finish(&report)?;
    super::store::finish(store);
    outcome(&args, &report)
}

/// The start-up lines: what is captured, how, and where it goes.
fn announce(
    args: &CaptureArgs,
    engine: &Engine,
    iface: &str,
    snaplen: u32,
    queues: usize,
    pool: PoolSize,
) {
    let pool = engine.pool_size().unwrap_or(pool);
    let verb = if args.read.is_some() {
        "reading from file"
    } else {
        "listening on"
    };
    log::info!(
        "{verb} {iface}, link-type {}, snapshot length {snaplen} bytes, {queues} queue{}, pool {}x{} cells",
        engine.linktype(),
        if queues == 1 { "" } else { "s" },
        pool.chunks,
        pool.cells
    );
    log::info!("{}", engine.backend_report());
    if let Some(line) = engine.output_report() {
        log::info!("{line}");
    }
}

/// Points the capture at `-w`, the terminal or the store (opened here, its keeper started
/// once the capture runs).
fn set_output(
    args: &CaptureArgs,
    cfg: &mut CaptureConfig,
) -> anyhow::Result<Option<super::store::PendingStore>> {
    let format = file_format(args);
    cfg.output = args.write.as_ref().map(|p| {
        let target = if p.as_os_str() == "-" {
            Output::Stdout
        } else {
            Output::File(p.clone())
        };
        (target, format)
    });
    if prints(args) {
        let printer = crate::cli::print::Printer::new(std::io::stdout(), args.read.is_none());
        cfg.output = Some((Output::Sink(Box::new(printer)), FileFormat::PcapNs));
    }
    args.store.open(args.rotate_size, cfg)
}

/// How the capture ended, as the exit code says it.
fn outcome(args: &CaptureArgs, report: &CaptureReport) -> anyhow::Result<()> {
    if report.file_limit_reached {
        // tcpdump's words, and as with tcpdump the capture ends successfully.
        log::info!(
            "Maximum file limit reached: {}",
            args.rotate_files.unwrap_or(0)
        );
    }
    if report.write_error.is_some() {
        // The engine printed the error (naming the file) when it happened.
        return Err(anyhow::Error::new(crate::cli::Reported));
    }
    if report.post_rotate_failed > 0 {
        anyhow::bail!(
            "-z: the command failed on {} file(s)",
            report.post_rotate_failed
        );
    }
    if let Some(e) = &report.capture_error {
        anyhow::bail!("{e}");
    }
    Ok(())
}
