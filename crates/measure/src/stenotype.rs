//! Google Stenographer's packet writer, stenotype, as a peer of `capture --store`: how it is
//! started, and what it wrote, read back from its own files.
//!
//! stenotype (built by `scripts/stenotype.sh`) reads AF_PACKET TPACKET_V3 blocks and writes
//! each whole block, as the kernel filled it, to a packet file with O_DIRECT through libaio;
//! a second thread writes an index per file (a leveldb sstable of addresses, ports and
//! protocols to packet offsets). With `--dir D` and one thread its files are `D/PKT0/MICROS`
//! and `D/IDX0/MICROS`; it needs both directories made beforehand (the Stenographer server
//! does that) and names a file being written `.MICROS` until it closes it.
//!
//! Why the packets are counted from the blocks and not with `tcpdump -r`: a packet file is
//! not pcap but raw ring blocks. Each block starts with the kernel's `tpacket_block_desc`
//! (`struct tpacket_hdr_v1`, little-endian here): version (2 for TPACKET_V3) at 0,
//! `num_pkts` at 12, `offset_to_first_pkt` at 16 and `blk_len` at 20; a file is a run of
//! whole blocks of `--blocksize_kb` (1 MiB by default).
//!
//! What it prints (with `-v`, on stderr): `Thread 0 starting to process packets` once its
//! socket is bound; `Thread 0 stats: MB=.. secs=.. MBps=.. packets=N blocks=B polls=P drops=D
//! drop%=..` on its first block and every 100 blocks after (not at exit).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};

use super::filecount::StoreHeld;
use super::peer::{CaptureSpec, Counts};

/// Bytes of one stenotype block (its default `--blocksize_kb 1024`, which the bench keeps).
pub const BLOCK_BYTES: usize = 1 << 20;
/// The fewest blocks stenotype accepts (`--blocks`).
const MIN_BLOCKS: u64 = 16;
/// `tpacket_block_desc.version` of a TPACKET_V3 block.
const TPACKET_V3: u32 = 2;
/// Bytes of the block descriptor before the first packet.
const BLOCK_DESC_BYTES: u32 = 48;

/// stenotype's command line writing into the store directory `dir` from `iface`.
///
/// Memory: its only buffer between the wire and the disk is the ring, `--blocks` of 1 MiB,
/// so it gets the whole `buffer_kib` there (at least its minimum of 16 blocks). Half the ring
/// may be in flight to the disk (`--aiops`; its default of 128 exceeds so small a ring and
/// must not exceed `--blocks`), the other half stays with the kernel. `--blockage_sec 1`
/// retires a partly filled block after 1 s (default 10 s), so the bench's drain sees the
/// last packets on disk. `--filesize_mb` rotates as poolcap's `-C`. `--uid/--gid root` keeps
/// it from dropping to `nobody`, who could not write the bench's scratch directory.
/// `--seccomp none`: its policy (`kill`) lets it capture but kills it with SIGSYS after
/// "Process exiting successfully" on this kernel and libc (a syscall of the exit path it does
/// not allow), which would count every run as failed. Run through `sh` to make `PKT0/` and `IDX0/`, then
/// exec'd, so the measured process is stenotype itself.
pub fn argv(spec: &CaptureSpec, iface: &str, dir: &Path, file_mb: u64) -> Vec<String> {
    let blocks = (spec.buffer_kib / 1024).max(MIN_BLOCKS);
    let dir = dir.to_string_lossy();
    [
        "sh",
        "-c",
        "mkdir -p \"$1/PKT0\" \"$1/IDX0\" && shift && exec \"$@\"",
        "sh",
        &dir,
        "stenotype",
        "-v",
        "--iface",
        iface,
        "--dir",
        &dir,
        "--threads",
        "1",
        "--blocks",
        &blocks.to_string(),
        "--aiops",
        &(blocks / 2).to_string(),
        "--filesize_mb",
        &file_mb.to_string(),
        "--blockage_sec",
        "1",
        "--uid",
        "root",
        "--gid",
        "root",
        "--seccomp",
        "none",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Its own counts: packets and kernel drops from its last stats line (printed on its first
/// block and every 100 after, so they lag the end of a run; the bench's loss comes from
/// its files). No stats line: it never filled a block.
pub fn parse(output: &str) -> Counts {
    let last = output.lines().rev().find(|l| l.contains(" stats: "));
    let field = |key: &str| -> u64 {
        last.and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.parse().ok())
        })
        .unwrap_or(0)
    };
    Counts {
        captured: field("packets="),
        dropped: field("drops="),
        received: None,
        extra: BTreeMap::new(),
    }
}

/// Counts the packet and index files of every stenotype thread in `dir` (`PKTn/`, `IDXn/`).
pub fn count_dir(dir: &Path) -> anyhow::Result<StoreHeld> {
    let mut held = StoreHeld::default();
    let mut threads = 0;
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let packets = name.starts_with("PKT");
        if !packets && !name.starts_with("IDX") {
            continue;
        }
        threads += usize::from(packets);
        for f in std::fs::read_dir(e.path())? {
            let f = f?;
            let len = f.metadata()?.len();
            held.truncated |= f.file_name().to_string_lossy().starts_with('.');
            if !packets {
                held.index_bytes += len;
                continue;
            }
            let (n, whole) = count_blocks(std::fs::File::open(f.path())?)
                .with_context(|| format!("cannot read {}", f.path().display()))?;
            held.packets += n;
            held.bytes += len;
            held.truncated |= !whole;
        }
    }
    if threads == 0 {
        bail!("{} holds no stenotype PKTn directory", dir.display());
    }
    // Its blocks are counted, not read as frames.
    held.distinct = held.packets;
    Ok(held)
}

/// Packets in one packet file: the sum of its blocks' `num_pkts`, and whether it ends on a
/// block boundary. Fails on a block whose descriptor is not a TPACKET_V3 one.
pub fn count_blocks(mut file: impl Read) -> anyhow::Result<(u64, bool)> {
    let mut block = vec![0u8; BLOCK_BYTES];
    let mut packets = 0u64;
    for i in 0u64.. {
        let mut filled = 0;
        while filled < BLOCK_BYTES {
            match file.read(&mut block[filled..])? {
                0 => break,
                n => filled += n,
            }
        }
        if filled < BLOCK_BYTES {
            return Ok((packets, filled == 0));
        }
        let word = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"));
        let (version, num, first, len) = (word(0), word(12), word(16), word(20));
        if version != TPACKET_V3 || first < BLOCK_DESC_BYTES || len as usize > BLOCK_BYTES {
            bail!(
                "block {i} is no TPACKET_V3 block (version {version}, first packet at \
                 {first}, length {len})"
            );
        }
        packets += u64::from(num);
    }
    unreachable!("the block loop returns at the end of the file")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::Tool;

    /// A block as the kernel hands it over: a descriptor holding `num` packets.
    fn block(num: u32) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_BYTES];
        b[0..4].copy_from_slice(&TPACKET_V3.to_le_bytes());
        b[4..8].copy_from_slice(&48u32.to_le_bytes());
        b[8..12].copy_from_slice(&0x21u32.to_le_bytes());
        b[12..16].copy_from_slice(&num.to_le_bytes());
        b[16..20].copy_from_slice(&48u32.to_le_bytes());
        b[20..24].copy_from_slice(&(48 + 100 * num).to_le_bytes());
        b
    }

    #[test]
    fn counts_the_packets_of_whole_blocks() {
        let file = [block(2436), block(2298), block(1)].concat();
        assert_eq!(count_blocks(&file[..]).unwrap(), (4735, true));
        assert_eq!(count_blocks(&[][..]).unwrap(), (0, true));
        // A file cut inside its last block counts the whole blocks before it.
        let cut = &file[..2 * BLOCK_BYTES + 4096];
        assert_eq!(count_blocks(cut).unwrap(), (4734, false));
    }

    #[test]
    fn refuses_a_file_that_is_not_ring_blocks() {
        let mut pcap = block(5);
        pcap[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        let e = count_blocks(&pcap[..]).unwrap_err().to_string();
        assert!(e.contains("no TPACKET_V3 block"), "{e}");
    }

    #[test]
    fn counts_a_directory_of_threads_and_indexes() {
        let dir = tempfile::tempdir().unwrap();
        for (sub, name, data) in [
            ("PKT0", "1795825731708368", [block(3), block(4)].concat()),
            ("PKT0", "1795825791708368", block(10)),
            ("IDX0", "1795825731708368", vec![0; 300]),
            ("IDX0", "1795825791708368", vec![0; 200]),
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
            std::fs::write(dir.path().join(sub).join(name), data).unwrap();
        }
        let held = count_dir(dir.path()).unwrap();
        assert_eq!(
            held,
            StoreHeld {
                packets: 17,
                distinct: 17,
                duplicates: 0,
                bytes: 3 * BLOCK_BYTES as u64,
                truncated: false,
                index_bytes: 500
            }
        );
        // A file stenotype never closed stays hidden: counted, and flagged.
        std::fs::write(dir.path().join("PKT0/.1795825851708368"), block(1)).unwrap();
        let held = count_dir(dir.path()).unwrap();
        assert_eq!((held.packets, held.truncated), (18, true));
        let empty = tempfile::tempdir().unwrap();
        assert!(count_dir(empty.path()).is_err());
    }

    // Recorded in a lab: 200,000 imix frames at 100k pps, stopped with SIGINT.
    const OUTPUT: &str = "\
2026-11-28T00:27:58.512368Z T:94f3c6 [stenotype.cc:466] Thread 0 starting to process packets
2026-11-28T00:27:58.512468Z T:94f3c6 [aio.cc:190] Opening packet file /var/tmp/s/PKT0/.1795825678512420: 4
2026-11-28T00:27:59.479067Z T:94f3c6 [stenotype.cc:537] Thread 0 stats: MB=1 secs=3e-06 MBps=333333 packets=2436 blocks=1 polls=1 drops=0 drop%=0
2026-11-28T00:28:01.479067Z T:94f3c6 [stenotype.cc:537] Thread 0 stats: MB=100 secs=1.9 MBps=52 packets=190213 blocks=100 polls=97 drops=17 drop%=0.008
2026-11-28T00:28:02.970373Z T:9573d6 [stenotype.cc:437] Got signal 2, stopping threads
2026-11-28T00:28:58.713345Z T:f148f3 [stenotype.cc:716] Process exiting successfully
";

    #[test]
    fn parses_its_last_stats_line_and_ready_line() {
        let c = parse(OUTPUT);
        assert_eq!((c.captured, c.dropped), (190_213, 17));
        assert_eq!(parse("no blocks at all\n"), Counts::default());
        assert!(OUTPUT.contains(Tool::Stenotype.ready_marker()));
    }

    #[test]
    fn gets_the_whole_buffer_as_ring_blocks() {
        let spec = CaptureSpec {
            write: true,
            store: Some(100),
            ..CaptureSpec::new(Tool::Stenotype, 36_864)
        };
        let line = argv(&spec, "prb0", Path::new("/s/capture.pcap.store"), 100).join(" ");
        assert!(line.starts_with("sh -c mkdir -p "), "{line}");
        assert!(
            line.ends_with(
                "sh /s/capture.pcap.store stenotype -v --iface prb0 --dir \
                 /s/capture.pcap.store --threads 1 --blocks 36 --aiops 18 --filesize_mb 100 \
                 --blockage_sec 1 --uid root --gid root --seccomp none"
            ),
            "{line}"
        );
        let small = CaptureSpec::new(Tool::Stenotype, 4096);
        assert!(argv(&small, "prb0", Path::new("/s"), 100)
            .join(" ")
            .contains("--blocks 16 --aiops 8"));
    }
}
