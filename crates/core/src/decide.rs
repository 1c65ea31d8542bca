//! The capture thread's decisions as a value: [`Loop`] takes `now` and what the thread
//! observed, and returns what to do. It reads no clock, makes no syscall and touches no
//! pool, so the capture thread (`queue`) is a thin shell that observes, asks and performs,
//! `poolcap sim` drives the very same decisions in virtual time, and each decision has a
//! deterministic unit test below.
//!
//! One turn of a capture thread:
//!
//! 1. [`Loop::begin`]: the stop flag, the count limit, the backlogs and the room in the pool
//!    decide whether to stop ([`Step::Finish`]), to leave the packets in the kernel ring and
//!    wait for room ([`Step::Hold`]: a congestion pause, or a pool too full for the next
//!    batch), or to take a batch ([`Step::Take`]). The first look at the stop flag fixes
//!    the cut (see `end`); pause onsets and resumptions are reported so the time spent
//!    paused is counted.
//! 2. After a batch, [`Loop::took`]; when the source had nothing, [`Loop::quiet`] decides
//!    whether the open chunk has waited long enough to be sealed, whether the watermark may
//!    move on, whether the capture is over (a file at its end, or the drain after a stop has
//!    lasted long enough for the kernel to show every packet up to the cut) and otherwise
//!    how to wait and for how long ([`Wait`]).
//! 3. [`Loop::stats_due`]: whether to read the kernel's counters now.
//!
//! Chunks sealed are routed by the queue's offload [`Policy`], which the loop owns.

use std::time::Duration;

use crate::geometry::{PoolSize, Room};
use crate::policy::Policy;
use crate::wait::WaitStrategy;

/// Longest wait for room while paused or full: bounds how late a stop or the kernel
/// statistics are seen (room itself wakes the thread at once).
pub const ROOM_WAIT: Duration = Duration::from_millis(20);

/// Longest wait when something is pending (an open chunk to seal, a watermark to move on,
/// frames to give back), and the longest adaptive sleep.
const PENDING_WAIT: Duration = Duration::from_millis(2);

/// Longest wait for packets when nothing is pending: bounds how late a stop is seen.
const IDLE_WAIT: Duration = Duration::from_millis(50);

/// Longest wait while the link is down: nothing can arrive, so only a stop (or the link
/// coming back, which makes packets readable at once) matters; a few wakeups a second.
pub const LINK_DOWN_WAIT: Duration = Duration::from_millis(250);

/// How often the kernel's counters are read.
const STATS_EVERY: Duration = Duration::from_millis(100);

/// Adaptive waiting spins this long before it sleeps.
const ADAPTIVE_SPIN: Duration = Duration::from_micros(20);

/// Busy waiting spins this many times between looks.
const BUSY_SPINS: u32 = 256;

/// What does not change while a capture thread runs.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The receive queue.
    pub queue: usize,
    /// Its pool's geometry.
    pub pool: PoolSize,
    /// Packets are processed in the kernel ring, not copied into chunks.
    pub in_place: bool,
    /// How to wait when the source has nothing.
    pub wait: WaitStrategy,
    /// Seal an open chunk after this long when the source is idle.
    pub seal_after: Duration,
    /// How long a packet can sit in the source before it can be taken.
    pub visibility_delay: Duration,
    /// How long to let packets gather after emptying the source (see `Source::coalesce`).
    pub coalesce: Duration,
    /// A file writer merges this queue with others: the watermark must move on while idle.
    pub merged: bool,
}

/// What the thread sees before it takes a batch.
#[derive(Debug, Clone, Copy)]
pub struct Look<'a> {
    /// The stop flag is raised.
    pub stop: bool,
    /// The count limit is spent.
    pub budget_spent: bool,
    /// Chunks waiting in every capture queue.
    pub backlogs: &'a [usize],
    /// Packets in the source's next batch, when it can tell before taking it.
    pub next_batch: Option<usize>,
    /// Packets in the open chunk, if one is open.
    pub open: Option<usize>,
    /// Free chunks in the pool.
    pub free_chunks: usize,
}

/// What the thread sees when the source had nothing.
#[derive(Debug, Clone, Copy)]
pub struct Quiet {
    /// The stop flag is raised.
    pub stop: bool,
    /// Packets in the open chunk.
    pub open_len: usize,
    /// When the open chunk was opened.
    pub open_since: Duration,
    /// The source will never have packets again.
    pub exhausted: bool,
    /// Frames of chunks still out must come home to the kernel through this thread.
    pub frames_out: bool,
    /// The interface is down.
    pub link_down: bool,
    /// The kernel waits for a syscall before it delivers more (AF_XDP need_wakeup).
    pub needs_wakeup: bool,
}

/// What to do before taking a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// End the capture: the count limit is spent.
    Finish,
    /// Leave the packets in the kernel, seal the open chunk (if it holds packets) so the
    /// room can come, and wait up to [`ROOM_WAIT`] for `Room`.
    Hold(Room),
    /// Take a batch from the source.
    Take,
}

/// A change of the congestion pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// No change.
    Same,
    /// The queue stopped taking packets now.
    Began,
    /// The queue takes packets again after this long.
    Ended(Duration),
}

/// The answer of [`Loop::begin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    /// Fix the stop's cut now (the first look at the stop flag).
    pub fix_cut: bool,
    /// What happened to the pause.
    pub pause: Pause,
    /// What to do.
    pub step: Step,
}

/// How to wait for packets: make the syscall the kernel asked for (`kick`), spin, then block.
/// Every kick and every block is one syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// Wake the kernel first (a zero-timeout poll).
    pub kick: bool,
    /// Spin before blocking.
    pub spin: Spin,
    /// Then block.
    pub block: Block,
}

/// Spinning without a syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spin {
    /// No spinning.
    No,
    /// This many spin-loop hints.
    Times(u32),
    /// Until this much time has passed.
    For(Duration),
}

/// Blocking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Do not block.
    No,
    /// The source's poll, up to this long (packets end it early).
    Poll(Duration),
    /// A plain sleep (packets do not end it).
    Sleep(Duration),
}

/// What to do once the source had nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// End the capture.
    Finish,
    /// Wait, then turn again.
    Wait(Wait),
}

/// The answer of [`Loop::quiet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle {
    /// Seal the open chunk now.
    pub seal_open: bool,
    /// Move the watermark on to this long before the wall clock's now.
    pub watermark_lag: Option<Duration>,
    /// What then.
    pub then: Then,
}

/// See the module docs.
#[derive(Debug)]
pub struct Loop {
    setup: Setup,
    policy: Box<dyn Policy>,
    /// When the thread first found the source empty after the stop.
    draining_since: Option<Duration>,
    cut_fixed: bool,
    paused_since: Option<Duration>,
    last_stats: Duration,
    /// Adaptive waiting's current sleep.
    sleep: Duration,
    /// The last look found packets.
    after_batch: bool,
}

impl Loop {
    /// A loop starting at `now` that routes and pauses with `policy`.
    pub fn new(setup: Setup, policy: Box<dyn Policy>, now: Duration) -> Self {
        let mut l = Self {
            setup,
            policy,
            draining_since: None,
            cut_fixed: false,
            paused_since: None,
            last_stats: now,
            sleep: Duration::ZERO,
            after_batch: false,
        };
        l.sleep = l.first_sleep();
        l
    }

    /// Before taking a batch: see the module docs.
    pub fn begin(&mut self, now: Duration, look: &Look<'_>) -> Begin {
        let fix_cut = look.stop && !std::mem::replace(&mut self.cut_fixed, look.stop);
        if look.budget_spent {
            // The rest stays in the kernel, counted as not taken.
            return Begin {
                fix_cut,
                pause: Pause::Same,
                step: Step::Finish,
            };
        }
        let (q, r) = (self.setup.queue, self.setup.pool.chunks);
        let pause = self.policy.pause(q, look.backlogs, r) && !look.stop;
        let change = match (pause, self.paused_since) {
            (true, None) => {
                self.paused_since = Some(now);
                Pause::Began
            }
            (false, Some(t)) => {
                self.paused_since = None;
                Pause::Ended(now.saturating_sub(t))
            }
            _ => Pause::Same,
        };
        let step = if pause {
            Step::Hold(Room::Backlog)
        } else if !look.stop && self.short_of_room(look) {
            Step::Hold(Room::FreeChunk)
        } else {
            Step::Take
        };
        Begin {
            fix_cut,
            pause: change,
            step,
        }
    }

    /// True when the next batch the kernel holds would not fit in the open chunk and the free
    /// chunks (with a chunk to spare for packets larger than a cell): the capture thread then
    /// leaves it in the kernel ring, which buffers it until workers make room, instead of
    /// copying it out only to drop it. A batch larger than the whole pool is taken anyway.
    /// With this, the kernel ring extends the pool: the pool drops only what neither holds.
    fn short_of_room(&self, look: &Look<'_>) -> bool {
        if self.setup.in_place {
            return false;
        }
        let Some(n) = look.next_batch else {
            return false;
        };
        let size = self.setup.pool;
        let open_room = look.open.map_or(0, |n| size.cells.saturating_sub(n));
        let room = open_room + look.free_chunks * size.cells;
        let need = n + size.cells;
        need > room && need <= size.cells * size.chunks
    }

    /// The capture queue that processes a chunk sealed now.
    pub fn route(&mut self, backlogs: &[usize]) -> usize {
        self.policy
            .route(self.setup.queue, backlogs, self.setup.pool.chunks)
    }

    /// The source gave a batch.
    pub fn took(&mut self) {
        self.after_batch = true;
        self.sleep = self.first_sleep();
    }

    /// The source had nothing: see the module docs.
    pub fn quiet(&mut self, now: Duration, q: &Quiet) -> Idle {
        let s = self.setup;
        let seal_open = q.open_len > 0 && now.saturating_sub(q.open_since) >= s.seal_after;
        let open = q.open_len > 0 && !seal_open;
        if q.exhausted {
            return Idle {
                seal_open,
                watermark_lag: None,
                then: Then::Finish,
            };
        }
        // Packets not yet seen became visible at most one visibility delay ago (AF_PACKET:
        // the open block retires after its timeout); allow the same again plus 5 ms for
        // scheduling.
        let watermark_lag = (!open).then(|| 2 * s.visibility_delay + Duration::from_millis(5));
        if q.stop {
            let since = *self.draining_since.get_or_insert(now);
            // The kernel retires a block up to one timer tick late.
            let margin = Duration::from_millis(10).max(s.visibility_delay / 4);
            if now.saturating_sub(since) > 2 * s.visibility_delay + margin {
                return Idle {
                    seal_open,
                    watermark_lag,
                    then: Then::Finish,
                };
            }
        }
        // Wake in time to seal an open chunk, to move the watermark on for a writer that
        // merges queues, or to give frames that come home back to the kernel (AF_XDP);
        // otherwise only packets (or a stop) matter.
        let soon = s
            .visibility_delay
            .max(Duration::from_millis(1))
            .min(s.seal_after.max(PENDING_WAIT));
        let timeout = if open || s.merged || q.frames_out {
            soon
        } else {
            IDLE_WAIT
        };
        Idle {
            seal_open,
            watermark_lag,
            then: Then::Wait(self.wait(timeout, soon, q)),
        }
    }

    /// How to wait for packets: a blocking wait up to `timeout`; adaptive sleeps grow to
    /// `longest_sleep` at most (a sleep cannot be cut short by packets, so it stays short).
    fn wait(&mut self, timeout: Duration, longest_sleep: Duration, q: &Quiet) -> Wait {
        let after_batch = std::mem::take(&mut self.after_batch);
        let kick = q.needs_wakeup;
        let (kick, spin, block) = if q.link_down {
            (false, Spin::No, Block::Poll(LINK_DOWN_WAIT))
        } else {
            match self.setup.wait {
                // Let frames gather instead of waking per frame: the kernel keeps filling
                // the ring on its own unless it asked for a wakeup.
                WaitStrategy::Poll if after_batch && !self.setup.coalesce.is_zero() => {
                    (kick, Spin::No, Block::Sleep(self.setup.coalesce))
                }
                WaitStrategy::Poll => (false, Spin::No, Block::Poll(timeout)),
                WaitStrategy::Busy => (kick, Spin::Times(BUSY_SPINS), Block::No),
                WaitStrategy::Adaptive => {
                    let block = if kick {
                        Block::Poll(self.sleep)
                    } else {
                        Block::Sleep(self.sleep)
                    };
                    self.sleep = (self.sleep * 2).min(longest_sleep.max(self.first_sleep()));
                    (false, Spin::For(ADAPTIVE_SPIN), block)
                }
            }
        };
        Wait { kick, spin, block }
    }

    /// Adaptive waiting's first sleep after packets: short where the kernel batches
    /// (AF_PACKET blocks), a share of the coalescing time where it does not.
    fn first_sleep(&self) -> Duration {
        (self.setup.coalesce / 4).max(Duration::from_micros(50))
    }

    /// True when the kernel's counters are due to be read.
    pub fn stats_due(&mut self, now: Duration) -> bool {
        if now.saturating_sub(self.last_stats) < STATS_EVERY {
            return false;
        }
        self.last_stats = now;
        true
    }

    /// Whether the policy holds the queue's packets in the kernel now (a congestion pause).
    pub fn paused(&self) -> bool {
        self.paused_since.is_some()
    }

    /// The capture ends: how long it was still paused.
    pub fn finish(&mut self, now: Duration) -> Option<Duration> {
        self.paused_since.take().map(|t| now.saturating_sub(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Basic, Buddy, Congestion};

    const MS: Duration = Duration::from_millis(1);

    /// A pool of 4 chunks of 10 cells, AF_PACKET-like timing (8 ms blocks).
    fn setup(wait: WaitStrategy) -> Setup {
        Setup {
            queue: 0,
            pool: PoolSize {
                cells: 10,
                chunks: 4,
                cell_size: 128,
            },
            in_place: false,
            wait,
            seal_after: 2 * MS,
            visibility_delay: 8 * MS,
            coalesce: Duration::ZERO,
            merged: false,
        }
    }

    fn look(backlogs: &[usize]) -> Look<'_> {
        Look {
            stop: false,
            budget_spent: false,
            backlogs,
            next_batch: None,
            open: None,
            free_chunks: 4,
        }
    }

    fn quiet() -> Quiet {
        Quiet {
            stop: false,
            open_len: 0,
            open_since: Duration::ZERO,
            exhausted: false,
            frames_out: false,
            link_down: false,
            needs_wakeup: false,
        }
    }

    fn poll_for(idle: Idle) -> Duration {
        match idle.then {
            Then::Wait(Wait {
                block: Block::Poll(d),
                ..
            }) => d,
            other => panic!("not a poll: {other:?}"),
        }
    }

    #[test]
    fn the_first_look_at_the_stop_fixes_the_cut_and_a_spent_budget_finishes() {
        let mut l = Loop::new(setup(WaitStrategy::Poll), Box::new(Basic), Duration::ZERO);
        assert!(!l.begin(MS, &look(&[0])).fix_cut);
        let stop = Look {
            stop: true,
            ..look(&[0])
        };
        let b = l.begin(2 * MS, &stop);
        assert_eq!(
            (b.fix_cut, b.step),
            (true, Step::Take),
            "drain after the stop"
        );
        assert!(!l.begin(3 * MS, &stop).fix_cut, "the cut is fixed once");
        let spent = Look {
            budget_spent: true,
            ..look(&[0])
        };
        assert_eq!(l.begin(4 * MS, &spent).step, Step::Finish);
    }

    #[test]
    fn congestion_holds_from_high_to_low_and_counts_the_time_paused() {
        let policy = Box::new(Congestion::new(75.0, 25.0));
        let mut l = Loop::new(setup(WaitStrategy::Poll), policy, Duration::ZERO);
        let b = l.begin(MS, &look(&[2]));
        assert_eq!((b.pause, b.step), (Pause::Same, Step::Take));
        let b = l.begin(2 * MS, &look(&[3]));
        assert_eq!((b.pause, b.step), (Pause::Began, Step::Hold(Room::Backlog)));
        let b = l.begin(5 * MS, &look(&[2]));
        assert_eq!((b.pause, b.step), (Pause::Same, Step::Hold(Room::Backlog)));
        let b = l.begin(9 * MS, &look(&[1]));
        assert_eq!((b.pause, b.step), (Pause::Ended(7 * MS), Step::Take));
        l.begin(10 * MS, &look(&[4]));
        assert_eq!(l.finish(13 * MS), Some(3 * MS), "still paused at the end");
        // A stop never holds: the ring is drained up to the cut.
        let mut l = Loop::new(
            setup(WaitStrategy::Poll),
            Box::new(Congestion::new(75.0, 25.0)),
            Duration::ZERO,
        );
        let stop = Look {
            stop: true,
            ..look(&[4])
        };
        assert_eq!(l.begin(MS, &stop).step, Step::Take);
        assert_eq!(l.finish(2 * MS), None);
    }

    #[test]
    fn a_batch_that_does_not_fit_with_a_spare_chunk_stays_in_the_kernel() {
        let mut l = Loop::new(setup(WaitStrategy::Poll), Box::new(Basic), Duration::ZERO);
        // Room: free chunks (and what the open one has left); a batch needs its packets plus
        // one spare chunk; the whole pool is 40 cells.
        let at = |l: &mut Loop, n, open, free| {
            let look = Look {
                next_batch: Some(n),
                open,
                free_chunks: free,
                ..look(&[0])
            };
            l.begin(MS, &look).step
        };
        assert_eq!(at(&mut l, 20, None, 3), Step::Take);
        assert_eq!(at(&mut l, 21, None, 3), Step::Hold(Room::FreeChunk));
        assert_eq!(
            at(&mut l, 13, Some(7), 2),
            Step::Take,
            "3 left in the open one"
        );
        assert_eq!(at(&mut l, 14, Some(7), 2), Step::Hold(Room::FreeChunk));
        assert_eq!(at(&mut l, 14, None, 0), Step::Hold(Room::FreeChunk));
        assert_eq!(
            at(&mut l, 31, None, 0),
            Step::Take,
            "larger than the pool: taken"
        );
        let stop = Look {
            stop: true,
            next_batch: Some(20),
            free_chunks: 0,
            ..look(&[0])
        };
        assert_eq!(l.begin(MS, &stop).step, Step::Take, "a stop drains");
        let mut in_place = Loop::new(
            Setup {
                in_place: true,
                ..setup(WaitStrategy::Poll)
            },
            Box::new(Basic),
            Duration::ZERO,
        );
        assert_eq!(
            at(&mut in_place, 20, None, 0),
            Step::Take,
            "no chunks in place"
        );
    }

    #[test]
    fn an_open_chunk_is_sealed_once_it_has_waited_seal_after() {
        let mut l = Loop::new(setup(WaitStrategy::Poll), Box::new(Basic), Duration::ZERO);
        let open = Quiet {
            open_len: 3,
            open_since: 10 * MS,
            ..quiet()
        };
        let early = l.quiet(11 * MS, &open);
        assert!(!early.seal_open);
        assert_eq!(
            early.watermark_lag, None,
            "an open chunk holds the watermark"
        );
        assert_eq!(poll_for(early), 2 * MS, "wakes in time to seal");
        let due = l.quiet(12 * MS, &open);
        assert!(due.seal_open);
        assert_eq!(
            due.watermark_lag,
            Some(21 * MS),
            "two block timeouts and 5 ms"
        );
        assert_eq!(poll_for(due), 50 * MS, "nothing pending: the long wait");
        let merged = Loop::new(
            Setup {
                merged: true,
                ..setup(WaitStrategy::Poll)
            },
            Box::new(Basic),
            Duration::ZERO,
        )
        .quiet(MS, &quiet());
        assert_eq!(
            poll_for(merged),
            2 * MS,
            "a merging writer needs the watermark"
        );
        let frames = l.quiet(
            MS,
            &Quiet {
                frames_out: true,
                ..quiet()
            },
        );
        assert_eq!(
            poll_for(frames),
            2 * MS,
            "frames to give back to the kernel"
        );
    }

    #[test]
    fn the_drain_after_a_stop_lasts_two_visibility_delays_and_a_margin() {
        let mut l = Loop::new(setup(WaitStrategy::Poll), Box::new(Basic), Duration::ZERO);
        let stop = Quiet {
            stop: true,
            ..quiet()
        };
        // 8 ms blocks: 16 ms plus a 10 ms margin from the first empty look after the stop.
        assert!(matches!(l.quiet(100 * MS, &stop).then, Then::Wait(_)));
        assert!(matches!(l.quiet(126 * MS, &stop).then, Then::Wait(_)));
        assert_eq!(l.quiet(127 * MS, &stop).then, Then::Finish);
        let end = l.quiet(
            MS,
            &Quiet {
                exhausted: true,
                open_len: 2,
                ..quiet()
            },
        );
        assert_eq!(end.then, Then::Finish, "a file at its end");
        assert_eq!(end.watermark_lag, None);
    }

    #[test]
    fn each_wait_strategy_waits_as_documented() {
        let down = Loop::new(setup(WaitStrategy::Busy), Box::new(Basic), Duration::ZERO).quiet(
            MS,
            &Quiet {
                link_down: true,
                ..quiet()
            },
        );
        assert_eq!(poll_for(down), LINK_DOWN_WAIT, "whatever the strategy");
        let mut busy = Loop::new(setup(WaitStrategy::Busy), Box::new(Basic), Duration::ZERO);
        let kick = Quiet {
            needs_wakeup: true,
            ..quiet()
        };
        let want = Wait {
            kick: true,
            spin: Spin::Times(BUSY_SPINS),
            block: Block::No,
        };
        assert_eq!(busy.quiet(MS, &kick).then, Then::Wait(want));
        // Poll with coalescing (AF_XDP): right after a batch, sleep to let frames gather.
        let mut xdp = Loop::new(
            Setup {
                coalesce: MS,
                ..setup(WaitStrategy::Poll)
            },
            Box::new(Basic),
            Duration::ZERO,
        );
        xdp.took();
        let gather = Wait {
            kick: true,
            spin: Spin::No,
            block: Block::Sleep(MS),
        };
        assert_eq!(xdp.quiet(MS, &kick).then, Then::Wait(gather));
        assert_eq!(
            poll_for(xdp.quiet(MS, &kick)),
            50 * MS,
            "then a blocking poll"
        );
    }

    #[test]
    fn adaptive_sleeps_double_up_to_the_pending_wait_and_packets_reset_them() {
        let kick = Quiet {
            needs_wakeup: true,
            ..quiet()
        };
        let mut ad = Loop::new(
            setup(WaitStrategy::Adaptive),
            Box::new(Basic),
            Duration::ZERO,
        );
        let sleeps: Vec<Duration> = (0..8)
            .map(|_| match ad.quiet(MS, &quiet()).then {
                Then::Wait(Wait {
                    spin: Spin::For(s),
                    block: Block::Sleep(d),
                    kick: false,
                }) if s == ADAPTIVE_SPIN => d,
                other => panic!("{other:?}"),
            })
            .collect();
        let us = |n| Duration::from_micros(n);
        let want = [50, 100, 200, 400, 800, 1600, 2000, 2000].map(us);
        assert_eq!(sleeps, want);
        ad.took();
        let w = ad.quiet(MS, &kick).then;
        assert!(
            matches!(w, Then::Wait(Wait { block: Block::Poll(d), .. }) if d == us(50)),
            "{w:?}"
        );
    }

    #[test]
    fn kernel_counters_are_due_every_100_ms_and_chunks_go_where_the_policy_says() {
        let buddy = Buddy {
            threshold: 50.0,
            group: vec![0, 1],
        };
        let mut l = Loop::new(setup(WaitStrategy::Poll), Box::new(buddy), 5 * MS);
        assert!(!l.stats_due(104 * MS));
        assert!(l.stats_due(105 * MS));
        assert!(!l.stats_due(204 * MS));
        assert!(l.stats_due(205 * MS));
        assert_eq!(l.route(&[2, 0]), 0, "at T: home");
        assert_eq!(l.route(&[3, 0]), 1, "past T: the buddy");
    }
}
