//! A small mix of frames for filter tests, shared by the test crates: IPv4 UDP and TCP,
//! 802.1Q-tagged TCP and UDP, and ARP, written as a microsecond pcap.

#![allow(dead_code)]

use std::path::Path;

pub(crate) const FRAMES: u32 = 400;

/// Frame `i`: UDP 53, TCP 80, VLAN 100 TCP 80, VLAN 200 UDP 1234 or ARP, by `i % 5`.
pub(crate) fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    let (vlan, proto, port) = match i % 5 {
        0 => (None, Some(17u8), 53u16),
        1 => (None, Some(6), 80),
        2 => (Some(100u16), Some(6), 80),
        3 => (Some(200), Some(17), 1234),
        _ => (None, None, 0),
    };
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    let Some(proto) = proto else {
        f.extend_from_slice(&[0x08, 0x06]);
        f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&[
            0x02, 0, 0, 0, 0, 1, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2,
        ]);
        f.resize(f.len().max(60), 0);
        return f;
    };
    f.extend_from_slice(&[0x08, 0x00]);
    let l4 = if proto == 6 { 20 } else { 8 };
    let payload = 10 + (i % 7) as usize;
    let total = (20 + l4 + payload) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let sport = 10_000 + (i % 13) as u16;
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&port.to_be_bytes());
    if proto == 6 {
        f.extend_from_slice(&i.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
    }
    f.extend((0..payload).map(|k| (i as usize + k) as u8));
    f
}

/// A microsecond pcap of [`FRAMES`] frames, 1 ms apart.
pub(crate) fn write_pcap(path: &Path) {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&65_535u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..FRAMES {
        let f = frame(i);
        let us = 1_700_000_000_000_000u64 + u64::from(i) * 1000;
        b.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&(f.len() as u32).to_le_bytes());
        b.extend_from_slice(&f);
    }
    std::fs::write(path, b).expect("write pcap");
}
