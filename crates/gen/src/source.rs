//! What the generator sends by default: numbered synthetic frames over a flow and size mix,
//! written into a caller's buffer with no allocation per frame (a capture file's frames are
//! [`super::replay`]'s).

use std::net::Ipv4Addr;

use crate::flows::{flow_weights, Schedule, Skew, IMIX};
use crate::frame::{FlowAddr, FrameTemplate};

/// Frame sizes to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeSpec {
    /// Every frame this many bytes (60..=9000, without FCS).
    Fixed(usize),
    /// The simple IMIX (7:4:1 of 60, 590 and 1514 bytes).
    Imix,
}

/// Addresses of the synthetic flows; flow i uses source port `base_port + i` (and the next
/// source address after every 60,000 flows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Source MAC (the sending interface's).
    pub src_mac: [u8; 6],
    /// Destination MAC. The default is an address nobody has, so the receiving stack drops
    /// the frames cheaply after the capture sockets have seen them.
    pub dst_mac: [u8; 6],
    /// First source address.
    pub src_ip: Ipv4Addr,
    /// Destination address.
    pub dst_ip: Ipv4Addr,
    /// First source port.
    pub base_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

/// Numbered UDP frames over `flows` flows and a size mix.
#[derive(Debug)]
pub struct Synthetic {
    /// templates[flow][size class]
    templates: Vec<Vec<FrameTemplate>>,
    flow_schedule: Schedule,
    size_schedule: Schedule,
}

impl Synthetic {
    /// Builds templates for every flow and size class.
    pub fn new(
        ends: &Endpoints,
        flows: usize,
        skew: Skew,
        size: SizeSpec,
        gen_id: u32,
        seed: u64,
    ) -> Self {
        let sizes: Vec<(usize, f64)> = match size {
            SizeSpec::Fixed(n) => vec![(n, 1.0)],
            SizeSpec::Imix => IMIX.to_vec(),
        };
        let flows = flows.max(1);
        let templates = (0..flows)
            .map(|i| {
                let base = u32::from(ends.src_ip);
                let addr = FlowAddr {
                    src_mac: ends.src_mac,
                    dst_mac: ends.dst_mac,
                    src_ip: Ipv4Addr::from(base.wrapping_add((i / 60_000) as u32)),
                    dst_ip: ends.dst_ip,
                    src_port: ends.base_port.wrapping_add((i % 60_000) as u16),
                    dst_port: ends.dst_port,
                };
                sizes
                    .iter()
                    .map(|&(len, _)| FrameTemplate::new(&addr, len, gen_id))
                    .collect()
            })
            .collect();
        let size_weights: Vec<f64> = sizes.iter().map(|s| s.1).collect();
        Self {
            templates,
            flow_schedule: Schedule::new(&flow_weights(flows, skew), seed),
            size_schedule: Schedule::new(&size_weights, seed ^ 0x5eed),
        }
    }

    /// The largest frame this source produces.
    pub fn max_len(&self) -> usize {
        self.templates[0]
            .iter()
            .map(FrameTemplate::len)
            .max()
            .unwrap_or(0)
    }

    /// The mean frame length of the size mix.
    pub fn mean_len(size: SizeSpec) -> f64 {
        match size {
            SizeSpec::Fixed(n) => n.clamp(crate::frame::MIN_FRAME, crate::frame::MAX_FRAME) as f64,
            SizeSpec::Imix => {
                let t: f64 = IMIX.iter().map(|s| s.1).sum();
                IMIX.iter().map(|(s, w)| *s as f64 * w).sum::<f64>() / t
            }
        }
    }

    /// Writes frame `k` (sequence number `k`, send time `sent_ns` where the frame has room)
    /// into `out`; returns its length.
    #[inline]
    pub fn frame(&mut self, k: u64, out: &mut [u8], sent_ns: u64) -> usize {
        let f = self.flow_schedule.next_index();
        let s = self.size_schedule.next_index();
        let t = &self.templates[f][s];
        t.stamp_sent_into(out, k, sent_ns);
        t.len()
    }
}
