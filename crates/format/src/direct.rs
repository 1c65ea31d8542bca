//! A pcapng file written with `O_DIRECT`: each batch of records goes from an aligned buffer
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
//! Classic pcap has no block a reader skips, so a pcap file cannot be padded and is not
//! written this way. The padding makes the file a little larger than the records it holds
//! (at most [`ALIGN`] + 15 bytes per batch).

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

/// A file opened with `O_DIRECT` (by the caller, who knows how it must be created), taking
/// whole pcapng batches; see the module docs.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    /// Backing memory; the batch lives at `start..start + len`, `start` aligned.
    mem: Vec<u8>,
    start: usize,
    len: usize,
    /// Bytes the writer handed over in whole batches (padding not counted).
    logical: u64,
    /// Bytes in the file: where the next write goes.
    physical: u64,
}

impl DirectFile {
    /// Wraps `file`, empty and opened for writing with `O_DIRECT`; `batch` is the usual
    /// size of a batch (the buffer grows for a larger one).
    pub fn new(file: File, batch: usize) -> Self {
        let mut f = DirectFile {
            file,
            mem: Vec::new(),
            start: 0,
            len: 0,
            logical: 0,
            physical: 0,
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

impl Output for DirectFile {
    /// Pads the batch to a whole number of aligned blocks and writes it at once.
    fn end_batch(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let records = self.len;
        let pad = padding(records);
        self.reserve(pad);
        let at = self.start + self.len;
        put_padding(&mut self.mem[at..at + pad]);
        self.len += pad;
        let batch = &self.mem[self.start..self.start + self.len];
        self.len = 0;
        self.file.write_all_at(batch, self.physical)?;
        self.physical += batch.len() as u64;
        self.logical += records as u64;
        Ok(())
    }

    /// Only whole batches survive a failed write.
    fn partial_batch_kept(&self, _accepted: usize) -> usize {
        0
    }

    /// `len` is the end of the last whole batch the writer handed over: the file is cut
    /// back to where that batch's padding ends.
    fn truncate_to(&mut self, len: u64) -> io::Result<()> {
        self.len = 0;
        if len != self.logical {
            return Err(io::Error::other(format!(
                "a direct-I/O file is cut back only to a batch end ({} bytes), not {len}",
                self.logical
            )));
        }
        self.file.set_len(self.physical)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn close(&mut self) -> io::Result<()> {
        self.end_batch()
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
    use crate::{read_bytes, CaptureWriter, FileFormat, IfStats};
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

    /// A pcapng file of `packets` packets of growing sizes, written in batches of `per_batch`
    /// through a `DirectFile` on the temporary directory's file system.
    fn write_direct(packets: usize, per_batch: usize) -> (Vec<u8>, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.pcapng");
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .unwrap();
        let mut w = CaptureWriter::new(DirectFile::new(file, 1 << 16), FileFormat::Pcapng, 0, "t0")
            .unwrap()
            .with_buffer_size(1 << 20);
        for i in 0..packets {
            let data = vec![i as u8; 60 + i % 1400];
            w.write_packet(i as u64 * 1000, &data, data.len() as u32)
                .unwrap();
            if (i + 1) % per_batch == 0 {
                // An empty record run ends the batch (and writes what write_packet gathered).
                w.write_records(&[], 0).unwrap();
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

    #[test]
    fn every_batch_ends_aligned_and_every_packet_reads_back_once() {
        let (bytes, written) = write_direct(1000, 37);
        assert_eq!(written, 1000);
        assert_eq!(bytes.len() % ALIGN, 0, "the file is whole aligned blocks");
        let f = read_bytes(&bytes).unwrap();
        assert_eq!(f.packets.len(), 1000);
        for (i, p) in f.packets.iter().enumerate() {
            assert_eq!(p.ts_ns, i as u64 * 1000);
            assert_eq!(p.data, vec![i as u8; 60 + i % 1400], "packet {i}");
        }
        assert_eq!(
            f.if_stats.map(|s| s.received),
            Some(1000),
            "statistics block kept"
        );
    }

    #[test]
    fn a_cut_goes_back_to_the_last_whole_batch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcapng");
        let file = std::fs::File::create(&path).unwrap();
        let mut d = DirectFile::new(file, 64);
        d.write_all(&[1u8; 100]).unwrap();
        d.end_batch().unwrap();
        d.write_all(&[2u8; 40]).unwrap();
        assert!(d.truncate_to(50).is_err(), "not a batch end");
        d.truncate_to(100).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), ALIGN as u64);
    }
}
