//! The simulation loop: the engine's own capture threads in virtual time, with workers
//! modelled as time per packet.
//!
//! The capture side is not a model: [`Queues`] turns the engine's capture-thread shells (the
//! very `CaptureThread` turn, its decisions, pools and offload policies) over in-memory
//! sources whose packets arrive on a virtual clock into a kernel ring of `ring` packets.
//! What this loop adds is what the engine leaves to its consumers:
//!
//! - the traffic: per receive queue, the arrival process of [`Generator`] until
//!   `cfg.seconds`; each queue's capture thread ends once its packets have all come and
//!   been taken, sealing its open chunk;
//! - the workers: worker w takes the chunks of capture queue w in FIFO order, a chunk
//!   costing (packets x cost of w) of virtual time (the x-loop's load), then sends it home,
//!   whoever's it is; the capture thread waiting for that room is woken at that instant;
//! - the capture threads are infinitely fast: a turn takes no virtual time, only their waits
//!   do (a poll ends at the next packet, a wait for room at the room).
//!
//! Why event-driven: time jumps from one capture thread's wake (a packet, a seal timeout,
//! room) or chunk completion to the next, and the result is a pure function of the
//! configuration (one thread, no clock reads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use poolcap_core::geometry::PoolSize;
use poolcap_engine::capture::pool::Chunk;
use poolcap_engine::capture::sim::{self, Queues, EPOCH_NS};
use poolcap_format::RecordedPacket;

use super::arrivals::{queue_flows, queue_rates, Generator};
use super::model::Config;
use super::report::{QueueReport, Report};

/// Most packets a capture thread takes from its ring at once (AF_XDP's receive batch).
const BATCH: usize = 256;

/// Queue q's packets: its arrivals until `end_ns`, counted as they come. They carry no
/// bytes (the workers' cost is modelled), so a pool of many chunks costs no memory.
struct Arrivals {
    gen: Generator,
    end_ns: f64,
    count: Arc<AtomicU64>,
}

impl Iterator for Arrivals {
    type Item = RecordedPacket;

    fn next(&mut self) -> Option<RecordedPacket> {
        if self.gen.peek() >= self.end_ns {
            return None;
        }
        let t = self.gen.advance();
        self.count.fetch_add(1, Ordering::Relaxed);
        Some(RecordedPacket {
            ts_ns: EPOCH_NS + t.ceil() as u64,
            data: Vec::new(),
            orig_len: 64,
        })
    }
}

/// A worker: its cost per packet and the chunk it is processing, until when.
#[derive(Debug)]
struct Worker {
    cost_ns: f64,
    serving: Option<(Chunk, Duration)>,
}

/// What this loop sees of a queue beyond the engine's counters.
#[derive(Debug, Default)]
struct Seen {
    arrived: Arc<AtomicU64>,
    paused_since: Option<Duration>,
    stats: QueueReport,
}

/// A simulation in progress.
#[derive(Debug)]
pub struct Engine {
    queues: Queues,
    workers: Vec<Worker>,
    seen: Vec<Seen>,
    chunks: usize,
    events: u64,
}

impl Engine {
    /// An engine at time 0. `cfg` must be valid ([`Config::validate`]).
    pub fn new(cfg: &Config) -> Self {
        let n = cfg.queues;
        let rates = queue_rates(&cfg.arrivals, n, cfg.seed);
        let flows = queue_flows(&cfg.arrivals, n, cfg.seed);
        let seen: Vec<Seen> = rates
            .iter()
            .map(|&r| Seen {
                stats: QueueReport {
                    offered_pps: r,
                    ..QueueReport::default()
                },
                ..Seen::default()
            })
            .collect();
        let arrivals = (0..n)
            .map(|q| {
                Box::new(Arrivals {
                    gen: Generator::new(&cfg.arrivals.shape, &flows[q], cfg.seed, q),
                    end_ns: cfg.seconds * 1e9,
                    count: Arc::clone(&seen[q].arrived),
                }) as Box<dyn Iterator<Item = RecordedPacket> + Send>
            })
            .collect();
        let setup = sim::Setup {
            pool: PoolSize {
                cells: cfg.cells,
                chunks: cfg.chunks,
                cell_size: 0,
            },
            policy: cfg.policy.clone(),
            groups: cfg.group_list(),
            seal_after: Duration::from_nanos(cfg.seal_after_ns as u64),
            ring: cfg.ring,
            batch: BATCH,
        };
        Self {
            queues: Queues::new(&setup, arrivals),
            workers: (0..n)
                .map(|w| Worker {
                    cost_ns: cfg.cost_of(w),
                    serving: None,
                })
                .collect(),
            seen,
            chunks: cfg.chunks,
            events: 0,
        }
    }

    /// Current virtual time, ns.
    pub fn now(&self) -> f64 {
        self.queues.now().as_nanos() as f64
    }

    /// Moves to the next instant something happens and handles it: chunks finished, then
    /// the capture threads due, then idle workers take what was sealed. False when nothing
    /// is left to do.
    pub fn step(&mut self) -> Result<bool, String> {
        let done = self
            .workers
            .iter()
            .filter_map(|w| w.serving.as_ref().map(|s| s.1));
        let Some(t) = done.chain(self.queues.next_turn()).min() else {
            return Ok(false);
        };
        self.queues.advance_to(t);
        self.events += 1;
        for w in 0..self.workers.len() {
            if self.workers[w].serving.as_ref().is_some_and(|s| s.1 <= t) {
                self.done(w);
                self.start(w);
            }
        }
        self.queues.turn_due().map_err(|e| e.to_string())?;
        for w in 0..self.workers.len() {
            if self.workers[w].serving.is_none() {
                self.start(w);
            }
        }
        self.observe(t);
        Ok(true)
    }

    /// Books the pause onsets and ends of the queues that turned.
    fn observe(&mut self, t: Duration) {
        for &q in self.queues.turned() {
            let paused = self.queues.paused(q);
            let s = &mut self.seen[q];
            match (paused, s.paused_since) {
                (true, None) => {
                    let free = self.queues.free_chunks(q);
                    s.paused_since = Some(t);
                    s.stats.pause_onsets += 1;
                    s.stats.min_free_at_pause =
                        Some(s.stats.min_free_at_pause.map_or(free, |m| m.min(free)));
                }
                (false, Some(since)) => {
                    s.paused_since = None;
                    s.stats.paused_ns += (t - since).as_nanos() as f64;
                }
                _ => {}
            }
        }
    }

    /// Worker w takes the next chunk of its capture queue, if any. The queue is longest
    /// just before a take (it grows only while its worker is busy).
    fn start(&mut self, w: usize) {
        let backlog = self.queues.backlog(w);
        if backlog == 0 {
            return;
        }
        let st = &mut self.seen[w].stats;
        st.peak_backlog = st.peak_backlog.max(backlog);
        let Some(c) = self.queues.take_captured(w) else {
            return;
        };
        let packets = c.len() as u64;
        let service = packets as f64 * self.workers[w].cost_ns;
        let st = &mut self.seen[w].stats;
        st.busy_ns += service;
        if c.home != w {
            self.seen[c.home].stats.offloaded_out_chunks += 1;
        }
        let until = self.queues.now() + Duration::from_nanos(service.round() as u64);
        self.workers[w].serving = Some((c, until));
    }

    /// Worker w is done with its chunk: counted, and sent home.
    fn done(&mut self, w: usize) {
        if let Some((c, _)) = self.workers[w].serving.take() {
            let n = c.len() as u64;
            self.seen[w].stats.worked_packets += n;
            self.seen[c.home].stats.processed += n;
            self.queues.recycle(c);
        }
    }

    /// Checks the books mid-run: every packet that arrived is captured, dropped or still in
    /// the kernel ring; captured packets are processed, in a chunk or in a worker's hands,
    /// never more; the engine's own counters add up.
    pub fn audit(&self) -> Result<(), String> {
        for (q, s) in self.seen.iter().enumerate() {
            let e = self.queues.stats(q);
            let arrived = s.arrived.load(Ordering::Relaxed);
            let accounted = e.captured + e.dropped_kernel + e.dropped_pool + e.not_taken;
            if accounted > arrived {
                return Err(format!(
                    "queue {q}: {accounted} packets accounted of {arrived} arrived"
                ));
            }
            if s.stats.processed > e.captured {
                return Err(format!(
                    "queue {q}: processed {} of {} captured",
                    s.stats.processed, e.captured
                ));
            }
            if self.queues.ended(q) && accounted != arrived {
                return Err(format!(
                    "queue {q} ended with {accounted} packets accounted of {arrived}"
                ));
            }
        }
        Ok(())
    }

    /// Runs to the end and returns the counters.
    pub fn finish(mut self) -> Result<Report, String> {
        while self.step()? {}
        let end_ns = self.now();
        let queues = self
            .seen
            .into_iter()
            .enumerate()
            .map(|(q, s)| {
                let e = self.queues.stats(q);
                QueueReport {
                    arrived: s.arrived.load(Ordering::Relaxed),
                    captured: e.captured,
                    dropped_kernel: e.dropped_kernel,
                    dropped_pool: e.dropped_pool,
                    sealed_chunks: e.chunks,
                    offloaded_out_packets: e.offloaded_out,
                    offloaded_in_packets: e.offloaded_in,
                    peak_in_use: e.pool_peak_chunks as usize,
                    final_free: self.queues.free_chunks(q),
                    ..s.stats
                }
            })
            .collect();
        Ok(Report {
            queues,
            chunks: self.chunks,
            end_ns,
            events: self.events,
        })
    }
}

/// Runs `cfg` to the end (traffic for `cfg.seconds`, then draining).
pub fn run(cfg: &Config) -> Result<Report, String> {
    cfg.validate()?;
    Engine::new(cfg).finish()
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
        while e.step().unwrap() {
            i += 1;
            if i.is_multiple_of(every) {
                e.audit().unwrap();
            }
        }
        e.audit().unwrap();
        let r = e.finish().unwrap();
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
    fn one_packet_chunks_sealed_at_once_with_a_ring_of_one_match_md1k_blocking() {
        // M = 1, R = K chunks, sealed as soon as the source is idle (seal_after rounds to
        // 0 ns), Poisson arrivals, fixed cost. The capture thread keeps a chunk to spare, so
        // at most K - 1 chunks are out, and one packet more waits in the ring: an M/D/1/K
        // queue whose blocked packets the kernel drops.
        for &(rho, k) in &[(0.9, 5usize), (0.95, 8), (1.0, 10)] {
            let cost = 1000.0;
            let cfg = Config {
                queues: 1,
                cells: 1,
                chunks: k,
                ring: 1,
                seal_after_ns: 0.5,
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
            assert_eq!(t.dropped_pool, 0);
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
    fn congestion_pauses_and_loses_the_same_excess_in_the_kernel() {
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
        // Basic fills the pool to its spare chunk, then the kernel ring holds what does not
        // fit and drops the rest: the pool itself drops nothing.
        let basic = audited(&cfg("basic"), 4001).total();
        assert!(basic.dropped_kernel > 0);
        assert_eq!(basic.dropped_pool, 0, "the ring extends the pool");
        assert_eq!(basic.pause_onsets, 0);
        assert_eq!(basic.peak_in_use, 49, "basic uses all but the spare chunk");

        let r = audited(&cfg("congestion:90,50"), 4001);
        let t = r.total();
        assert_eq!(t.dropped_pool, 0);
        assert!(t.dropped_kernel > 0);
        assert!(
            t.pause_onsets > 2,
            "the controller cycles: {}",
            t.pause_onsets
        );
        // The policy looks before each batch, and a batch of 256 packets fills 4 chunks of
        // 64, so a pause can begin a batch past 45 waiting chunks; the spare chunk is still
        // free then.
        let free = t.min_free_at_pause.unwrap();
        assert!(free >= 1, "{free} free chunks at a pause onset");
        // The workers stay busy either way: the loss is the same excess.
        let (a, b) = (basic.drop_rate(), t.drop_rate());
        assert!((a - b).abs() < 0.1 * a, "basic {a:.4} congestion {b:.4}");
    }

    #[test]
    fn a_burst_is_lost_where_the_engines_shell_loses_it() {
        // The burst of the engine's virtual-time test
        // (capture::sim::tests::a_burst_fills_the_pool_then_the_ring_and_the_kernel_drops_the_rest):
        // 1000 packets 1 ns apart into 16 chunks of 32 and a ring of 100, with a worker too
        // slow to free a chunk during the burst. The shell keeps a chunk to spare and leaves
        // the rest to the ring: 480 + 100 captured, 420 dropped by the kernel, none by the
        // pool. A simulator with its own capture model (no hold, all 16 chunks filled, as
        // `sim` had) would count 512 captured and 488 pool drops.
        let cfg = Config {
            queues: 1,
            cells: 32,
            chunks: 16,
            ring: 100,
            cost_ns: vec![1e6],
            policy: PolicySpec::Basic,
            arrivals: Arrivals {
                rate_pps: 1e9,
                split: Split::Even,
                shape: Shape::Constant,
            },
            seconds: 1e-6,
            ..Config::default()
        };
        let t = audited(&cfg, 1).total();
        assert_eq!(
            (t.arrived, t.captured, t.dropped_kernel, t.dropped_pool),
            (1000, 580, 420, 0),
            "{t:?}"
        );
    }
}
