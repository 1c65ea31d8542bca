//! A capture file written with `O_DIRECT`: each batch of records goes from an aligned buffer
//! to the device, past the page cache.
//!
//! Why: a buffered write copies every byte into the page cache and makes ext4 account for
//! every page (delayed allocation, buffer heads, LRU); on the veth lab that was most of the
//! writer's CPU at 1514-byte frames (`copy_folio_from_iter_atomic` alone 40% of poolcap's
//! samples). A direct write of 1 MiB took about a fifth of a buffered write's system time
//! per byte (`dd oflag=direct`). The records are still gathered into one aligned buffer (a
//! copy in user space, into memory that stays in the cache), since direct I/O needs aligned
//! memory, offsets and lengths, and the records sit wherever their chunks are.
//!
//! The whole-record guarantee: a direct write covers whole aligned blocks, so a batch is
//! padded to the next [`ALIGN`] bytes with a Name Resolution Block that names nothing (every
//! pcapng reader skips or ignores it). Every write therefore ends at a block boundary, the
//! file's size is always the end of the last whole batch, and `kill -9` leaves only whole
//! blocks. A failed write is cut back to the end of the last whole batch
//! ([`partial_batch_kept`](Output::partial_batch_kept) is 0).
//!
//! The padding makes the file a little larger than the records it holds (at most
//! [`ALIGN`] + 15 bytes per batch).
//!
//! Classic pcap has no block a reader skips, so a pcap batch cannot be padded
//! ([`Tail::Carry`]): a write covers the batch's whole aligned blocks only, and the bytes past
//! the last block boundary (part of a record, at most [`ALIGN`] - 1 bytes) stay in the buffer
//! and lead the next write. At the end (and after a failed write) the tail is written too
//! and the file cut to its exact length, so a stopped capture, a full disk or an I/O error
//! leave only whole records. While the capture runs the file ends at a block boundary, so
//! after `kill -9` its last record is cut short: every pcap reader handles that as it does a
//! `tcpdump -w` killed the same way (whose stdio buffer is flushed in fixed-size pieces):
//! libpcap hands over every whole record, then reports "truncated dump file"; Wireshark's
//! readers say the file was "cut short in the middle of a packet".

use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::os::unix::fs::FileExt;

use crate::write::Output;

/// Alignment of the buffer's memory, of every write's offset and of its length: the page
/// size, which covers the logical block size of every common device.
pub const ALIGN: usize = 4096;

/// pcapng Name Resolution Block: its records end with `nrb_record_end`, it may carry
/// options (a comment), and a reader that does not resolve names skips it.
const NRB_TYPE: u32 = 4;
const OPT_COMMENT: u16 = 1;
/// The smallest padding block: type, length, `nrb_record_end`, trailing length.
const MIN_PAD: usize = 16;

/// What a batch's bytes past its last aligned block become; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Padded with a block readers skip (pcapng).
    Pad,
    /// Kept for the next write (pcap).
    Carry,
}

/// A file opened with `O_DIRECT` (by the caller, who knows how it must be created), taking
/// whole batches of records; see the module docs.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    tail: Tail,
    /// Backing memory; the batch lives at `start..start + len`, `start` aligned.
    mem: Vec<u8>,
    start: usize,
    len: usize,
    /// Bytes the writer handed over in whole batches (padding not counted).
    logical: u64,
    /// Bytes in the file written whole (a block boundary): where the next write goes. With
    /// [`Tail::Carry`] the buffer starts with the bytes from here to `logical`.
    physical: u64,
    /// Bytes the last failed write got into the file past `physical`.
    landed: usize,
}

impl DirectFile {
    /// Wraps `file`, empty and opened for writing with `O_DIRECT`; `batch` is the usual
    /// size of a batch (the buffer grows for a larger one); `tail` says how a batch ends.
    pub fn new(file: File, batch: usize, tail: Tail) -> Self {
        let mut f = DirectFile {
            file,
            tail,
            mem: Vec::new(),
            start: 0,
            len: 0,
            logical: 0,
            physical: 0,
            landed: 0,
        };
        f.reserve(batch + ALIGN + MIN_PAD);
        f
    }

    /// Makes room for `more` bytes after the batch so far, in aligned memory.
    fn reserve(&mut self, more: usize) {
        let need = self.len + more;
        if self.start + need <= self.mem.len() {
            return;
        }
        let mut mem = vec![0u8; need.next_multiple_of(ALIGN) + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN);
        mem[start..start + self.len].copy_from_slice(&self.mem[self.start..self.start + self.len]);
        (self.mem, self.start) = (mem, start);
    }

    fn append(&mut self, bytes: &[u8]) {
        self.reserve(bytes.len());
        let at = self.start + self.len;
        self.mem[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

impl Write for DirectFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.append(buf);
        Ok(buf.len())
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.reserve(bufs.iter().map(|b| b.len()).sum());
        bufs.iter().map(|b| self.write(b)).sum()
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl DirectFile {
    /// Bytes at the buffer's start that belong to batches already handed over (the carried
    /// tail; 0 with [`Tail::Pad`]).
    fn carried(&self) -> usize {
        match self.tail {
            Tail::Pad => 0,
            Tail::Carry => usize::try_from(self.logical - self.physical).unwrap_or(usize::MAX),
        }
    }

    /// Writes the first `n` bytes of the buffer (whole blocks) at `physical` and keeps the
    /// rest at the buffer's start; on failure remembers how much landed.
    fn write_blocks(&mut self, n: usize) -> io::Result<()> {
        let (mut done, at) = (0, self.start);
        self.landed = 0;
        while done < n {
            let wrote = self
                .file
                .write_at(&self.mem[at + done..at + n], self.physical + done as u64);
            match wrote {
                Ok(0) => return self.failed(done, io::ErrorKind::WriteZero.into()),
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.failed(done, e),
            }
        }
        self.mem.copy_within(at + n..at + self.len, at);
        self.len -= n;
        self.physical += n as u64;
        Ok(())
    }

    fn failed(&mut self, landed: usize, e: io::Error) -> io::Result<()> {
        self.landed = landed;
        Err(e)
    }

    /// Writes the tail carried past `physical` (`logical - physical` bytes at the buffer's
    /// start) in a zero-padded block, unless a failed write got it there already, and cuts
    /// the file to `logical`.
    fn write_tail(&mut self) -> io::Result<()> {
        let tail = self.carried();
        if tail > 0 && self.landed < tail {
            let block = tail.next_multiple_of(ALIGN);
            self.reserve(block - self.len.min(block));
            self.mem[self.start + tail..self.start + block].fill(0);
            self.file
                .write_all_at(&self.mem[self.start..self.start + block], self.physical)?;
        }
        self.file.set_len(self.logical)
    }
}

impl Output for DirectFile {
    /// Writes the batch's whole aligned blocks at once: padded to the last one
    /// ([`Tail::Pad`]), or up to it, the rest carried ([`Tail::Carry`]).
    fn end_batch(&mut self) -> io::Result<()> {
        let records = self.len - self.carried();
        if records == 0 {
            return Ok(());
        }
        let blocks = match self.tail {
            Tail::Pad => {
                let pad = padding(self.len);
                self.reserve(pad);
                let at = self.start + self.len;
                put_padding(&mut self.mem[at..at + pad]);
                self.len += pad;
                self.len
            }
            Tail::Carry => self.len / ALIGN * ALIGN,
        };
        let written = self.write_blocks(blocks);
        if written.is_err() && self.tail == Tail::Pad {
            self.len -= padding(records);
        }
        written?;
        self.logical += records as u64;
        Ok(())
    }

    /// Only whole batches survive a failed write.
    fn partial_batch_kept(&self, _accepted: usize) -> usize {
        0
    }

    /// `len` is the end of the last whole batch the writer handed over: the file is cut
    /// back to where that batch's padding ends ([`Tail::Pad`]) or to `len` exactly, its
    /// carried tail written first ([`Tail::Carry`]).
    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        if len != self.logical {
            return Err(io::Error::other(format!(
                "a direct-I/O file is cut back only to a batch end ({} bytes), not {len}",
                self.logical
            )));
        }
        let cut = match self.tail {
            Tail::Pad => self.file.set_len(self.physical),
            Tail::Carry => self.write_tail(),
        };
        self.len = 0;
        cut
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn close(&mut self) -> io::Result<()> {
        self.end_batch()?;
        match self.tail {
            Tail::Pad => Ok(()),
            Tail::Carry => self.write_tail(),
        }
    }
}

/// Bytes of padding block that bring `len` bytes to a multiple of [`ALIGN`] (`len` is a
/// multiple of 4, as pcapng blocks are).
fn padding(len: usize) -> usize {
    match len.next_multiple_of(ALIGN) - len {
        0 => 0,
        p if p < MIN_PAD => p + ALIGN,
        p => p,
    }
}

/// Fills `out` (0, 16, 20, or at least 24 bytes, a multiple of 4) with one Name Resolution
/// Block naming nothing: 20 bytes hold an empty option list, more a comment of spaces.
fn put_padding(out: &mut [u8]) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let len = u32::try_from(n).unwrap_or(u32::MAX).to_ne_bytes();
    out[..4].copy_from_slice(&NRB_TYPE.to_ne_bytes());
    out[4..8].copy_from_slice(&len);
    out[8..12].fill(0); // nrb_record_end
    let options = &mut out[12..n - 4];
    if options.len() >= 8 {
        let comment = options.len() - 8;
        let code_len = [OPT_COMMENT, u16::try_from(comment).unwrap_or(u16::MAX)];
        options[..2].copy_from_slice(&code_len[0].to_ne_bytes());
        options[2..4].copy_from_slice(&code_len[1].to_ne_bytes());
        options[4..4 + comment].fill(b' ');
    }
    let end = options.len().saturating_sub(4);
    options[end..].fill(0); // opt_endofopt (or nothing when there is no room for options)
    out[n - 4..].copy_from_slice(&len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{read_bytes, CaptureWriter, FileFormat, IfStats, ReadError};
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn padding_reaches_the_next_aligned_end_with_one_block() {
        for len in (0..3 * ALIGN).step_by(4) {
            let p = padding(len);
            assert_eq!((len + p) % ALIGN, 0, "{len}");
            assert!(p == 0 || p >= MIN_PAD, "{len}: {p}");
        }
    }

    /// A file of `packets` packets of growing sizes in `format`, written in batches of
    /// `per_batch` through a `DirectFile` on the temporary directory's file system; `check`
    /// looks at the file after each batch.
    fn write_direct(
        format: FileFormat,
        packets: usize,
        per_batch: usize,
        check: impl Fn(&[u8], usize),
    ) -> (Vec<u8>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let tail = if format == FileFormat::Pcapng {
            Tail::Pad
        } else {
            Tail::Carry
        };
        let mut w = CaptureWriter::new(DirectFile::new(file, 1 << 16, tail), format, 0, "t0")
            .unwrap()
            .with_buffer_size(1 << 20);
        for i in 0..packets {
            let data = vec![i as u8; 60 + i % 1400];
            w.write_packet(i as u64 * 1000, &data, data.len() as u32)
                .unwrap();
            if (i + 1) % per_batch == 0 {
                // An empty record run ends the batch (and writes what write_packet gathered).
                w.write_records(&[], 0).unwrap();
                check(&std::fs::read(&path).unwrap(), i + 1);
            }
        }
        let written = w.packets_written();
        w.finish(Some(IfStats {
            received: packets as u64,
            dropped: 0,
        }))
        .unwrap();
        (std::fs::read(&path).unwrap(), written)
    }

    fn check_packets(f: &crate::CaptureFile, n: usize) {
        assert_eq!(f.packets.len(), n);
        for (i, p) in f.packets.iter().enumerate() {
            assert_eq!(p.ts_ns, i as u64 * 1000);
            assert_eq!(p.data, vec![i as u8; 60 + i % 1400], "packet {i}");
        }
    }

    #[test]
    fn every_batch_ends_aligned_and_every_packet_reads_back_once() {
        let whole_batches = |bytes: &[u8], n: usize| {
            assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
            check_packets(&read_bytes(bytes).unwrap(), n);
        };
        let (bytes, written) = write_direct(FileFormat::Pcapng, 1000, 37, whole_batches);
        assert_eq!(written, 1000);
        assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
        let f = read_bytes(&bytes).unwrap();
        check_packets(&f, 1000);
        assert_eq!(
            f.if_stats.map(|s| s.received),
            Some(1000),
            "statistics block kept"
        );
    }

    #[test]
    fn pcap_carries_the_tail_while_running_and_ends_exact() {
        // While running: whole blocks, every packet before the last block boundary whole,
        // at most the record that crosses it cut short (what kill -9 leaves).
        let blocks = |bytes: &[u8], n: usize| {
            assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
            let records: usize = (0..n).map(|i| 16 + 60 + i % 1400).sum();
            let whole = match read_bytes(bytes) {
                Ok(f) => f.packets.len(),
                Err(ReadError::Truncated { packets, .. }) => packets as usize,
                Err(e) => panic!("{e}"),
            };
            let past = 24 + (0..=whole).map(|i| 16 + 60 + i % 1400).sum::<usize>();
            assert!(whole == n || past > bytes.len(), "{whole} of {n} whole");
            assert!(
                24 + records - bytes.len() < ALIGN,
                "the tail is under a block"
            );
        };
        for format in [FileFormat::Pcap, FileFormat::PcapNs] {
            let (bytes, written) = write_direct(format, 1000, 37, blocks);
            assert_eq!(written, 1000);
            let records: usize = (0..1000).map(|i| 16 + 60 + i % 1400).sum();
            assert_eq!(bytes.len(), 24 + records, "{format}: exactly the records");
            check_packets(&read_bytes(&bytes).unwrap(), 1000);
        }
    }

    #[test]
    fn a_cut_goes_back_to_the_last_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        for (tail, len) in [(Tail::Pad, ALIGN), (Tail::Carry, 100)] {
            let path = dir.path().join(format!("{tail:?}"));
            let file = std::fs::File::create(&path).unwrap();
            let mut d = DirectFile::new(file, 64, tail);
            d.write_all(&[1u8; 100]).unwrap();
            d.end_batch().unwrap();
            d.write_all(&[2u8; 40]).unwrap();
            assert!(d.truncate_to(50).is_err(), "not a batch end");
            d.truncate_to(100).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len(), len, "{tail:?}");
            assert_eq!(bytes[..100], [1u8; 100], "{tail:?}");
        }
    }
}
