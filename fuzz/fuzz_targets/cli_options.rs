//! The option parsers of the command line over arbitrary strings: units (`300k`, `1Gbit`,
//! `2s`, `64M`), `--pool M,R`, `--offload`, `--buddy-groups`, `--compress`, MAC addresses.
//! Each returns a value or an error message, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poolcap::capture::compress::Compression;
use poolcap::capture::policy::{parse_buddy_groups, PolicySpec};
use poolcap::frame::parse_mac;
use poolcap::units::{self, parse_pool};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(s) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 9 {
        0 => {
            if let Ok(r) = units::parse_rate(s) {
                assert!(r.pps(64.0) > 0.0);
            }
        }
        1 => {
            let _ = units::parse_count(s);
        }
        2 => {
            let _ = units::parse_duration(s);
        }
        3 => {
            let _ = units::parse_bytes(s);
        }
        4 => {
            if let Ok((m, r)) = parse_pool(s) {
                assert!(m >= 1 && r >= 1);
            }
        }
        5 => {
            let _ = s.parse::<PolicySpec>();
        }
        6 => {
            let queues = usize::from(which / 9 % 8) + 1;
            if let Ok(groups) = parse_buddy_groups(s, queues) {
                assert!(groups.iter().flatten().all(|&q| q < queues));
            }
        }
        7 => {
            let _ = s.parse::<Compression>();
        }
        _ => {
            let _ = parse_mac(s);
        }
    }
});
