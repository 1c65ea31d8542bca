//! OUT, the interface forwarded frames leave by, as both transmit paths see it: the
//! per-queue forwarding counters, OUT's state (up, carrier, the driver's own drops) and how
//! long a send the kernel has no room for is retried. The `sendmmsg` path ([`super::forward`])
//! and the shared-UMEM path ([`super::forward_xdp`]) both use this module and neither
//! reaches into the other, so the forwarder picks a path without a cycle between them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use poolcap_sys::netdev;
use poolcap_sys::tx::is_link_down;

/// How often, and how long between tries, a send the kernel has no room for is retried
/// before its frames count as `dropped_tx` (about 20 ms in all).
pub(super) const TRANSIENT_RETRIES: u32 = 200;
pub(super) const TRANSIENT_PAUSE: Duration = Duration::from_micros(100);

/// How often OUT's state and drop counter are read while frames flow.
const LINK_CHECK: Duration = Duration::from_millis(10);

/// Live forwarding counters of one receive queue (written by the forwarder thread only).
#[derive(Debug, Default)]
pub struct ForwardCounters {
    /// Frames sent out of OUT.
    pub forwarded: AtomicU64,
    /// Bytes handed to OUT.
    pub forwarded_bytes: AtomicU64,
    /// Frames the `--drop` rule removed.
    pub dropped_by_rule: AtomicU64,
    /// Frames OUT did not take (down, full, or captured cut short so they cannot go whole).
    pub dropped_tx: AtomicU64,
}

impl ForwardCounters {
    pub(super) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// (forwarded, forwarded_bytes, dropped_by_rule, dropped_tx) now.
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (
            g(&self.forwarded),
            g(&self.forwarded_bytes),
            g(&self.dropped_by_rule),
            g(&self.dropped_tx),
        )
    }
}

/// Every queue's forwarding counters.
pub type AllForwardCounters = Arc<Vec<ForwardCounters>>;

/// What the forwarder knows about OUT. A send can fail (OUT administratively down), but a
/// driver can also take frames and drop them (no carrier: a veth whose peer is down, a
/// cable pulled). So OUT's state and its `tx_dropped` counter are read every
/// [`LINK_CHECK`] while frames flow: frames are not handed to an OUT without carrier, and
/// frames the driver dropped since the last look move from `forwarded` to `dropped_tx`
/// (OUT carries only what the forwarder sends). Each outage is reported once.
#[derive(Debug)]
pub(super) struct OutState {
    iface: String,
    /// OUT is up with carrier, as of the last look.
    pub(super) usable: bool,
    /// An outage has been reported and has not ended.
    failing: bool,
    last_look: Instant,
    tx_dropped: Option<u64>,
    /// Frames handed to OUT per queue since the last look.
    pub(super) handed: Vec<u64>,
}

impl OutState {
    pub(super) fn new(iface: &str, queues: usize) -> Self {
        Self {
            iface: iface.to_string(),
            usable: true,
            failing: false,
            last_look: Instant::now(),
            tx_dropped: netdev::counter(iface, "tx_dropped"),
            handed: vec![0; queues],
        }
    }

    /// Says once per outage that OUT stopped taking frames.
    pub(super) fn fail(&mut self, why: &str) {
        if !std::mem::replace(&mut self.failing, true) {
            log::warn!(
                "poolcap: {} {why}; counting its frames as dropped_tx until it takes them again",
                self.iface
            );
        }
    }

    /// OUT refused a send with `e`: down, or refusing frames.
    pub(super) fn refused(&mut self, e: &std::io::Error) {
        let why = if is_link_down(e) {
            "is down"
        } else {
            "refuses frames"
        };
        self.fail(&format!("{why} ({e})"));
    }

    /// Reads OUT's state and drop counter when due (or now, with `force`).
    pub(super) fn look(&mut self, force: bool, counters: &[ForwardCounters]) {
        if !force && self.last_look.elapsed() < LINK_CHECK {
            return;
        }
        self.last_look = Instant::now();
        let (up, carrier) = (
            netdev::is_up(&self.iface) != Some(false),
            netdev::has_carrier(&self.iface) != Some(false),
        );
        self.usable = up && carrier;
        let mut lost = match (self.tx_dropped, netdev::counter(&self.iface, "tx_dropped")) {
            (Some(before), Some(now)) => {
                self.tx_dropped = Some(now);
                now.saturating_sub(before)
            }
            _ => 0,
        };
        let handed: u64 = self.handed.iter().sum();
        if lost > 0 {
            self.fail("drops the frames it is handed (tx_dropped)");
        } else if !up {
            self.fail("is down");
        } else if !carrier {
            self.fail("has no carrier");
        } else if handed > 0 && std::mem::take(&mut self.failing) {
            log::info!("poolcap: {} takes frames again", self.iface);
        }
        for (c, handed) in counters.iter().zip(&mut self.handed) {
            let n = lost.min(*handed);
            c.forwarded.fetch_sub(n, Ordering::Relaxed);
            ForwardCounters::add(&c.dropped_tx, n);
            lost -= n;
            *handed = 0;
        }
    }
}
