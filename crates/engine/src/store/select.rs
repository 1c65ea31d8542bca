//! The part of a tcpdump expression the index can answer: which regions of a file may hold
//! a matching packet. libpcap still applies the whole expression to every packet read, so
//! this only has to select a superset, and it does so conservatively:
//!
//! * understood primitives: `[ip|ip6|arp|rarp|tcp|udp|sctp] [src|dst|src or dst|src and
//!   dst] host ADDR | net ADDR/LEN | net ADDR mask MASK | port N | portrange A-B`, the
//!   protocols alone (`tcp`, `udp`, `icmp`, `icmp6`, `sctp`, `igmp`, `ip`, `ip6`, `arp`,
//!   `rarp`) and `[ip|ip6] proto N`; direction is ignored (a region with the address
//!   either way is read); a net is looked up as the address prefix the index holds that
//!   covers it (IPv4 /16 and /24, IPv6 /32 and /64, see `sig`), and a range of up to
//!   [`PORTS`] ports as each of its ports; a shorter prefix or a wider range selects
//!   everything;
//! * `and` intersects, `or` unites (equal precedence, left to right, as in pcap-filter(7));
//!   `not` selects everything (a region holding the negated key may hold other packets);
//! * anything else (`tcp[13] & 2 != 0`, `len > 100`, names to resolve, `ether host`)
//!   selects everything, and so does the whole expression if it uses a keyword that moves
//!   libpcap's offsets (`vlan`, `mpls`, `pppoed`, `pppoes`, `geneve`, `vxlan`) or if this
//!   parser does not follow it.

use std::net::IpAddr;

use super::index::{Posting, Postings};
use super::keys;
use super::sig;

/// A filter as the index sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Every region.
    All,
    /// Regions holding any of these keys (kind byte and value).
    Keys(Vec<Vec<u8>>),
    /// Both.
    And(Box<Selector>, Box<Selector>),
    /// Either.
    Or(Box<Selector>, Box<Selector>),
}

/// Ports of a `portrange` looked up one by one at most.
pub const PORTS: u16 = 32;

const SHIFTING: [&str; 6] = ["vlan", "mpls", "pppoed", "pppoes", "geneve", "vxlan"];

impl Selector {
    /// What the index can use of `expr` (see the module docs).
    pub fn parse(expr: &str) -> Selector {
        let tokens = tokenize(expr);
        if tokens.iter().any(|t| SHIFTING.contains(&t.as_str())) {
            return Selector::All;
        }
        let mut p = Parser { t: &tokens, i: 0 };
        match p.expr() {
            Some(s) if p.i == tokens.len() => s,
            _ => Selector::All,
        }
    }

    /// Whether the index is of no use.
    pub fn is_all(&self) -> bool {
        matches!(self, Selector::All)
    }

    /// The keys whose postings [`Selector::regions`] looks at: what a lookup has to read.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        match self {
            Selector::All => Vec::new(),
            Selector::Keys(ks) => ks.clone(),
            Selector::And(a, b) | Selector::Or(a, b) => {
                let mut r = a.keys();
                r.extend(b.keys());
                r
            }
        }
    }

    /// The regions that may hold a match, each with the mask of its pages where such a
    /// packet may start, from `postings` (which hold at least the keys of
    /// [`Selector::keys`]), in region order; `None`: all of them, whole.
    ///
    /// Sorted lists merged, not maps: a key such as `udp` names every region of a file (15k
    /// in 1 GB), and building a map of them took longer than reading the index.
    pub fn regions(&self, postings: &Postings) -> Option<Vec<Posting>> {
        match self {
            Selector::All => None,
            Selector::Keys(ks) => Some(joined(
                ks.iter().flat_map(|k| postings.get(k)).copied().collect(),
            )),
            Selector::And(a, b) => match (a.regions(postings), b.regions(postings)) {
                (None, x) | (x, None) => x,
                (Some(a), Some(b)) => Some(common(&a, &b)),
            },
            Selector::Or(a, b) => match (a.regions(postings), b.regions(postings)) {
                (Some(mut a), Some(b)) => {
                    a.extend(b);
                    Some(joined(a))
                }
                _ => None,
            },
        }
    }
}

/// `list` in region order, one posting per region (the pages of a region's postings joined).
fn joined(mut list: Vec<Posting>) -> Vec<Posting> {
    list.sort_unstable_by_key(|p| p.region);
    list.dedup_by(|next, kept| {
        let same = next.region == kept.region;
        if same {
            kept.pages |= next.pages;
        }
        same
    });
    list
}

/// The regions of both `a` and `b` (each in region order, one posting per region), with
/// the pages they share, where they share any.
fn common(a: &[Posting], b: &[Posting]) -> Vec<Posting> {
    let mut out = Vec::new();
    let mut b = b.iter().peekable();
    for p in a {
        while b.next_if(|q| q.region < p.region).is_some() {}
        let Some(q) = b.peek().filter(|q| q.region == p.region) else {
            continue;
        };
        if p.pages & q.pages != 0 {
            out.push(Posting {
                region: p.region,
                pages: p.pages & q.pages,
            });
        }
    }
    out
}

/// Words, with parentheses and a standalone `!` split off.
fn tokenize(expr: &str) -> Vec<String> {
    let spaced = expr
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace("&&", " and ")
        .replace("||", " or ");
    let mut out = Vec::new();
    for w in spaced.split_whitespace() {
        let w = w.to_ascii_lowercase();
        match w.strip_prefix('!') {
            Some(rest) if !rest.starts_with('=') => {
                out.push("not".into());
                if !rest.is_empty() {
                    out.push(rest.into());
                }
            }
            _ => out.push(w),
        }
    }
    out
}

struct Parser<'a> {
    t: &'a [String],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).map(String::as_str)
    }

    fn peek_at(&self, n: usize) -> Option<&str> {
        self.t.get(self.i + n).map(String::as_str)
    }

    /// term ((and|or) term)*, left to right.
    fn expr(&mut self) -> Option<Selector> {
        let mut left = self.term()?;
        while let Some(op) = self.peek() {
            let and = match op {
                "and" => true,
                "or" => false,
                _ => break,
            };
            self.i += 1;
            let right = self.term()?;
            left = if and {
                both(left, right)
            } else {
                either(left, right)
            };
        }
        Some(left)
    }

    fn term(&mut self) -> Option<Selector> {
        match self.peek()? {
            "not" => {
                self.i += 1;
                self.term()?;
                Some(Selector::All)
            }
            "(" => {
                self.i += 1;
                let inner = self.expr()?;
                (self.peek()? == ")").then_some(())?;
                self.i += 1;
                Some(inner)
            }
            _ => Some(self.primitive()),
        }
    }

    /// A primitive's words up to the next `and`/`or`/unmatched `)`; understood or All.
    fn primitive(&mut self) -> Selector {
        let start = self.i;
        let mut depth = 0usize;
        while let Some(w) = self.peek() {
            match w {
                "(" => depth += 1,
                ")" if depth == 0 => break,
                ")" => depth -= 1,
                "and" | "or" if depth == 0 => {
                    // `src or dst` / `src and dst` belong to the primitive.
                    let prev = self.t[self.i - 1].as_str();
                    if !(self.i > start && prev == "src" && self.peek_at(1) == Some("dst")) {
                        break;
                    }
                }
                _ => {}
            }
            self.i += 1;
        }
        let words: Vec<&str> = self.t[start..self.i].iter().map(String::as_str).collect();
        understood(&words).unwrap_or(Selector::All)
    }
}

fn exact(kind: u8, value: &[u8]) -> Vec<u8> {
    let mut k = vec![kind];
    k.extend_from_slice(value);
    k
}

fn proto(n: u8) -> Selector {
    Selector::Keys(vec![exact(keys::PROTO, &[n])])
}

fn ethertype(t: u16) -> Selector {
    Selector::Keys(vec![exact(keys::ETHERTYPE, &t.to_be_bytes())])
}

/// A protocol word alone, as a selector.
fn protocol(word: &str) -> Option<Selector> {
    Some(match word {
        "tcp" => proto(6),
        "udp" => proto(17),
        "icmp" => proto(1),
        "icmp6" => proto(58),
        "igmp" => proto(2),
        "sctp" => proto(132),
        "ip" => ethertype(keys::ETH_IP),
        "ip6" => ethertype(keys::ETH_IP6),
        "arp" => ethertype(keys::ETH_ARP),
        "rarp" => ethertype(keys::ETH_RARP),
        _ => return None,
    })
}

fn and(a: Option<Selector>, b: Selector) -> Selector {
    match a {
        Some(a) => both(a, b),
        None => b,
    }
}

/// `a and b`: what one side cannot narrow, the other still does.
fn both(a: Selector, b: Selector) -> Selector {
    match (a, b) {
        (Selector::All, x) | (x, Selector::All) => x,
        (a, b) => Selector::And(Box::new(a), Box::new(b)),
    }
}

/// `a or b`: everything if either side is.
fn either(a: Selector, b: Selector) -> Selector {
    match (a, b) {
        (Selector::All, _) | (_, Selector::All) => Selector::All,
        (a, b) => Selector::Or(Box::new(a), Box::new(b)),
    }
}

fn understood(w: &[&str]) -> Option<Selector> {
    // `ip proto N`, `ip6 proto N`, `proto N`.
    match w {
        [q, "proto", n] if matches!(*q, "ip" | "ip6") => {
            return Some(and(protocol(q), proto(n.parse().ok()?)))
        }
        ["proto", n] => return Some(proto(n.parse().ok()?)),
        [p] => return protocol(p),
        _ => {}
    }
    let (qual, w) = match w.first().copied() {
        Some(p @ ("ip" | "ip6" | "arp" | "rarp" | "tcp" | "udp" | "sctp")) => {
            (Some(protocol(p)?), &w[1..])
        }
        _ => (None, w),
    };
    let w = match w {
        ["src", "or" | "and", "dst", rest @ ..] => rest,
        ["src" | "dst", rest @ ..] => rest,
        _ => w,
    };
    let keys = match w {
        ["host", addr] => vec![match addr.parse::<IpAddr>().ok()? {
            IpAddr::V4(a) => exact(keys::V4, &a.octets()),
            IpAddr::V6(a) => exact(keys::V6, &a.octets()),
        }],
        ["net", cidr] => {
            let (addr, bits) = cidr.split_once('/')?;
            vec![net(addr.parse().ok()?, bits.parse().ok()?)?]
        }
        ["net", addr, "mask", mask] => {
            let mask: std::net::Ipv4Addr = mask.parse().ok()?;
            let bits = u32::from(mask);
            // Only contiguous masks are prefixes.
            (bits.leading_ones() + bits.trailing_zeros() == 32).then_some(())?;
            vec![net(addr.parse().ok()?, bits.leading_ones())?]
        }
        ["port", n] => vec![exact(keys::PORT, &n.parse::<u16>().ok()?.to_be_bytes())],
        ["portrange", r] => {
            let (a, b) = r.split_once('-')?;
            let (a, b) = (a.parse::<u16>().ok()?, b.parse::<u16>().ok()?);
            let (lo, hi) = (a.min(b), a.max(b));
            (hi - lo < PORTS).then_some(())?;
            (lo..=hi)
                .map(|p| exact(keys::PORT, &p.to_be_bytes()))
                .collect()
        }
        _ => return None,
    };
    Some(and(qual, Selector::Keys(keys)))
}

/// The key of the narrowest prefix the index holds that covers `addr`/`bits`: the address
/// itself, or one of the prefixes `sig` derives; `None` if none does.
fn net(addr: IpAddr, bits: u32) -> Option<Vec<u8>> {
    // The prefixes held, longest first: (bits, kind, bytes of the address it keeps).
    let (octets, held): (Vec<u8>, [(u32, u8, usize); 3]) = match addr {
        IpAddr::V4(a) => (
            a.octets().to_vec(),
            [(32, keys::V4, 4), (24, sig::V4_24, 3), (16, sig::V4_16, 2)],
        ),
        IpAddr::V6(a) => (
            a.octets().to_vec(),
            [
                (128, keys::V6, 16),
                (64, sig::V6_64, 8),
                (32, sig::V6_32, 4),
            ],
        ),
    };
    let max = held[0].0;
    let (_, kind, len) = held
        .into_iter()
        .find(|&(b, _, _)| bits <= max && bits >= b)?;
    Some(exact(kind, &octets[..len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(e: &str) -> Selector {
        Selector::parse(e)
    }

    #[test]
    fn understood_shapes_select_keys_and_the_rest_selects_all() {
        for e in [
            "host 10.0.0.1",
            "src host 10.0.0.1",
            "src or dst host fe80::1",
            "net 10.1.0.0/16",
            "net 10.1.0.0 mask 255.255.0.0",
            "tcp port 80",
            "udp dst port 53",
            "portrange 1000-1010",
            "tcp",
            "ip proto 47",
            "host 10.0.0.1 and port 80",
            "(host 10.0.0.1 or host 10.0.0.2) and tcp",
        ] {
            assert!(!s(e).is_all(), "{e}");
        }
        for e in [
            "tcp[13] & 2 != 0",
            "not host 10.0.0.1",
            "host example.com",
            "vlan and host 10.0.0.1",
            "host 10.0.0.1 or len > 100",
            "ether host 1:2:3:4:5:6",
            "(tcp[13] & 2) != 0",
            "net 10.1",
            "portrange 1000-2000",
            "host 10.0.0.1 or 10.0.0.2",
        ] {
            assert!(s(e).is_all(), "{e}: {:?}", s(e));
        }
        // An unknown part only widens: `tcp[13] & 2 != 0 and host X` still uses the host.
        assert!(!s("tcp[13] & 2 != 0 and host 10.0.0.1").is_all());
    }

    #[test]
    fn and_keeps_the_pages_both_sides_name_and_or_joins_them_in_region_order() {
        let p = |region, pages| Posting { region, pages };
        let mut postings = Postings::default();
        // A port, 10.1/16, and an address of it, in key order.
        postings.push(&[keys::PORT, 0, 53], [p(3, 0b11), p(5, 0b1000), p(7, 1)]);
        postings.push(&[keys::V4, 10, 1, 0, 1], [p(1, 0b01), p(5, 0b11)]);
        postings.push(&[sig::V4_16, 10, 1], [p(1, 0b01), p(3, 0b10), p(5, 0b111)]);
        assert_eq!(
            s("net 10.1.0.0/16").regions(&postings),
            Some(vec![p(1, 0b01), p(3, 0b10), p(5, 0b111)])
        );
        // Region 5 holds both, but in no common page: not read.
        assert_eq!(
            s("net 10.1.0.0/16 and port 53").regions(&postings),
            Some(vec![p(3, 0b10)])
        );
        assert_eq!(
            s("host 10.1.0.1 or port 53").regions(&postings),
            Some(vec![p(1, 0b01), p(3, 0b11), p(5, 0b1011), p(7, 1)])
        );
        assert_eq!(s("tcp[13] & 2 != 0").regions(&postings), None);
    }

    #[test]
    fn nets_look_up_the_prefix_that_covers_them_and_ranges_their_ports() {
        let keys = |e: &str| s(e).keys();
        assert_eq!(keys("net 10.1.2.0/24"), vec![vec![sig::V4_24, 10, 1, 2]]);
        assert_eq!(keys("net 10.1.2.0/26"), vec![vec![sig::V4_24, 10, 1, 2]]);
        assert_eq!(keys("net 10.1.0.0/20"), vec![vec![sig::V4_16, 10, 1]]);
        assert_eq!(keys("net 10.1.2.3/32"), vec![vec![keys::V4, 10, 1, 2, 3]]);
        assert_eq!(
            keys("net 2001:db8::/48"),
            vec![vec![sig::V6_32, 0x20, 0x01, 0x0d, 0xb8]]
        );
        assert!(s("net 10.0.0.0/8").is_all() && s("net ::/16").is_all());
        assert_eq!(keys("portrange 80-81").len(), 2);
        assert!(s(&format!("portrange 1000-{}", 1000 + PORTS)).is_all());
    }

    #[test]
    fn and_and_or_have_equal_precedence_left_to_right() {
        // pcap-filter(7): `a or b and c` is `(a or b) and c`.
        match s("tcp or udp and port 53") {
            Selector::And(left, _) => assert!(matches!(*left, Selector::Or(..))),
            other => panic!("{other:?}"),
        }
    }
}
