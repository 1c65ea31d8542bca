//! The in-memory source, for deterministic tests of the pipeline and for `poolcap-bench sim`:
//! a list of packets handed out in batches, with faults injected on purpose (smoltcp's
//! FaultInjector): packets the "kernel" drops, packets delivered out of order, batches that
//! do not come (stalls), and a kernel error after a number of packets. Drops are reported
//! as kernel drops, so the accounting must still add up exactly.
//!
//! With a [`VirtualClock`] ([`MemSource::arriving_on`]), packets arrive at their timestamps
//! on that clock into a "kernel ring" of a bounded size ([`MemSource::with_ring`]), which
//! drops what arrives while it is full, so a test or the simulator can drive the capture
//! thread's real shell through time. The packets are read from their iterator only as they
//! arrive, so a simulated run of millions need not hold them all.

use std::cell::{RefCell, RefMut};
use std::collections::VecDeque;
use std::iter::Peekable;
use std::time::Duration;

use poolcap_format::RecordedPacket;
use poolcap_sys::poll::Readiness;
use poolcap_sys::SysError;

use super::clock::{Clock, VirtualClock};
use super::pool::Pool;
use super::source::{Filler, KernelDrops, Source};

/// Faults to inject; `None` injects none.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Every Nth packet is dropped by the "kernel".
    pub drop_every: Option<usize>,
    /// Every Nth packet of a batch swaps places with the one after it.
    pub reorder_every: Option<usize>,
    /// Every Nth look finds nothing ready.
    pub stall_every: Option<u64>,
    /// After this many packets are delivered, waiting fails.
    pub error_after: Option<u64>,
}

/// Packets still to come, in timestamp order.
struct Coming(Box<dyn Iterator<Item = RecordedPacket> + Send>);

impl Iterator for Coming {
    type Item = RecordedPacket;

    fn next(&mut self) -> Option<RecordedPacket> {
        self.0.next()
    }
}

impl std::fmt::Debug for Coming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Coming")
    }
}

/// The packets that have arrived and wait to be taken, and those still to come.
#[derive(Debug)]
struct Ring {
    coming: Peekable<Coming>,
    waiting: VecDeque<RecordedPacket>,
    /// Most packets that wait; more are dropped.
    size: usize,
    /// Packets that have arrived so far (the index of the next one).
    arrived: usize,
    /// Since the last report: packets put into the ring, and dropped.
    received: u64,
    dropped: u64,
}

impl Ring {
    /// Lets in the packets that have arrived by `now_ns` (all when `None`).
    fn admit(&mut self, now_ns: Option<u64>, drop_every: Option<usize>) {
        while let Some(p) = self
            .coming
            .next_if(|p| now_ns.is_none_or(|now| p.ts_ns <= now))
        {
            self.arrived += 1;
            let injected = drop_every.is_some_and(|n| n > 0 && self.arrived.is_multiple_of(n));
            if injected || self.waiting.len() >= self.size {
                self.dropped += 1;
            } else {
                self.received += 1;
                self.waiting.push_back(p);
            }
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct MemSource {
    ring: RefCell<Ring>,
    batch: usize,
    faults: Faults,
    looks: u64,
    delivered: u64,
    /// Packets arrive at their timestamps on this clock; without one, all are there.
    arrivals: Option<VirtualClock>,
}

impl MemSource {
    /// A source that hands out `packets` in batches of `batch`, with `faults`.
    pub fn new(
        packets: impl IntoIterator<Item = RecordedPacket, IntoIter: Send + 'static>,
        batch: usize,
        faults: Faults,
    ) -> Self {
        Self {
            ring: RefCell::new(Ring {
                coming: Coming(Box::new(packets.into_iter())).peekable(),
                waiting: VecDeque::new(),
                size: usize::MAX,
                arrived: 0,
                received: 0,
                dropped: 0,
            }),
            batch: batch.max(1),
            faults,
            looks: 0,
            delivered: 0,
            arrivals: None,
        }
    }

    /// The same source whose packets (in timestamp order) arrive at their timestamps on
    /// `clock`.
    pub fn arriving_on(mut self, clock: VirtualClock) -> Self {
        self.arrivals = Some(clock);
        self
    }

    /// The same source with room for `size` packets waiting to be taken; packets that
    /// arrive while it is full are kernel drops.
    pub fn with_ring(self, size: usize) -> Self {
        self.ring.borrow_mut().size = size.max(1);
        self
    }

    /// The ring with every packet arrived by now let in; tells the clock when the next one
    /// comes.
    fn ring(&self) -> RefMut<'_, Ring> {
        let mut r = self.ring.borrow_mut();
        let now = self.arrivals.as_ref().map(VirtualClock::wall_ns);
        r.admit(now, self.faults.drop_every);
        if let Some(clock) = &self.arrivals {
            clock.next_packet_at(r.coming.peek().map(|p| p.ts_ns));
        }
        r
    }

    fn failed(&self) -> bool {
        self.faults.error_after.is_some_and(|n| self.delivered >= n)
    }
}

impl Source for MemSource {
    fn take_batch(&mut self, pool: &Pool, filler: &mut Filler) -> bool {
        self.looks += 1;
        filler.begin_batch();
        let stall = self
            .faults
            .stall_every
            .is_some_and(|n| n > 0 && self.looks.is_multiple_of(n));
        // Packets that arrive in time are drained up to the stop's cut, as from a ring;
        // the others stop at once, as a file does.
        let file_like = self.arrivals.is_none();
        if stall || (file_like && filler.stopping()) || self.failed() {
            return false;
        }
        let mut batch: Vec<RecordedPacket> = {
            let mut r = self.ring();
            let n = r.waiting.len().min(self.batch);
            r.waiting.drain(..n).collect()
        };
        if batch.is_empty() {
            return false;
        }
        if let Some(n) = self.faults.reorder_every.filter(|&n| n > 0) {
            for k in (n - 1..batch.len().saturating_sub(1)).step_by(n) {
                batch.swap(k, k + 1);
            }
        }
        // Past an injected error nothing more is delivered; the rest counts as not taken.
        let left = self
            .faults
            .error_after
            .map_or(u64::MAX, |n| n - self.delivered);
        batch.truncate(usize::try_from(left).unwrap_or(usize::MAX));
        for p in batch {
            if !file_like && filler.past_cut(p.ts_ns) {
                continue;
            }
            filler.push_copy(pool, p.ts_ns, [&p.data, &[], &[]], p.orig_len);
            self.delivered += 1;
        }
        true
    }

    /// In time, ready when a packet waits (the clock makes the wait); otherwise a short
    /// sleep.
    fn poll(&self, timeout: Duration) -> Result<Readiness, SysError> {
        if self.failed() {
            return Err(SysError {
                call: "mem source",
                what: format!("after {} packets", self.delivered),
                source: std::io::Error::other("injected fault"),
            });
        }
        if self.arrivals.is_some() {
            return Ok(if self.ring().waiting.is_empty() {
                Readiness::Idle
            } else {
                Readiness::Readable
            });
        }
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
        Ok(Readiness::Idle)
    }

    /// Packets wait in the source, as in a kernel ring, while the pool has no room.
    fn next_batch_len(&self) -> Option<usize> {
        Some(self.ring().waiting.len().min(self.batch))
    }

    /// The packets that arrived since the last call: the dropped ones as kernel drops, the
    /// rest as received.
    fn kernel_drops(&mut self) -> Result<KernelDrops, SysError> {
        let mut r = self.ring();
        let d = KernelDrops {
            kernel: std::mem::take(&mut r.dropped),
            received: Some(std::mem::take(&mut r.received)),
            ..KernelDrops::default()
        };
        Ok(d)
    }

    fn exhausted(&self) -> bool {
        let mut r = self.ring();
        r.waiting.is_empty() && r.coming.peek().is_none()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use poolcap_format::{FileFormat, RecordedPacket};
    use poolcap_sys::rx_ring::RingGeometry;
    use poolcap_sys::socket::FanoutMode;
    use poolcap_sys::xsk::ZeroCopy;

    use super::{Faults, MemSource};
    use crate::capture::backend::{BackendConfig, BackendKind};
    use crate::capture::policy::PolicySpec;
    use crate::capture::pool::PoolSize;
    use crate::capture::queue::WaitStrategy;
    use crate::capture::source::Source;
    use crate::capture::testsink::Shared;
    use crate::capture::threads::failpoint;
    use crate::capture::{CaptureConfig, CaptureReport, Engine, Input, Output};

    /// `n` packets of queue `q`: 60 bytes carrying (q, i), 1 µs apart.
    fn packets(q: u8, n: u32) -> Vec<RecordedPacket> {
        (0..n)
            .map(|i| {
                let mut data = vec![0u8; 60];
                data[0] = q;
                data[1..5].copy_from_slice(&i.to_be_bytes());
                RecordedPacket {
                    ts_ns: 1_000_000_000 + u64::from(i) * 1000 + u64::from(q),
                    data,
                    orig_len: 60,
                }
            })
            .collect()
    }

    /// Runs the whole pipeline over `sources`; returns the report and the file's packets.
    fn run(
        sources: Vec<MemSource>,
        count: Option<u64>,
        load: u32,
    ) -> (CaptureReport, Vec<RecordedPacket>) {
        let out = Shared::default();
        let engine = Engine::start(
            config(sources, count, load, &out),
            Arc::new(AtomicBool::new(false)),
            |_| Ok(()),
        )
        .expect("start");
        let report = engine.run();
        let bytes = out.bytes();
        let file = poolcap_format::read_bytes(&bytes).expect("output reads back");
        (report, file.packets)
    }

    /// A capture of `sources` through `workers` workers (with `load`) into `out`.
    fn config(
        sources: Vec<MemSource>,
        count: Option<u64>,
        load: u32,
        out: &Shared,
    ) -> CaptureConfig {
        let q = sources.len();
        CaptureConfig {
            input: Input::Sources(
                sources
                    .into_iter()
                    .map(|s| Box::new(s) as Box<dyn Source>)
                    .collect(),
            ),
            iface: "mem".into(),
            queues: q,
            fanout: FanoutMode::Hash,
            pool: PoolSize {
                cells: 32,
                chunks: 8,
                cell_size: 128,
            },
            workers: 1,
            load,
            in_place: false,
            wait: WaitStrategy::Poll,
            snaplen: 262_144,
            ring: RingGeometry {
                block_size: 1 << 16,
                block_nr: 2,
                retire_timeout_ms: 4,
            },
            filter: None,
            output: Some((Output::Sink(Box::new(out.clone())), FileFormat::Pcapng)),
            compress: None,
            files: Default::default(),
            probe: None,
            count,
            duration: Some(Duration::from_secs(20)),
            cpus: None,
            seal_after: Duration::from_millis(2),
            policy: PolicySpec::Basic,
            backend: BackendConfig {
                kind: BackendKind::AfPacket,
                zero_copy: ZeroCopy::Auto,
                force: false,
            },
            buddy_groups: vec![(0..q).collect()],
            status_every: None,
            promiscuous: false,
            stats_request: None,
        }
    }

    #[test]
    fn a_failed_spawn_stops_and_joins_every_thread_already_started() {
        // Two capture threads, the writer, one worker: 4 spawns; each in turn fails.
        for n in 0..4 {
            let out = Shared::default();
            let sources = (0..2)
                .map(|q| MemSource::new(packets(q, 100_000), 64, Faults::default()))
                .collect();
            let stop = Arc::new(AtomicBool::new(false));
            failpoint::fail_at(Some(n));
            let err = Engine::start(config(sources, None, 10, &out), Arc::clone(&stop), |_| {
                Ok(())
            })
            .expect_err("the injected spawn failure ends the start");
            let spawned = failpoint::spawned();
            failpoint::fail_at(None);
            assert_eq!(spawned, n + 1, "no spawn after the failed one");
            assert!(err.to_string().contains("injected spawn failure"), "{err}");
            assert_eq!(
                failpoint::running(),
                0,
                "spawn {n} failed: threads still run"
            );
            assert!(stop.load(Ordering::Relaxed), "the stop flag was raised");
            // The writer's output (when it started) and every source went with their
            // threads: only this test holds the output now.
            assert_eq!(Arc::strong_count(&out.0), 1, "spawn {n}: output still held");
        }
        // The same configuration starts and runs when no spawn fails.
        failpoint::fail_at(None);
        let sources = (0..2)
            .map(|q| MemSource::new(packets(q, 100), 64, Faults::default()))
            .collect();
        let (r, file) = run(sources, None, 10);
        assert_eq!(failpoint::spawned(), 4, "{r:?}");
        assert_eq!((r.captured, file.len()), (200, 200), "{r:?}");
        assert_eq!(failpoint::running(), 0);
    }

    #[test]
    fn one_queue_that_only_writes_runs_the_writer_on_its_capture_thread() {
        let faults = Faults {
            drop_every: Some(7),
            stall_every: Some(4),
            ..Faults::default()
        };
        failpoint::fail_at(None);
        let (r, file) = run(vec![MemSource::new(packets(0, 1000), 50, faults)], None, 0);
        assert_eq!(failpoint::spawned(), 1, "the capture thread only: {r:?}");
        assert_eq!(r.captured, 1000 - 1000 / 7, "{r:?}");
        assert_eq!((r.written, r.not_written), (r.captured, 0), "{r:?}");
        let mut seen: Vec<u32> = file
            .iter()
            .map(|p| u32::from_be_bytes([p.data[1], p.data[2], p.data[3], p.data[4]]))
            .collect();
        seen.sort_unstable();
        let want: Vec<u32> = (0..1000).filter(|i| (i + 1) % 7 != 0).collect();
        assert_eq!(seen, want, "every packet not dropped is in the file once");
        // With a load the writer has its own thread, behind the worker.
        failpoint::fail_at(None);
        let (r, file) = run(vec![MemSource::new(packets(0, 100), 50, faults)], None, 10);
        assert_eq!(
            failpoint::spawned(),
            3,
            "capture thread, writer, worker: {r:?}"
        );
        assert_eq!(file.len() as u64, r.captured);
    }

    #[test]
    fn injected_drops_reorders_and_stalls_add_up_exactly() {
        let faults = Faults {
            drop_every: Some(7),
            reorder_every: Some(5),
            stall_every: Some(3),
            error_after: None,
        };
        let sources = (0..2)
            .map(|q| MemSource::new(packets(q, 1000), 50, faults))
            .collect();
        let (r, file) = run(sources, None, 100);
        let dropped = 2 * (1000 / 7);
        assert_eq!(r.dropped_kernel, dropped, "{r:?}");
        assert_eq!(r.captured, 2000 - dropped, "{r:?}");
        assert_eq!(
            (r.not_taken, r.dropped_pool, r.filtered),
            (0, 0, 0),
            "{r:?}"
        );
        assert_eq!(r.written, r.captured);
        assert_eq!(file.len() as u64, r.captured);
        let mut seen: Vec<(u8, u32)> = file
            .iter()
            .map(|p| {
                (
                    p.data[0],
                    u32::from_be_bytes([p.data[1], p.data[2], p.data[3], p.data[4]]),
                )
            })
            .collect();
        seen.sort_unstable();
        let want: Vec<(u8, u32)> = (0..2u8)
            .flat_map(|q| {
                (0..1000u32)
                    .filter(|i| (i + 1) % 7 != 0)
                    .map(move |i| (q, i))
            })
            .collect();
        assert_eq!(seen, want, "every packet not dropped is in the file once");
        assert!(r.capture_error.is_none());
    }

    #[test]
    fn a_source_error_ends_the_capture_with_the_packets_before_it() {
        let faults = Faults {
            error_after: Some(300),
            ..Faults::default()
        };
        let (r, file) = run(vec![MemSource::new(packets(0, 1000), 64, faults)], None, 0);
        assert!(
            r.capture_error
                .as_deref()
                .is_some_and(|e| e.contains("injected fault")),
            "{r:?}"
        );
        assert_eq!(
            (r.captured, r.written, r.not_taken),
            (300, 300, 700),
            "{r:?}"
        );
        assert_eq!(file.len(), 300);
    }

    /// A stalling source of `n` packets: every other look finds nothing (a wait of about
    /// a millisecond), so it outlasts the supervisor's tick by far.
    fn slow(q: u8, n: u32) -> MemSource {
        let faults = Faults {
            stall_every: Some(2),
            ..Faults::default()
        };
        MemSource::new(packets(q, n), 50, faults)
    }

    #[test]
    fn one_source_running_out_leaves_the_others_to_read_theirs_to_the_end() {
        let quick = MemSource::new(packets(0, 10), 50, Faults::default());
        let (r, file) = run(vec![quick, slow(1, 20_000)], None, 0);
        assert_eq!((r.captured, r.not_taken), (20_010, 0), "{r:?}");
        assert_eq!(file.len(), 20_010);
    }

    #[test]
    fn one_source_failing_ends_the_capture_of_every_queue() {
        let failing = MemSource::new(
            packets(0, 1000),
            64,
            Faults {
                error_after: Some(300),
                ..Faults::default()
            },
        );
        let (r, _) = run(vec![failing, slow(1, 200_000)], None, 0);
        assert!(r.capture_error.is_some(), "{r:?}");
        // The slow queue needs seconds for its packets; the failure ended it long before.
        assert!(r.not_taken > 700, "{r:?}");
    }

    #[test]
    fn a_count_limit_takes_exactly_n_from_several_queues_and_leaves_the_rest() {
        let sources = (0..2)
            .map(|q| MemSource::new(packets(q, 1000), 64, Faults::default()))
            .collect();
        let (r, file) = run(sources, Some(50), 0);
        assert_eq!((r.captured, r.written, r.not_written), (50, 50, 0), "{r:?}");
        assert_eq!(r.not_taken, 1950, "{r:?}");
        assert_eq!(file.len(), 50);
    }

    #[test]
    fn every_pipeline_accounts_exactly_and_only_a_sink_writes() {
        // (load, file): count in place, straight to the writer, workers sending chunks
        // home, workers passing chunks to the writer.
        for (load, file) in [(0, false), (0, true), (50, false), (50, true)] {
            let faults = Faults {
                drop_every: Some(7),
                stall_every: Some(4),
                ..Faults::default()
            };
            let sources = (0..2)
                .map(|q| MemSource::new(packets(q, 1000), 50, faults))
                .collect();
            let out = Shared::default();
            let mut cfg = config(sources, None, load, &out);
            if !file {
                cfg.output = None;
            }
            let r = Engine::start(cfg, Arc::new(AtomicBool::new(false)), |_| Ok(()))
                .expect("start")
                .run();
            let what = format!("load {load} file {file}: {r:?}");
            let dropped = 2 * (1000 / 7);
            assert_eq!(
                (r.captured, r.dropped_kernel),
                (2000 - dropped, dropped),
                "{what}"
            );
            assert_eq!((r.dropped_pool, r.not_taken), (0, 0), "{what}");
            let written = if file { r.captured } else { 0 };
            assert_eq!((r.written, r.not_written), (written, 0), "{what}");
            let bytes = out.bytes();
            assert_eq!(bytes.is_empty(), !file, "{what}");
            if file {
                let packets = poolcap_format::read_bytes(&bytes)
                    .expect("reads back")
                    .packets;
                assert_eq!(packets.len() as u64, r.captured, "{what}");
            }
            assert!(r.capture_error.is_none(), "{what}");
        }
    }
}
