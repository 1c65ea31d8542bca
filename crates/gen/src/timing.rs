//! When each frame is due: the generator's rate shaping, as pure arithmetic on frame indices.
//!
//! Frame k is due at [`Timing::due_ns`]`(k)` nanoseconds after the start; the send loop sends
//! a batch of frames that are all due and waits (sleeping, then spinning) for the next. Within
//! a batch frames leave back to back, so the largest burst a fixed rate produces is one batch.
//! Bursts (`--burst LEN --idle D`) and recorded timing (replay) are other shapes of the same
//! function. Nothing here reads a clock, so tests check it exactly.

/// The shape of a transmission in time.
#[derive(Debug, Clone, PartialEq)]
pub enum Timing {
    /// Every frame is due at once: top speed.
    TopSpeed,
    /// One frame every `period_ns`.
    Rate {
        /// Nanoseconds between frames.
        period_ns: f64,
    },
    /// `len` frames (spaced by `period_ns`, 0 for top speed), then `idle_ns` of silence after
    /// the burst's last frame went out, repeated.
    Burst {
        /// Frames per burst.
        len: u64,
        /// Silence after each burst.
        idle_ns: u64,
        /// Spacing inside a burst.
        period_ns: f64,
    },
    /// Recorded offsets from a capture, divided by `speed`, looped every `cycle_ns`.
    Recorded {
        /// Offset of each frame from the first, in ns.
        offsets_ns: Vec<u64>,
        /// Length of one pass, in ns (last offset plus one mean gap).
        cycle_ns: u64,
        /// Replay speed factor (2 = twice as fast).
        speed: f64,
    },
}

impl Timing {
    /// Nanoseconds after the start at which frame `k` is due.
    pub fn due_ns(&self, k: u64) -> u64 {
        match self {
            Timing::TopSpeed => 0,
            Timing::Rate { period_ns } => (k as f64 * period_ns) as u64,
            Timing::Burst {
                len,
                idle_ns,
                period_ns,
            } => {
                let (b, i) = (k / len, k % len);
                let burst_span = (*len as f64 - 1.0) * period_ns + *idle_ns as f64 + period_ns;
                (b as f64 * burst_span + i as f64 * period_ns) as u64
            }
            Timing::Recorded {
                offsets_ns,
                cycle_ns,
                speed,
            } => {
                let n = offsets_ns.len().max(1) as u64;
                let (pass, i) = (k / n, (k % n) as usize);
                let t =
                    pass as f64 * *cycle_ns as f64 + offsets_ns.get(i).copied().unwrap_or(0) as f64;
                (t / speed) as u64
            }
        }
    }

    /// The silence due before frame `k` when it opens a burst other than the first. The
    /// schedule cannot know how long a burst at top speed lasts (as long as the link takes),
    /// so the send loop starts this silence at the previous burst's actual end.
    pub fn silence_before(&self, k: u64) -> Option<u64> {
        match self {
            Timing::Burst { len, idle_ns, .. } if k > 0 && k.is_multiple_of(*len) => Some(*idle_ns),
            _ => None,
        }
    }

    /// Nanoseconds the `n` frames from `k` take by the schedule, not counting the silence
    /// after a burst they end (a batch never crosses one, see [`Timing::run_limit`]).
    /// Saturating: a schedule must not run backwards, but if one did, a wrapped span would
    /// put the next batch centuries away.
    pub fn span_ns(&self, k: u64, n: u64) -> u64 {
        self.due_ns(k + n)
            .saturating_sub(self.due_ns(k))
            .saturating_sub(self.silence_before(k + n).unwrap_or(0))
    }

    /// How many frames from `k` on may go in one batch without crossing a burst boundary.
    pub fn run_limit(&self, k: u64) -> u64 {
        match self {
            Timing::Burst { len, .. } => len - k % len,
            _ => u64::MAX,
        }
    }

    /// True when frames are paced (not all due at once).
    pub fn is_paced(&self) -> bool {
        match self {
            Timing::TopSpeed => false,
            Timing::Recorded { speed, .. } => speed.is_finite(),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rate_spaces_frames_evenly() {
        let t = Timing::Rate {
            period_ns: 1e9 / 100_000.0,
        };
        assert_eq!(t.due_ns(0), 0);
        assert_eq!(t.due_ns(1), 10_000);
        assert_eq!(t.due_ns(100_000), 1_000_000_000);
        assert_eq!(t.run_limit(7), u64::MAX);
    }

    #[test]
    fn bursts_alternate_with_idle_time() {
        let t = Timing::Burst {
            len: 4,
            idle_ns: 1_000_000,
            period_ns: 0.0,
        };
        assert_eq!((0..4).map(|k| t.due_ns(k)).collect::<Vec<_>>(), vec![0; 4]);
        assert_eq!(t.due_ns(4), 1_000_000);
        assert_eq!(t.due_ns(9), 2_000_000);
        assert_eq!(t.run_limit(0), 4);
        assert_eq!(t.run_limit(6), 2);
        let silences: Vec<_> = (0..9).map(|k| t.silence_before(k)).collect();
        assert_eq!(
            silences,
            [
                None,
                None,
                None,
                None,
                Some(1_000_000),
                None,
                None,
                None,
                Some(1_000_000)
            ]
        );
        assert_eq!(Timing::TopSpeed.silence_before(4), None);
        // The last batch of a burst spans no time at top speed: the silence after it is the
        // next burst's business, not a reason to hold the batch back.
        assert_eq!(t.span_ns(2, 2), 0);
        let paced = Timing::Burst {
            len: 4,
            idle_ns: 1_000_000,
            period_ns: 10.0,
        };
        assert_eq!(paced.span_ns(2, 2), 20);
        assert_eq!(paced.span_ns(4, 2), 20);
        let rate = Timing::Rate { period_ns: 10.0 };
        assert_eq!(rate.span_ns(3, 5), 50);
    }

    #[test]
    fn recorded_timing_scales_and_loops() {
        let t = Timing::Recorded {
            offsets_ns: vec![0, 100, 300],
            cycle_ns: 400,
            speed: 2.0,
        };
        assert_eq!(t.due_ns(1), 50);
        assert_eq!(t.due_ns(2), 150);
        assert_eq!(t.due_ns(3), 200); // second pass starts after one cycle / speed
        assert_eq!(t.due_ns(5), 350);
        let top = Timing::Recorded {
            offsets_ns: vec![0, 100],
            cycle_ns: 200,
            speed: f64::INFINITY,
        };
        assert_eq!(top.due_ns(3), 0);
        assert!(!top.is_paced());
    }
}
