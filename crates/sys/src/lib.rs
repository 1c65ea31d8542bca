//! poolcap-sys: the only crate of poolcap that contains `unsafe` code.
//!
//! It wraps exactly what the kernel offers for packet capture and generation on Linux and
//! nothing else: AF_PACKET sockets and their socket options ([`socket`]), the TPACKET_V3
//! receive ring ([`rx_ring`]), waiting on capture sockets ([`poll`]), the forwarder's sender
//! ([`tx`]), AF_XDP sockets for capture and for forwarding from the UMEM ([`xsk`]), generated
//! eBPF programs and maps ([`bpf`]), shared memory mappings (module `mmap`), a handful of
//! process facts ([`process`]), read-ahead hints for files ([`readahead`]), libpcap's version ([`libpcap`]) and its filter over a packet
//! cut short ([`pcap_filter`]), and what a TCP peer has not acknowledged ([`tcp`]).
//! Pipeline logic lives in `poolcap-core` and `poolcap-engine`, which forbid `unsafe` (as
//! every other crate of the workspace does).
//!
//! Every wrapper passes `error::enter` right before its system call: one chokepoint where
//! the unit tests' fake ([`fault`]) can make any named call fail.
//!
//! Safety contract: every `unsafe` block carries a `// SAFETY:` comment naming the
//! invariant it relies on; every type that hands out views of kernel-shared memory ties their
//! lifetime to a guard whose `Drop` gives the memory back to the kernel.

pub mod bpf;
pub mod error;
pub mod fault;
pub mod libpcap;
pub(crate) mod mmap;
pub mod netdev;
pub mod pcap_filter;
pub mod poll;
pub mod privilege;
pub mod process;
pub mod readahead;
pub mod rx_ring;
pub mod socket;
pub(crate) mod sockopt;
pub mod tcp;
pub mod time;
pub mod tx;
pub mod xdp;
pub mod xsk;

pub use error::SysError;
