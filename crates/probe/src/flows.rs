//! The flow table of one rule on one worker: per 5-tuple packets, wire and IP bytes, first
//! and last seen, the TCP flags seen, and the first packet's VLAN id and ICMP type and code
//! (not part of the key, which the in-kernel program shares), in a hash map that grows with the flows seen (a rule that
//! sees few flows holds little: tables sized for the cap up front held 3.4 GB for 5,000
//! idle rules; a known flow's packet allocates nothing, growth is amortised) and is
//! capped: when a new flow finds the table full, one resident flow is evicted and its
//! counts move to the `evicted` aggregate, so the flows plus the evicted always add up to
//! every packet the rule counted.

use hashbrown::HashMap;
use serde::Serialize;

use crate::packet::{FlowKey, Parsed};

/// One flow's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowStats {
    /// Packets.
    pub packets: u64,
    /// Wire bytes.
    pub bytes: u64,
    /// IP bytes: the wire bytes without the link-layer header and VLAN tags (IPFIX's
    /// octetDeltaCount).
    pub ip_bytes: u64,
    /// First packet, ns since the epoch.
    pub first_ns: u64,
    /// Last packet, ns since the epoch.
    pub last_ns: u64,
    /// OR of the TCP flags seen.
    pub tcp_flags: u8,
    /// The first packet's outer VLAN id.
    pub vlan: Option<u16>,
    /// The first packet's ICMP type * 256 + code.
    pub icmp: Option<u16>,
}

impl FlowStats {
    /// One packet of `wire_len` bytes seen at `ts_ns`.
    #[inline]
    pub fn packet(wire_len: u32, ts_ns: u64, p: &Parsed) -> Self {
        Self {
            packets: 1,
            bytes: u64::from(wire_len),
            ip_bytes: u64::from(wire_len.saturating_sub(u32::from(p.l2_len))),
            first_ns: ts_ns,
            last_ns: ts_ns,
            tcp_flags: p.flags,
            vlan: p.vlan,
            icmp: p.icmp,
        }
    }

    /// Adds another part of the same flow.
    #[inline]
    pub fn absorb(&mut self, o: &FlowStats) {
        if o.first_ns < self.first_ns {
            self.vlan = o.vlan;
            self.icmp = o.icmp;
        }
        self.packets += o.packets;
        self.ip_bytes += o.ip_bytes;
        self.bytes += o.bytes;
        self.first_ns = self.first_ns.min(o.first_ns);
        self.last_ns = self.last_ns.max(o.last_ns);
        self.tcp_flags |= o.tcp_flags;
    }
}

/// What the cap pushed out of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Evicted {
    /// Flows evicted.
    pub flows: u64,
    /// Their packets.
    pub packets: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Evicted {
    /// Adds `o`.
    pub fn add(&mut self, o: &Evicted) {
        self.flows += o.flows;
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

type Map = HashMap<FlowKey, FlowStats, foldhash::fast::RandomState>;

/// A capped flow table.
#[derive(Debug, Clone)]
pub struct FlowTable {
    map: Map,
    limit: usize,
    evicted: Evicted,
}

impl FlowTable {
    /// An empty table for at most `limit` flows (it allocates as flows arrive).
    pub fn new(limit: usize) -> Self {
        Self {
            map: Map::with_hasher(Default::default()),
            limit: limit.max(1),
            evicted: Evicted::default(),
        }
    }

    /// Counts one packet of `key` ([`FlowStats::packet`]).
    #[inline]
    pub fn observe(&mut self, key: FlowKey, packet: FlowStats) {
        if let Some(s) = self.map.get_mut(&key) {
            s.absorb(&packet);
            return;
        }
        if self.map.len() >= self.limit {
            self.evict_one();
        }
        self.map.insert(key, packet);
    }

    fn evict_one(&mut self) {
        // Any resident flow: the first the map yields, found in a few control-byte groups
        // of a full table.
        if let Some(k) = self.map.keys().next().copied() {
            if let Some(s) = self.map.remove(&k) {
                self.evicted.add(&Evicted {
                    flows: 1,
                    packets: s.packets,
                    bytes: s.bytes,
                });
            }
        }
    }

    /// Adds a whole flow counted elsewhere (the in-kernel table, which kept its own cap).
    pub fn add_flow(&mut self, key: FlowKey, stats: FlowStats) {
        self.map
            .entry(key)
            .and_modify(|m| m.absorb(&stats))
            .or_insert(stats);
    }

    /// Adds evictions counted elsewhere.
    pub fn add_evicted(&mut self, e: &Evicted) {
        self.evicted.add(e);
    }

    /// Adds another table's flows and evictions (at merge time, not per packet: the merged
    /// table may hold up to the sum of both limits).
    pub fn absorb(&mut self, other: FlowTable) {
        self.limit += other.limit;
        self.map.reserve(other.map.len());
        for (k, s) in other.map {
            self.map.entry(k).and_modify(|m| m.absorb(&s)).or_insert(s);
        }
        self.evicted.add(&other.evicted);
    }

    /// Flows resident.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// No flow resident.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// What the cap evicted.
    pub fn evicted(&self) -> Evicted {
        self.evicted
    }

    /// Resident flows, largest first by `by` (ties by key, so reports are stable).
    pub fn ranked(&self, by: crate::config::TopBy) -> Vec<(FlowKey, FlowStats)> {
        let mut v: Vec<(FlowKey, FlowStats)> = self.map.iter().map(|(k, s)| (*k, *s)).collect();
        let size = |s: &FlowStats| match by {
            crate::config::TopBy::Bytes => (s.bytes, s.packets),
            crate::config::TopBy::Packets => (s.packets, s.bytes),
        };
        v.sort_by(|a, b| size(&b.1).cmp(&size(&a.1)).then(a.0.cmp(&b.0)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TopBy;
    use std::net::{IpAddr, Ipv4Addr};

    fn key(n: u16) -> FlowKey {
        FlowKey {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            proto: 17,
            sport: n,
            dport: 9,
        }
    }

    /// One packet of `bytes` (14 of them the Ethernet header).
    fn packet(bytes: u32, ts_ns: u64, flags: u8) -> FlowStats {
        FlowStats::packet(
            bytes,
            ts_ns,
            &Parsed {
                key: key(0),
                flags,
                l2_len: 14,
                vlan: Some(ts_ns as u16),
                icmp: None,
            },
        )
    }

    #[test]
    fn counts_times_and_flags_per_flow() {
        let mut t = FlowTable::new(8);
        t.observe(key(1), packet(100, 50, 0x02));
        t.observe(key(1), packet(60, 20, 0x10));
        t.observe(key(2), packet(1000, 30, 0));
        let r = t.ranked(TopBy::Bytes);
        assert_eq!(r[0].0, key(2));
        assert_eq!(
            r[1].1,
            FlowStats {
                packets: 2,
                bytes: 160,
                ip_bytes: 132,
                first_ns: 20,
                last_ns: 50,
                tcp_flags: 0x12,
                vlan: Some(20),
                icmp: None,
            },
            "the VLAN id of the first packet, whichever came in first"
        );
        assert_eq!(t.ranked(TopBy::Packets)[0].0, key(1));
    }

    #[test]
    fn the_cap_evicts_and_keeps_totals() {
        let mut t = FlowTable::new(4);
        for i in 0..100u16 {
            t.observe(key(i % 10), packet(10, u64::from(i), 0));
        }
        assert_eq!(t.len(), 4);
        let resident: u64 = t.ranked(TopBy::Bytes).iter().map(|f| f.1.packets).sum();
        assert!(t.evicted().flows > 0);
        assert_eq!(resident + t.evicted().packets, 100);
        assert_eq!(
            t.ranked(TopBy::Bytes)
                .iter()
                .map(|f| f.1.bytes)
                .sum::<u64>()
                + t.evicted().bytes,
            1000
        );
    }

    #[test]
    fn absorbing_merges_same_keys() {
        let mut a = FlowTable::new(4);
        let mut b = FlowTable::new(4);
        a.observe(key(1), packet(10, 5, 0));
        b.observe(key(1), packet(20, 1, 0));
        b.observe(key(2), packet(30, 9, 0));
        a.absorb(b);
        assert_eq!(a.len(), 2);
        let one = a
            .ranked(TopBy::Bytes)
            .into_iter()
            .find(|f| f.0 == key(1))
            .unwrap()
            .1;
        assert_eq!(
            (one.packets, one.bytes, one.first_ns, one.last_ns),
            (2, 30, 1, 5)
        );
    }
}
