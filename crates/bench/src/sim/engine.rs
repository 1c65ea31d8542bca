//! The discrete-event loop: receive queues, kernel rings, capture threads, pools, capture
//! queues and workers in virtual time. Each capture thread's decisions (pause and resume,
//! where a sealed chunk goes, when a partly filled chunk is sealed) are made by the
//! engine's own [`Loop`] with the engine's own policies, so the simulator cannot drift
//! from the capture thread it models.
//!
//! Why event-driven: time jumps from one packet arrival, chunk completion or seal timeout to
//! the next, so a second of 2 Mpps costs about 2 M heap operations whatever the clock
//! resolution, and the result is a pure function of the configuration (no threads, no
//! clock reads). The model, per receive queue q:
//!
//! - the capture thread is infinitely fast: an arriving packet goes straight into the open
//!   chunk, taken from q's pool when the first packet needs it; with no free chunk the
//!   packet is `dropped_pool`;
//! - unless the loop says hold ([`Step::Hold`], a congestion pause): then the open chunk
//!   is sealed at once, as the engine does, packets wait in the kernel ring (K packets;
//!   beyond that `dropped_kernel`), and are taken in order as soon as the pause ends;
//! - a chunk is sealed when it holds M packets, or when the loop finds it open for
//!   `seal_after` (it looks at that instant after the chunk's first packet); at seal time
//!   the loop's route names the capture queue it joins;
//! - the kernel does not announce its next batch (as AF_XDP), so the loop never holds
//!   packets in the kernel for want of a free chunk: with no free chunk a packet is
//!   `dropped_pool`;
//! - worker w serves capture queue w in FIFO order, a chunk taking (packets x cost of w);
//!   the finished chunk goes back to its home pool, whoever processed it;
//! - when the traffic ends, the run goes on until every buffered packet is processed; the
//!   policies keep deciding meanwhile (a pause lifted at once would pour a full kernel ring
//!   into the pool and count drops that steady state never sees), and only a queue still
//!   paused when nothing else is left to happen is resumed by force.
//!
//! `backlogs[i]` is what the real engine reports: chunks waiting in capture queue i, not
//! counting the one its worker is processing.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use super::arrivals::{queue_flows, queue_rates, Generator};
use super::model::Config;
use super::report::{QueueReport, Report};
use std::time::Duration;

use poolcap_core::decide::{self, Look, Loop, Pause, Quiet, Step};
use poolcap_core::geometry::PoolSize;
use poolcap_core::policy::group_of;
use poolcap_core::wait::WaitStrategy;

/// Virtual time as the loop's clock, rounded up, so a chunk opened at `t` (rounded down) is
/// found `seal_after` old exactly `seal_after` later.
fn clock(ns: f64) -> Duration {
    Duration::from_nanos(ns.ceil() as u64)
}

#[derive(Debug, Clone, Copy)]
enum What {
    Arrival(usize),
    Done(usize),
    Seal(usize, u64),
}

#[derive(Debug, Clone, Copy)]
struct Event {
    t: f64,
    seq: u64,
    what: What,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    /// Reversed, so that `BinaryHeap` pops the earliest event (ties: first scheduled).
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// A sealed chunk: whose pool it belongs to and how many packets it holds.
#[derive(Debug, Clone, Copy)]
struct Sealed {
    home: usize,
    packets: usize,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    id: u64,
    packets: usize,
    /// When its first packet came, ns.
    since: f64,
}

#[derive(Debug)]
struct Queue {
    gen: Generator,
    /// The capture thread's decisions, with the queue's policy.
    decide: Loop,
    cost_ns: f64,
    /// Packets waiting in the kernel ring.
    kernel: usize,
    /// Free chunks of this (home) pool.
    free: usize,
    open: Option<Open>,
    /// The capture queue: sealed chunks (any home) waiting for this queue's worker.
    waiting: VecDeque<Sealed>,
    serving: Option<Sealed>,
    paused: bool,
    paused_since: f64,
    stats: QueueReport,
}

/// Queue q's capture thread decisions: the engine's loop, over a source that does not
/// announce its batches and has no visibility delay, with the queue's policy.
fn capture_loop(cfg: &Config, q: usize, groups: &[Vec<usize>]) -> Loop {
    let setup = decide::Setup {
        queue: q,
        pool: PoolSize {
            cells: cfg.cells.max(1),
            chunks: cfg.chunks,
            cell_size: 0,
        },
        in_place: false,
        wait: WaitStrategy::Poll,
        seal_after: Duration::from_nanos(cfg.seal_after_ns as u64),
        visibility_delay: Duration::ZERO,
        coalesce: Duration::ZERO,
        merged: false,
    };
    Loop::new(
        setup,
        cfg.policy.build(&group_of(groups, q)),
        Duration::ZERO,
    )
}

/// A simulation in progress.
#[derive(Debug)]
pub struct Engine {
    queues: Vec<Queue>,
    backlogs: Vec<usize>,
    heap: BinaryHeap<Event>,
    seq: u64,
    now: f64,
    ring: usize,
    cells: usize,
    chunks: usize,
    seal_after_ns: f64,
    end_ns: f64,
    next_chunk: u64,
    stopping: bool,
    recheck: Vec<usize>,
    events: u64,
}

impl Engine {
    /// An engine at time 0 with the first arrivals scheduled. `cfg` must be valid
    /// ([`Config::validate`]).
    pub fn new(cfg: &Config) -> Self {
        let n = cfg.queues;
        let rates = queue_rates(&cfg.arrivals, n, cfg.seed);
        let flows = queue_flows(&cfg.arrivals, n, cfg.seed);
        let groups = cfg.group_list();
        let end_ns = cfg.seconds * 1e9;
        let queues: Vec<Queue> = (0..n)
            .map(|q| Queue {
                gen: Generator::new(&cfg.arrivals.shape, &flows[q], cfg.seed, q),
                decide: capture_loop(cfg, q, &groups),
                cost_ns: cfg.cost_of(q),
                kernel: 0,
                free: cfg.chunks,
                open: None,
                waiting: VecDeque::new(),
                serving: None,
                paused: false,
                paused_since: 0.0,
                stats: QueueReport {
                    offered_pps: rates[q],
                    ..QueueReport::default()
                },
            })
            .collect();
        let mut e = Self {
            queues,
            backlogs: vec![0; n],
            heap: BinaryHeap::with_capacity(4 * n + 16),
            seq: 0,
            now: 0.0,
            ring: cfg.ring,
            cells: cfg.cells.max(1),
            chunks: cfg.chunks,
            seal_after_ns: cfg.seal_after_ns,
            end_ns,
            next_chunk: 0,
            stopping: false,
            recheck: Vec::new(),
            events: 0,
        };
        for q in 0..n {
            let t = e.queues[q].gen.peek();
            if t < end_ns {
                e.push(t, What::Arrival(q));
            }
        }
        e
    }

    fn push(&mut self, t: f64, what: What) {
        self.seq += 1;
        self.heap.push(Event {
            t,
            seq: self.seq,
            what,
        });
    }

    /// Current virtual time, ns.
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Handles the next event; false when nothing is left to do.
    pub fn step(&mut self) -> bool {
        let Some(ev) = self.heap.pop() else {
            // Nothing is left to happen: a queue still paused would hold its kernel ring
            // forever, so lift the pauses and take what the rings hold.
            let stuck: Vec<usize> = (0..self.queues.len())
                .filter(|&q| self.queues[q].kernel > 0)
                .collect();
            if stuck.is_empty() {
                return false;
            }
            self.stopping = true;
            for q in stuck {
                self.update_pause(q);
                self.drain(q);
            }
            return true;
        };
        self.now = ev.t;
        self.events += 1;
        match ev.what {
            What::Arrival(q) => {
                self.queues[q].gen.advance();
                let next = self.queues[q].gen.peek();
                if next < self.end_ns {
                    self.push(next, What::Arrival(q));
                }
                self.arrive(q);
            }
            What::Done(w) => self.done(w),
            What::Seal(q, id) => {
                if let Some(o) = self.queues[q].open.filter(|o| o.id == id) {
                    let quiet = Quiet {
                        stop: false,
                        open_len: o.packets,
                        open_since: Duration::from_nanos(o.since as u64),
                        exhausted: false,
                        frames_out: false,
                        link_down: false,
                        needs_wakeup: false,
                    };
                    if self.queues[q]
                        .decide
                        .quiet(clock(self.now), &quiet)
                        .seal_open
                    {
                        self.seal(q);
                    }
                }
            }
        }
        while let Some(q) = self.recheck.pop() {
            if !self.update_pause(q) {
                self.drain(q);
            }
        }
        true
    }

    /// Asks q's loop whether to take packets now, books the pause's transitions, and seals
    /// the open chunk when the loop holds; true when it holds.
    fn update_pause(&mut self, q: usize) -> bool {
        let s = &self.queues[q];
        let look = Look {
            stop: self.stopping,
            budget_spent: false,
            backlogs: &self.backlogs,
            next_batch: None,
            open: s.open.map(|o| o.packets),
            free_chunks: s.free,
        };
        let begin = self.queues[q].decide.begin(clock(self.now), &look);
        let now = self.now;
        let s = &mut self.queues[q];
        match begin.pause {
            Pause::Began => {
                s.paused = true;
                s.paused_since = now;
                s.stats.pause_onsets += 1;
                s.stats.min_free_at_pause =
                    Some(s.stats.min_free_at_pause.map_or(s.free, |m| m.min(s.free)));
            }
            Pause::Ended(_) => {
                s.paused = false;
                s.stats.paused_ns += now - s.paused_since;
            }
            Pause::Same => {}
        }
        let hold = matches!(begin.step, Step::Hold(_));
        if hold && s.open.is_some_and(|o| o.packets > 0) {
            self.seal(q);
        }
        hold
    }

    /// Takes packets from q's kernel ring while the policy lets it.
    fn drain(&mut self, q: usize) {
        while self.queues[q].kernel > 0 {
            self.queues[q].kernel -= 1;
            if self.capture(q) && self.update_pause(q) {
                break;
            }
        }
    }

    fn arrive(&mut self, q: usize) {
        self.queues[q].stats.arrived += 1;
        let paused = self.update_pause(q);
        let s = &mut self.queues[q];
        if paused || s.kernel > 0 {
            if s.kernel < self.ring {
                s.kernel += 1;
                s.stats.peak_kernel = s.stats.peak_kernel.max(s.kernel);
            } else {
                s.stats.dropped_kernel += 1;
            }
            if !paused {
                self.drain(q);
            }
        } else {
            self.capture(q);
        }
    }

    /// The capture thread takes one packet; true if that sealed a chunk.
    fn capture(&mut self, q: usize) -> bool {
        let s = &mut self.queues[q];
        let open = match &mut s.open {
            Some(o) => o,
            None => {
                if s.free == 0 {
                    s.stats.dropped_pool += 1;
                    return false;
                }
                s.free -= 1;
                s.stats.peak_in_use = s.stats.peak_in_use.max(self.chunks - s.free);
                self.next_chunk += 1;
                let id = self.next_chunk;
                let o = s.open.insert(Open {
                    id,
                    packets: 0,
                    since: self.now,
                });
                if self.cells > 1 {
                    let t = self.now + self.seal_after_ns;
                    self.seq += 1;
                    self.heap.push(Event {
                        t,
                        seq: self.seq,
                        what: What::Seal(q, id),
                    });
                }
                o
            }
        };
        open.packets += 1;
        s.stats.captured += 1;
        if open.packets >= self.cells {
            self.seal(q);
            true
        } else {
            false
        }
    }

    /// Seals q's open chunk and hands it to the capture queue the policy names.
    fn seal(&mut self, q: usize) {
        let Some(open) = self.queues[q].open.take() else {
            return;
        };
        let n = self.queues.len();
        let mut target = self.queues[q].decide.route(&self.backlogs);
        if target >= n {
            target = q;
        }
        let st = &mut self.queues[q].stats;
        st.sealed_chunks += 1;
        if target != q {
            st.offloaded_out_chunks += 1;
            st.offloaded_out_packets += open.packets as u64;
            self.queues[target].stats.offloaded_in_packets += open.packets as u64;
        }
        let t = &mut self.queues[target];
        t.waiting.push_back(Sealed {
            home: q,
            packets: open.packets,
        });
        self.backlogs[target] += 1;
        t.stats.peak_backlog = t.stats.peak_backlog.max(self.backlogs[target]);
        if t.serving.is_none() {
            self.start(target);
        }
    }

    /// Worker w takes the next chunk of its capture queue, if any.
    fn start(&mut self, w: usize) {
        let s = &mut self.queues[w];
        let Some(c) = s.waiting.pop_front() else {
            return;
        };
        self.backlogs[w] -= 1;
        s.serving = Some(c);
        let service = c.packets as f64 * s.cost_ns;
        s.stats.busy_ns += service;
        if s.paused {
            self.recheck.push(w);
        }
        self.push(self.now + service, What::Done(w));
    }

    fn done(&mut self, w: usize) {
        if let Some(c) = self.queues[w].serving.take() {
            self.queues[w].stats.worked_packets += c.packets as u64;
            let home = &mut self.queues[c.home];
            home.stats.processed += c.packets as u64;
            home.free += 1;
        }
        self.start(w);
    }

    /// Checks the books mid-run: every chunk of every pool is free, open, waiting or being
    /// processed exactly once; every packet that arrived is in a final counter, the kernel
    /// ring or a chunk; the backlogs the policies see are the capture queues' lengths.
    pub fn audit(&self) -> Result<(), String> {
        let n = self.queues.len();
        let mut held = vec![0usize; n];
        let mut packets = vec![0u64; n];
        for s in &self.queues {
            for c in s.waiting.iter().chain(s.serving.iter()) {
                held[c.home] += 1;
                packets[c.home] += c.packets as u64;
            }
        }
        for (q, s) in self.queues.iter().enumerate() {
            let open = s.open.map_or(0, |o| o.packets);
            let chunks = s.free + usize::from(s.open.is_some()) + held[q];
            if chunks != self.chunks {
                return Err(format!(
                    "t={} queue {q}: free {} + open {} + elsewhere {} != R {}",
                    self.now,
                    s.free,
                    usize::from(s.open.is_some()),
                    held[q],
                    self.chunks
                ));
            }
            if self.backlogs[q] != s.waiting.len() {
                return Err(format!("queue {q}: backlog out of step"));
            }
            let st = &s.stats;
            if st.arrived != st.captured + st.dropped_kernel + st.dropped_pool + s.kernel as u64 {
                return Err(format!("queue {q}: arrivals not all accounted for"));
            }
            if st.captured != st.processed + open as u64 + packets[q] {
                return Err(format!("queue {q}: captured packets not all in chunks"));
            }
        }
        Ok(())
    }

    /// Runs to the end and returns the counters.
    pub fn finish(mut self) -> Report {
        while self.step() {}
        let chunks = self.chunks;
        let now = self.now;
        Report {
            queues: self
                .queues
                .into_iter()
                .map(|mut s| {
                    if s.paused {
                        s.stats.paused_ns += now - s.paused_since;
                    }
                    s.stats.final_free = s.free;
                    s.stats
                })
                .collect(),
            chunks,
            end_ns: now,
            events: self.events,
        }
    }
}

/// Runs `cfg` to the end (traffic for `cfg.seconds`, then draining).
pub fn run(cfg: &Config) -> Result<Report, String> {
    cfg.validate()?;
    Ok(Engine::new(cfg).finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::closed_form::md1k_blocking;
    use crate::sim::model::{Arrivals, Shape, Split};
    use poolcap_core::policy::PolicySpec;

    fn policies() -> Vec<PolicySpec> {
        ["basic", "buddy:60", "buddy:90", "congestion:90,50"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect()
    }

    /// Runs with an audit of the books every `every` events.
    fn audited(cfg: &Config, every: u64) -> Report {
        cfg.validate().unwrap();
        let mut e = Engine::new(cfg);
        let mut i = 0u64;
        while e.step() {
            i += 1;
            if i.is_multiple_of(every) {
                e.audit().unwrap();
            }
        }
        e.audit().unwrap();
        let r = e.finish();
        r.check().unwrap();
        r
    }

    #[test]
    fn ample_capacity_loses_nothing_under_any_policy_or_traffic() {
        let shapes = [
            (Split::Even, Shape::Constant),
            (Split::Even, Shape::Poisson),
            (
                Split::Zipf {
                    flows: 1000,
                    exponent: 1.1,
                },
                Shape::Poisson,
            ),
            (
                Split::Even,
                Shape::OnOff {
                    burst: 5000,
                    peak_pps: 5e6,
                    idle_ns: 4e6,
                },
            ),
        ];
        for (split, shape) in shapes {
            for policy in policies() {
                let cfg = Config {
                    queues: 4,
                    cost_ns: vec![100.0],
                    policy: policy.clone(),
                    arrivals: Arrivals {
                        rate_pps: 1e6,
                        split: split.clone(),
                        shape: shape.clone(),
                    },
                    seconds: 0.05,
                    ..Config::default()
                };
                let r = audited(&cfg, 997);
                let t = r.total();
                assert!(t.arrived > 10_000, "{shape:?}: {}", t.arrived);
                assert_eq!(t.dropped(), 0, "{policy:?} {shape:?}\n{}", r.table());
                assert_eq!(t.processed, t.arrived);
            }
        }
    }

    #[test]
    fn one_packet_chunks_match_md1k_blocking() {
        // M = 1, R = K chunks, Poisson arrivals, fixed cost: an M/D/1/K queue.
        for &(rho, k) in &[(0.9, 5usize), (0.95, 8), (1.0, 10)] {
            let cost = 1000.0;
            let cfg = Config {
                queues: 1,
                cells: 1,
                chunks: k,
                cost_ns: vec![cost],
                policy: PolicySpec::Basic,
                arrivals: Arrivals {
                    rate_pps: rho * 1e9 / cost,
                    split: Split::Even,
                    shape: Shape::Poisson,
                },
                seconds: 2.0,
                seed: 3,
                ..Config::default()
            };
            let r = run(&cfg).unwrap();
            r.check().unwrap();
            let t = r.total();
            assert_eq!(t.dropped_kernel, 0);
            let got = t.drop_rate();
            let want = md1k_blocking(rho, k);
            assert!(
                (got - want).abs() < 0.1 * want,
                "rho {rho} K {k}: simulated {got:.5}, M/D/1/K {want:.5}"
            );
        }
    }

    /// Four queues, one offered 1.5x what its worker can do, the others half: 3 of 4
    /// workers' worth in total.
    fn imbalanced(policy: &str) -> Config {
        Config {
            queues: 4,
            cost_ns: vec![1000.0],
            policy: policy.parse().unwrap(),
            arrivals: Arrivals {
                rate_pps: 0.0,
                split: Split::PerQueue(vec![1.5e6, 0.5e6, 0.5e6, 0.5e6]),
                shape: Shape::Poisson,
            },
            seconds: 0.3,
            ..Config::default()
        }
    }

    #[test]
    fn buddy_offload_saves_the_hot_queue_and_chunks_come_home() {
        let basic = audited(&imbalanced("basic"), 5003);
        let b = basic.total();
        // Basic: the hot queue loses about a third once its pool is full.
        assert!(basic.queues[0].drop_rate() > 0.15, "{}", basic.table());
        assert_eq!(
            b.dropped(),
            basic.queues[0].dropped(),
            "only the hot queue loses"
        );
        assert_eq!(b.offloaded_out_chunks, 0);
        for p in ["buddy:60", "buddy:90"] {
            let buddy = audited(&imbalanced(p), 5003);
            let t = buddy.total();
            assert!(
                t.drop_rate() < b.drop_rate() / 20.0,
                "{p}: {} vs basic {}\n{}",
                t.drop_rate(),
                b.drop_rate(),
                buddy.table()
            );
            assert!(buddy.queues[0].offloaded_out_packets > 0);
            assert!(buddy.queues[1].offloaded_in_packets > 0);
            // Offloaded chunks are processed elsewhere but counted and returned at home.
            assert!(buddy.queues[1].worked_packets > buddy.queues[1].processed);
            assert_eq!(buddy.queues[0].processed, buddy.queues[0].captured);
            assert!(buddy.queues.iter().all(|q| q.final_free == 100));
        }
    }

    #[test]
    fn buddy_groups_keep_offloads_inside_the_group() {
        let cfg = Config {
            groups: Some(vec![vec![0, 1], vec![2, 3]]),
            ..imbalanced("buddy:60")
        };
        let r = audited(&cfg, 5003);
        assert!(r.queues[1].offloaded_in_packets > 0);
        assert_eq!(r.queues[2].offloaded_in_packets, 0);
        assert_eq!(r.queues[3].offloaded_in_packets, 0);
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let cfg = Config {
            queues: 8,
            policy: "buddy:70".parse().unwrap(),
            seconds: 0.1,
            ..Config::default()
        };
        let a = run(&cfg).unwrap();
        let b = run(&cfg).unwrap();
        assert_eq!(a, b);
        let c = run(&Config { seed: 2, ..cfg }).unwrap();
        assert_ne!(a.total().arrived, c.total().arrived);
    }

    #[test]
    fn congestion_control_moves_losses_from_the_pool_to_the_kernel() {
        // Two queues, each offered 1.5x its worker's capacity.
        let cfg = |policy: &str| Config {
            queues: 2,
            cells: 64,
            chunks: 50,
            cost_ns: vec![1000.0],
            policy: policy.parse().unwrap(),
            arrivals: Arrivals {
                rate_pps: 3e6,
                split: Split::Even,
                shape: Shape::Poisson,
            },
            seconds: 0.2,
            ..Config::default()
        };
        let basic = audited(&cfg("basic"), 4001).total();
        assert!(basic.dropped_pool > 0);
        assert_eq!(
            basic.dropped_kernel, 0,
            "basic never leaves packets to the kernel"
        );
        assert_eq!(basic.pause_onsets, 0);

        let r = audited(&cfg("congestion:90,50"), 4001);
        let t = r.total();
        assert_eq!(
            t.dropped_pool, 0,
            "paused at 90% of R, the pool never runs dry"
        );
        assert!(t.dropped_kernel > 0);
        assert!(
            t.pause_onsets > 2,
            "the controller cycles: {}",
            t.pause_onsets
        );
        // At a pause onset 45 of 50 chunks wait; one is open and one being processed, so at
        // least 3 are free, and none is taken while paused.
        let free = t.min_free_at_pause.unwrap();
        assert!(free >= 3, "{free} free chunks at a pause onset");
        assert_eq!(
            t.peak_kernel, 4096,
            "the kernel ring absorbs what is left to it"
        );
        // The workers stay busy either way: the loss is the same excess, moved.
        let (a, b) = (basic.drop_rate(), t.drop_rate());
        assert!((a - b).abs() < 0.1 * a, "basic {a:.4} congestion {b:.4}");
    }
}
