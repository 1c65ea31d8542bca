//! The traffic generator: sends an exact number of numbered frames (or replays a capture) on
//! an interface, paced by [`timing::Timing`], and reports what really left.
//!
//! Fast path: frames are stamped into a batch arena and handed to the kernel with one
//! `sendmmsg` per batch on an AF_PACKET socket, so there is no syscall per frame at top speed.
//! Frames the kernel refuses (`ENOBUFS`, `EAGAIN`) are retried, so `frames` counts only what
//! the kernel accepted; frames the link itself then dropped (the interface's `tx_dropped`)
//! are reported beside it.
//!
//! Send time: synthetic frames of 64 bytes and more carry the CLOCK_REALTIME time at which
//! their batch was filled (one clock read per batch, just before `sendmmsg`), so a capture in
//! another network namespace of the same machine, whose timestamps come from the same clock,
//! gives each frame's one-way latency (`poolcap check`).
//!
//! Queue choice: with `PACKET_QDISC_BYPASS` the kernel picks the transmit queue from the
//! sending CPU, so every flow lands on one receive queue of a veth peer. When the interface
//! has several transmit queues and there are several flows, the qdisc path is used instead
//! and the flow hash spreads flows over queues (see `docs/design.md`).
//!
//! The crate also holds what the generator's frames are made of and how they are checked
//! once captured: [`frame`] (templates and the tag carrying generator id, sequence number
//! and send time), [`flows`] (how frames spread over flows and sizes), [`seqcheck`] (loss,
//! duplicates, reordering and latency of what arrived) and [`capfile`] (reading back the
//! files poolcap writes, compressed or not).

#![forbid(unsafe_code)]

pub mod capfile;
pub mod flows;
pub mod frame;
pub mod replay;
pub mod seqcheck;
pub mod source;
pub mod timing;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use poolcap_sys::socket::{ifindex, is_transient, PacketSocket, TxBatch};
use serde::{Deserialize, Serialize};

use self::replay::{Replay, Skipped};
use self::source::Synthetic;
use self::timing::Timing;
use poolcap_sys::{netdev, process};

/// Whether to bypass the qdisc layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Bypass {
    /// Bypass unless flows must be spread over several transmit queues.
    Auto,
    /// Always bypass.
    On,
    /// Never bypass.
    Off,
}

/// What to send.
#[derive(Debug)]
pub enum Frames {
    /// Numbered synthetic frames.
    Synthetic(Synthetic),
    /// A capture file's frames.
    Replay(Replay),
}

impl Frames {
    fn max_len(&self) -> usize {
        match self {
            Frames::Synthetic(s) => s.max_len(),
            Frames::Replay(r) => r.max_len(),
        }
    }

    #[inline]
    fn frame(&mut self, k: u64, out: &mut [u8], sent_ns: u64) -> usize {
        match self {
            Frames::Synthetic(s) => s.frame(k, out, sent_ns),
            Frames::Replay(r) => r.frame(k, out),
        }
    }

    /// Frames of a replayed file passed over once `sent` have been sent.
    fn skipped(&self, sent: u64) -> Skipped {
        match self {
            Frames::Synthetic(_) => Skipped::default(),
            Frames::Replay(r) => r.skipped(sent),
        }
    }
}

/// A resolved generator run.
#[derive(Debug)]
pub struct GenConfig {
    /// Interface to send on.
    pub iface: String,
    /// The frames.
    pub frames: Frames,
    /// Pacing.
    pub timing: Timing,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Frames per `sendmmsg` call.
    pub batch: usize,
    /// Qdisc bypass policy.
    pub bypass: Bypass,
    /// Number of flows (decides [`Bypass::Auto`]).
    pub flows: usize,
    /// Pin the sending thread to this CPU.
    pub cpu: Option<usize>,
    /// Generator id written into every frame (reported back).
    pub gen_id: u32,
}

/// What a run sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenReport {
    /// Interface.
    pub iface: String,
    /// Generator id of the frames.
    pub gen_id: u32,
    /// Frames the kernel accepted.
    pub frames: u64,
    /// Their bytes (without FCS).
    pub bytes: u64,
    /// Seconds from the first to the last send.
    pub seconds: f64,
    /// Achieved frames per second.
    pub pps: f64,
    /// Achieved bits per second.
    pub bps: f64,
    /// Send calls the kernel refused with ENOBUFS/EAGAIN (retried).
    pub refused: u64,
    /// Frames the interface dropped on transmit during the run (its `tx_dropped` counter).
    pub link_dropped: u64,
    /// Whether the qdisc was bypassed.
    pub qdisc_bypass: bool,
    /// Frames per send call.
    pub batch: usize,
    /// True when stopped early by a signal.
    pub interrupted: bool,
    /// Replay: frames of the file skipped because they are longer than the link carries.
    /// (Defaults to 0 so reports of older builds still read.)
    #[serde(default)]
    pub skipped_too_big: u64,
    /// Replay: frames of the file skipped because they are not a sendable Ethernet frame
    /// (shorter than its header, or raw IP of neither version).
    #[serde(default)]
    pub skipped_malformed: u64,
    /// CPU seconds (user and system, every thread) the generator used while sending: what a
    /// paced run costs the core it shares (on veth the receive work of the frames it sends
    /// is counted here too).
    #[serde(default)]
    pub cpu_s: f64,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// The interface does not exist.
    #[error("no such interface `{0}`")]
    NoInterface(String),
    /// A socket call failed.
    #[error(transparent)]
    Sys(#[from] poolcap_sys::SysError),
    /// Sending failed with an error that retrying does not cure.
    #[error("sending on {iface} failed after {sent} frames")]
    Send {
        /// Interface.
        iface: String,
        /// Frames sent before the failure.
        sent: u64,
        /// The error.
        source: io::Error,
    },
}

/// Sleeps, then spins, until `deadline` (sleeping alone overshoots by tens of microseconds).
fn wait_until(deadline: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return;
        }
        let left = deadline - now;
        if left > SPIN {
            std::thread::sleep((left - SPIN).min(Duration::from_millis(50)));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The end of a wait that is spun rather than slept: a sleep (with the timer slack set to
/// [`TIMER_SLACK_NS`]) ends this much late at most on the veth lab's VMs, most of the time.
/// Spinning only these last microseconds keeps a paced sender off the CPU between batches
/// (it spun whole waits below 300 us, that is, always at 50k pps: a core for 50k frames a
/// second).
const SPIN: Duration = Duration::from_micros(20);

/// The sending thread's timer slack while paced.
const TIMER_SLACK_NS: u64 = 1_000;

/// Nanoseconds since the Unix epoch on CLOCK_REALTIME, the clock capture timestamps use.
fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Runs the generator until its count or duration is reached or `stop` is set.
pub fn run(mut cfg: GenConfig, stop: &AtomicBool) -> Result<GenReport, GenError> {
    let idx = ifindex(&cfg.iface).map_err(|_| GenError::NoInterface(cfg.iface.clone()))?;
    if let Some(cpu) = cfg.cpu {
        core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
    }
    if cfg.timing.is_paced() {
        poolcap_sys::process::set_timer_slack_ns(TIMER_SLACK_NS);
    }
    let sock = PacketSocket::open()?;
    let bypass = match cfg.bypass {
        Bypass::On => true,
        Bypass::Off => false,
        Bypass::Auto => cfg.flows <= 1 || netdev::tx_queues(&cfg.iface) <= 1,
    };
    sock.set_qdisc_bypass(bypass)?;
    sock.set_send_buffer(4 << 20)?;
    sock.bind(idx)?;

    let batch = cfg.batch.max(1);
    let mut tx = TxBatch::new(batch, cfg.frames.max_len());
    let dropped_before = netdev::counter(&cfg.iface, "tx_dropped").unwrap_or(0);

    let (mut sent, mut bytes, mut refused) = (0u64, 0u64, 0u64);
    let cpu_before = process::cpu_time(process::Who::SelfProcess);
    let start = Instant::now();
    let mut late_ns = 0u64; // how far the schedule was moved back after a long stall
    let mut last_send = start;
    // When the previous batch started going out.
    let mut last_batch_ns = 0u64;
    let mut interrupted = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let left = cfg.count.map_or(u64::MAX, |c| c - sent);
        if left == 0 {
            break;
        }
        // Frames of this batch: never across the end of a burst.
        let n = (batch as u64).min(left).min(cfg.timing.run_limit(sent));
        if let Some(d) = cfg.duration {
            if start.elapsed() >= d {
                break;
            }
        }
        // Wait for the next frame's due time. A sender that fell behind (preempted) catches
        // up at up to twice the rate: batches stay at least half a batch period apart, so no
        // burst exceeds one batch and the average rate is kept. Only a stall of more than
        // 20 ms is given up (the schedule moves), so it never turns into a long fast run.
        if cfg.timing.is_paced() {
            if let Some(idle) = cfg.timing.silence_before(sent) {
                // The silence follows the previous burst's actual end, however long the link
                // took to carry it (the schedule moves by as much).
                let end = start.elapsed().as_nanos() as u64;
                late_ns = (end + idle).saturating_sub(cfg.timing.due_ns(sent));
            }
            let due = cfg.timing.due_ns(sent) + late_ns;
            let period = cfg.timing.span_ns(sent, n);
            let now_ns = start.elapsed().as_nanos() as u64;
            if now_ns > due + 20_000_000 {
                late_ns += now_ns - due;
            }
            let due = cfg.timing.due_ns(sent) + late_ns;
            let at = due.max(last_batch_ns + period / 2);
            wait_until(start + Duration::from_nanos(at), stop);
        }
        let sent_ns = realtime_ns();
        // The wait may have crossed the end: no batch leaves after it (its stamp is read
        // first, so every stamp is before the end).
        if cfg.duration.is_some_and(|d| start.elapsed() >= d) {
            break;
        }
        last_batch_ns = start.elapsed().as_nanos() as u64;
        let n = n as usize;
        for i in 0..n {
            let len = cfg.frames.frame(sent + i as u64, tx.slot_mut(i), sent_ns);
            tx.set_len(i, len);
        }
        let mut done = 0usize;
        let mut stalled_since: Option<Instant> = None;
        while done < n {
            match tx.send(&sock, done, n) {
                Ok(k) if k > 0 => {
                    bytes += (done..done + k)
                        .map(|i| tx.frame(i).len() as u64)
                        .sum::<u64>();
                    done += k;
                    stalled_since = None;
                }
                Ok(_) => refused += 1,
                Err(e) if is_transient(&e) => {
                    refused += 1;
                    let since = *stalled_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(5) || stop.load(Ordering::Relaxed) {
                        return Err(GenError::Send {
                            iface: cfg.iface,
                            sent: sent + done as u64,
                            source: e,
                        });
                    }
                    std::thread::yield_now();
                }
                Err(e) => {
                    return Err(GenError::Send {
                        iface: cfg.iface,
                        sent: sent + done as u64,
                        source: e,
                    });
                }
            }
        }
        sent += n as u64;
        last_send = Instant::now();
    }
    let seconds = (last_send - start).as_secs_f64();
    let link_dropped = netdev::counter(&cfg.iface, "tx_dropped")
        .unwrap_or(0)
        .saturating_sub(dropped_before);
    let rate = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    let skipped = cfg.frames.skipped(sent);
    let cpu = process::cpu_time(process::Who::SelfProcess);
    let cpu_s = (cpu.user + cpu.system) - (cpu_before.user + cpu_before.system);
    Ok(GenReport {
        iface: cfg.iface,
        gen_id: cfg.gen_id,
        frames: sent,
        bytes,
        seconds,
        pps: rate(sent as f64),
        bps: rate(bytes as f64 * 8.0),
        refused,
        link_dropped,
        qdisc_bypass: bypass,
        batch,
        interrupted,
        skipped_too_big: skipped.too_big,
        skipped_malformed: skipped.malformed,
        cpu_s,
    })
}
