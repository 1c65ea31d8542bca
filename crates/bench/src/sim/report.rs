//! What a simulation run counted, and how it is printed and saved.
//!
//! Why its own module: the same counters serve the one-off run (a per-queue table on the
//! terminal), the sweeps (one CSV row per run) and the tests (the conservation law every
//! packet obeys: arrived = processed + dropped by the kernel + dropped by the pool).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Counters of one receive queue (its packets, its pool, its worker).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueReport {
    /// Configured average arrival rate, packets/s.
    pub offered_pps: f64,
    /// Packets that arrived at the queue.
    pub arrived: u64,
    /// Packets the capture thread put into a chunk.
    pub captured: u64,
    /// Packets of this queue (home) whose chunk a worker finished, here or at a buddy.
    pub processed: u64,
    /// Packets lost because the kernel ring was full (capture paused).
    pub dropped_kernel: u64,
    /// Packets lost because the home pool had no free chunk.
    pub dropped_pool: u64,
    /// Chunks sealed by this queue's capture thread.
    pub sealed_chunks: u64,
    /// Of those, chunks routed to a buddy.
    pub offloaded_out_chunks: u64,
    /// Packets in chunks routed to a buddy.
    pub offloaded_out_packets: u64,
    /// Packets of other queues that this queue's worker was given.
    pub offloaded_in_packets: u64,
    /// Packets this queue's worker processed (its own and offloaded ones).
    pub worked_packets: u64,
    /// Virtual time this queue's worker was busy, ns.
    pub busy_ns: f64,
    /// Virtual time the capture was paused by the policy, ns.
    pub paused_ns: f64,
    /// Times the capture paused.
    pub pause_onsets: u64,
    /// Fewest free chunks in the home pool at a pause onset (None: never paused).
    pub min_free_at_pause: Option<usize>,
    /// Most chunks of the pool in use at once (open, waiting or being processed).
    pub peak_in_use: usize,
    /// Longest capture queue (chunks waiting, any home).
    pub peak_backlog: usize,
    /// Free chunks in the pool after the run drained (R when every chunk came home).
    pub final_free: usize,
}

impl QueueReport {
    /// All losses.
    pub fn dropped(&self) -> u64 {
        self.dropped_kernel + self.dropped_pool
    }

    /// Lost share of the arrivals (0 when nothing arrived).
    pub fn drop_rate(&self) -> f64 {
        ratio(self.dropped(), self.arrived)
    }

    /// Share of the arrivals the kernel dropped.
    pub fn kernel_drop_rate(&self) -> f64 {
        ratio(self.dropped_kernel, self.arrived)
    }

    /// Share of the arrivals the pool dropped.
    pub fn pool_drop_rate(&self) -> f64 {
        ratio(self.dropped_pool, self.arrived)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The result of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Per receive queue.
    pub queues: Vec<QueueReport>,
    /// Chunks per pool (R), for the accounting check.
    pub chunks: usize,
    /// Virtual time when the last buffered packet was done, ns.
    pub end_ns: f64,
    /// Events the engine handled.
    pub events: u64,
}

impl Report {
    /// Sums over queues (peaks are maxima; `min_free_at_pause` is the minimum).
    pub fn total(&self) -> QueueReport {
        let mut t = QueueReport::default();
        for q in &self.queues {
            t.offered_pps += q.offered_pps;
            t.arrived += q.arrived;
            t.captured += q.captured;
            t.processed += q.processed;
            t.dropped_kernel += q.dropped_kernel;
            t.dropped_pool += q.dropped_pool;
            t.sealed_chunks += q.sealed_chunks;
            t.offloaded_out_chunks += q.offloaded_out_chunks;
            t.offloaded_out_packets += q.offloaded_out_packets;
            t.offloaded_in_packets += q.offloaded_in_packets;
            t.worked_packets += q.worked_packets;
            t.busy_ns += q.busy_ns;
            t.paused_ns += q.paused_ns;
            t.pause_onsets += q.pause_onsets;
            t.min_free_at_pause = match (t.min_free_at_pause, q.min_free_at_pause) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            t.peak_in_use = t.peak_in_use.max(q.peak_in_use);
            t.peak_backlog = t.peak_backlog.max(q.peak_backlog);
            t.final_free += q.final_free;
        }
        t
    }

    /// The queue with the highest offered rate (the hot one), if any.
    pub fn hottest(&self) -> Option<usize> {
        (0..self.queues.len()).max_by(|&a, &b| {
            self.queues[a]
                .offered_pps
                .total_cmp(&self.queues[b].offered_pps)
                .then(b.cmp(&a))
        })
    }

    /// Checks the accounting: every packet in exactly one final counter, everything captured
    /// processed, every chunk back in its home pool, offloads given = offloads taken.
    pub fn check(&self) -> Result<(), String> {
        for (i, q) in self.queues.iter().enumerate() {
            if q.arrived != q.processed + q.dropped_kernel + q.dropped_pool {
                return Err(format!(
                    "queue {i}: arrived {} != processed {} + kernel {} + pool {}",
                    q.arrived, q.processed, q.dropped_kernel, q.dropped_pool
                ));
            }
            if q.captured != q.processed {
                return Err(format!(
                    "queue {i}: captured {} but processed {}",
                    q.captured, q.processed
                ));
            }
            if q.final_free != self.chunks {
                return Err(format!(
                    "queue {i}: {} of {} chunks came home",
                    q.final_free, self.chunks
                ));
            }
        }
        let t = self.total();
        if t.offloaded_out_packets != t.offloaded_in_packets || t.worked_packets != t.processed {
            return Err(format!(
                "offloaded out {} in {}, worked {} processed {}",
                t.offloaded_out_packets, t.offloaded_in_packets, t.worked_packets, t.processed
            ));
        }
        Ok(())
    }

    /// A per-queue table and a total line, for the terminal.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>5} {:>10} {:>11} {:>11} {:>10} {:>10} {:>8} {:>10} {:>10} {:>6} {:>8}",
            "queue",
            "offered/s",
            "arrived",
            "processed",
            "drop:kern",
            "drop:pool",
            "drop %",
            "offl.out",
            "offl.in",
            "busy%",
            "paused%"
        );
        let secs = (self.end_ns * 1e-9).max(1e-12);
        let line = |s: &mut String, name: &str, q: &QueueReport, workers: f64| {
            let _ = writeln!(
                s,
                "{:>5} {:>10.0} {:>11} {:>11} {:>10} {:>10} {:>8.3} {:>10} {:>10} {:>6.1} {:>8.1}",
                name,
                q.offered_pps,
                q.arrived,
                q.processed,
                q.dropped_kernel,
                q.dropped_pool,
                100.0 * q.drop_rate(),
                q.offloaded_out_packets,
                q.offloaded_in_packets,
                100.0 * q.busy_ns * 1e-9 / secs / workers,
                100.0 * q.paused_ns * 1e-9 / secs / workers,
            );
        };
        for (i, q) in self.queues.iter().enumerate() {
            line(&mut s, &i.to_string(), q, 1.0);
        }
        line(
            &mut s,
            "all",
            &self.total(),
            self.queues.len().max(1) as f64,
        );
        s
    }
}

/// One run of a sweep, as a CSV row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Which sweep (`queues`, `threshold`).
    pub sweep: String,
    /// Policy as written on the command line.
    pub policy: String,
    /// Receive queues.
    pub queues: usize,
    /// Buddy threshold T in percent, for buddy policies.
    pub threshold: Option<f64>,
    /// The run's seed.
    pub seed: u64,
    /// The run's counters.
    pub report: Report,
    /// Wall-clock time of the run, seconds.
    pub wall_s: f64,
}

/// CSV header matching [`Row::csv`].
pub const CSV_HEADER: &str = "sweep,policy,queues,threshold,seed,offered_pps,arrived,processed,\
dropped_kernel,dropped_pool,drop_rate,kernel_drop_rate,pool_drop_rate,hot_queue,\
hot_offered_share,hot_drop_rate,offloaded_packets,paused_share,events,wall_s";

impl Row {
    /// The row's CSV fields.
    pub fn csv(&self) -> String {
        let t = self.report.total();
        let hot = self.report.hottest().unwrap_or(0);
        let h = self.report.queues.get(hot).cloned().unwrap_or_default();
        let secs = (self.report.end_ns * 1e-9).max(1e-12);
        format!(
            "{},{},{},{},{},{:.0},{},{},{},{},{:.6},{:.6},{:.6},{},{:.4},{:.6},{},{:.4},{},{:.3}",
            self.sweep,
            self.policy,
            self.queues,
            self.threshold.map(|t| t.to_string()).unwrap_or_default(),
            self.seed,
            t.offered_pps,
            t.arrived,
            t.processed,
            t.dropped_kernel,
            t.dropped_pool,
            t.drop_rate(),
            t.kernel_drop_rate(),
            t.pool_drop_rate(),
            hot,
            if t.offered_pps > 0.0 {
                h.offered_pps / t.offered_pps
            } else {
                0.0
            },
            h.drop_rate(),
            t.offloaded_out_packets,
            t.paused_ns * 1e-9 / secs / self.queues.max(1) as f64,
            self.report.events,
            self.wall_s,
        )
    }
}

/// Writes `rows` with a header to `path`.
pub fn write_csv(path: &Path, rows: &[Row]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "{CSV_HEADER}")?;
    for r in rows {
        writeln!(f, "{}", r.csv())?;
    }
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_have_as_many_fields_as_the_header() {
        let row = Row {
            sweep: "queues".into(),
            policy: "buddy:60".into(),
            queues: 2,
            threshold: Some(60.0),
            seed: 1,
            report: Report {
                queues: vec![
                    QueueReport {
                        offered_pps: 10.0,
                        arrived: 10,
                        processed: 9,
                        captured: 9,
                        dropped_pool: 1,
                        worked_packets: 9,
                        final_free: 4,
                        ..QueueReport::default()
                    },
                    QueueReport {
                        offered_pps: 30.0,
                        final_free: 4,
                        ..QueueReport::default()
                    },
                ],
                chunks: 4,
                end_ns: 1e9,
                events: 5,
            },
            wall_s: 0.5,
        };
        let n = CSV_HEADER.split(',').count();
        assert_eq!(row.csv().split(',').count(), n, "{}", row.csv());
        assert_eq!(row.report.hottest(), Some(1));
        assert_eq!(row.report.check(), Ok(()));
        assert!((row.report.total().drop_rate() - 0.1).abs() < 1e-12);
    }
}
