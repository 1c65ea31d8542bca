//! eBPF through raw `bpf(2)` calls, for programs poolcap generates itself (the probe's
//! in-kernel rules): per-CPU array maps, a plain array (the probe's generation word),
//! per-CPU hash maps taken whole (its flow tables), an RCU grace period (so a taken map is
//! no longer written), loading an instruction array with the verifier's
//! log on failure, attaching at tc ingress through TCX links (kernel 6.6+) that go away
//! with their fds, and running a program on a given
//! buffer (`BPF_PROG_TEST_RUN`) so generated code can be checked frame by frame. XDP programs
//! (the bench's redirect floor) load and link the same way, with the XDP program and attach
//! types: a `BPF_XDP` link, like a TCX one, detaches when its fd closes.
//!
//! The XDP redirect program for AF_XDP is a clang-built object loaded by aya (`xdp`); these
//! programs are built from instructions at run time, so they need none of an object's
//! machinery (BTF, relocations), only the few commands below. Attribute layouts follow
//! `union bpf_attr` in include/uapi/linux/bpf.h; unused trailing fields are left out, which
//! the kernel reads as zero.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::{Result, SysError};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// Hash elements allocated on insert, not all at creation: a cap is a bound, not a cost.
const BPF_F_NO_PREALLOC: u32 = 1;
/// `BPF_MAP_UPDATE_ELEM` of a key that must exist.
const BPF_EXIST: u64 = 2;
/// `membarrier(2)` command that waits for an RCU grace period on every CPU.
const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_TCX_INGRESS: u32 = 46;
/// Verifier log kept in an error: its end says why.
const LOG_TAIL: usize = 3000;
const LOG_SIZE: usize = 4 << 20;

/// One eBPF instruction, as `struct bpf_insn` (registers packed dst low, src high).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode: class | size/op | mode/source.
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    pub regs: u8,
    /// Signed offset (memory access or jump).
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl Insn {
    /// An instruction from its fields.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            regs: (dst & 0x0f) | (src << 4),
            off,
            imm,
        }
    }

    /// The 8 bytes the kernel reads (little-endian host).
    pub fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = self.regs;
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    relative_fd: u32,
    _pad: u32,
    expected_revision: u64,
}

/// Every `bpf(cmd, attr, sizeof attr)` goes through here (and the crate's chokepoint), returning the non-negative result.
fn bpf<T>(cmd: libc::c_long, attr: &mut T, call: &'static str, what: &str) -> Result<i64> {
    crate::error::enter(call, || what.to_string())?;
    // SAFETY: `attr` is a live, writable repr(C) prefix of `union bpf_attr` for `cmd`, and
    // its size is passed, so the kernel reads and writes only within it; pointers inside it
    // were set by the callers to buffers that outlive this call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(SysError::last(call, what));
    }
    Ok(rc)
}

fn owned_fd(rc: i64) -> OwnedFd {
    // SAFETY: the bpf command that returned `rc` created a new file descriptor that nothing
    // else owns.
    unsafe { OwnedFd::from_raw_fd(rc as RawFd) }
}

fn name16(name: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, s) in n.iter_mut().zip(name.bytes().take(15)) {
        *d = if s.is_ascii_alphanumeric() || s == b'_' {
            s
        } else {
            b'_'
        };
    }
    n
}

/// The number of possible CPUs (the slots of a per-CPU value), from
/// `/sys/devices/system/cpu/possible` (`0-1`, `0-3,6`): the highest index plus one.
pub fn possible_cpus() -> Result<usize> {
    let path = "/sys/devices/system/cpu/possible";
    let text = std::fs::read_to_string(path).map_err(|source| SysError {
        call: "read",
        what: path.into(),
        source,
    })?;
    parse_cpu_list(&text).ok_or_else(|| SysError {
        call: "parse",
        what: format!("{path}: `{}`", text.trim()),
        source: io::Error::from(io::ErrorKind::InvalidData),
    })
}

fn parse_cpu_list(text: &str) -> Option<usize> {
    let mut max = None;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        max = max.max(Some(last));
    }
    max.map(|m| m + 1)
}

/// A `BPF_MAP_TYPE_PERCPU_ARRAY` with `u32` keys: each CPU updates its own copy of a slot
/// without atomics; a lookup returns every CPU's copy.
#[derive(Debug)]
pub struct PerCpuArray {
    fd: OwnedFd,
    value_size: usize,
    entries: u32,
    cpus: usize,
}

impl PerCpuArray {
    /// Creates the map (zeroed) with `entries` slots of `value_size` bytes (a multiple of 8).
    pub fn create(name: &str, value_size: u32, entries: u32) -> Result<Self> {
        let spec = MapSpec {
            map_type: BPF_MAP_TYPE_PERCPU_ARRAY,
            key_size: 4,
            value_size,
            entries,
            flags: 0,
        };
        Ok(Self {
            fd: spec.create(name)?,
            value_size: value_size as usize,
            entries,
            cpus: possible_cpus()?,
        })
    }

    /// The map's fd, for `BPF_PSEUDO_MAP_FD` loads in a program.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Slots in the map.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Every CPU's copy of slot `key`, one `value_size` slice after another.
    pub fn lookup(&self, key: u32) -> Result<Vec<u8>> {
        let what = || format!("slot {key}");
        lookup_per_cpu(
            &self.fd,
            &key.to_ne_bytes(),
            self.value_size,
            self.cpus,
            what,
        )
    }
}

/// A map's creation attributes.
struct MapSpec {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    entries: u32,
    flags: u32,
}

impl MapSpec {
    fn create(&self, name: &str) -> Result<OwnedFd> {
        let mut attr = MapCreateAttr {
            map_type: self.map_type,
            key_size: self.key_size,
            value_size: self.value_size,
            max_entries: self.entries,
            map_flags: self.flags,
            map_name: name16(name),
            ..Default::default()
        };
        let what = format!(
            "{name}: {} x {} bytes, type {}",
            self.entries, self.value_size, self.map_type
        );
        let fd = bpf(BPF_MAP_CREATE, &mut attr, "bpf(BPF_MAP_CREATE)", &what)?;
        Ok(owned_fd(fd))
    }
}

/// One map command on `key` (and `value`, the value or the next key's buffer).
fn elem(
    fd: &OwnedFd,
    cmd: libc::c_long,
    call: &'static str,
    key: Option<&[u8]>,
    value: Option<&mut [u8]>,
    flags: u64,
    what: &dyn Fn() -> String,
) -> Result<()> {
    let mut attr = MapElemAttr {
        map_fd: fd.as_raw_fd() as u32,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: value.map_or(0, |v| v.as_mut_ptr() as u64),
        flags,
        ..Default::default()
    };
    bpf(cmd, &mut attr, call, &what()).map(drop)
}

/// Every CPU's copy of `key`'s value, one `value_size` slice after another.
fn lookup_per_cpu(
    fd: &OwnedFd,
    key: &[u8],
    value_size: usize,
    cpus: usize,
    what: impl Fn() -> String,
) -> Result<Vec<u8>> {
    // Per-CPU values are copied out at an 8-byte stride per CPU.
    let stride = value_size.div_ceil(8) * 8;
    let mut out = vec![0u8; stride * cpus];
    let call = "bpf(BPF_MAP_LOOKUP_ELEM)";
    elem(
        fd,
        BPF_MAP_LOOKUP_ELEM,
        call,
        Some(key),
        Some(&mut out),
        0,
        &what,
    )?;
    if stride != value_size {
        out = out
            .chunks(stride)
            .flat_map(|c| c[..value_size].to_vec())
            .collect();
    }
    Ok(out)
}

/// A `BPF_MAP_TYPE_ARRAY` with `u32` keys: one value shared by every CPU, written from
/// user space (the probe's generation word).
#[derive(Debug)]
pub struct Array {
    fd: OwnedFd,
}

impl Array {
    /// Creates the map (zeroed) with `entries` slots of `value_size` bytes.
    pub fn create(name: &str, value_size: u32, entries: u32) -> Result<Self> {
        let spec = MapSpec {
            map_type: BPF_MAP_TYPE_ARRAY,
            key_size: 4,
            value_size,
            entries,
            flags: 0,
        };
        Ok(Self {
            fd: spec.create(name)?,
        })
    }

    /// The map's fd, for `BPF_PSEUDO_MAP_FD` loads in a program.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Writes slot `key` (`value` is the map's value size).
    pub fn set(&self, key: u32, value: &[u8]) -> Result<()> {
        let mut v = value.to_vec();
        let what = || format!("slot {key}");
        let call = "bpf(BPF_MAP_UPDATE_ELEM)";
        elem(
            &self.fd,
            BPF_MAP_UPDATE_ELEM,
            call,
            Some(&key.to_ne_bytes()),
            Some(&mut v),
            0,
            &what,
        )
    }
}

/// A `BPF_MAP_TYPE_PERCPU_HASH` whose elements are allocated on insert: a program inserts
/// with `BPF_NOEXIST` and finds it full at `entries`; user space takes what changed and
/// zeroes it.
#[derive(Debug)]
pub struct PerCpuHash {
    fd: OwnedFd,
    key_size: usize,
    value_size: usize,
    cpus: usize,
}

impl PerCpuHash {
    /// Creates the (empty) map for at most `entries` keys.
    pub fn create(name: &str, key_size: u32, value_size: u32, entries: u32) -> Result<Self> {
        let spec = MapSpec {
            map_type: BPF_MAP_TYPE_PERCPU_HASH,
            key_size,
            value_size,
            entries,
            flags: BPF_F_NO_PREALLOC,
        };
        Ok(Self {
            fd: spec.create(name)?,
            key_size: key_size as usize,
            value_size: value_size as usize,
            cpus: possible_cpus()?,
        })
    }

    /// The map's fd, for `BPF_PSEUDO_MAP_FD` loads in a program.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Every key whose value is not zero on every CPU, with every CPU's copy of it; those
    /// values are then zeroed in place and the all-zero keys (untouched since the last
    /// call) deleted. So a key that stays in use is neither freed nor allocated again,
    /// which a program inserting from softirq context cannot always do (the kernel
    /// allocates the element and its per-CPU values without sleeping). Exact only when no
    /// program writes the map meanwhile.
    pub fn take(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let stride = self.value_size.div_ceil(8) * 8;
        let mut zero = vec![0u8; stride * self.cpus];
        let mut out = Vec::new();
        for key in self.keys()? {
            let value = self.lookup(&key)?;
            if value.iter().all(|&b| b == 0) {
                self.delete(&key)?;
                continue;
            }
            let what = || format!("key {} bytes", key.len());
            let call = "bpf(BPF_MAP_UPDATE_ELEM)";
            elem(
                &self.fd,
                BPF_MAP_UPDATE_ELEM,
                call,
                Some(&key),
                Some(&mut zero),
                BPF_EXIST,
                &what,
            )?;
            out.push((key, value));
        }
        Ok(out)
    }

    /// Every key of the map.
    fn keys(&self) -> Result<Vec<Vec<u8>>> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut next = vec![0u8; self.key_size];
            let call = "bpf(BPF_MAP_GET_NEXT_KEY)";
            let what = || format!("after {} keys", keys.len());
            let prev = keys.last().map(Vec::as_slice);
            match elem(
                &self.fd,
                BPF_MAP_GET_NEXT_KEY,
                call,
                prev,
                Some(&mut next),
                0,
                &what,
            ) {
                Ok(()) => keys.push(next),
                Err(e) if e.errno() == Some(libc::ENOENT) => return Ok(keys),
                Err(e) => return Err(e),
            }
        }
    }

    fn lookup(&self, key: &[u8]) -> Result<Vec<u8>> {
        let what = || format!("key {} bytes", key.len());
        lookup_per_cpu(&self.fd, key, self.value_size, self.cpus, what)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let what = || format!("key {} bytes", key.len());
        let call = "bpf(BPF_MAP_DELETE_ELEM)";
        elem(
            &self.fd,
            BPF_MAP_DELETE_ELEM,
            call,
            Some(key),
            None,
            0,
            &what,
        )
    }
}

/// Waits for an RCU grace period on every CPU (`membarrier(MEMBARRIER_CMD_GLOBAL)`): a tc
/// program runs inside an RCU read-side section, so once this returns every run that
/// began before the call has ended, and a map it chose before is no longer written.
pub fn synchronize_rcu() -> Result<()> {
    crate::error::enter("membarrier(MEMBARRIER_CMD_GLOBAL)", String::new)?;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if rc < 0 {
        return Err(SysError::last("membarrier(MEMBARRIER_CMD_GLOBAL)", ""));
    }
    Ok(())
}

/// `BPF_PROG_LOAD` of `insns` as a program of `prog_type` for `attach_type` (GPL: the helpers
/// it may call need no more); a program the verifier refuses is loaded again with the log
/// on, and the log's end is in the error.
fn load_program(prog_type: u32, attach_type: u32, name: &str, insns: &[Insn]) -> Result<OwnedFd> {
    let license = b"GPL\0";
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name16(name),
        expected_attach_type: attach_type,
        ..Default::default()
    };
    let what = format!("{name}, {} instructions", insns.len());
    match prog_load(&mut attr, &what) {
        Ok(fd) => Ok(owned_fd(fd)),
        Err(first) => {
            let mut log = vec![0u8; LOG_SIZE];
            attr.log_level = 1;
            attr.log_size = log.len() as u32;
            attr.log_buf = log.as_mut_ptr() as u64;
            match prog_load(&mut attr, &what) {
                Ok(fd) => Ok(owned_fd(fd)),
                Err(_) => {
                    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                    let text = String::from_utf8_lossy(&log[..end]);
                    let tail = &text[text.len().saturating_sub(LOG_TAIL)..];
                    Err(SysError {
                        call: first.call,
                        what: format!("{what}; verifier log ends: {}", tail.trim()),
                        source: first.source,
                    })
                }
            }
        }
    }
}

/// How many times a load the verifier gave up on with `EAGAIN` is tried (libbpf tries 5).
const PROG_LOAD_ATTEMPTS: u32 = 5;

/// `BPF_PROG_LOAD`, tried again while the verifier answers `EAGAIN`: it checks for a pending
/// signal between instructions and gives up with `EAGAIN` when one is, whatever the program
/// (seen under the root test suite: a 5357-instruction program refused twice in a row after
/// 33 instructions). A short pause lets a burst of signals pass.
fn prog_load(attr: &mut ProgLoadAttr, what: &str) -> Result<i64> {
    let mut attempt = 1;
    loop {
        match bpf(BPF_PROG_LOAD, attr, "bpf(BPF_PROG_LOAD)", what) {
            Err(e) if e.errno() == Some(libc::EAGAIN) && attempt < PROG_LOAD_ATTEMPTS => {
                std::thread::sleep(std::time::Duration::from_millis(10 * u64::from(attempt)));
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// A loaded tc (`BPF_PROG_TYPE_SCHED_CLS`) program.
#[derive(Debug)]
pub struct TcProgram {
    fd: OwnedFd,
}

impl TcProgram {
    /// Loads `insns` (GPL: the helpers it may call need no more); a program the verifier
    /// refuses is loaded again with the log on, and the log's end is in the error.
    pub fn load(name: &str, insns: &[Insn]) -> Result<Self> {
        let fd = load_program(BPF_PROG_TYPE_SCHED_CLS, BPF_TCX_INGRESS, name, insns)?;
        Ok(Self { fd })
    }

    /// Runs the program `repeat` times on `frame` (an Ethernet frame, no device).
    pub fn test_run(&self, frame: &[u8], repeat: u32) -> Result<TestRun> {
        let mut attr = TestRunAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat,
            ..Default::default()
        };
        bpf(
            BPF_PROG_TEST_RUN,
            &mut attr,
            "bpf(BPF_PROG_TEST_RUN)",
            &format!("{} bytes", frame.len()),
        )?;
        Ok(TestRun {
            retval: attr.retval,
            ns_per_run: attr.duration,
        })
    }
}

/// What `BPF_PROG_TEST_RUN` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value (of the last run).
    pub retval: u32,
    /// The kernel's mean time per run, in ns.
    pub ns_per_run: u32,
}

/// A program attached at tc ingress of an interface through a TCX link: detached when the
/// link is dropped (or the process dies).
#[derive(Debug)]
pub struct TcxLink {
    _fd: OwnedFd,
}

impl TcxLink {
    /// Attaches `prog` at the ingress of interface `ifindex`, after any TCX programs there.
    pub fn attach(prog: &TcProgram, ifindex: u32) -> Result<Self> {
        let fd = link_create(
            &prog.fd,
            ifindex,
            BPF_TCX_INGRESS,
            "bpf(BPF_LINK_CREATE, BPF_TCX_INGRESS)",
        )?;
        Ok(Self { _fd: fd })
    }
}

/// `BPF_LINK_CREATE` of `prog` at interface `ifindex` for `attach_type`: the link's fd.
fn link_create(
    prog: &OwnedFd,
    ifindex: u32,
    attach_type: u32,
    call: &'static str,
) -> Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type,
        ..Default::default()
    };
    let fd = bpf(
        BPF_LINK_CREATE,
        &mut attr,
        call,
        &format!("ifindex {ifindex}"),
    )?;
    Ok(owned_fd(fd))
}

/// A loaded XDP (`BPF_PROG_TYPE_XDP`) program.
#[derive(Debug)]
pub struct XdpProgram {
    fd: OwnedFd,
}

impl XdpProgram {
    /// Loads `insns` as an XDP program (see [`TcProgram::load`] for the license and the
    /// verifier's log).
    pub fn load(name: &str, insns: &[Insn]) -> Result<Self> {
        let fd = load_program(BPF_PROG_TYPE_XDP, BPF_XDP, name, insns)?;
        Ok(Self { fd })
    }
}

/// An XDP program attached to an interface through a `BPF_XDP` link: the kernel picks the
/// driver's native mode where there is one (veth has), and the program is detached when the
/// link is dropped or the process dies, so nothing is left on the interface after a crash.
#[derive(Debug)]
pub struct XdpLink {
    _fd: OwnedFd,
}

impl XdpLink {
    /// Attaches `prog` to interface `ifindex`; fails if another XDP program is attached.
    pub fn attach(prog: &XdpProgram, ifindex: u32) -> Result<Self> {
        let fd = link_create(&prog.fd, ifindex, BPF_XDP, "bpf(BPF_LINK_CREATE, BPF_XDP)")?;
        Ok(Self { _fd: fd })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_as_struct_bpf_insn() {
        // `r0 = 0; exit` and `r1 = *(u32 *)(r6 + 20)`, as llvm-objdump shows them.
        assert_eq!(
            Insn::new(0xb7, 0, 0, 0, 0).to_bytes(),
            [0xb7, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::new(0x95, 0, 0, 0, 0).to_bytes(),
            [0x95, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::new(0x61, 1, 6, 20, 0).to_bytes(),
            [0x61, 0x61, 0x14, 0, 0, 0, 0, 0]
        );
        // `if r2 s> -3 goto -2` packs negative fields as two's complement.
        assert_eq!(
            Insn::new(0x65, 2, 0, -2, -3).to_bytes(),
            [0x65, 0x02, 0xfe, 0xff, 0xfd, 0xff, 0xff, 0xff]
        );
        assert_eq!(std::mem::size_of::<Insn>(), 8);
    }

    #[test]
    fn attribute_layouts_match_union_bpf_attr() {
        assert_eq!(std::mem::size_of::<MapCreateAttr>(), 44);
        assert_eq!(std::mem::size_of::<MapElemAttr>(), 32);
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<TestRunAttr>(), 40);
        assert_eq!(std::mem::size_of::<LinkCreateAttr>(), 32);
    }

    #[test]
    fn possible_cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-3,6"), Some(7));
        assert_eq!(parse_cpu_list("x"), None);
    }

    /// `r0 = 0; exit`: the least program the verifier accepts.
    fn return_zero() -> [Insn; 2] {
        [Insn::new(0xb7, 0, 0, 0, 0), Insn::new(0x95, 0, 0, 0, 0)]
    }

    #[test]
    fn a_load_interrupted_by_signals_is_tried_again_a_few_times() {
        // Every attempt but the last is refused with EAGAIN; the last reaches the kernel,
        // which loads the program (root) or refuses it for want of privileges, never EAGAIN.
        let _plan = crate::fault::inject(
            "bpf(BPF_PROG_LOAD)",
            libc::EAGAIN,
            0,
            PROG_LOAD_ATTEMPTS - 1,
        );
        match TcProgram::load("retry_test", &return_zero()) {
            Ok(_) => {}
            Err(e) => assert_ne!(e.errno(), Some(libc::EAGAIN), "{e}"),
        }
    }

    #[test]
    fn a_load_interrupted_every_time_fails_with_eagain() {
        // Both the plain load and the one with the log give up after their attempts.
        let _plan = crate::fault::inject(
            "bpf(BPF_PROG_LOAD)",
            libc::EAGAIN,
            0,
            2 * PROG_LOAD_ATTEMPTS,
        );
        let e = TcProgram::load("retry_test", &return_zero()).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EAGAIN), "{e}");
    }

    #[test]
    fn names_are_cut_and_cleaned_for_the_kernel() {
        assert_eq!(&name16("poolcap-probe")[..14], b"poolcap_probe\0");
        assert_eq!(name16("a_very_long_program_name")[15], 0);
    }
}
