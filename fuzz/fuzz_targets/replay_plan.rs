//! The replay reader: a capture file of arbitrary bytes through the reader and the replay
//! plan. Whatever the file says, the schedule only moves forward, every frame fits the link,
//! and every packet of the file is either sent or counted as skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolcap::gen::replay::{plan, recorded_timing, LinkSpec};

fuzz_target!(|data: &[u8]| {
    let Some((&mtu, bytes)) = data.split_first() else {
        return;
    };
    let Ok(file) = poolcap_format::read_bytes(bytes) else {
        return;
    };
    let total = file.packets.len() as u64;
    let link = LinkSpec {
        mtu: 60 + usize::from(mtu) * 8,
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
    };
    let Ok(p) = plan(file, &link) else {
        return;
    };
    let n = p.replay.len() as u64;
    assert_eq!(n, p.offsets_ns.len() as u64);
    let skipped = p.replay.skipped(n);
    assert_eq!(n + skipped.too_big + skipped.malformed, total);
    assert!(
        p.offsets_ns.windows(2).all(|w| w[0] <= w[1]),
        "schedule runs back"
    );
    let mut buf = vec![0u8; p.replay.max_len()];
    for k in 0..n {
        let len = p.replay.frame(k, &mut buf);
        assert!((14..=link.mtu + 18).contains(&len), "frame of {len} bytes");
    }
    let timing = recorded_timing(p.offsets_ns, 1.0);
    let mut prev = 0;
    for k in 0..2 * n {
        let due = timing.due_ns(k);
        assert!(due >= prev, "frame {k} due before frame {}", k - 1);
        prev = due;
    }
});
