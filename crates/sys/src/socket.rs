//! AF_PACKET sockets and the socket options poolcap uses.
//!
//! One [`PacketSocket`] per receive queue for capture (joined to a fanout group, carrying a
//! TPACKET_V3 ring and an optional classic BPF filter) and one per sending thread for the
//! generator (batched `sendmmsg`, optionally bypassing the qdisc).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::{Result, SysError};
use crate::poll::{self, Readiness};
use crate::sockopt::{self, Plain};

/// `ETH_P_ALL` in network byte order: every protocol.
fn eth_p_all_be() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

/// Looks up an interface index by name in the current network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    let c = CString::new(name).map_err(|_| SysError {
        call: "if_nametoindex",
        what: name.to_string(),
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    crate::error::enter("if_nametoindex", || name.to_string())?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(SysError::last("if_nametoindex", name));
    }
    Ok(idx)
}

/// The hardware type (`ARPHRD_*`) of interface `name` in the current network namespace.
pub fn arphrd(name: &str) -> Result<u16> {
    IfAsker::new(name)?.hw_type()
}

/// Asks the kernel about one interface by name (the `SIOCGIF*` ioctls), in the current
/// network namespace: right whatever sysfs is mounted, where sysfs may show another
/// namespace's interfaces. Its socket stays open, so a question costs one ioctl and no file
/// (the capture's link watch asks a few times a second for hours).
#[derive(Debug)]
pub struct IfAsker {
    fd: OwnedFd,
    name: String,
}

impl IfAsker {
    /// An asker about `name` (which need not exist yet).
    pub fn new(name: &str) -> Result<Self> {
        let bytes = name.as_bytes();
        if bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(SysError {
                call: "ioctl(SIOCGIF*)",
                what: name.to_string(),
                source: io::Error::from(io::ErrorKind::InvalidInput),
            });
        }
        // SAFETY: socket() takes plain integers; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(SysError::last("socket(AF_INET, SOCK_DGRAM)", name));
        }
        Ok(Self {
            // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            name: name.to_string(),
        })
    }

    /// Runs `request` on the interface; returns the filled request.
    fn ask(&self, request: libc::c_ulong, call: &'static str) -> Result<libc::ifreq> {
        crate::error::enter(call, || self.name.clone())?;
        // SAFETY: ifreq is plain data (a name and a union of plain fields); all-zero is valid.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        // The name was checked shorter than IFNAMSIZ: it stays NUL-terminated.
        for (dst, &src) in req.ifr_name.iter_mut().zip(self.name.as_bytes()) {
            *dst = src as libc::c_char;
        }
        // SAFETY: `req` is a valid ifreq with a NUL-terminated name (zeroed past it); the
        // kernel writes the answer into its union, which outlives the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), request, &mut req) };
        if rc < 0 {
            return Err(SysError::last(call, &self.name));
        }
        Ok(req)
    }

    /// Its hardware type (`ARPHRD_*`).
    pub fn hw_type(&self) -> Result<u16> {
        let req = self.ask(libc::SIOCGIFHWADDR, "ioctl(SIOCGIFHWADDR)")?;
        // SAFETY: after SIOCGIFHWADDR succeeded the union holds `ifru_hwaddr`.
        Ok(unsafe { req.ifr_ifru.ifru_hwaddr }.sa_family)
    }

    /// Its index (`ENODEV` once it is deleted).
    pub fn index(&self) -> Result<u32> {
        let req = self.ask(libc::SIOCGIFINDEX, "ioctl(SIOCGIFINDEX)")?;
        // SAFETY: after SIOCGIFINDEX succeeded the union holds `ifru_ifindex`.
        Ok(unsafe { req.ifr_ifru.ifru_ifindex } as u32)
    }

    /// Whether it is administratively up (`IFF_UP`).
    pub fn is_up(&self) -> Result<bool> {
        let req = self.ask(libc::SIOCGIFFLAGS, "ioctl(SIOCGIFFLAGS)")?;
        // SAFETY: after SIOCGIFFLAGS succeeded the union holds `ifru_flags`.
        Ok(unsafe { req.ifr_ifru.ifru_flags } & libc::IFF_UP as libc::c_short != 0)
    }
}

/// PACKET_FANOUT modes (how the kernel spreads packets over the group's sockets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FanoutMode {
    /// By flow hash: one flow always lands on one socket.
    Hash,
    /// Round robin over the sockets.
    #[cfg_attr(feature = "clap", value(name = "lb"))]
    LoadBalance,
    /// By the CPU that received the packet.
    Cpu,
    /// By the packet's recorded receive queue.
    #[cfg_attr(feature = "clap", value(name = "qm"))]
    QueueMapping,
}

impl FanoutMode {
    fn raw(self) -> u32 {
        match self {
            FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
            FanoutMode::LoadBalance => libc::PACKET_FANOUT_LB,
            FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
            FanoutMode::QueueMapping => libc::PACKET_FANOUT_QM,
        }
    }
}

/// One classic BPF instruction, as `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Generic field (constant, offset).
    pub k: u32,
}

/// Counters from PACKET_STATISTICS since the previous read (the kernel resets them on read).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Packets that reached the socket's ring (the kernel's `tp_packets` less its drops).
    pub received: u64,
    /// Packets the kernel dropped because the ring had no room.
    pub drops: u64,
    /// Times the ring was frozen because user space held every block.
    pub freezes: u64,
}

/// An AF_PACKET raw socket.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl PacketSocket {
    /// Opens a raw packet socket that receives nothing until [`PacketSocket::bind`], so a
    /// filter and a ring can be set up before the first packet arrives. Its packets start
    /// with the interface's link-layer header.
    pub fn open() -> Result<Self> {
        Self::open_kind(libc::SOCK_RAW, "socket(AF_PACKET, SOCK_RAW)")
    }

    /// Opens a cooked packet socket (`SOCK_DGRAM`): its packets start at the network header
    /// and the link layer is described by each packet's `sockaddr_ll` (see
    /// [`crate::rx_ring::RxPacket::link`]). For capturing on every interface at once, whose
    /// link-layer headers differ.
    pub fn open_cooked() -> Result<Self> {
        Self::open_kind(libc::SOCK_DGRAM, "socket(AF_PACKET, SOCK_DGRAM)")
    }

    fn open_kind(kind: libc::c_int, call: &'static str) -> Result<Self> {
        crate::error::enter(call, String::new)?;
        // SAFETY: socket() takes plain integers; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_PACKET, kind | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(SysError::last(call, ""));
        }
        // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    fn setsockopt<T: Plain>(
        &self,
        level: i32,
        opt: i32,
        val: &T,
        call: &'static str,
    ) -> Result<()> {
        sockopt::set(self.fd.as_fd(), level, opt, val, call)
    }

    /// Binds to `ifindex` for every protocol: from now on packets arrive.
    pub fn bind(&self, ifindex: u32) -> Result<()> {
        let mut sll: libc::sockaddr_ll = sockopt::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = eth_p_all_be();
        sll.sll_ifindex = ifindex as i32;
        sockopt::bind(
            self.fd.as_fd(),
            &sll,
            "bind(AF_PACKET)",
            format!("ifindex {ifindex}"),
        )
    }

    /// Puts interface `ifindex` in promiscuous mode for as long as this socket lives
    /// (PACKET_MR_PROMISC membership): the kernel counts one promiscuity reference per
    /// socket and takes it back when the socket closes, also when the process is killed, so
    /// nothing is left to undo. tcpdump (libpcap) does the same.
    pub fn set_promiscuous(&self, ifindex: u32) -> Result<()> {
        let mut mreq: libc::packet_mreq = sockopt::zeroed();
        mreq.mr_ifindex = ifindex as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        self.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_ADD_MEMBERSHIP,
            &mreq,
            "setsockopt(PACKET_ADD_MEMBERSHIP)",
        )
    }

    /// Selects TPACKET_V3 for the rings of this socket.
    pub fn set_tpacket_v3(&self) -> Result<()> {
        let v: libc::c_int = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        self.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &v,
            "setsockopt(PACKET_VERSION)",
        )
    }

    /// Stops delivering frames this host sends on the interface (PACKET_IGNORE_OUTGOING,
    /// Linux 4.20): a forwarder that also transmits on the interface it captures on must not
    /// see its own frames again.
    pub fn set_ignore_outgoing(&self) -> Result<()> {
        let v: libc::c_int = 1;
        self.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            &v,
            "setsockopt(PACKET_IGNORE_OUTGOING)",
        )
    }

    /// Sends frames straight to the driver, skipping the qdisc layer.
    pub fn set_qdisc_bypass(&self, on: bool) -> Result<()> {
        let v: libc::c_int = on.into();
        self.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            &v,
            "setsockopt(PACKET_QDISC_BYPASS)",
        )
    }

    /// Asks for a send buffer of `bytes` (SO_SNDBUFFORCE, falling back to SO_SNDBUF).
    pub fn set_send_buffer(&self, bytes: usize) -> Result<()> {
        let v: libc::c_int = bytes.min(i32::MAX as usize) as libc::c_int;
        self.setsockopt(
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            &v,
            "setsockopt(SO_SNDBUFFORCE)",
        )
        .or_else(|_| {
            self.setsockopt(
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                &v,
                "setsockopt(SO_SNDBUF)",
            )
        })
    }

    /// Attaches a classic BPF program that the kernel runs on every packet before the ring.
    pub fn attach_filter(&self, program: &[BpfInsn]) -> Result<()> {
        let mut insns: Vec<libc::sock_filter> = program
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let len = u16::try_from(insns.len()).map_err(|_| SysError {
            call: "setsockopt(SO_ATTACH_FILTER)",
            what: format!("{} instructions", insns.len()),
            source: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        let prog = libc::sock_fprog {
            len,
            filter: insns.as_mut_ptr(),
        };
        // The kernel copies the program during the call, so `insns` may be freed after it.
        self.setsockopt(
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog,
            "setsockopt(SO_ATTACH_FILTER)",
        )
    }

    /// Sets up a TPACKET_V3 receive ring; [`crate::rx_ring::RxRing`] maps it.
    pub(crate) fn set_rx_ring(&self, req: &libc::tpacket_req3) -> Result<()> {
        self.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            req,
            "setsockopt(PACKET_RX_RING)",
        )
    }

    /// Joins fanout group `group` in `mode`. Every socket of the group must use the same mode.
    /// `ignore_outgoing`: the group does not get frames this host sends (a fanout group has
    /// its own hook, so [`PacketSocket::set_ignore_outgoing`] does not reach it).
    pub fn join_fanout(&self, group: u16, mode: FanoutMode, ignore_outgoing: bool) -> Result<()> {
        let flags = if ignore_outgoing {
            libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING
        } else {
            0
        };
        let arg: u32 = u32::from(group) | ((mode.raw() | flags) << 16);
        self.setsockopt(
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            &arg,
            "setsockopt(PACKET_FANOUT)",
        )
    }

    /// Reads (and thereby resets) the kernel's counters for this socket.
    pub fn take_statistics(&self) -> Result<KernelStats> {
        let st: libc::tpacket_stats_v3 = sockopt::get(
            self.fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            "getsockopt(PACKET_STATISTICS)",
        )?;
        // For TPACKET_V3 the kernel reports tp_packets including the drops.
        let drops = u64::from(st.tp_drops);
        Ok(KernelStats {
            received: u64::from(st.tp_packets).saturating_sub(drops),
            drops,
            freezes: u64::from(st.tp_freeze_q_cnt),
        })
    }

    /// Waits up to `timeout_ms` for the socket to become readable (see [`crate::poll`]).
    pub fn wait_readable(&self, timeout_ms: i32) -> Result<Readiness> {
        poll::wait_readable(self.fd.as_fd(), timeout_ms, "poll(AF_PACKET)")
    }
}

/// True for send errors that mean "the kernel has no room right now, try again"
/// (`ENOBUFS`, `EAGAIN`).
pub fn is_transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOBUFS) | Some(libc::EAGAIN))
}

/// A batch of frames to transmit with `sendmmsg`: an arena of `capacity` slots of `slot`
/// bytes that the caller fills, plus the message headers pointing into it. The arena is
/// allocated once and never moves, so sending a batch allocates nothing.
pub struct TxBatch {
    arena: Vec<u8>,
    slot: usize,
    lens: Vec<usize>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl std::fmt::Debug for TxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxBatch")
            .field("capacity", &self.lens.len())
            .field("slot", &self.slot)
            .finish()
    }
}

// SAFETY: the raw pointers in `iovs`/`msgs` point into `arena` (owned, never reallocated)
// and into `iovs` itself; moving the TxBatch to another thread moves their targets with it.
unsafe impl Send for TxBatch {}

impl TxBatch {
    /// A batch of `capacity` frames of at most `slot` bytes each.
    pub fn new(capacity: usize, slot: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            arena: vec![0; capacity * slot],
            slot,
            lens: vec![0; capacity],
            iovs: Vec::with_capacity(capacity),
            msgs: Vec::with_capacity(capacity),
        }
    }

    /// How many frames fit.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }

    /// The buffer of slot `i`, to write a frame into.
    pub fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.arena[i * self.slot..(i + 1) * self.slot]
    }

    /// Sets the length of the frame in slot `i`.
    pub fn set_len(&mut self, i: usize, len: usize) {
        self.lens[i] = len.min(self.slot);
    }

    /// The frame in slot `i`.
    pub fn frame(&self, i: usize) -> &[u8] {
        &self.arena[i * self.slot..i * self.slot + self.lens[i]]
    }

    /// Sends slots `from..to` on a bound socket with one `sendmmsg` call. Returns how many
    /// the kernel accepted (a prefix); `Err` only when it accepted none.
    pub fn send(&mut self, sock: &PacketSocket, from: usize, to: usize) -> io::Result<usize> {
        let to = to.min(self.lens.len());
        if from >= to {
            return Ok(0);
        }
        self.iovs.clear();
        let base = self.arena.as_mut_ptr();
        for i in from..to {
            // SAFETY: slot i lies inside the arena (i < capacity), so the offset is in bounds.
            let p = unsafe { base.add(i * self.slot) };
            self.iovs.push(libc::iovec {
                iov_base: p.cast(),
                iov_len: self.lens[i],
            });
        }
        // The iovecs point into `self.arena`, which neither moves nor is freed during the call.
        send_frames(sock.as_fd(), &mut self.iovs, &mut self.msgs)
    }
}

/// Sends one frame per iovec with one `sendmmsg` call on `fd` (through the syscall
/// chokepoint, so a test can make it fail); `msgs` is scratch space, cleared before return.
/// Returns how many frames the kernel accepted (a prefix); `Err` only when it accepted none.
///
/// The caller keeps every iovec's memory alive and unmoved for the call: the generator's
/// arena, or a pool chunk when forwarding.
pub(crate) fn send_frames(
    fd: BorrowedFd<'_>,
    iovs: &mut [libc::iovec],
    msgs: &mut Vec<libc::mmsghdr>,
) -> io::Result<usize> {
    crate::error::enter("sendmmsg", String::new).map_err(|e| e.source)?;
    msgs.clear();
    for iov in iovs.iter_mut() {
        // SAFETY: msghdr is plain data; all-zero (no address, no control data) is valid.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = iov as *mut libc::iovec;
        hdr.msg_iovlen = 1;
        msgs.push(libc::mmsghdr {
            msg_hdr: hdr,
            msg_len: 0,
        });
    }
    // SAFETY: each mmsghdr points at one iovec of `iovs`, borrowed mutably for this call so
    // neither moves; each iovec points at memory the caller keeps alive for the call (see
    // above); the kernel only reads the frames and writes `msg_len`.
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            msgs.len() as libc::c_uint,
            0,
        )
    };
    msgs.clear();
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc as usize)
}
