//! What one worker counted for one period: per rule packets and bytes, and per action its
//! table (flows, frame sizes, alert keys). A tally is plain data: the worker fills it
//! without locks, hands it over whole at the period switch, and the reporter merges the
//! workers' tallies with [`Tally::absorb`]. Merging is addition, so it is order-free.

use std::net::IpAddr;

use hashbrown::HashMap;

use crate::config::{AlertKey, Config};
use crate::flows::{FlowStats, FlowTable};
use crate::packet::Parsed;

/// Upper bounds (inclusive) of the frame-size buckets, in wire bytes; the last is open.
pub const SIZE_BOUNDS: [u32; 6] = [64, 127, 255, 511, 1023, 1518];

/// Bucket labels, as in reports.
pub const SIZE_LABELS: [&str; 7] = [
    "<=64",
    "65-127",
    "128-255",
    "256-511",
    "512-1023",
    "1024-1518",
    ">1518",
];

/// A frame-size histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sizes(pub [u64; 7]);

impl Sizes {
    #[inline]
    fn observe(&mut self, wire_len: u32) {
        let i = SIZE_BOUNDS
            .iter()
            .position(|&b| wire_len <= b)
            .unwrap_or(SIZE_BOUNDS.len());
        self.0[i] += 1;
    }

    fn absorb(&mut self, o: &Sizes) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

/// Matching packets per alert key, capped like the flow table: packets of keys that find
/// the map full are counted in `untracked`.
#[derive(Debug, Clone)]
pub struct KeyCounts {
    map: HashMap<IpAddr, u64, foldhash::fast::RandomState>,
    limit: usize,
    /// Packets whose key could not be kept.
    pub untracked: u64,
}

impl KeyCounts {
    fn new(limit: usize) -> Self {
        Self {
            map: HashMap::with_hasher(Default::default()),
            limit: limit.max(1),
            untracked: 0,
        }
    }

    #[inline]
    fn observe(&mut self, key: IpAddr) {
        if let Some(n) = self.map.get_mut(&key) {
            *n += 1;
        } else if self.map.len() < self.limit {
            self.map.insert(key, 1);
        } else {
            self.untracked += 1;
        }
    }

    fn absorb(&mut self, o: KeyCounts) {
        self.limit += o.limit;
        for (k, n) in o.map {
            *self.map.entry(k).or_insert(0) += n;
        }
        self.untracked += o.untracked;
    }

    /// Keys with more than `min` packets, largest first.
    pub fn above(&self, min: u64) -> Vec<(IpAddr, u64)> {
        let mut v: Vec<(IpAddr, u64)> = self
            .map
            .iter()
            .filter(|(_, &n)| n > min)
            .map(|(k, n)| (*k, *n))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// One rule's counts in one period.
#[derive(Debug, Clone)]
pub struct RuleTally {
    /// Matching packets.
    pub packets: u64,
    /// Their wire bytes.
    pub bytes: u64,
    /// Matching packets with no IP header (counted, not in any flow or alert key); only
    /// with the flows or alert action.
    pub no_ip: u64,
    /// Flow table, with the flows action.
    pub flows: Option<FlowTable>,
    /// Size histogram, with the sizes action.
    pub sizes: Option<Sizes>,
    /// Alert key counts, with the alert action.
    pub alert: Option<(AlertKey, KeyCounts)>,
}

impl RuleTally {
    /// Counts one matching packet; `parsed` is its flow key and TCP flags, if it has one.
    #[inline]
    pub fn observe(&mut self, wire_len: u32, ts_ns: u64, parsed: Option<&Parsed>) {
        self.packets += 1;
        self.bytes += u64::from(wire_len);
        if let Some(s) = &mut self.sizes {
            s.observe(wire_len);
        }
        if !self.needs_key() {
            return;
        }
        let Some(p) = parsed else {
            self.no_ip += 1;
            return;
        };
        let key = p.key;
        if let Some(f) = &mut self.flows {
            f.observe(key, FlowStats::packet(wire_len, ts_ns, p));
        }
        if let Some((by, counts)) = &mut self.alert {
            counts.observe(match by {
                AlertKey::Dst => key.dst,
                AlertKey::Src => key.src,
            });
        }
    }

    /// Whether this rule needs the packet's flow key.
    pub fn needs_key(&self) -> bool {
        self.flows.is_some() || self.alert.is_some()
    }

    fn absorb(&mut self, o: RuleTally) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.no_ip += o.no_ip;
        if let (Some(a), Some(b)) = (&mut self.flows, o.flows) {
            a.absorb(b);
        }
        if let (Some(a), Some(b)) = (&mut self.sizes, o.sizes) {
            a.absorb(&b);
        }
        if let (Some((_, a)), Some((_, b))) = (&mut self.alert, o.alert) {
            a.absorb(b);
        }
    }
}

/// Every rule's counts of one worker (or, merged, of all workers) in one period; indexed
/// like the rules of the configuration it was made for.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Per rule, in configuration order.
    pub rules: Vec<RuleTally>,
    /// Packets analysed, whether a rule matched or not: the period's captured packets, cut
    /// at the same switch as the rules' counts.
    pub analysed: u64,
    /// Their wire bytes.
    pub analysed_bytes: u64,
}

impl Tally {
    /// Empty tables for `config`'s rules (they grow as packets come; disabled rules get
    /// none).
    pub fn new(config: &Config) -> Self {
        let rules = config
            .rules
            .iter()
            .map(|r| {
                let on = r.enabled;
                RuleTally {
                    packets: 0,
                    bytes: 0,
                    no_ip: 0,
                    flows: r
                        .flows
                        .filter(|_| on)
                        .map(|_| FlowTable::new(config.flow_limit)),
                    sizes: (on && r.sizes).then(Sizes::default),
                    alert: r
                        .alert
                        .filter(|_| on)
                        .map(|a| (a.key, KeyCounts::new(config.flow_limit))),
                }
            })
            .collect();
        Self {
            rules,
            analysed: 0,
            analysed_bytes: 0,
        }
    }

    /// Adds another tally made for the same configuration.
    pub fn absorb(&mut self, other: Tally) {
        self.analysed += other.analysed;
        self.analysed_bytes += other.analysed_bytes;
        for (a, b) in self.rules.iter_mut().zip(other.rules) {
            a.absorb(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::Path;

    #[test]
    fn sizes_fall_in_their_buckets() {
        let mut s = Sizes::default();
        for len in [60, 64, 65, 1518, 1519, 9000] {
            s.observe(len);
        }
        assert_eq!(s.0, [2, 1, 0, 0, 0, 1, 2]);
    }

    #[test]
    fn merged_tallies_add_up() {
        let c = parse(
            Path::new("t.toml"),
            "period = \"1s\"\n[[rule]]\nname = \"a\"\nfilter = \"udp\"\nactions = [\"flows\", \"sizes\", \"alert\"]\nalert = { key = \"dst\", rate = 1 }\n",
        )
        .unwrap();
        let frame = crate::testing::udp4([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, 10);
        let key = crate::packet::parse(&frame);
        let mut a = Tally::new(&c);
        let mut b = Tally::new(&c);
        a.rules[0].observe(60, 1, key.as_ref());
        b.rules[0].observe(100, 2, key.as_ref());
        b.rules[0].observe(100, 3, None);
        a.absorb(b);
        let r = &a.rules[0];
        assert_eq!((r.packets, r.bytes, r.no_ip), (3, 260, 1));
        assert_eq!(r.flows.as_ref().unwrap().len(), 1);
        assert_eq!(r.sizes.unwrap().0[0..2], [1, 2]);
        assert_eq!(r.alert.as_ref().unwrap().1.above(1).len(), 1);
    }

    #[test]
    fn alert_keys_are_capped_and_the_rest_counted() {
        let mut k = KeyCounts::new(2);
        for i in 0..5u8 {
            k.observe(IpAddr::from([10, 0, 0, i]));
        }
        k.observe(IpAddr::from([10, 0, 0, 0]));
        assert_eq!(k.above(0).len(), 2);
        assert_eq!(k.untracked, 3);
        assert_eq!(k.above(1), vec![(IpAddr::from([10, 0, 0, 0]), 2)]);
    }
}
