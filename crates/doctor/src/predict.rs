//! The loss model of `poolcap predict`: two stages in tandem, each with a capacity from the
//! profile, and the buffers between them absorbing bursts until the backlog exceeds them.
//!
//! 1. **Kernel stage** (receive work up to the capture ring): capacity
//!    `C_k = 1e9 / kernel(caplen)` frames/s. Frames arriving faster are dropped before any
//!    buffer the capture owns (NIC ring, backlog): *kernel loss*. On veth this work runs on
//!    the sender's CPU and slows the sender instead, so in a veth lab kernel loss is rare.
//! 2. **Application stage** (everything the capture tool does per packet, on one core):
//!    capacity `C_a = 1e9 / app(caplen)`, where `app` sums the tool's stage costs (poolcap:
//!    ring read, plus the copy into the pool, `load` x-loop iterations, the pcap record and
//!    compression when it has them; tcpdump/dumpcap: their measured cost writing to
//!    /dev/null or a file, plus compression in the pipe). Frames the kernel delivered that
//!    find the buffers full are *application loss*; Linux reports them as "dropped by
//!    kernel" (ring full), but the application's speed is what caused them.
//! 3. **Buffers**: the kernel ring holds `B / slot` frames (`slot` = captured bytes plus the
//!    TPACKET_V3 header in front of the MAC header, and for libpcap the 4 bytes it reserves
//!    there to put a VLAN tag back, 8-byte aligned as the kernel packs a block); poolcap's
//!    pool adds R x M frames when it copies (with analysis or a file), since its capture
//!    thread leaves blocks in the ring when the pool is full, so the two add up; less the
//!    ring block the reader is emptying and the chunk the worker is analysing, which are
//!    handed back only whole.
//!
//! 4. **CPU share** ([`crate::share`]): on a shared core a tool with a backlog runs a
//!    timeslice `L` per wait `w`, so `C_a` is `L / (L + w) x 1e9 / app` (times the part of
//!    the core the receive work leaves when it runs there, in softirq, first); below that it still
//!    waits for the CPU `u (1 - s) / s` of the time (`u` = the core it needs, `s` = the
//!    share it ran when runnable in calibration); waits that outlast the time the buffers
//!    hold lose what arrives beyond it (*wait loss*, part of the application loss).
//!    The share of the tool's configuration and the waits' tail come from the profile's `cpu`
//!    (calibrated); without it the tool has a core of its own. With analysis (`--load`)
//!    poolcap's share is that of the calibration run with a saturated worker
//!    ([`share::SATURATED`]). The receive work on the tool's CPU costs `kernel_rps` (that
//!    CPU's busy time per frame at an rps-on calibration point, less the tool's) when the
//!    profile has it;
//!    the waits are then those of that rps-on point (the tool waits behind the receive
//!    softirq and `ksoftirqd`, which rps-off calibration does not show).
//!
//! 5. **The edge** ([`Edge`]): tcpdump and dumpcap behind the receive work cost less while
//!    they keep up (each frame read soon after it was written, on the same CPU) than once
//!    behind. The prediction uses the cost behind; when the profile also has the cost
//!    keeping up and the rate lies between the two capacities, the capture falls behind
//!    only if a wait for its CPU outlasts its buffers, and the prediction is the likelier of
//!    the two, with both losses beside it.
//!
//! 6. **The disk** ([`DiskStage`]): a capture writing a file (pcap or pcapng, uncompressed)
//!    hands its records to the disk, which takes `C_d = disk rate / record bytes` frames/s
//!    behind a buffer of its own: with direct I/O (poolcap's default) the device's rate and
//!    the writer's buffers in flight ([`DIRECT_IN_FLIGHT_BYTES`]); through the page cache
//!    (`--buffered`, tcpdump, dumpcap) write-back's sustained rate and the dirty bytes the
//!    kernel lets the cache take before it throttles the writer (the profile's `disk`). A
//!    full disk buffer holds the writer back, its frames stay in the ring and the pool, and
//!    those fill in turn. A run shorter than the time the disk buffer takes to fill loses
//!    nothing to the disk, however fast it writes; a longer one loses what its rate exceeds
//!    `C_d` by beyond both buffers.
//!
//! Traffic is a fluid: `rate` frames/s, optionally in bursts of `burst` frames followed by
//! `idle` seconds of silence. Over each burst the backlog grows by `(min(rate, C_k) - C_a)`
//! per second, whatever exceeds the buffers is lost, and the idle time drains `C_a x idle`
//! (`C_a` without the receive work on the tool's CPU: no frame arrives then).
//! A finite `count` is run cycle by cycle from an empty buffer; an endless one until the
//! backlog at the end of a cycle repeats. Loss starts (steady traffic) at
//! `min(C_k, C_a)` frames/s.

use serde::Serialize;

use crate::profile::{Cost, Profile, ToolCosts};
use crate::share;

/// The capture tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Tool {
    /// poolcap capture.
    Poolcap,
    /// tcpdump (libpcap, one thread, the kernel ring is its buffer).
    Tcpdump,
    /// dumpcap (libpcap, one poll per packet).
    Dumpcap,
}

/// What is captured, how, and what traffic arrives.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The tool.
    pub tool: Tool,
    /// Frames per second offered (within a burst, when there are bursts).
    pub rate_pps: f64,
    /// Frame sizes (bytes without FCS) and their weights.
    pub sizes: Vec<(f64, f64)>,
    /// Bytes kept of each frame.
    pub snaplen: u32,
    /// Kernel ring bytes.
    pub buffer_bytes: u64,
    /// poolcap's pool (M cells per chunk, R chunks).
    pub pool: (usize, usize),
    /// x-loop iterations per packet (poolcap).
    pub load: u32,
    /// `poolcap probe`'s rules run on the worker for each packet (0: a capture, no probe).
    pub rules: usize,
    /// How many of those rules beyond the first update a flow table with each packet (the
    /// model takes a `flows` rule to match every packet: an upper bound for a rule set
    /// whose filters select).
    pub flow_rules: usize,
    /// Where the packets go (poolcap writes a file from the kernel ring where the frames
    /// lie).
    pub output: Output,
    /// Compression of the file (`zstd:3`).
    pub compress: Option<String>,
    /// Bursts of this many frames at `rate_pps`, each followed by `idle_s` of silence.
    pub burst: Option<(u64, f64)>,
    /// Frames sent in all (`None`: an endless stream).
    pub count: Option<u64>,
    /// The kernel's receive work runs on the capture tool's CPU (a NIC whose interrupts or
    /// RPS land there; in the veth lab, `rps_cpus` set to the tool's CPU): its cost adds to
    /// the application's instead of being a stage of its own.
    pub kernel_on_app_cpu: bool,
    /// How poolcap writes a file: past the page cache or through it (tcpdump and dumpcap
    /// always write through it).
    pub io: DiskIo,
}

/// How a capture file reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum DiskIo {
    /// `O_DIRECT`, past the page cache (poolcap's default).
    Direct,
    /// Through the page cache (`poolcap capture --buffered`, tcpdump, dumpcap).
    Buffered,
}

impl DiskIo {
    /// How `tool` writes by default: poolcap direct, the peers through the page cache.
    pub fn default_for(tool: Tool) -> DiskIo {
        match tool {
            Tool::Poolcap => DiskIo::Direct,
            Tool::Tcpdump | Tool::Dumpcap => DiskIo::Buffered,
        }
    }
}

/// Bytes poolcap's direct writer has on their way to the device before it waits for it:
/// the aligned buffers it makes while the device is behind (the file writer's
/// `STALL_BYTES`, on a machine where that is at most a quarter of the memory left).
pub const DIRECT_IN_FLIGHT_BYTES: f64 = (1 << 30) as f64;

impl Scenario {
    /// An endless steady stream of `size`-byte frames at `rate_pps` into `tool` with every
    /// setting at poolcap's default: full frames, a 4 MiB ring, the (256,64) pool, no load,
    /// no probe, no file (pcap when there is one), the kernel's receive work on its own CPU.
    pub fn steady(tool: Tool, rate_pps: f64, size: f64) -> Scenario {
        Scenario {
            tool,
            rate_pps,
            sizes: vec![(size, 1.0)],
            snaplen: 262_144,
            buffer_bytes: 4 << 20,
            pool: (256, 64),
            load: 0,
            rules: 0,
            flow_rules: 0,
            output: Output::Nothing,
            compress: None,
            burst: None,
            count: None,
            kernel_on_app_cpu: false,
            io: DiskIo::default_for(tool),
        }
    }

    /// poolcap copies every packet into the pool for its workers: an x-loop load or probe
    /// rules to run.
    fn analyses(&self) -> bool {
        self.tool == Tool::Poolcap && (self.load > 0 || self.rules > 0)
    }
}

/// Where a capture's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Nowhere: poolcap counts them (a peer always writes something: read as /dev/null).
    Nothing,
    /// A pcap stream to /dev/null, as the bench's sessions write: the records and the write
    /// calls without the page cache's copy.
    DevNull,
    /// A pcap file.
    Pcap,
    /// A pcapng file (poolcap's default format).
    Pcapng,
}

impl Output {
    /// poolcap formats and writes records (to a file or to /dev/null).
    fn writes(self) -> bool {
        self != Output::Nothing
    }

    /// A file on disk: a peer's `file` costs rather than its `null` ones.
    fn is_file(self) -> bool {
        matches!(self, Output::Pcap | Output::Pcapng)
    }

    /// Bytes a record of `caplen` captured bytes takes in the file (`None`: no file): pcap's
    /// 16-byte header; pcapng's Enhanced Packet Block, 32 bytes around the data padded to 4.
    pub fn record_bytes(self, caplen: f64) -> Option<f64> {
        match self {
            Output::Pcap => Some(16.0 + caplen),
            Output::Pcapng => Some(32.0 + (caplen / 4.0).ceil() * 4.0),
            Output::Nothing | Output::DevNull => None,
        }
    }

    /// What writing a record costs poolcap here: the cost measured for this output, else
    /// (a profile without pcapng or /dev/null costs) the pcap file's.
    fn write_cost(self, p: &Profile) -> Cost {
        let measured = match self {
            Output::DevNull => p.write_null,
            Output::Pcapng => p.pcapng,
            Output::Nothing | Output::Pcap => None,
        };
        measured.unwrap_or(p.write)
    }
}

/// One stage's share of the application's cost per packet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageCost {
    /// Stage name: `ring read`, `pool copy`, `x-loop`, `write`, `zstd:3`.
    pub stage: String,
    /// Nanoseconds per packet.
    pub ns: f64,
}

/// What the model predicts; losses are fractions of the offered frames.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Total loss: `kernel_loss + app_loss`.
    pub loss: f64,
    /// Frames the kernel could not deliver into the ring.
    pub kernel_loss: f64,
    /// Frames delivered that found the ring (and pool) full.
    pub app_loss: f64,
    /// Offered rate, frames/s (within bursts).
    pub offered_pps: f64,
    /// Mean captured bytes per frame.
    pub caplen: f64,
    /// Kernel stage capacity, frames/s.
    pub kernel_capacity_pps: f64,
    /// Application capacity, frames/s.
    pub app_capacity_pps: f64,
    /// Steady rate above which loss starts, frames/s.
    pub loss_starts_pps: f64,
    /// Frames the ring and pool hold.
    pub buffer_frames: f64,
    /// Longest burst at `offered_pps` absorbed without loss (`None`: any burst).
    pub max_burst: Option<f64>,
    /// Share of the core the tool gets with a backlog (1: a core of its own).
    pub cpu_share: f64,
    /// Frames lost to waits for the CPU that outlast the buffers (included in `app_loss`).
    pub wait_loss: f64,
    /// The stage with the largest cost (`kernel` when the kernel is the bottleneck).
    pub bottleneck: String,
    /// The application's costs per packet, stage by stage.
    pub stages: Vec<StageCost>,
    /// Set when the capture may keep up or fall behind ([`Edge`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge: Option<Edge>,
    /// The disk the file goes to (`None`: no file, or the disk is not known; `notes` says
    /// which).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskStage>,
    /// What the prediction leaves out because the profile does not know it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The disk as a stage: its capacity for the scenario's records and the buffer in front of
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DiskStage {
    /// How the file is written.
    pub io: DiskIo,
    /// Bytes the disk takes a second (the profile's rate for `io`).
    pub bytes_per_s: f64,
    /// Bytes of a mean record in the file.
    pub record_bytes: f64,
    /// Frames a second it takes.
    pub capacity_pps: f64,
    /// Bytes the buffer in front of it holds: the writer's in flight, or the page cache's
    /// dirty limit.
    pub buffer_bytes: f64,
    /// Frames that buffer holds.
    pub buffer_frames: f64,
    /// Seconds the buffer takes to fill at the rate the capture hands it frames (`None`: it
    /// does not fill).
    pub fills_in_s: Option<f64>,
}

/// The disk stage of `s` at `caplen` captured bytes, or why there is none: no file (`Ok(None)`),
/// or the profile does not know the disk (`Err`, the note to print).
fn disk_stage(p: &Profile, s: &Scenario, caplen: f64) -> Result<Option<DiskStage>, String> {
    let Some(record_bytes) = s.output.record_bytes(caplen) else {
        return Ok(None);
    };
    if let Some(level) = &s.compress {
        return Err(format!(
            "the disk is not modelled with {level}: what it writes depends on how well the \
             traffic compresses"
        ));
    }
    let unknown = |what: &str| {
        Err(format!(
            "the disk is not modelled: the profile has no {what} (`poolcap calibrate` \
             measures it in --disk-dir)"
        ))
    };
    let Some(d) = &p.disk else {
        return unknown("disk measurement");
    };
    let io = match s.tool {
        Tool::Poolcap => s.io,
        Tool::Tcpdump | Tool::Dumpcap => DiskIo::Buffered,
    };
    let (rate, buffer) = match io {
        DiskIo::Direct => (d.direct_bytes_per_s, Some(DIRECT_IN_FLIGHT_BYTES)),
        DiskIo::Buffered => (d.buffered_bytes_per_s, d.dirty_limit_bytes),
    };
    let (Some(rate), Some(buffer)) = (rate.filter(|r| *r > 0.0), buffer) else {
        return unknown(match (io, rate) {
            (DiskIo::Direct, _) => "direct-I/O rate",
            (DiskIo::Buffered, None) => "page-cache write-back rate",
            (DiskIo::Buffered, Some(_)) => "dirty limit",
        });
    };
    Ok(Some(DiskStage {
        io,
        bytes_per_s: rate,
        record_bytes,
        capacity_pps: rate / record_bytes,
        buffer_bytes: buffer,
        buffer_frames: buffer / record_bytes,
        fills_in_s: None,
    }))
}

/// Why a scenario cannot be predicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ScenarioError> {
    Err(ScenarioError(msg.into()))
}

/// Which of a peer's costs behind the receive work applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pace {
    /// Fallen behind: the cost measured at the sender's top speed (`null_rps`, `file_rps`).
    Behind,
    /// Keeping up: the cost measured at a light rate (`null_rps_light`, `file_rps_light`).
    KeepingUp,
}

/// The application's stage costs for `s` at `caplen` captured bytes, a peer behind the
/// receive work at `pace`.
fn app_stages(
    p: &Profile,
    s: &Scenario,
    caplen: f64,
    pace: Pace,
) -> Result<Vec<StageCost>, ScenarioError> {
    let mut v = Vec::new();
    let mut add = |stage: &str, ns: f64| {
        v.push(StageCost {
            stage: stage.to_owned(),
            ns,
        });
    };
    match peer_costs(p, s.tool) {
        // poolcap
        None => {
            add("ring read", p.poolcap_count.ns(caplen));
            if s.analyses() {
                add("pool copy", p.pool_copy.ns(caplen));
            }
            if s.rules > 0 {
                let Some(probe) = &p.probe else {
                    return err("the profile has no cost for probe rules (calibrate again)");
                };
                let Some(ns) = probe.ns(s.rules, s.flow_rules, caplen) else {
                    return err("the profile has no cost for flows rules (calibrate again)");
                };
                add("probe rules", ns);
            }
            if s.load > 0 {
                add("x-loop", f64::from(s.load) * p.x_loop_ns);
            }
            if s.output.writes() {
                add("write", s.output.write_cost(p).ns(caplen));
            }
        }
        Some(t) => {
            if s.load > 0 {
                return err("--load is poolcap's x-loop: tcpdump and dumpcap have none");
            }
            if s.rules > 0 {
                return err("probe rules run in poolcap: tcpdump and dumpcap have none");
            }
            let (what, cost, behind, light) = if s.output.is_file() {
                ("capture and write", t.file, t.file_rps, t.file_rps_light)
            } else {
                ("capture to /dev/null", t.null, t.null_rps, t.null_rps_light)
            };
            let behind = match pace {
                Pace::KeepingUp => light.or(behind),
                Pace::Behind => behind,
            };
            match behind.filter(|_| s.kernel_on_app_cpu) {
                Some(behind) => {
                    // Its own cost there (the CPU's busy time less the receive work's),
                    // never below its rps-off cost.
                    let ns = behind.ns(caplen).max(cost.ns(caplen));
                    add(&format!("{what} behind the receive work"), ns);
                }
                None => add(what, cost.ns(caplen)),
            }
        }
    }
    if let Some(level) = &s.compress {
        if !s.output.writes() {
            return err("compression needs a written file (-w)");
        }
        if s.tool == Tool::Dumpcap {
            return err("dumpcap cannot compress its output here");
        }
        let Some(c) = p.compress.get(level) else {
            let known: Vec<&str> = p.compress.keys().map(String::as_str).collect();
            return err(format!(
                "the profile has no cost for `{level}` (it has {})",
                known.join(", ")
            ));
        };
        add(level, c.ns(caplen));
    }
    Ok(v)
}

/// A peer's costs (`None` for poolcap).
fn peer_costs(p: &Profile, tool: Tool) -> Option<&ToolCosts> {
    match tool {
        Tool::Tcpdump => Some(&p.tcpdump),
        Tool::Dumpcap => Some(&p.dumpcap),
        Tool::Poolcap => None,
    }
}

/// The share of its CPU a peer gets once behind the receive work there
/// (`ToolCosts::null_rps_left`), when `s` has it behind at `pace` and the profile measured it.
fn left_behind(p: &Profile, s: &Scenario, caplen: f64, pace: Pace) -> Option<f64> {
    if pace != Pace::Behind || !s.kernel_on_app_cpu {
        return None;
    }
    let t = peer_costs(p, s.tool)?;
    let left = if s.output.is_file() {
        t.file_rps_left
    } else {
        t.null_rps_left
    }?;
    Some(left.ns(caplen).clamp(0.0, 1.0))
}

/// The calibration configuration whose CPU share `s` runs at: poolcap's `count`, with
/// analysis the saturated worker's ([`share::SATURATED`]; `copy` in a profile without it) or
/// `write`; a peer's `null` or `file`.
fn share_key(s: &Scenario, cpu: &share::Cpu) -> String {
    match s.tool {
        Tool::Poolcap if s.analyses() && cpu.sharing.contains_key(share::SATURATED) => {
            share::SATURATED.to_owned()
        }
        Tool::Poolcap if s.analyses() => "copy".to_owned(),
        Tool::Poolcap if s.output.writes() => "write".to_owned(),
        Tool::Poolcap => "count".to_owned(),
        Tool::Tcpdump | Tool::Dumpcap => format!(
            "{} {}",
            if s.tool == Tool::Tcpdump {
                "tcpdump"
            } else {
                "dumpcap"
            },
            if s.output.is_file() { "file" } else { "null" }
        ),
    }
}

/// The kernel ring's bytes and the pool's cells that buffer `s`'s packets: poolcap's pool
/// when it copies (analysis); with a file alone it writes from the ring, which then has all
/// of the pool's memory (cells of 2 KiB, or of the snaplen when smaller: the engine's
/// `backend::hold_split`); the peers' kernel buffer only.
fn memory(s: &Scenario) -> (u64, usize) {
    let (m, r) = s.pool;
    match s.tool {
        Tool::Poolcap if s.analyses() => (s.buffer_bytes, m * r),
        Tool::Poolcap if s.output.writes() => {
            let cell = s.snaplen.clamp(64, 2048) as usize;
            (s.buffer_bytes + (r * m * cell) as u64, 0)
        }
        _ => (s.buffer_bytes, 0),
    }
}

/// Bytes of one block of `tool`'s kernel ring of `buffer` bytes (`-B`): poolcap's a
/// sixteenth of it within 16–256 KiB, in whole pages (the capture's ring geometry); libpcap's
/// 256 KiB (its TPACKET_V3 "frame" is the largest snaplen).
pub fn ring_block_bytes(tool: Tool, buffer: u64) -> u64 {
    match tool {
        Tool::Poolcap => (buffer / 16).clamp(16 << 10, 256 << 10) / 4096 * 4096,
        Tool::Tcpdump | Tool::Dumpcap => 256 << 10,
    }
}

/// Bytes of one block of poolcap's ring of `ring` bytes when it writes from it (the ring
/// grown by the pool, `buffer` bytes asked for with `-B`): a thirty-second of it within
/// 16 KiB–1 MiB, in whole pages, never less than `-B`'s block (the engine's
/// `held_block_size`).
pub fn held_block_bytes(ring: u64, buffer: u64) -> u64 {
    let held = (ring / 32).clamp(16 << 10, 1 << 20) / 4096 * 4096;
    held.max(ring_block_bytes(Tool::Poolcap, buffer))
}

/// The TPACKET_V3 block header in front of a block's frames.
const BLOCK_HEADER: f64 = 48.0;

/// Seconds the kernel lets `s`'s open ring block fill before it hands it over, full or not
/// (TPACKET_V3's `tp_retire_blk_tov`): poolcap's 4 ms when workers analyse (the capture's
/// ring geometry) and 50 ms when it only counts or writes (`NO_ANALYSIS_RETIRE_MS` in the
/// engine); libpcap passes the tool's read timeout, tcpdump's 1000 ms and dumpcap's 250 ms.
/// Measured: a stopped tcpdump's 4 MiB ring holds the same 27584 frames of 64 B at 100k and
/// 567k pps, and so does dumpcap's (26205) at 100k: their timeouts are well beyond a block's
/// filling time.
fn retire_timeout_s(s: &Scenario) -> f64 {
    match s.tool {
        Tool::Poolcap if s.analyses() => 0.004,
        Tool::Poolcap => 0.050,
        Tool::Tcpdump => 1.0,
        Tool::Dumpcap => 0.250,
    }
}

/// Frames a ring block of `frames` slots holds when frames arrive at `rate` per second and
/// the kernel retires the open block every `tov` seconds whether it is full or not (its
/// retire timer runs periodically on this kernel, 6.18): the blocks opened within one period
/// share its `rate x tov` frames, so each holds `rate x tov / ceil(tov / fill)`, where `fill
/// = frames / rate` is the time a block takes to fill. A ring whose reader is behind is
/// then fuller in blocks than in frames. Measured with a stopped poolcap analysing (4 ms,
/// 16 blocks of 1724 slots for 64 B frames): 379, 1136, 919 and 1228 frames a block at 100k,
/// 300k, 450k and 687k pps, against 400, 1200, 900 and 1374 from this rule.
pub fn frames_per_block(frames: f64, rate: f64, tov: f64) -> f64 {
    if !(rate > 0.0 && tov > 0.0 && frames > 0.0) {
        return frames.max(0.0);
    }
    let blocks_a_period = (tov * rate / frames).ceil().max(1.0);
    (rate * tov / blocks_a_period).min(frames)
}

/// Bytes libpcap asks the kernel to leave free in front of each frame in the ring
/// (`PACKET_RESERVE`), room to put a stripped VLAN tag back.
const LIBPCAP_RESERVE: f64 = 4.0;

/// The mean bytes a frame of `s`'s size mix takes in a TPACKET_V3 block: the captured bytes,
/// the header in front of them (and libpcap's reserve), 8-byte aligned as the kernel packs a
/// block.
fn slot_bytes(p: &Profile, s: &Scenario) -> f64 {
    let snap = f64::from(s.snaplen);
    let reserve = if s.tool == Tool::Poolcap {
        0.0
    } else {
        LIBPCAP_RESERVE
    };
    let total_w: f64 = s.sizes.iter().map(|(_, w)| w).sum();
    s.sizes
        .iter()
        .map(|(b, w)| ((p.ring_slot_overhead + reserve + b.min(snap)) / 8.0).ceil() * 8.0 * w)
        .sum::<f64>()
        / total_w
}

/// `s`'s kernel ring when frames arrive at `rate` per second: the frames it holds (whole
/// blocks, a ring grown by the pool having the blocks of its grown size, each as full as the
/// retire timer lets it get; [`frames_per_block`]) and the frames one block holds.
pub fn ring_frames(p: &Profile, s: &Scenario, rate: f64) -> (f64, f64) {
    let (ring_bytes, _) = memory(s);
    let block = match s.tool {
        Tool::Poolcap if ring_bytes > s.buffer_bytes => {
            held_block_bytes(ring_bytes, s.buffer_bytes)
        }
        tool => ring_block_bytes(tool, ring_bytes),
    };
    let slots = ((block as f64 - BLOCK_HEADER) / slot_bytes(p, s)).floor();
    let per_block = frames_per_block(slots, rate, retire_timeout_s(s));
    ((ring_bytes / block).max(1) as f64 * per_block, per_block)
}

/// Predicts kernel and application loss of `s` on the machine `p` describes. A peer behind
/// the receive work whose offered rate lies between its capacity once behind and its
/// capacity keeping up (where the profile has both) is at the edge ([`Edge`]): it is
/// predicted behind when a wait for its CPU is likely to outlast its buffers during the run,
/// else keeping up, and the prediction says so.
pub fn predict(p: &Profile, s: &Scenario) -> Result<Prediction, ScenarioError> {
    let behind = predict_at(p, s, Pace::Behind)?;
    if s.tool == Tool::Poolcap || !s.kernel_on_app_cpu {
        return Ok(behind);
    }
    let up = predict_at(p, s, Pace::KeepingUp)?;
    let delivered = behind.offered_pps.min(behind.kernel_capacity_pps);
    if !(behind.app_capacity_pps < delivered
        && delivered <= up.app_capacity_pps
        && up.loss < behind.loss)
    {
        return Ok(behind);
    }
    let falls_behind = falls_behind(p, s, behind.buffer_frames / delivered);
    let edge = Edge {
        loss_keeping_up: up.loss,
        loss_behind: behind.loss,
        keeps_up_to_pps: up.app_capacity_pps,
        falls_behind,
    };
    let mut likelier = if falls_behind >= 0.5 { behind } else { up };
    likelier.edge = Some(edge);
    Ok(likelier)
}

/// The chance that a capture of `s` falls behind during its run: that one of its waits for
/// the CPU outlasts `depth_s`, the time its buffers hold at the rate delivered. A wait that
/// long fills them; the reader then takes frames written long before, which cost it more,
/// and it stays behind. Waits are exponential of the mean the tool waited per timeslice
/// while it kept up at top speed behind the receive work in calibration
/// ([`share::RpsWaits::keeping_up`]; without it, its mean wait per timeslice behind), `w`,
/// one per timeslice and wait ([`share::SLICE_S`] + `w`) while frames arrive:
/// `1 - exp(-n e^(-depth / w))` for `n` of them (Poisson). An endless capture, or a profile
/// without the tool's waits: 1 (it falls behind sooner or later, or nothing says it does
/// not).
fn falls_behind(p: &Profile, s: &Scenario, depth_s: f64) -> f64 {
    let waits = p.cpu.as_ref().and_then(|c| {
        let r = c.rps.as_ref()?;
        let key = share_key(s, c);
        r.keeping_up
            .get(&key)
            .copied()
            .or_else(|| r.by_key.get(&key).map(|x| x.wait_s))
    });
    let (Some(w), Some(count)) = (waits.filter(|w| *w > 0.0), s.count) else {
        return 1.0;
    };
    let n = count as f64 / s.rate_pps / (share::SLICE_S + w);
    1.0 - (-n * (-depth_s.max(0.0) / w).exp()).exp()
}

/// A capture at the edge: a peer behind the receive work whose offered rate lies between
/// its capacity once behind and its capacity keeping up. Measured with dumpcap at 450k
/// frames of 64 B a second: ten runs lost 0-33%, each keeping up until a stall let a backlog
/// build, after which every frame it read had long left the cache and cost it 30-80% more,
/// so it stayed behind. The prediction is the likelier of the two by `falls_behind`; the
/// measured loss may lie anywhere between `loss_keeping_up` and `loss_behind`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Edge {
    /// The loss if it keeps up the whole run (waits for the CPU only).
    pub loss_keeping_up: f64,
    /// The loss once behind, from the start of the run.
    pub loss_behind: f64,
    /// The rate it keeps up with at its light cost, frames/s.
    pub keeps_up_to_pps: f64,
    /// The chance that it falls behind during the run (the model's `falls_behind`).
    pub falls_behind: f64,
}

/// [`predict`] with a peer behind the receive work at `pace`.
fn predict_at(p: &Profile, s: &Scenario, pace: Pace) -> Result<Prediction, ScenarioError> {
    if !(s.rate_pps.is_finite() && s.rate_pps > 0.0) {
        return err("the rate must be positive");
    }
    let total_w: f64 = s.sizes.iter().map(|(_, w)| w).sum();
    if s.sizes.is_empty() || total_w <= 0.0 {
        return err("no frame sizes");
    }
    if s.snaplen == 0 {
        return err("the snaplen must be at least 1");
    }
    let snap = f64::from(s.snaplen);
    let caplen = s.sizes.iter().map(|(b, w)| b.min(snap) * w).sum::<f64>() / total_w;
    let mut stages = app_stages(p, s, caplen, pace)?;
    let cap = |ns: f64| if ns > 0.0 { 1e9 / ns } else { f64::INFINITY };
    // The receive work on the tool's CPU, per frame (none elsewhere).
    let kernel_ns = if s.kernel_on_app_cpu {
        p.kernel_on_tool_cpu().ns(caplen)
    } else {
        0.0
    };
    let ck = if s.kernel_on_app_cpu {
        stages.insert(
            0,
            StageCost {
                stage: "kernel".to_owned(),
                ns: kernel_ns,
            },
        );
        f64::INFINITY
    } else {
        cap(p.kernel.ns(caplen))
    };
    let app_ns: f64 = stages.iter().map(|x| x.ns).sum();
    let key = p.cpu.as_ref().map(|c| share_key(s, c));
    let sharing = p.cpu.as_ref().zip(key.as_ref()).map(|(c, k)| c.of(k));
    let cpu_share = p
        .cpu
        .as_ref()
        .zip(key.as_ref())
        .map_or(1.0, |(c, k)| c.capacity_share(k));
    // On a shared core the receive work on the tool's CPU runs in softirq, before any task:
    // the tool gets its share of what it leaves, or, for a peer behind it, the share of its
    // CPU calibration measured there ([`left_behind`]). On a core of its own the two costs
    // add.
    //
    // Between bursts no frame arrives and the receive work leaves the CPU to the tool: it
    // drains its backlog at its capacity without that work (`idle_ca`). Drained at the
    // burst's capacity, dumpcap behind the receive work in bursts of 4096 frames of 64 B
    // (1.65M pps, 5.6 ms apart, a 1 MiB ring) was predicted to lose 34% where its runs lost
    // nothing.
    let (ca, idle_ca, tool_ns) = match sharing {
        None => (cap(app_ns), cap(app_ns - kernel_ns), app_ns),
        Some(_) => {
            let left = left_behind(p, s, caplen, pace)
                .unwrap_or_else(|| (1.0 - s.rate_pps * kernel_ns / 1e9).max(0.0));
            let tool_ns = app_ns - kernel_ns;
            let alone = cap(tool_ns) * cpu_share;
            (alone * left, alone, tool_ns)
        }
    };
    let (_, pool) = memory(s);
    let r = s.rate_pps;
    let delivered = r.min(ck);
    // A reader hands a ring block back only once it has taken every frame in it, and
    // poolcap's worker a chunk once it has analysed every packet in it: with the buffers
    // full, the block and the chunk being emptied hold free room nobody can fill.
    let (ring_frames, per_block) = ring_frames(p, s, delivered);
    let held = per_block + if pool > 0 { s.pool.0 } else { 0 } as f64;
    let buffer = (ring_frames + pool as f64 - held).max(0.0);
    let (burst, idle) = match s.burst {
        Some((b, i)) if b > 0 => (b as f64, i.max(0.0)),
        Some(_) => return err("a burst must have at least one frame"),
        None => (s.count.map_or(f64::INFINITY, |c| c as f64), 0.0),
    };
    let (mut disk, mut notes) = match disk_stage(p, s, caplen) {
        Ok(d) => (d, Vec::new()),
        Err(note) => (None, vec![note]),
    };
    // What the capture hands the disk while frames arrive, and what it can write.
    let handed = delivered.min(ca);
    let written = disk.map_or(f64::INFINITY, |d| d.capacity_pps);
    if let Some(d) = disk.as_mut() {
        d.fills_in_s = (handed > written).then(|| d.buffer_frames / (handed - written));
    }
    let (kernel_loss, app_loss) = if burst.is_infinite() {
        // An endless steady stream: the buffers' head start is negligible.
        (
            (r - delivered) / r,
            (delivered - ca.min(written)).max(0.0) / r,
        )
    } else {
        fluid(
            Fluid {
                rate: r,
                delivered,
                app: ca,
                idle_app: idle_ca,
                buffer,
                burst,
                idle,
                disk: disk.map(|d| (d.capacity_pps, d.buffer_frames)),
            },
            s.count.map(|c| c as f64),
        )
    };
    if disk.is_some() && s.count.is_none() && handed > written {
        notes.push(
            "an endless stream: the disk's buffer only delays its loss (give --duration or \
             --count for a run of that length)"
                .to_owned(),
        );
    }
    // Waits for the CPU, at the core the tool needs for what it keeps up with.
    // With the receive work on the tool's CPU, as the rps-on calibration waited.
    let waits = p
        .cpu
        .as_ref()
        .zip(key.as_ref())
        .map(|(c, k)| c.waits(k, s.kernel_on_app_cpu));
    // Frames arrive for a burst's length at a time (a finite steady run: its whole length).
    let arrivals_s = burst / r;
    let wait_loss = waits.map_or(0.0, |(x, waits)| {
        let demand = delivered.min(ca) * tool_ns / 1e9;
        let waiting = share::waiting(demand, x.share);
        let lost = waits.lost(waiting, buffer / delivered, arrivals_s);
        (1.0 - kernel_loss - app_loss) * lost
    });
    let app_loss = app_loss + wait_loss;
    let max_burst = burst_absorbed(
        delivered,
        ca,
        buffer,
        disk.map(|d| (d.capacity_pps, d.buffer_frames)),
    )
    .map(|t| t * r);
    let mut worst = stages
        .iter()
        .max_by(|a, b| a.ns.total_cmp(&b.ns))
        .map_or_else(String::new, |x| x.stage.clone());
    if r > ck && ck <= ca {
        worst = "kernel".to_owned();
    }
    if handed > written {
        worst = "disk".to_owned();
    }
    Ok(Prediction {
        loss: kernel_loss + app_loss,
        kernel_loss,
        app_loss,
        offered_pps: r,
        caplen,
        kernel_capacity_pps: ck,
        app_capacity_pps: ca,
        loss_starts_pps: ck.min(ca).min(written),
        buffer_frames: buffer,
        max_burst,
        cpu_share,
        wait_loss,
        bottleneck: worst,
        stages,
        edge: None,
        disk,
        notes,
    })
}

/// Seconds of frames delivered at `delivered` a second that the buffers take before one is
/// lost (`None`: any number): the ring and pool (`buffer` frames) in front of the
/// application's `app` frames a second, and behind it the disk's buffer (`(capacity,
/// frames)`), which once full holds the application to the disk's capacity.
fn burst_absorbed(delivered: f64, app: f64, buffer: f64, disk: Option<(f64, f64)>) -> Option<f64> {
    let ring_alone = (delivered > app).then(|| buffer / (delivered - app));
    let Some((written, disk_frames)) = disk.filter(|(w, _)| delivered.min(app) > *w) else {
        return ring_alone;
    };
    let disk_full = disk_frames / (delivered.min(app) - written);
    match ring_alone {
        Some(t) if t <= disk_full => Some(t),
        _ => {
            let backlog = (delivered - app).max(0.0) * disk_full;
            Some(disk_full + (buffer - backlog) / (delivered - written))
        }
    }
}

/// What to change when `stage` is the bottleneck.
pub fn remedy(stage: &str) -> &'static str {
    match stage {
        "kernel" => "spread receive work over more queues and CPUs (NIC channels, RPS away from the capture CPU)",
        "ring read" => "capture with more --queues on more CPUs",
        "pool copy" | "write" | "capture and write" | "capture to /dev/null" => {
            "keep fewer bytes per packet (-s 96)"
        }
        "x-loop" => "lower --load, or give --workers more CPUs",
        "disk" => {
            "write fewer bytes (-s 96, --compress zstd:1), write past the page cache (poolcap's \
             direct I/O), or a faster disk"
        }
        "probe rules" => {
            "fewer rules, more --workers on more CPUs, or count them in the kernel (--in-kernel)"
        }
        s if s.starts_with("zstd") || s.starts_with("gzip") => "a faster --compress level (zstd:1)",
        s if s.ends_with("behind the receive work") => {
            "move the receive work off the capture CPU (RPS, IRQ affinity)"
        }
        _ => "a larger buffer (it helps only against bursts)",
    }
}

/// The fluid model's inputs, frames and seconds.
#[derive(Debug, Clone, Copy)]
struct Fluid {
    rate: f64,
    delivered: f64,
    /// The application's capacity while a burst arrives.
    app: f64,
    /// Its capacity between bursts (no receive work then).
    idle_app: f64,
    buffer: f64,
    burst: f64,
    idle: f64,
    /// The disk's capacity and the frames its buffer holds (`None`: no disk stage).
    disk: Option<(f64, f64)>,
}

impl Fluid {
    /// Hands the disk the `frames` the application took in `t` seconds, the disk's buffer at
    /// `filled` frames: what its buffer cannot take holds the application back, so those
    /// frames stay in the ring's `backlog`; returns the frames that then overflow the ring.
    fn hand_to_disk(&self, frames: f64, t: f64, filled: &mut f64, backlog: &mut f64) -> f64 {
        let Some((written, held)) = self.disk else {
            return 0.0;
        };
        *filled += frames - written * t;
        let back = (*filled - held).max(0.0);
        *filled = filled.clamp(0.0, held);
        *backlog += back;
        let lost = (*backlog - self.buffer).max(0.0);
        *backlog = backlog.min(self.buffer);
        lost
    }
}

/// (kernel loss, application loss) as fractions of the offered frames: `count` frames
/// (`None`: endless, until the cycle's end backlog repeats) in cycles of a burst and an idle
/// time, from empty buffers. The disk's buffer is filled by what the application took over
/// each phase and drained at the disk's capacity; what it cannot take goes back to the ring
/// ([`Fluid::hand_to_disk`]). Exact for a steady run (one phase), an approximation for bursts,
/// where the stages' phases interleave within a cycle.
fn fluid(f: Fluid, count: Option<f64>) -> (f64, f64) {
    let (mut backlog, mut sent, mut k_lost, mut a_lost) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    let mut on_disk = 0.0f64;
    let cycles = count.map_or(1_000_000.0, |c| (c / f.burst).ceil());
    let mut last_cycle = (0.0, 0.0);
    let mut i = 0.0;
    while i < cycles {
        // The last cycle of a finite count may be a partial burst.
        let n = count.map_or(f.burst, |c| (c - sent).min(f.burst));
        let t = n / f.rate;
        let k = (f.rate - f.delivered) * t;
        let (before, disk_before) = (backlog, on_disk);
        backlog += (f.delivered - f.app) * t;
        let mut a = (backlog - f.buffer).max(0.0);
        backlog = backlog.clamp(0.0, f.buffer);
        let taken = f.delivered * t + before - backlog - a;
        a += f.hand_to_disk(taken, t, &mut on_disk, &mut backlog);
        let drained = backlog.min(f.idle_app * f.idle);
        backlog -= drained;
        // What the disk's buffer sends back between bursts stays within the ring.
        f.hand_to_disk(drained, f.idle, &mut on_disk, &mut backlog);
        sent += n;
        k_lost += k;
        a_lost += a;
        last_cycle = (k / n, a / n);
        i += 1.0;
        let repeats = (backlog - before).abs() < 1e-9 && (on_disk - disk_before).abs() < 1e-9;
        if count.is_none() && repeats && i > 1.0 {
            return last_cycle;
        }
    }
    match count {
        Some(_) => (k_lost / sent, a_lost / sent),
        None => last_cycle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Cost, ProbeCosts, ToolCosts};
    use std::collections::BTreeMap;

    fn flat(ns: f64) -> Cost {
        Cost {
            ns_per_packet: ns,
            ..Cost::default()
        }
    }

    /// Round numbers: kernel 1 µs (1 Mpps), poolcap count 1 µs, copy 1 µs, write 2 µs per
    /// byte-free packet (pcapng 1.5 µs, to /dev/null 0.3 µs), x-loop 1 ns, the probe's first
    /// rule 0.5 µs and each further one 0.1 µs, zstd:3 1 µs, tcpdump 4 µs to /dev/null.
    fn profile() -> Profile {
        Profile {
            source: "test".into(),
            load_average: None,
            sender: flat(1000.0),
            kernel: flat(1000.0),
            poolcap_count: flat(1000.0),
            pool_copy: flat(1000.0),
            write: flat(2000.0),
            pcapng: Some(flat(1500.0)),
            write_null: Some(flat(300.0)),
            probe: Some(ProbeCosts {
                first_rule: flat(500.0),
                per_rule: flat(100.0),
                flow_rule: Some(flat(200.0)),
            }),
            compress: BTreeMap::from([("zstd:3".to_owned(), flat(1000.0))]),
            x_loop_ns: 1.0,
            tcpdump: ToolCosts {
                null: flat(4000.0),
                file: flat(5000.0),
                file_rps: Some(flat(20_000.0)),
                ..ToolCosts::default()
            },
            dumpcap: ToolCosts {
                null: flat(10_000.0),
                file: flat(10_000.0),
                null_rps: Some(flat(40_000.0)),
                null_rps_light: Some(flat(19_000.0)),
                ..ToolCosts::default()
            },
            ring_slot_overhead: 48.0,
            cpu: None,
            kernel_rps: None,
            rings: Vec::new(),
            disk: None,
        }
    }

    /// [`profile`] with writing free on the CPU and a disk of 400 MB/s direct, 250 MB/s
    /// through the page cache, which takes 1 GB dirty: at 500k pps of pcap records of 1000 B
    /// (984 B frames) the capture hands the disk 500 MB/s.
    fn with_disk() -> Profile {
        Profile {
            write: flat(0.0),
            disk: Some(crate::profile::Disk {
                dir: "/var/tmp".into(),
                direct_bytes_per_s: Some(400e6),
                buffered_bytes_per_s: Some(250e6),
                dirty_limit_bytes: Some(1e9),
            }),
            ..profile()
        }
    }

    /// 500k pps of 984 B frames written to a pcap file for `seconds`, `io`.
    fn writing(seconds: f64, io: DiskIo) -> Scenario {
        Scenario {
            output: Output::Pcap,
            count: Some((500e3 * seconds) as u64),
            io,
            sizes: vec![(984.0, 1.0)],
            ..scenario(Tool::Poolcap, 500e3)
        }
    }

    #[test]
    fn a_run_the_page_cache_takes_whole_loses_nothing_above_the_disks_rate() {
        // 500 MB/s into a cache that takes 1 GB while write-back drains 250 MB/s: full after
        // 4 s. Three seconds lose nothing though the disk is half as fast.
        let p = predict(&with_disk(), &writing(3.0, DiskIo::Buffered)).unwrap();
        assert_eq!(p.loss, 0.0, "{p:?}");
        let d = p.disk.unwrap();
        assert_eq!((d.record_bytes, d.capacity_pps), (1000.0, 250e3));
        assert!(close(d.fills_in_s.unwrap(), 4.0), "{d:?}");
        assert_eq!(p.bottleneck, "disk");
        assert!(close(p.loss_starts_pps, 250e3), "{p:?}");
        // The longest burst: 4 s filling the cache, then the ring at 250k a second.
        let absorbed = (4.0 + p.buffer_frames / 250e3) * 500e3;
        assert!(close(p.max_burst.unwrap(), absorbed), "{p:?}");
        assert!(p.notes.is_empty(), "{p:?}");
    }

    #[test]
    fn a_long_run_loses_what_its_rate_exceeds_the_disks_by_beyond_the_buffers() {
        // 20 s: 10M frames, of which the disk writes 5M, the cache holds 1M and the ring
        // its buffer's worth.
        let p = predict(&with_disk(), &writing(20.0, DiskIo::Buffered)).unwrap();
        let lost = 10e6 - 5e6 - 1e6 - p.buffer_frames;
        assert!(close(p.app_loss, lost / 10e6), "{p:?}");
        assert_eq!(p.kernel_loss, 0.0);
        // Endless: half of it, and a note that the buffers only delay it.
        let endless = Scenario {
            count: None,
            ..writing(1.0, DiskIo::Buffered)
        };
        let e = predict(&with_disk(), &endless).unwrap();
        assert!(
            close(e.loss, 0.5) && e.notes[0].contains("endless"),
            "{e:?}"
        );
    }

    #[test]
    fn direct_io_writes_at_the_devices_rate_behind_the_writers_buffers() {
        // 400 MB/s: 400k pps of the 500k, behind 1 GiB in flight (1073741.8 records). Thirty
        // seconds lose 100k a second beyond the buffers; forty lose less than through the
        // cache.
        let thirty = predict(&with_disk(), &writing(30.0, DiskIo::Direct)).unwrap();
        let d = thirty.disk.unwrap();
        assert!(
            close(d.buffer_frames, DIRECT_IN_FLIGHT_BYTES / 1000.0),
            "{d:?}"
        );
        let lost = 3e6 - d.buffer_frames - thirty.buffer_frames;
        assert!(close(thirty.loss, lost / 15e6), "{thirty:?}");
        let forty = predict(&with_disk(), &writing(40.0, DiskIo::Direct)).unwrap();
        let buffered = predict(&with_disk(), &writing(40.0, DiskIo::Buffered)).unwrap();
        assert!(forty.loss < buffered.loss, "{forty:?} {buffered:?}");
        // Below the device's rate nothing is lost, however long.
        let slow = Scenario {
            rate_pps: 300e3,
            ..writing(60.0, DiskIo::Direct)
        };
        let s = predict(&with_disk(), &slow).unwrap();
        assert_eq!(s.loss, 0.0);
        assert_eq!(s.disk.unwrap().fills_in_s, None);
        // tcpdump writes through the page cache whatever `io` says.
        let tcpdump = Scenario {
            tool: Tool::Tcpdump,
            ..writing(1.0, DiskIo::Direct)
        };
        let t = predict(&with_disk(), &tcpdump).unwrap().disk.unwrap();
        assert_eq!(t.io, DiskIo::Buffered);
    }

    #[test]
    fn a_disk_the_profile_does_not_know_is_left_out_and_said_so() {
        let s = writing(20.0, DiskIo::Buffered);
        let unknown = predict(&profile(), &s).unwrap();
        assert_eq!(unknown.disk, None);
        assert!(
            unknown.notes[0].contains("no disk measurement"),
            "{unknown:?}"
        );
        // Measured direct only: the page cache's rate is not known.
        let mut p = with_disk();
        if let Some(d) = p.disk.as_mut() {
            d.buffered_bytes_per_s = None;
        }
        let half = predict(&p, &s).unwrap();
        assert!(half.notes[0].contains("write-back rate"), "{half:?}");
        // Compressed, what reaches the disk is not known; nothing written, nothing to say.
        let zstd = Scenario {
            compress: Some("zstd:3".into()),
            ..s.clone()
        };
        assert!(predict(&with_disk(), &zstd).unwrap().notes[0].contains("zstd:3"));
        let counting = Scenario {
            output: Output::Nothing,
            ..s
        };
        assert!(predict(&with_disk(), &counting).unwrap().notes.is_empty());
        // A profile written before the disk was measured still reads.
        let mut json = serde_json::to_value(Profile::built_in()).unwrap();
        json.as_object_mut().unwrap().remove("disk");
        let old: Profile = serde_json::from_value(json).unwrap();
        assert_eq!(old.disk, None);
    }

    #[test]
    fn bursts_fill_the_disks_buffer_and_idle_time_drains_it() {
        // Bursts of 1M frames (2 s at 500k pps) with 2 s of silence: each burst leaves 500k
        // in the page cache, the silence drains them: nothing lost, however many bursts.
        let bursts = |idle_s: f64| Scenario {
            burst: Some((1_000_000, idle_s)),
            count: Some(10_000_000),
            ..writing(1.0, DiskIo::Buffered)
        };
        assert_eq!(predict(&with_disk(), &bursts(2.0)).unwrap().loss, 0.0);
        // Half a second of silence drains 125k of the 500k: the cache fills over the bursts.
        let short = predict(&with_disk(), &bursts(0.5)).unwrap();
        assert!(short.loss > 0.0, "{short:?}");
    }

    fn scenario(tool: Tool, rate: f64) -> Scenario {
        Scenario {
            buffer_bytes: 1 << 20,
            ..Scenario::steady(tool, rate, 64.0)
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn below_every_capacity_nothing_is_lost() {
        let p = predict(&profile(), &scenario(Tool::Poolcap, 500_000.0)).unwrap();
        assert_eq!((p.loss, p.kernel_loss, p.app_loss), (0.0, 0.0, 0.0));
        assert!(close(p.loss_starts_pps, 1e6));
        assert_eq!(p.max_burst, None);
    }

    #[test]
    fn a_slow_application_loses_the_excess_of_an_endless_stream() {
        // poolcap writing from the ring, with no copy: 1 + 2 µs = 333k pps; offered 500k: a
        // third is lost.
        let s = Scenario {
            output: Output::Pcap,
            ..scenario(Tool::Poolcap, 500_000.0)
        };
        let p = predict(&profile(), &s).unwrap();
        assert!(close(p.app_capacity_pps, 1e6 / 3.0), "{p:?}");
        assert!(
            close(p.app_loss, 1.0 / 3.0) && p.kernel_loss == 0.0,
            "{p:?}"
        );
        assert_eq!(p.bottleneck, "write");
        // tcpdump at 4 µs.
        let p = predict(&profile(), &scenario(Tool::Tcpdump, 500_000.0)).unwrap();
        assert!(close(p.app_loss, 0.5));
    }

    #[test]
    fn a_peer_counting_behind_the_receive_work_costs_what_its_rps_run_cost() {
        // dumpcap: 10 µs with rps off, 40 µs of its own measured with rps on (no kernel_rps
        // here: the kernel stage is the rps-off 1 µs); tcpdump was not measured with rps on.
        let rps = |tool| Scenario {
            kernel_on_app_cpu: true,
            ..scenario(tool, 10_000.0)
        };
        let d = predict(&profile(), &rps(Tool::Dumpcap)).unwrap();
        assert_eq!(
            d.stages[1].stage,
            "capture to /dev/null behind the receive work"
        );
        // Its own 40 µs after the kernel stage's 1 µs.
        assert!(close(d.app_capacity_pps, 1e9 / 41_000.0), "{d:?}");
        let off = predict(&profile(), &scenario(Tool::Dumpcap, 10_000.0)).unwrap();
        assert!(close(off.app_capacity_pps, 1e5), "{off:?}");
        let t = predict(&profile(), &rps(Tool::Tcpdump)).unwrap();
        assert_eq!(t.stages[1].stage, "capture to /dev/null");
        // tcpdump writing was measured with rps on: 20 µs of its own, and the kernel's 1 µs.
        let w = predict(
            &profile(),
            &Scenario {
                output: Output::Pcap,
                ..rps(Tool::Tcpdump)
            },
        )
        .unwrap();
        assert_eq!(
            w.stages[1].stage,
            "capture and write behind the receive work"
        );
        assert!(close(w.app_capacity_pps, 1e9 / 21_000.0), "{w:?}");
    }

    #[test]
    fn between_its_capacities_behind_and_keeping_up_a_peer_is_at_the_edge() {
        // dumpcap behind the receive work: 1 + 40 µs once behind (24.4k pps), 1 + 19 µs
        // keeping up (50k pps).
        let at = |rate| {
            let s = Scenario {
                kernel_on_app_cpu: true,
                ..scenario(Tool::Dumpcap, rate)
            };
            predict(&profile(), &s).unwrap()
        };
        let below = at(20_000.0);
        assert_eq!((below.loss, below.edge), (0.0, None));
        // At 40k pps: a steady loss of 1 - 24.4/40 once behind, none keeping up.
        let edge = at(40_000.0);
        assert!(
            close(edge.loss, 1.0 - 1e9 / 41_000.0 / 40_000.0),
            "{edge:?}"
        );
        let e = edge.edge.expect("at the edge");
        assert_eq!(e.loss_keeping_up, 0.0);
        assert!(close(e.keeps_up_to_pps, 50_000.0), "{e:?}");
        // Beyond what it keeps up with it falls behind for sure.
        assert_eq!(at(60_000.0).edge, None);
        // With rps off, and for a peer without a light cost, there is no edge.
        assert_eq!(
            predict(&profile(), &scenario(Tool::Dumpcap, 40_000.0))
                .unwrap()
                .edge,
            None
        );
        let t = Scenario {
            kernel_on_app_cpu: true,
            output: Output::Pcap,
            ..scenario(Tool::Tcpdump, 40_000.0)
        };
        assert_eq!(predict(&profile(), &t).unwrap().edge, None);
    }

    /// A shared core whose rps-off calibration says nothing of waits or shares, with `rps`'s
    /// waits behind the receive work.
    fn shared_core(rps: Option<crate::share::RpsWaits>) -> crate::share::Cpu {
        crate::share::Cpu {
            sharing: BTreeMap::new(),
            tail_s: 0.0,
            longest_s: None,
            rps,
        }
    }

    #[test]
    fn at_the_edge_a_capture_falls_behind_when_a_wait_outlasts_its_buffers() {
        // dumpcap at 40k pps, between its capacities (about 24k behind, 50k keeping up), 40k
        // frames (a 1 s run); it waited 2 ms a timeslice behind the receive work, so a run
        // holds 1 s / 5 ms = 200 waits. The share when runnable is 1 (no capacity share).
        let mut p = profile();
        p.cpu = Some(shared_core(Some(crate::share::RpsWaits {
            sharing: crate::share::Sharing {
                share: 1.0,
                wait_s: 0.0,
            },
            by_key: BTreeMap::from([(
                "dumpcap null".to_owned(),
                crate::share::Sharing {
                    share: 1.0,
                    wait_s: 0.002,
                },
            )]),
            keeping_up: BTreeMap::new(),
            tail_s: 0.0,
            longest_s: None,
        })));
        let at = |p: &Profile, ring_kib: u64, count: Option<u64>| {
            let s = Scenario {
                kernel_on_app_cpu: true,
                buffer_bytes: ring_kib << 10,
                count,
                ..scenario(Tool::Dumpcap, 40_000.0)
            };
            predict(p, &s).unwrap()
        };
        // A 1 MiB ring of 64 B frames holds 150 ms at 40k pps (three of its four blocks):
        // e^-75 a wait, no chance in 200. Predicted keeping up: nothing lost, and the loss
        // behind beside it.
        let deep = at(&p, 1024, Some(40_000));
        let e = deep.edge.expect("at the edge");
        let depth = deep.buffer_frames / 40_000.0;
        let chance = 1.0 - (-200.0 * (-depth / 0.002_f64).exp()).exp();
        assert!(close(depth, 0.150), "{deep:?}");
        assert!(close(e.falls_behind, chance) && chance < 1e-6, "{e:?}");
        assert_eq!((deep.loss, e.loss_keeping_up), (0.0, 0.0));
        assert!(close(deep.app_capacity_pps, e.keeps_up_to_pps), "{deep:?}");
        assert!(e.loss_behind > 0.0, "{e:?}");
        // Its waits while keeping up, where calibration measured them, decide instead: 20 ms
        // a timeslice, 43 of them in the run (1 s / 23 ms), e^-7.5 a wait, 2% in all.
        let mut kept = p.clone();
        if let Some(r) = kept.cpu.as_mut().and_then(|c| c.rps.as_mut()) {
            r.keeping_up.insert("dumpcap null".to_owned(), 0.020);
        }
        let n = 1.0 / (share::SLICE_S + 0.020);
        let chance = 1.0 - (-n * (-depth / 0.020_f64).exp()).exp();
        let e = at(&kept, 1024, Some(40_000)).edge.unwrap();
        assert!(
            close(e.falls_behind, chance) && (0.01..0.05).contains(&chance),
            "{e:?}"
        );
        // The smallest ring: one block of 256 KiB, none beyond the one held: no depth, so it
        // falls behind, and the loss is the one behind.
        let shallow = at(&p, 256, Some(40_000));
        let e = shallow.edge.expect("at the edge");
        assert!(close(e.falls_behind, 1.0), "{e:?}");
        assert!(close(shallow.loss, e.loss_behind) && shallow.loss > 0.0);
        // Endless, or without the tool's waits: it falls behind sooner or later.
        assert!(close(at(&p, 1024, None).edge.unwrap().falls_behind, 1.0));
        p.cpu = None;
        let e = at(&p, 1024, Some(40_000)).edge.unwrap();
        assert!(close(e.falls_behind, 1.0), "{e:?}");
    }

    #[test]
    fn behind_the_receive_work_a_peer_keeps_its_measured_share_whatever_the_rate() {
        // dumpcap behind the receive work: 40 µs a packet of its own, the receive work 1 µs a
        // frame, on a shared core (a `cpu` that says nothing of its waits).
        let mut p = profile();
        p.cpu = Some(shared_core(None));
        let behind = |p: &Profile, rate: f64| {
            let s = Scenario {
                kernel_on_app_cpu: true,
                ..scenario(Tool::Dumpcap, rate)
            };
            predict(p, &s).unwrap().app_capacity_pps
        };
        // The receive work first: 25k pps of what 60k and 100k frames a second leave.
        assert!(close(behind(&p, 60e3), 25e3 * 0.94));
        assert!(close(behind(&p, 100e3), 25e3 * 0.9));
        // With the share calibration measured (half the CPU): the same at either rate.
        p.dumpcap.null_rps_left = Some(flat(0.5));
        assert!(close(behind(&p, 60e3), 12_500.0));
        assert!(close(behind(&p, 100e3), 12_500.0));
    }

    #[test]
    fn the_kernel_drops_what_exceeds_its_capacity_first() {
        let p = predict(&profile(), &scenario(Tool::Poolcap, 2e6)).unwrap();
        assert!(close(p.kernel_loss, 0.5), "{p:?}");
        assert!(close(p.app_loss, 0.0));
        assert_eq!(p.bottleneck, "kernel");
    }

    #[test]
    fn buffers_absorb_a_finite_run_until_the_backlog_exceeds_them() {
        // 64 B frames: slot = align8(48 + 64) = 112 B; 1 MiB ring = 16 blocks of 64 KiB, 584
        // slots each, which at 500k pps fill in 1.17 ms: the 4 ms retire timer of an
        // analysing capture closes four blocks a period, 500 frames each. 8000 frames, less
        // one block (500) and one chunk (100) held while being emptied.
        let s = Scenario {
            load: 3000,
            count: Some(100_000),
            pool: (100, 10),
            ..scenario(Tool::Poolcap, 500_000.0)
        };
        // app: 1 + 1 + 3 µs = 200k pps; 0.2 s of sending: 60k frames backlog - 8400 held.
        let p = predict(&profile(), &s).unwrap();
        assert!(close(p.buffer_frames, 8000.0 + 1000.0 - 600.0), "{p:?}");
        assert!(close(p.app_loss, (60_000.0 - 8400.0) / 100_000.0), "{p:?}");
        // Without a count, the asymptotic share.
        let p = predict(&profile(), &Scenario { count: None, ..s }).unwrap();
        assert!(close(p.app_loss, 0.6));
    }

    #[test]
    fn a_block_holds_what_arrives_before_the_retire_timer_closes_it() {
        // Measured with a stopped poolcap analysing 64 B frames (16 blocks of 1724 slots, a
        // 4 ms timer): 379, 1136, 919 and 1228 frames a block at 100k, 300k, 450k and 687k
        // pps. The rule: 400, 1200, 900 and 1374.
        let at = |pps: f64| frames_per_block(1724.0, pps, 0.004);
        assert!(close(at(100_000.0), 400.0));
        assert!(close(at(300_000.0), 1200.0));
        assert!(close(at(450_000.0), 900.0), "two blocks a period");
        assert!(close(at(687_000.0), 687_000.0 * 0.004 / 2.0));
        // Within a long period every block but the last fills; with nothing arriving a
        // block keeps its slots; at any rate it holds no more than them.
        assert!(close(frames_per_block(1724.0, 1e6, 1.0), 1e6 / 581.0));
        assert!(close(frames_per_block(1724.0, 0.0, 0.004), 1724.0));
        assert!(close(
            frames_per_block(1724.0, 1e9, 0.004),
            1e9 * 0.004 / 2321.0
        ));
    }

    #[test]
    fn an_analysing_ring_buffers_fewer_frames_at_low_rates_and_a_peers_does_not() {
        // A 4 MiB ring: 16 blocks of 2340 slots of align8(48 + 60) = 112 B (libpcap's 4-byte
        // reserve fits in the same 112); the pool's one chunk is the one held.
        let s = |tool: Tool, rate: f64| Scenario {
            tool,
            load: u32::from(tool == Tool::Poolcap),
            buffer_bytes: 4 << 20,
            pool: (100, 1),
            count: Some(1_000_000),
            ..Scenario::steady(tool, rate, 60.0)
        };
        let frames =
            |tool: Tool, rate: f64| predict(&profile(), &s(tool, rate)).unwrap().buffer_frames;
        // poolcap analysing: 4 ms of frames a block at 100k pps (400); at 1M pps a block
        // fills in 2.34 ms, two a period, 2000 frames each. One block is held.
        assert!(close(frames(Tool::Poolcap, 100_000.0), 15.0 * 400.0));
        assert!(close(frames(Tool::Poolcap, 1e6), 15.0 * 2000.0));
        // tcpdump's 1 s timer: 2340 slots a block at 100k pps too, all but a sliver.
        let tcpdump = frames(Tool::Tcpdump, 100_000.0);
        assert!(tcpdump > 15.0 * 2300.0, "{tcpdump}");
    }

    #[test]
    fn writing_only_puts_the_pool_into_the_ring() {
        // 64 B frames of 112 B slots, 1 MiB ring, pool (100, 20) of 2 KiB cells: a file is
        // written from the ring, which has all 20 chunks' memory and the pool none: 32 whole
        // blocks of 156 KiB, a thirty-second of the 4.9 MiB (1425 slots, 2.85 ms at 500k pps),
        // which the 50 ms retire timer of a capture that only writes closes eighteen a period
        // (1388.9 frames each); one is held while it is written. No pool copy.
        let s = Scenario {
            output: Output::Pcap,
            pool: (100, 20),
            count: Some(100_000),
            ..scenario(Tool::Poolcap, 500_000.0)
        };
        let p = predict(&profile(), &s).unwrap();
        let block = 500_000.0 * 0.05 / 18.0;
        assert!(close(p.buffer_frames, 31.0 * block), "{p:?}");
        assert!(!p.stages.iter().any(|x| x.stage == "pool copy"), "{p:?}");
        // With analysis the pool stays whole; a peer has only its kernel buffer.
        let analysed = Scenario {
            load: 1,
            ..s.clone()
        };
        let p = predict(&profile(), &analysed).unwrap();
        assert!(close(p.buffer_frames, 8000.0 + 2000.0 - 600.0), "{p:?}");
        // libpcap's 4 bytes of VLAN reserve make its slot align8(48 + 4 + 64) = 120 B, and
        // its blocks are 256 KiB (2184 slots, 4.37 ms at 500k pps; tcpdump's 1 s timer closes
        // 229 a period, 2183.4 frames each), one held.
        let peer = Scenario {
            tool: Tool::Tcpdump,
            ..s
        };
        assert!(close(
            predict(&profile(), &peer).unwrap().buffer_frames,
            3.0 * 500_000.0 / 229.0
        ));
    }

    #[test]
    fn a_probe_pays_its_first_rule_and_each_further_one_beyond_the_pool_copy() {
        // 11 rules: ring read 1 µs + copy 1 µs + 0.5 µs + 10 x 0.1 µs = 3.5 µs a packet.
        let s = Scenario {
            rules: 11,
            ..scenario(Tool::Poolcap, 500_000.0)
        };
        let p = predict(&profile(), &s).unwrap();
        let names: Vec<&str> = p.stages.iter().map(|x| x.stage.as_str()).collect();
        assert_eq!(names, ["ring read", "pool copy", "probe rules"]);
        assert!(close(p.app_capacity_pps, 1e9 / 3500.0), "{p:?}");
        assert!(close(p.loss, (500_000.0 - 1e9 / 3500.0) / 500_000.0));
        assert_eq!(p.bottleneck, "probe rules");
        assert!(remedy("probe rules").contains("--in-kernel"));
        // Its workers analyse: the pool buffers too, as with an x-loop load.
        let loaded = Scenario {
            rules: 0,
            load: 1,
            ..s.clone()
        };
        let analysing = predict(&profile(), &loaded).unwrap();
        assert!(close(p.buffer_frames, analysing.buffer_frames));
        // A peer has no rules; a profile without probe costs cannot answer.
        let peer = Scenario {
            tool: Tool::Tcpdump,
            ..s.clone()
        };
        assert!(predict(&profile(), &peer)
            .unwrap_err()
            .0
            .contains("tcpdump"));
        let unmeasured = Profile {
            probe: None,
            ..profile()
        };
        let e = predict(&unmeasured, &s).unwrap_err();
        assert!(e.0.contains("no cost for probe rules"), "{e}");
    }

    #[test]
    fn each_further_flows_rule_adds_its_flow_table_update() {
        // 11 rules, 10 of them further flows rules: 3.5 µs + 10 x 0.2 µs = 5.5 µs a packet.
        let s = Scenario {
            rules: 11,
            flow_rules: 10,
            ..scenario(Tool::Poolcap, 100_000.0)
        };
        let p = predict(&profile(), &s).unwrap();
        assert!(close(p.app_capacity_pps, 1e9 / 5500.0), "{p:?}");
        // A profile calibrated before flows rules were measured cannot answer for them.
        let mut old = profile();
        old.probe.as_mut().unwrap().flow_rule = None;
        let e = predict(&old, &s).unwrap_err();
        assert!(e.0.contains("no cost for flows rules"), "{e}");
    }

    #[test]
    fn pcapng_and_dev_null_cost_what_was_measured_for_them_else_what_pcap_costs() {
        let pcap = Scenario {
            output: Output::Pcap,
            ..scenario(Tool::Poolcap, 100_000.0)
        };
        let pcapng = Scenario {
            output: Output::Pcapng,
            ..pcap.clone()
        };
        let write = |p: &Profile, s: &Scenario| {
            let r = predict(p, s).unwrap();
            r.stages.iter().find(|x| x.stage == "write").unwrap().ns
        };
        let null = Scenario {
            output: Output::DevNull,
            ..pcap.clone()
        };
        assert_eq!(write(&profile(), &pcap), 2000.0);
        assert_eq!(write(&profile(), &pcapng), 1500.0);
        assert_eq!(write(&profile(), &null), 300.0);
        let unmeasured = Profile {
            pcapng: None,
            write_null: None,
            ..profile()
        };
        assert_eq!(write(&unmeasured, &pcapng), 2000.0);
        assert_eq!(write(&unmeasured, &null), 2000.0);
    }

    #[test]
    fn bursts_are_lost_only_beyond_what_the_buffers_and_the_idle_time_absorb() {
        // app 200k pps, bursts at 1 Mpps: backlog grows 0.8 per frame sent.
        let base = Scenario {
            load: 3000,
            pool: (100, 10),
            burst: Some((10_000, 0.1)),
            ..scenario(Tool::Poolcap, 1e6)
        };
        // The ring's 16 blocks of 584 slots fill in 0.58 ms at 1 Mpps: seven a 4 ms retire
        // period, 571.4 frames each; one is held, and a chunk of 100.
        let buffer = 15.0 * 4000.0 / 7.0 + 900.0;
        let p = predict(&profile(), &base).unwrap();
        assert!(close(p.buffer_frames, buffer), "{p:?}");
        assert_eq!(
            p.loss, 0.0,
            "8000 backlog < 9471 frames, drained in the idle time"
        );
        let mb = p.max_burst.unwrap();
        assert!(close(mb, buffer / 0.8), "{mb}");
        let big = Scenario {
            burst: Some((20_000, 0.1)),
            ..base.clone()
        };
        let p = predict(&profile(), &big).unwrap();
        assert!(close(p.app_loss, (16_000.0 - buffer) / 20_000.0), "{p:?}");
        // Too little idle time to drain: the backlog carries over and the steady share of
        // loss is what the mean rate exceeds the capacity by.
        let short = Scenario {
            burst: Some((20_000, 0.001)),
            ..base
        };
        let p = predict(&profile(), &short).unwrap();
        let mean = 20_000.0 / (0.02 + 0.001);
        assert!(close(p.app_loss, 1.0 - 200_000.0 / mean), "{p:?}");
    }

    #[test]
    fn kernel_work_on_the_capture_cpu_adds_to_the_application() {
        let s = Scenario {
            kernel_on_app_cpu: true,
            ..scenario(Tool::Poolcap, 2e6)
        };
        let p = predict(&profile(), &s).unwrap();
        // 1 µs kernel + 1 µs ring read on one core: 500k pps of 2 Mpps.
        assert!(close(p.app_capacity_pps, 500_000.0), "{p:?}");
        assert!(close(p.app_loss, 0.75) && p.kernel_loss == 0.0);
        assert_eq!(p.stages[0].stage, "kernel");
        // In bursts of 10k frames (5 ms at 2 Mpps) the backlog grows by 7500 a burst. The
        // silence after one has no receive work: the ring read alone drains 1 Mpps, 7500 in
        // 7.5 ms, so five bursts lose nothing; with half that silence the backlog carries
        // over and the ring overflows.
        let bursts = |idle_s: f64| {
            let s = Scenario {
                burst: Some((10_000, idle_s)),
                count: Some(50_000),
                ..s.clone()
            };
            predict(&profile(), &s).unwrap()
        };
        let calm = bursts(0.0075);
        assert!(
            calm.buffer_frames > 7500.0 && calm.buffer_frames < 11_250.0,
            "{calm:?}"
        );
        assert_eq!(calm.loss, 0.0, "{calm:?}");
        assert!(bursts(0.00375).loss > 0.0);
    }

    /// Calibrated at `share` when runnable, with waits of one timeslice per timeslice run
    /// (a busy thread gets half the core); `copy` on a core of its own.
    fn shared(share: f64, tail_s: f64) -> Profile {
        use crate::share::{Cpu, Sharing, SLICE_S};
        let at = |share, wait_s| Sharing { share, wait_s };
        Profile {
            cpu: Some(Cpu {
                sharing: BTreeMap::from([
                    ("count".to_owned(), at(share, SLICE_S)),
                    ("tcpdump null".to_owned(), at(share, SLICE_S)),
                    ("copy".to_owned(), at(1.0, 0.0)),
                ]),
                tail_s,
                longest_s: None,
                rps: None,
            }),
            ..profile()
        }
    }

    #[test]
    fn a_share_of_the_core_scales_the_application_capacity() {
        // Count 1 µs at half the core: 500k pps; the kernel (1 Mpps) delivers half of 2 Mpps,
        // the application keeps half of that. Waits of 1 µs never outlast a 9 ms ring.
        let p = predict(&shared(0.5, 1e-6), &scenario(Tool::Poolcap, 2e6)).unwrap();
        assert!(close(p.app_capacity_pps, 500_000.0), "{p:?}");
        assert!(
            close(p.kernel_loss, 0.5) && close(p.app_loss, 0.25),
            "{p:?}"
        );
        assert!(close(p.loss_starts_pps, 500_000.0) && p.cpu_share == 0.5);
        // The share is the configuration's: with analysis poolcap runs at `copy`'s.
        let copy = Scenario {
            load: 1000,
            ..scenario(Tool::Poolcap, 1000.0)
        };
        assert_eq!(predict(&shared(0.5, 1e-6), &copy).unwrap().cpu_share, 1.0);
    }

    #[test]
    fn on_a_shared_core_receive_work_comes_first_and_the_tool_shares_the_rest() {
        // 400k pps of 1 µs softirq work leave 60% of the core; the tool gets half of that:
        // 300k pps of its 1 µs, a quarter of the offered frames lost.
        let s = Scenario {
            kernel_on_app_cpu: true,
            ..scenario(Tool::Poolcap, 400_000.0)
        };
        let p = predict(&shared(0.5, 1e-6), &s).unwrap();
        assert!(close(p.app_capacity_pps, 300_000.0), "{p:?}");
        assert!(close(p.app_loss, 0.25) && p.kernel_loss == 0.0, "{p:?}");
        // Receive work that fills the core leaves the tool nothing.
        let flood = predict(&shared(0.5, 1e-6), &scenario(Tool::Poolcap, 1e6)).unwrap();
        assert!(flood.app_capacity_pps > 0.0);
        let s = Scenario {
            kernel_on_app_cpu: true,
            ..scenario(Tool::Poolcap, 1e6)
        };
        assert_eq!(
            predict(&shared(0.5, 1e-6), &s).unwrap().app_capacity_pps,
            0.0
        );
    }

    #[test]
    fn receive_work_on_the_tool_cpu_costs_what_it_measured_there() {
        // kernel_rps 0.5 µs: 400k pps leave 80% of the core, the tool gets half: 400k pps of
        // its 1 µs, so nothing is lost (with `kernel`'s 1 µs, a quarter was).
        let p = Profile {
            kernel_rps: Some(flat(500.0)),
            ..shared(0.5, 1e-6)
        };
        let s = Scenario {
            kernel_on_app_cpu: true,
            ..scenario(Tool::Poolcap, 400_000.0)
        };
        let got = predict(&p, &s).unwrap();
        assert!(close(got.app_capacity_pps, 400_000.0), "{got:?}");
        assert!(got.app_loss < 1e-9 && got.stages[0].ns == 500.0, "{got:?}");
        // rps off: the kernel stage keeps its own capacity from `kernel`.
        let off = predict(&p, &scenario(Tool::Poolcap, 400_000.0)).unwrap();
        assert_eq!(off.kernel_capacity_pps, 1e6);
    }

    #[test]
    fn with_analysis_poolcap_gets_the_saturated_workers_share() {
        use crate::share::{Sharing, SATURATED};
        // Count 1 µs + copy 1 µs + 1000 x-loop iterations of 1 ns: 3 µs, 333k pps on a whole
        // core; a saturated worker got 30% of it: 100k pps, so 200k offered lose half.
        let mut p = shared(0.5, 1e-6);
        let cpu = p.cpu.as_mut().unwrap();
        let busy = Sharing {
            share: 0.3,
            wait_s: 0.0001,
        };
        cpu.sharing.insert(SATURATED.to_owned(), busy);
        let s = Scenario {
            load: 1000,
            ..scenario(Tool::Poolcap, 200_000.0)
        };
        let got = predict(&p, &s).unwrap();
        assert!(close(got.cpu_share, 0.3), "{got:?}");
        assert!(close(got.app_capacity_pps, 100_000.0), "{got:?}");
        assert!((got.app_loss - 0.5).abs() < 1e-6, "{got:?}");
        // Without analysis the share stays the configuration's own (count: a slice per wait).
        let count = predict(&p, &scenario(Tool::Poolcap, 1000.0)).unwrap();
        assert_eq!(count.cpu_share, 0.5);
    }

    #[test]
    fn waits_longer_than_the_ring_lose_below_capacity() {
        // tcpdump 4 µs at 50k pps needs 20% of a core; at half a core it waits as long as it
        // runs (20% of the time), and half the core is enough. The 1 MiB ring holds 4 blocks
        // of 2184 slots of 120 B (libpcap reserves 4 bytes in each), which fill in 43.7 ms
        // at 50k pps, 23 a 1 s retire period: 2173.9 frames each, one of them held while it
        // is read. 130 ms at 50k.
        let held = 50_000.0 / 23.0;
        let frames = 3.0 * held;
        let depth = frames / 50_000.0;
        let s = scenario(Tool::Tcpdump, 50_000.0);
        let p = predict(&shared(0.5, depth), &s).unwrap();
        assert!(close(p.wait_loss, 0.2 / std::f64::consts::E), "{p:?}");
        assert!(close(p.loss, p.wait_loss) && p.kernel_loss == 0.0);
        // A 4 MiB ring, 5 times as deep, loses e^-4 of that; a core of its own loses nothing.
        let deep = Scenario {
            buffer_bytes: 4 << 20,
            ..s.clone()
        };
        let d = predict(&shared(0.5, depth), &deep).unwrap();
        let deep_frames = 15.0 * held;
        let ratio = (-(deep_frames - frames) / frames).exp();
        assert!((d.loss / p.loss - ratio).abs() < 1e-3, "{d:?}");
        assert_eq!(predict(&profile(), &s).unwrap().loss, 0.0);
        assert_eq!(predict(&shared(1.0, depth), &s).unwrap().loss, 0.0);
        // No wait outlasts the longest calibration allowed: a ring deeper than it loses
        // nothing to waits.
        let mut bounded = shared(0.5, depth);
        if let Some(c) = bounded.cpu.as_mut() {
            c.longest_s = Some(depth * 0.9);
        }
        assert_eq!(predict(&bounded, &s).unwrap().wait_loss, 0.0);
        // Bursts the ring holds whole lose nothing to waits; longer ones lose what arrives
        // beyond the ring's depth before the burst ends.
        let bursts = |frames: u64| Scenario {
            burst: Some((frames, 0.1)),
            ..s.clone()
        };
        let short = predict(&shared(0.5, depth), &bursts(6000)).unwrap();
        assert_eq!(short.wait_loss, 0.0, "{short:?}");
        let long = predict(&shared(0.5, depth), &bursts(13_000)).unwrap();
        let e = std::f64::consts::E;
        let within = 0.2 * (1.0 / e - (-13_000.0 / frames).exp());
        assert!(close(long.wait_loss, within), "{long:?}");
        // Behind the receive work (rps on) it waits as the rps-on calibration did: a core of
        // its own there loses nothing; rps off keeps the configuration's waits.
        // Calibrated at 50% rps off, and behind the receive work at `share`, waits of at
        // most `longest_s`.
        let with_rps = |share: f64, longest_s: Option<f64>| {
            let mut p = shared(0.5, depth);
            if let Some(c) = p.cpu.as_mut() {
                c.rps = Some(crate::share::RpsWaits {
                    sharing: crate::share::Sharing { share, wait_s: 0.0 },
                    by_key: Default::default(),
                    keeping_up: Default::default(),
                    tail_s: depth,
                    longest_s,
                });
            }
            p
        };
        let behind = with_rps(1.0, None);
        assert!(close(predict(&behind, &s).unwrap().wait_loss, p.wait_loss));
        let rps = Scenario {
            kernel_on_app_cpu: true,
            ..s
        };
        assert_eq!(predict(&behind, &rps).unwrap().wait_loss, 0.0);
        // Behind the receive work no wait outlasts the softirq's time budget: a ring deeper
        // than it loses nothing to waits, a shallower one less than unbounded waits lose.
        let shallow = with_rps(0.5, Some(depth * 0.9));
        assert_eq!(predict(&shallow, &rps).unwrap().wait_loss, 0.0);
        let cut = predict(&with_rps(0.5, Some(depth * 2.0)), &rps)
            .unwrap()
            .wait_loss;
        assert!(cut > 0.0 && cut < p.wait_loss, "{cut} {}", p.wait_loss);
        // A configuration measured behind the receive work waits at its own share there:
        // tcpdump to /dev/null ran whenever runnable, so it loses nothing to waits where
        // poolcap counting's half share loses; tcpdump writing, not measured, waits as
        // poolcap counting did.
        let mut own = with_rps(0.5, None);
        if let Some(r) = own.cpu.as_mut().and_then(|c| c.rps.as_mut()) {
            let ran = crate::share::Sharing {
                share: 1.0,
                wait_s: 0.0,
            };
            r.by_key.insert("tcpdump null".to_owned(), ran);
        }
        assert!(predict(&with_rps(0.5, None), &rps).unwrap().wait_loss > 0.0);
        assert_eq!(predict(&own, &rps).unwrap().wait_loss, 0.0);
        let writing = Scenario {
            output: Output::Pcap,
            ..rps.clone()
        };
        assert!(predict(&own, &writing).unwrap().wait_loss > 0.0);
    }

    #[test]
    fn snaplen_and_imix_set_the_captured_bytes() {
        let mut p = profile();
        p.write = Cost {
            ns_per_byte: 10.0,
            ..Cost::default()
        };
        let s = Scenario {
            output: Output::Pcap,
            snaplen: 96,
            sizes: vec![(60.0, 7.0), (590.0, 4.0), (1514.0, 1.0)],
            ..scenario(Tool::Poolcap, 1000.0)
        };
        let r = predict(&p, &s).unwrap();
        assert!(close(r.caplen, (60.0 * 7.0 + 96.0 * 5.0) / 12.0));
        assert!(r
            .stages
            .iter()
            .any(|x| x.stage == "write" && close(x.ns, 750.0)));
    }

    #[test]
    fn every_bottleneck_has_a_remedy() {
        assert!(remedy("x-loop").contains("--load"));
        assert!(remedy("zstd:19").contains("zstd:1"));
        assert!(remedy("capture to /dev/null behind the receive work").contains("RPS"));
        assert!(remedy("write").contains("-s 96"));
        assert!(remedy("kernel").contains("queues"));
    }

    #[test]
    fn impossible_scenarios_are_refused_with_a_reason() {
        let p = profile();
        let bad = |s: Scenario| predict(&p, &s).unwrap_err().0;
        assert!(bad(scenario(Tool::Poolcap, 0.0)).contains("rate"));
        assert!(bad(Scenario {
            load: 5,
            ..scenario(Tool::Tcpdump, 1.0)
        })
        .contains("x-loop"));
        assert!(bad(Scenario {
            compress: Some("zstd:3".into()),
            ..scenario(Tool::Poolcap, 1.0)
        })
        .contains("-w"));
        assert!(bad(Scenario {
            output: Output::Pcap,
            compress: Some("zstd:19".into()),
            ..scenario(Tool::Poolcap, 1.0)
        })
        .contains("zstd:3"));
        assert!(bad(Scenario {
            sizes: vec![],
            ..scenario(Tool::Poolcap, 1.0)
        })
        .contains("sizes"));
    }
}
