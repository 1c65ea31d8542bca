//! Checks a stream of captured frames against what generators sent: counts tagged frames per
//! generator and finds missing sequence numbers, duplicates and reordering.
//!
//! Memory is one bit per sequence number up to the highest seen, so checking ten million
//! frames takes about 1.2 MB. Frames that carry their send time also give their one-way
//! latency (module `latency`).

mod latency;

use std::collections::BTreeMap;

use serde::Serialize;

use self::latency::Latencies;
pub use self::latency::LatencyReport;
use crate::frame::{latency_ns, parse_tag};

#[derive(Debug, Default, Clone)]
struct GenState {
    seen: Vec<u64>,
    unique: u64,
    duplicates: u64,
    reordered: u64,
    max_seq: Option<u64>,
    /// Highest sequence number seen per flow.
    flow_max: BTreeMap<u16, u64>,
    reordered_in_flow: u64,
    latency: Latencies,
}

/// What one generator's frames looked like on arrival.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GenReport {
    /// The generator's id.
    pub gen_id: u32,
    /// Tagged frames seen, duplicates included.
    pub frames: u64,
    /// Distinct sequence numbers seen.
    pub unique: u64,
    /// Frames whose sequence number had been seen before.
    pub duplicates: u64,
    /// Frames that arrived after a frame with a higher sequence number.
    pub reordered: u64,
    /// Frames that arrived after a frame of the same flow with a higher sequence number:
    /// what a forwarder must never do (frames of different flows may legitimately pass
    /// each other on different queues).
    pub reordered_in_flow: u64,
    /// Sequence numbers below the expected count (or below the highest seen) never seen.
    pub missing: u64,
    /// Distinct sequence numbers at or past the expected count: frames the generator was not
    /// expected to send (0 without an expected count).
    pub extra: u64,
    /// Highest sequence number seen.
    pub max_seq: Option<u64>,
    /// Capture time minus send time of the frames that carry a send time; absent when none
    /// does (older generators, frames under 64 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyReport>,
}

/// Accumulates frames; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct SeqChecker {
    gens: BTreeMap<u32, GenState>,
    untagged: u64,
}

impl SeqChecker {
    /// A checker that has seen nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Looks at one captured frame whose capture time is unknown (no latency).
    pub fn observe(&mut self, frame: &[u8]) {
        self.observe_at(frame, 0);
    }

    /// Looks at one captured frame, captured at `ts_ns` (nanoseconds since the epoch; 0 for
    /// unknown).
    pub fn observe_at(&mut self, frame: &[u8], ts_ns: u64) {
        let Some(tag) = parse_tag(frame) else {
            self.untagged += 1;
            return;
        };
        let g = self.gens.entry(tag.gen_id).or_default();
        let word = (tag.seq / 64) as usize;
        if word >= g.seen.len() {
            g.seen.resize(word + 1, 0);
        }
        let bit = 1u64 << (tag.seq % 64);
        if g.seen[word] & bit != 0 {
            g.duplicates += 1;
        } else {
            g.seen[word] |= bit;
            g.unique += 1;
        }
        match g.max_seq {
            Some(m) if tag.seq < m => g.reordered += 1,
            _ => g.max_seq = Some(tag.seq),
        }
        let flow_max = g.flow_max.entry(tag.flow).or_insert(tag.seq);
        if tag.seq < *flow_max {
            g.reordered_in_flow += 1;
        } else {
            *flow_max = tag.seq;
        }
        if let Some(sent) = tag.sent_ns.filter(|_| ts_ns != 0) {
            g.latency.push(latency_ns(sent, ts_ns));
        }
    }

    /// Frames that carried no generator tag.
    pub fn untagged(&self) -> u64 {
        self.untagged
    }

    /// One report per generator seen. `expected` is the number of frames each generator
    /// sent (sequence numbers 0..expected); without it the highest sequence number seen
    /// bounds what counts as missing.
    pub fn reports(&self, expected: Option<u64>) -> Vec<GenReport> {
        self.gens
            .iter()
            .map(|(&gen_id, g)| {
                let span = expected.unwrap_or_else(|| g.max_seq.map_or(0, |m| m + 1));
                let below = |n: u64| -> u64 {
                    let full = (n / 64) as usize;
                    let mut c: u64 = g
                        .seen
                        .iter()
                        .take(full)
                        .map(|w| u64::from(w.count_ones()))
                        .sum();
                    if !n.is_multiple_of(64) {
                        if let Some(w) = g.seen.get(full) {
                            c += u64::from((w & ((1u64 << (n % 64)) - 1)).count_ones());
                        }
                    }
                    c
                };
                let kept = below(span);
                GenReport {
                    gen_id,
                    frames: g.unique + g.duplicates,
                    unique: g.unique,
                    duplicates: g.duplicates,
                    reordered: g.reordered,
                    reordered_in_flow: g.reordered_in_flow,
                    missing: span - kept,
                    extra: g.unique - kept,
                    max_seq: g.max_seq,
                    latency: g.latency.report(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{FlowAddr, FrameTemplate};
    use std::net::Ipv4Addr;

    fn frames(gen_id: u32, seqs: &[u64]) -> Vec<Vec<u8>> {
        flow_frames(gen_id, 1, seqs)
    }

    fn flow_frames(gen_id: u32, src_port: u16, seqs: &[u64]) -> Vec<Vec<u8>> {
        let a = FlowAddr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            src_port,
            dst_port: 2,
        };
        let t = FrameTemplate::new(&a, 64, gen_id);
        seqs.iter()
            .map(|&s| {
                let mut f = vec![0; 64];
                t.stamp_into(&mut f, s);
                f
            })
            .collect()
    }

    #[test]
    fn complete_in_order_stream_is_clean() {
        let mut c = SeqChecker::new();
        for f in frames(3, &(0..1000).collect::<Vec<_>>()) {
            c.observe(&f);
        }
        let r = &c.reports(Some(1000))[0];
        assert_eq!(
            (r.gen_id, r.frames, r.unique, r.missing),
            (3, 1000, 1000, 0)
        );
        assert_eq!((r.duplicates, r.reordered), (0, 0));
    }

    #[test]
    fn finds_loss_duplicates_and_reordering() {
        let mut c = SeqChecker::new();
        for f in frames(1, &[0, 1, 3, 2, 2, 5, 7]) {
            c.observe(&f);
        }
        c.observe(&[0u8; 60]);
        let r = &c.reports(Some(10))[0];
        assert_eq!(r.frames, 7);
        assert_eq!(r.unique, 6);
        assert_eq!(r.duplicates, 1);
        assert_eq!(r.reordered, 2); // 2 after 3, and the duplicate 2
        assert_eq!(r.missing, 4); // 4, 6, 8, 9
        assert_eq!(c.untagged(), 1);
        assert_eq!(r.extra, 0);
        assert_eq!(c.reports(None)[0].missing, 2); // only 4 and 6 below max 7
        assert_eq!(c.reports(None)[0].extra, 0);
        let short = &c.reports(Some(3))[0];
        assert_eq!((short.missing, short.extra), (0, 3)); // 3, 5 and 7 were not expected
    }

    #[test]
    fn reordering_within_a_flow_is_counted_apart_from_across_flows() {
        let mut c = SeqChecker::new();
        // Flow 10 has even numbers, flow 11 odd ones; flow 11 lags behind flow 10 (across
        // flows), and its 5 passes its 3 (within a flow).
        let order = [(10, 0), (10, 2), (11, 1), (10, 4), (11, 5), (11, 3)];
        for (port, seq) in order {
            c.observe(&flow_frames(1, port, &[seq])[0]);
        }
        let r = &c.reports(Some(6))[0];
        assert_eq!(r.reordered, 2); // 1 after 2, 3 after 5
        assert_eq!(r.reordered_in_flow, 1); // only 3 after 5 of flow 11
    }

    #[test]
    fn generators_are_counted_apart() {
        let mut c = SeqChecker::new();
        for f in frames(1, &[0, 1]).into_iter().chain(frames(2, &[0])) {
            c.observe(&f);
        }
        let r = c.reports(None);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].gen_id, r[0].unique), (1, 2));
        assert_eq!((r[1].gen_id, r[1].unique), (2, 1));
    }

    #[test]
    fn stamped_frames_give_latency_and_unstamped_ones_none() {
        let a = FlowAddr {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 0, 0, 1),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            src_port: 1,
            dst_port: 2,
        };
        let sent = 1_790_000_000_000_000_000u64;
        let mut c = SeqChecker::new();
        let t = FrameTemplate::new(&a, 64, 1);
        let mut f = vec![0; 64];
        for seq in 0..100u64 {
            t.stamp_sent_into(&mut f, seq, sent + seq * 1_000);
            c.observe_at(&f, sent + seq * 1_000 + 20_000 + seq);
        }
        // Generator 2 sends 60-byte frames, which have no room for a send time.
        let t2 = FrameTemplate::new(&a, 60, 2);
        let mut f2 = vec![0; 60];
        t2.stamp_sent_into(&mut f2, 0, sent);
        c.observe_at(&f2, sent + 5);
        let r = c.reports(None);
        let l = r[0].latency.expect("generator 1 has latency");
        assert_eq!(
            (l.frames, l.min_ns, l.p50_ns, l.max_ns),
            (100, 20_000, 20_049, 20_099)
        );
        assert_eq!(r[1].latency, None);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json[0]["latency"]["p99_ns"], 20_098);
        assert!(json[1].get("latency").is_none());
    }
}
