//! Capture queues in virtual time: the real capture threads' shells ([`super::queue`]), one
//! per receive queue, over in-memory sources whose packets arrive on a shared
//! [`VirtualClock`], handing sealed chunks to capture queues as the engine's workers
//! pipeline does. What consumes the capture queues (the workers and what their analysis
//! costs) is the driver's: `poolcap-bench sim` models it as time per packet, and this type
//! only turns the shells and moves chunks when the driver says.
//!
//! Why: the simulator used to re-model the shell (when to take, hold, seal, drop); now the
//! decisions, the pool, the offload policy and the shell's turn are the engine's own code,
//! so what `sim` predicts is what this engine would do with an infinitely fast capture
//! thread and the given consumers. quinn's `Pair::drive` is the pattern: the driver moves
//! time to the earliest thing any party waits for, and turns that party.
//!
//! Behind the engine's `sim` feature: not part of the release binary's API.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use poolcap_format::RecordedPacket;

use super::account::{QueueCounters, QueueStats};
use super::clock::{VirtualClock, Wake};
use super::doorbell::Doorbell;
use super::end::Cut;
use super::error::CaptureError;
use super::mem::{Faults, MemSource};
use super::pipeline::Handoff;
use super::policy::{group_of, PolicySpec};
use super::pool::{Chunk, Pool, PoolSize, Room};
use super::progress::Progress;
use super::queue::{CaptureThread, Shell, WaitStrategy};

/// The packets' clock at virtual time 0.
pub const EPOCH_NS: u64 = 1_700_000_000_000_000_000;

/// Hang guard: turns of one shell at one instant before the driver gives up.
const TURNS_PER_INSTANT: u32 = 1_000_000;

/// What every simulated queue shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Cells per chunk and chunks per pool (each queue's pool).
    pub pool: PoolSize,
    /// The offload policy, one instance per queue.
    pub policy: PolicySpec,
    /// Buddy groups (every queue in one of them).
    pub groups: Vec<Vec<usize>>,
    /// Seal an open chunk after this long when the source is idle.
    pub seal_after: Duration,
    /// Packets a receive queue's kernel ring holds.
    pub ring: usize,
    /// Most packets the capture thread takes at once.
    pub batch: usize,
}

/// One receive queue: its shell (until it ends), clock, pool and counters.
struct Queue {
    shell: Option<Shell<VirtualClock>>,
    clock: VirtualClock,
    /// The wait its last turn asked for; `None`: it turns at the current instant.
    wake: Option<Wake>,
    counters: Arc<QueueCounters>,
}

/// See the module docs.
pub struct Queues {
    clock: VirtualClock,
    queues: Vec<Queue>,
    pools: Arc<Vec<Arc<Pool>>>,
    /// The queues the last [`Queues::turn_due`] turned.
    turned: Vec<usize>,
}

impl std::fmt::Debug for Queues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queues")
            .field("now", &self.now())
            .field("queues", &self.queues.len())
            .finish()
    }
}

impl Queues {
    /// One capture thread per arrival process (packets in timestamp order, stamped on
    /// [`EPOCH_NS`]), at time 0.
    pub fn new(
        setup: &Setup,
        arrivals: Vec<Box<dyn Iterator<Item = RecordedPacket> + Send>>,
    ) -> Self {
        let n = arrivals.len();
        let clock = VirtualClock::new(EPOCH_NS);
        // A capture queue may hold every chunk of every pool.
        let pools: Arc<Vec<Arc<Pool>>> = Arc::new(
            (0..n)
                .map(|q| Arc::new(Pool::new(q, setup.pool, n * setup.pool.chunks, None)))
                .collect(),
        );
        let counters: Vec<Arc<QueueCounters>> = (0..n).map(|_| Arc::default()).collect();
        let all_counters = Arc::new(counters.clone());
        let bells = Arc::new(vec![Vec::<Arc<Doorbell>>::new(); n]);
        let cut = Arc::new(Cut::default());
        let queues = arrivals
            .into_iter()
            .zip(counters)
            .enumerate()
            .map(|(q, (packets, counters))| {
                let own = clock.beside();
                let source = MemSource::new(packets, setup.batch, Faults::default())
                    .with_ring(setup.ring)
                    .arriving_on(own.clone());
                let thread = CaptureThread {
                    queue: q,
                    source: Box::new(source),
                    pool: Arc::clone(&pools[q]),
                    pools: Arc::clone(&pools),
                    counters: Arc::clone(&counters),
                    all_counters: Arc::clone(&all_counters),
                    policy: setup.policy.build(&group_of(&setup.groups, q)),
                    progress: Arc::new(Mutex::new(Progress::default())),
                    wait: WaitStrategy::Poll,
                    seal_after: setup.seal_after,
                    snaplen: usize::MAX,
                    handoff: Handoff::Workers(Arc::clone(&bells)),
                    merged: false,
                    stop: Arc::new(AtomicBool::new(false)),
                    cut: Arc::clone(&cut),
                    budget: None,
                    link_down: Arc::new(AtomicBool::new(false)),
                    writer: None,
                };
                Queue {
                    shell: Some(thread.shell(own.clone())),
                    clock: own,
                    wake: None,
                    counters,
                }
            })
            .collect();
        Self {
            clock,
            queues,
            pools,
            turned: Vec::with_capacity(n),
        }
    }

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        use super::clock::Clock;
        self.clock.now()
    }

    /// The next instant a capture thread turns (`None`: every one has ended): its wait
    /// ends, or now for one that did not wait.
    pub fn next_turn(&self) -> Option<Duration> {
        let now = self.now();
        self.queues
            .iter()
            .filter(|q| q.shell.is_some())
            .map(|q| q.wake.map_or(now, |w| w.at.max(now)))
            .min()
    }

    /// Moves time on to `t` (never back).
    pub fn advance_to(&self, t: Duration) {
        self.clock.set(t);
    }

    /// Turns every capture thread whose wait has ended, each until it waits again or ends
    /// (its source has had all its packets and they are taken); a thread that fails ends
    /// the run with its error.
    pub fn turn_due(&mut self) -> Result<(), CaptureError> {
        let now = self.now();
        self.turned.clear();
        for (i, q) in self.queues.iter_mut().enumerate() {
            if q.wake.is_some_and(|w| w.at > now) {
                continue;
            }
            q.wake = None;
            let Some(shell) = &mut q.shell else {
                continue;
            };
            self.turned.push(i);
            let mut turns = 0;
            while q.wake.is_none() {
                if !shell.turn() {
                    if let Some(shell) = q.shell.take() {
                        shell.end().result?;
                    }
                    break;
                }
                q.wake = q.clock.take_wake();
                turns += 1;
                assert!(
                    turns < TURNS_PER_INSTANT,
                    "hang guard: a shell turned {turns} times at one instant without waiting"
                );
            }
        }
        Ok(())
    }

    /// The queues the last [`Queues::turn_due`] turned: only their pauses can have changed.
    pub fn turned(&self) -> &[usize] {
        &self.turned
    }

    /// A worker takes the next chunk waiting in capture queue `w`, which wakes its capture
    /// thread if it waits for the backlog to fall.
    pub fn take_captured(&mut self, w: usize) -> Option<Chunk> {
        let c = self.pools[w].take_captured()?;
        self.made_room(w, Room::Backlog);
        Some(c)
    }

    /// A worker is done with `chunk`: it goes home, which wakes the home capture thread if
    /// it waits for a free chunk or the backlog.
    pub fn recycle(&mut self, chunk: Chunk) {
        let home = chunk.home;
        self.pools[home].recycle(chunk);
        self.made_room(home, Room::FreeChunk);
    }

    /// Ends the wait of queue `q`'s capture thread now if it waits for `what` (a waiter for
    /// the backlog is woken by a free chunk too, as in `Pool::wait_for_room`).
    fn made_room(&mut self, q: usize, what: Room) {
        let now = self.now();
        let wake = &mut self.queues[q].wake;
        if let Some(w) = wake.filter(|w| w.room.is_some_and(|r| what as u8 <= r as u8)) {
            *wake = Some(Wake {
                at: w.at.min(now),
                room: None,
            });
        }
    }

    /// Chunks waiting in capture queue `w`.
    pub fn backlog(&self, w: usize) -> usize {
        self.pools[w].backlog()
    }

    /// Free chunks in queue `q`'s pool.
    pub fn free_chunks(&self, q: usize) -> usize {
        self.pools[q].free_chunks()
    }

    /// Whether queue `q`'s capture thread is paused by its policy.
    pub fn paused(&self, q: usize) -> bool {
        self.queues[q].shell.as_ref().is_some_and(Shell::paused)
    }

    /// Whether queue `q`'s capture thread has ended (its packets have all come and been
    /// taken).
    pub fn ended(&self, q: usize) -> bool {
        self.queues[q].shell.is_none()
    }

    /// Queue `q`'s counters so far.
    pub fn stats(&self, q: usize) -> QueueStats {
        self.queues[q].counters.snapshot(q)
    }

    /// Receive queues.
    pub fn len(&self) -> usize {
        self.queues.len()
    }

    /// True with no receive queue.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of `n` packets 1 ns apart on one queue.
    fn burst(n: u64) -> Box<dyn Iterator<Item = RecordedPacket> + Send> {
        Box::new((0..n).map(|i| RecordedPacket {
            ts_ns: EPOCH_NS + i,
            data: vec![0; 16],
            orig_len: 16,
        }))
    }

    #[test]
    fn a_burst_fills_the_pool_then_the_ring_and_the_kernel_drops_the_rest() {
        // 16 chunks of 32 cells, a ring of 100, and nobody takes a chunk: the capture
        // thread takes each packet as it arrives until the next would not fit with a chunk
        // to spare (15 chunks' worth: 480 packets), then leaves the rest in the ring, which
        // holds 100; the kernel drops the other 420. poolcap-bench's
        // `a_burst_is_lost_where_the_engines_shell_loses_it` expects these numbers from
        // `sim`.
        let setup = Setup {
            pool: PoolSize {
                cells: 32,
                chunks: 16,
                cell_size: 16,
            },
            policy: PolicySpec::Basic,
            groups: vec![vec![0]],
            seal_after: Duration::from_millis(1),
            ring: 100,
            batch: 256,
        };
        let mut q = Queues::new(&setup, vec![burst(1000)]);
        while let Some(t) = q.next_turn() {
            if t > Duration::from_millis(100) {
                break;
            }
            q.advance_to(t);
            q.turn_due().unwrap();
        }
        let s = q.stats(0);
        assert_eq!((s.captured, s.dropped_pool), (480, 0), "{s:?}");
        assert_eq!(q.backlog(0), 15, "fifteen full chunks wait");
        // The workers come: every chunk taken and sent home, until nothing is left.
        while let Some(t) = q.next_turn() {
            q.advance_to(t);
            q.turn_due().unwrap();
            while let Some(c) = q.take_captured(0) {
                q.recycle(c);
            }
        }
        let s = q.stats(0);
        assert!(q.ended(0));
        assert_eq!(
            (s.captured, s.dropped_kernel, s.dropped_pool, s.not_taken),
            (580, 420, 0, 0),
            "{s:?}"
        );
    }
}
