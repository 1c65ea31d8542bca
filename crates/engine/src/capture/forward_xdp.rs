//! Forwarding from the UMEM: when IN is captured with AF_XDP, each IN queue's socket
//! shares its UMEM with a transmit socket on OUT ([`poolcap_sys::xsk::XskTx`]), and the
//! forwarder puts each frame's UMEM address and length on that socket's TX ring. No byte is
//! copied in user space; in copy mode (veth, or a driver without AF_XDP zero-copy) the
//! kernel copies each frame once into an skb, in zero-copy mode the driver sends from the
//! UMEM itself.
//!
//! ```text
//! IN queue q ─► UMEM q ─► chunk ─► worker(s) ─► forwarder ─► TX ring of OUT queue q
//!                 ▲                                  │ (chunk held)          │
//!                 └── fill ring ◄── pool q ◄─────────┴──── completion ring ◄─┘
//! ```
//!
//! A frame's memory is the kernel's from the moment its address is on the TX ring until its
//! address comes back in the completion ring: its chunk (which holds the frame's token) is
//! kept in a [`Ledger`] until the last of its frames completes, and only then goes home,
//! where its capture thread gives the frames back to the fill ring.
//!
//! A socket sharing a UMEM inherits its owner's mode: when IN runs zero-copy, OUT's driver
//! must support AF_XDP zero-copy too, or the bind fails (and says so); on veth both run in
//! copy mode. OUT needs at least as many transmit queues as IN queues are captured.
//!
//! IN queue q sends on OUT queue q, so each queue's frames leave in the order the
//! forwarder puts them on the ring, which is the home order (`forward`). Accounting is that
//! of the sendmmsg path: a frame on the TX ring is `forwarded` (OUT's `tx_dropped` moves
//! frames the driver dropped to `dropped_tx`, as there); frames the ring has no room for
//! within the retry time, or that OUT is not usable for, are `dropped_tx`; frames still
//! on the ring when forwarding ends (OUT stopped taking them) move to `dropped_tx` too.

use std::io;

use poolcap_sys::xsk::{RxFrame, UmemShare, XskTx};

use super::error::CaptureError;
use super::forward_out::{ForwardCounters, OutState, TRANSIENT_PAUSE, TRANSIENT_RETRIES};
use super::pool::{Chunk, Pool};
use poolcap_sys::netdev;

/// TX and completion ring entries per queue: a few chunks of frames.
const RING: u32 = 4096;

/// Transmit sockets on OUT, one per IN queue, each sharing that queue's UMEM.
#[derive(Debug)]
pub struct XdpTransmit {
    queues: Vec<QueueTx>,
    zero_copy: bool,
}

#[derive(Debug)]
struct QueueTx {
    tx: XskTx,
    held: Ledger<Chunk>,
    reaped: Vec<u64>,
}

impl XdpTransmit {
    /// Binds queue q of `out` to the UMEM of IN queue q, for every share.
    pub fn bind(shares: &[UmemShare], out: &str, ifindex: u32) -> Result<Self, CaptureError> {
        let have = netdev::tx_queues(out);
        if shares.len() > have {
            return Err(CaptureError::Xdp(format!(
                "{out} has {have} transmit queue{}, fewer than the {} IN queues: AF_XDP forwarding sends each IN queue on its own OUT queue",
                if have == 1 { "" } else { "s" },
                shares.len()
            )));
        }
        let queues = shares
            .iter()
            .enumerate()
            .map(|(q, share)| {
                let tx = XskTx::bind_shared(share, ifindex, q as u32, RING).map_err(|e| {
                    CaptureError::Xdp(format!(
                        "AF_XDP transmit socket on {out} queue {q} (sharing IN's UMEM): {e}"
                    ))
                })?;
                Ok(QueueTx {
                    held: Ledger::new(u64::from(tx.frame_size())),
                    tx,
                    reaped: Vec::with_capacity(RING as usize),
                })
            })
            .collect::<Result<Vec<_>, CaptureError>>()?;
        let zero_copy = queues.iter().all(|q| q.tx.zero_copy());
        Ok(Self { queues, zero_copy })
    }

    /// The transmit path, as reports name it.
    pub fn path(&self) -> String {
        format!(
            "af_xdp shared umem ({})",
            if self.zero_copy { "zero-copy" } else { "copy" }
        )
    }

    /// True while chunks wait for completions.
    pub(super) fn holding(&self) -> bool {
        self.queues.iter().any(|q| !q.held.is_empty())
    }

    /// Sends frames `keep` of `chunk` (the others were dropped or are counted by the
    /// caller) and keeps the chunk until they complete. Returns (frames, bytes) put on the
    /// TX ring; the rest of `keep` is OUT's to count as `dropped_tx`.
    pub(super) fn send(
        &mut self,
        chunk: Chunk,
        keep: &[usize],
        out: &mut OutState,
        pool: &Pool,
    ) -> (u64, u64) {
        let home = chunk.home;
        let q = &mut self.queues[home];
        let frames: Vec<&RxFrame> = keep
            .iter()
            .map(|&i| chunk.frame(i).expect("AF_XDP chunks hold frames"))
            .collect();
        let slot = q.held.reserve(frames.iter().map(|f| f.addr()));
        let placed = q.drive(&frames, out, pool);
        out.handed[home] += placed as u64;
        let bytes = frames[..placed].iter().map(|f| f.len() as u64).sum();
        for f in &frames[placed..] {
            // Never on the ring: nothing will complete it.
            q.held.release(f.addr());
        }
        drop(frames);
        if let Some(c) = q.held.store(slot, chunk) {
            pool.recycle(c);
        }
        (placed as u64, bytes)
    }

    /// Sends chunks whose frames have all completed home, and nudges the kernel on
    /// descriptors a previous kick left on a ring.
    pub(super) fn tend(&mut self, pools: &[std::sync::Arc<Pool>]) {
        for (home, q) in self.queues.iter_mut().enumerate() {
            if q.tx.tx_pending() {
                // Errors are seen (and reported) by the next send.
                let _ = q.tx.kick();
            }
            q.reap(&pools[home]);
        }
    }

    /// At the end: waits (bounded) for the last completions, then counts frames OUT never
    /// completed as `dropped_tx`, closes the sockets (the kernel then reads no frame) and
    /// sends every chunk home.
    pub(super) fn finish(self, pools: &[std::sync::Arc<Pool>], counters: &[ForwardCounters]) {
        for (home, mut q) in self.queues.into_iter().enumerate() {
            let mut stalls = 0;
            while !q.held.is_empty() && stalls < TRANSIENT_RETRIES {
                let _ = q.tx.kick();
                if q.reap(&pools[home]) == 0 {
                    stalls += 1;
                    std::thread::sleep(TRANSIENT_PAUSE);
                }
            }
            let QueueTx { tx, held, .. } = q;
            drop(tx);
            let (chunks, stuck) = held.into_held();
            if stuck > 0 {
                log::warn!(
                    "poolcap: {stuck} frames of queue {home} were never sent by OUT; counted as dropped_tx"
                );
                counters[home]
                    .forwarded
                    .fetch_sub(stuck, std::sync::atomic::Ordering::Relaxed);
                ForwardCounters::add(&counters[home].dropped_tx, stuck);
            }
            for c in chunks {
                pools[home].recycle(c);
            }
        }
    }
}

/// True for a kick error that passes: more to send (EAGAIN), no buffer or a full device
/// queue right now (ENOBUFS, EBUSY: the kernel completed the frame it could not queue), or
/// a signal.
fn passes(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN | libc::ENOBUFS | libc::EBUSY | libc::EINTR)
    )
}

impl QueueTx {
    /// Puts `frames` on the TX ring and has the kernel send them, reaping completions as
    /// they come; returns how many were put on the ring (a prefix). Gives up when OUT is not
    /// usable, refuses frames, or neither takes nor completes any for the retry time.
    fn drive(&mut self, frames: &[&RxFrame], out: &mut OutState, pool: &Pool) -> usize {
        let (mut placed, mut stalls) = (0, 0);
        while out.usable && (placed < frames.len() || self.tx.tx_pending()) {
            let k = self.tx.transmit(&frames[placed..]);
            placed += k;
            if let Err(e) = self.tx.kick() {
                if !passes(&e) {
                    out.refused(&e);
                    break;
                }
            }
            // Copy mode completes frames during the kick: reaping now sends chunks home
            // (this one too, once stored) without waiting for the forwarder's next round.
            let reaped = self.reap(pool);
            if k == 0 && reaped == 0 {
                stalls += 1;
                if stalls >= TRANSIENT_RETRIES {
                    out.fail("stays full");
                    break;
                }
                std::thread::sleep(TRANSIENT_PAUSE);
            } else {
                stalls = 0;
            }
        }
        placed
    }

    /// Takes the completions; chunks whose last frame completed go home. Returns how many
    /// frames completed.
    fn reap(&mut self, pool: &Pool) -> usize {
        self.reaped.clear();
        let n = self.tx.reap(&mut self.reaped);
        for &addr in &self.reaped {
            if let Some(c) = self.held.release(addr) {
                pool.recycle(c);
            }
        }
        n
    }
}

/// Items (chunks) held until every frame of theirs the kernel was given is back: frames are
/// known by their UMEM address, whatever the offset into their frame.
#[derive(Debug)]
pub struct Ledger<T> {
    frame_size: u64,
    /// Per UMEM frame index, the slot of the item it belongs to (`NONE`: none).
    owner: Vec<u32>,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Frames given and not yet back.
    pending: u64,
}

#[derive(Debug)]
struct Slot<T> {
    item: Option<T>,
    pending: u32,
}

const NONE: u32 = u32::MAX;

impl<T> Ledger<T> {
    /// An empty ledger for a UMEM of `frame_size`-byte frames.
    pub fn new(frame_size: u64) -> Self {
        Self {
            frame_size,
            owner: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            pending: 0,
        }
    }

    /// Registers the frames at `addrs` as given to the kernel, for an item to be stored in
    /// the returned slot.
    pub fn reserve(&mut self, addrs: impl Iterator<Item = u64>) -> u32 {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot {
                item: None,
                pending: 0,
            });
            (self.slots.len() - 1) as u32
        });
        let mut n = 0;
        for addr in addrs {
            let f = (addr / self.frame_size) as usize;
            if f >= self.owner.len() {
                self.owner.resize(f + 1, NONE);
            }
            debug_assert_eq!(self.owner[f], NONE, "frame {f} given twice");
            self.owner[f] = slot;
            n += 1;
        }
        self.slots[slot as usize].pending = n;
        self.pending += u64::from(n);
        slot
    }

    /// Stores the item of `slot`; gives it straight back if none of its frames is pending.
    pub fn store(&mut self, slot: u32, item: T) -> Option<T> {
        let s = &mut self.slots[slot as usize];
        if s.pending == 0 {
            self.free.push(slot);
            return Some(item);
        }
        s.item = Some(item);
        None
    }

    /// The frame at `addr` is back (completed, or never given after all); returns its item
    /// if that was the item's last frame and the item is stored.
    pub fn release(&mut self, addr: u64) -> Option<T> {
        let f = (addr / self.frame_size) as usize;
        let slot = std::mem::replace(self.owner.get_mut(f)?, NONE);
        if slot == NONE {
            return None;
        }
        self.pending -= 1;
        let s = &mut self.slots[slot as usize];
        s.pending -= 1;
        if s.pending > 0 {
            return None;
        }
        let item = s.item.take();
        if item.is_some() {
            self.free.push(slot);
        }
        item
    }

    /// True when no frame is pending.
    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Every stored item, and how many frames were still pending.
    pub fn into_held(self) -> (Vec<T>, u64) {
        let items = self.slots.into_iter().filter_map(|s| s.item).collect();
        (items, self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_goes_home_only_after_its_last_frame_completes() {
        let mut l: Ledger<&str> = Ledger::new(2048);
        // Chunk a: frames 0 and 1 (addresses past the headroom); chunk b: frame 3.
        let a = l.reserve([256, 2048 + 256].into_iter());
        // A completion may come before the chunk is stored: it must not be lost.
        assert_eq!(l.release(2048 + 256), None);
        assert_eq!(l.store(a, "a"), None, "frame 0 is still the kernel's");
        let b = l.reserve([3 * 2048 + 256].into_iter());
        assert_eq!(l.store(b, "b"), None);
        assert!(!l.is_empty());
        assert_eq!(l.release(3 * 2048 + 256), Some("b"));
        assert_eq!(l.release(3 * 2048 + 256), None, "each completion once");
        assert_eq!(l.release(5 * 2048), None, "an address nobody gave");
        assert_eq!(l.release(256), Some("a"), "the last frame sends it home");
        assert!(l.is_empty());
        // Slots are reused; a chunk with no frame given goes straight back.
        let c = l.reserve(std::iter::empty());
        assert_eq!(l.store(c, "c"), Some("c"));
        let d = l.reserve([256].into_iter());
        assert_eq!(l.store(d, "d"), None);
        assert_eq!(
            l.into_held(),
            (vec!["d"], 1),
            "held at the end, with its frame"
        );
    }
}
