//! poolcap's XDP program (`bpf/xsk_redirect.c`): redirects every frame of receive queue q to
//! the AF_XDP socket registered for q, and passes frames of queues without a socket to the
//! stack. The compiled object is embedded, so building poolcap needs no clang.
//!
//! The program is attached through a bpf_link (aya), so it is detached when the
//! [`XdpRedirect`] is dropped and also when the process dies, crash included. An XDP program
//! already on the interface makes attaching fail (`EBUSY`); the caller reports it and does
//! not replace it unless told to.

use std::io;

use aya::maps::{MapData, XskMap};
use aya::programs::{ProgramError, Xdp, XdpMode};
use aya::Ebpf;

use crate::error::{Result, SysError};
use crate::xsk::Xsk;

/// The compiled program, as committed.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/xsk_redirect.o");

/// Where the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (native XDP): per-queue delivery, the mode AF_XDP is made for.
    Driver,
    /// In the stack (generic XDP): works everywhere, but veth delivers all on queue 0.
    Skb,
}

/// The program attached to an interface, with its socket map.
pub struct XdpRedirect {
    // Dropping the Ebpf detaches the program (the link is owned by it).
    _ebpf: Ebpf,
    sockets: XskMap<MapData>,
    stamps: bool,
}

impl std::fmt::Debug for XdpRedirect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("XdpRedirect")
    }
}

fn aya_error(call: &'static str, what: &str, e: impl std::error::Error) -> SysError {
    SysError {
        call,
        what: what.to_string(),
        source: io::Error::other(e.to_string()),
    }
}

/// The object's program `name`.
fn program<'a>(ebpf: &'a mut Ebpf, name: &str, iface: &str) -> Result<&'a mut Xdp> {
    ebpf.program_mut(name)
        .ok_or_else(|| {
            aya_error(
                "bpf(find program)",
                iface,
                io::Error::other(format!("{name} missing")),
            )
        })?
        .try_into()
        .map_err(|e: ProgramError| aya_error("bpf(program type)", iface, e))
}

impl XdpRedirect {
    /// Loads the program and attaches it to `iface` in `mode`: the one that stamps each
    /// frame with its receive time or, where the kernel refuses that (its XDP programs
    /// may not call `bpf_xdp_adjust_meta`), the one that does not ([`XdpRedirect::stamps`]).
    pub fn attach(iface: &str, mode: AttachMode) -> Result<Self> {
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| aya_error("bpf(load object)", iface, e))?;
        let stamps = program(&mut ebpf, "poolcap_xsk", iface)?.load().is_ok();
        let prog = match stamps {
            true => program(&mut ebpf, "poolcap_xsk", iface)?,
            false => {
                let plain = program(&mut ebpf, "poolcap_xsk_plain", iface)?;
                plain
                    .load()
                    .map_err(|e| aya_error("bpf(BPF_PROG_LOAD)", iface, e))?;
                plain
            }
        };
        let mode = match mode {
            AttachMode::Driver => XdpMode::Driver,
            AttachMode::Skb => XdpMode::Skb,
        };
        prog.attach(iface, mode).map_err(|e| match e {
            ProgramError::SyscallError(s) => SysError {
                call: "bpf(BPF_LINK_CREATE, XDP)",
                what: iface.to_string(),
                source: s.io_error,
            },
            e => aya_error("bpf(attach XDP)", iface, e),
        })?;
        let map = ebpf
            .take_map("xsks")
            .ok_or_else(|| aya_error("bpf(find map)", iface, io::Error::other("xsks missing")))?;
        let sockets = XskMap::try_from(map).map_err(|e| aya_error("bpf(map type)", iface, e))?;
        Ok(Self {
            _ebpf: ebpf,
            sockets,
            stamps,
        })
    }

    /// Whether the program writes each frame's receive time into its XDP metadata (see
    /// `Umem::meta_u64`); if not, the bytes there are whatever the frame held before.
    pub fn stamps(&self) -> bool {
        self.stamps
    }

    /// Sends frames of receive queue `queue` to `xsk`.
    pub fn register(&mut self, queue: u32, xsk: &Xsk) -> Result<()> {
        self.sockets
            .set(queue, xsk.raw_fd(), 0)
            .map_err(|e| aya_error("bpf(map update xsks)", &format!("queue {queue}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `xdp` section's instructions in an object file.
    fn program_bytes(obj: &[u8]) -> Vec<u8> {
        // A minimal ELF64 little-endian section walk: find the section named "xdp".
        let u16_at = |o: usize| u16::from_le_bytes([obj[o], obj[o + 1]]) as usize;
        let u32_at = |o: usize| u32::from_le_bytes(obj[o..o + 4].try_into().unwrap()) as usize;
        let u64_at = |o: usize| u64::from_le_bytes(obj[o..o + 8].try_into().unwrap()) as usize;
        let (shoff, shentsize, shnum, shstrndx) =
            (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
        let sh = |i: usize| shoff + i * shentsize;
        let strtab = u64_at(sh(shstrndx) + 0x18);
        for i in 0..shnum {
            let name_off = strtab + u32_at(sh(i));
            let name: Vec<u8> = obj[name_off..]
                .iter()
                .take_while(|&&b| b != 0)
                .copied()
                .collect();
            if name == b"xdp" {
                let (off, size) = (u64_at(sh(i) + 0x18), u64_at(sh(i) + 0x20));
                return obj[off..off + size].to_vec();
            }
        }
        panic!("no xdp section");
    }

    /// clang is one of the tools `./dev deps` installs: without it, or when it cannot
    /// compile the source, the test fails (it never passes without rebuilding the object).
    #[test]
    fn committed_object_matches_its_source() {
        let dir = std::env::temp_dir().join(format!("poolcap-xdp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("xsk_redirect.o");
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/bpf/xsk_redirect.c");
        let status = std::process::Command::new("clang")
            .args([
                "-O2",
                "-g",
                "-target",
                "bpf",
                "-I/usr/include/x86_64-linux-gnu",
                "-c",
                src,
                "-o",
            ])
            .arg(&out)
            .status();
        let status =
            status.unwrap_or_else(|e| panic!("clang (installed by ./dev deps) cannot run: {e}"));
        assert!(status.success(), "clang failed to compile {src}: {status}");
        let rebuilt = std::fs::read(&out).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            program_bytes(&rebuilt),
            program_bytes(OBJECT),
            "rebuild bpf/xsk_redirect.o from its source"
        );
    }
}
