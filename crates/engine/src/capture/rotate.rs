//! When to start a new capture file, and its name, exactly as tcpdump decides (`-C`, `-G`,
//! `-W`; tcpdump.c `dump_packet_and_trunc` and `MakeFilename`), so scripts written for
//! tcpdump's file sets keep working:
//!
//! * `-C SIZE`: before a packet is written, if the file is larger than SIZE bytes, start the
//!   next one. Files after the first are named FILE1, FILE2, ...; with `-W N` the first is
//!   FILE0 and numbers wrap after N-1 (a ring: the oldest file is overwritten), zero-padded
//!   to the width of N-1 so they sort.
//! * `-G SECS`: before a packet, if SECS have passed since the file's period began, start a
//!   new file named by strftime(3) of FILE at the new period's start (local time). With
//!   `-W N` and no `-C`, the capture ends after N files ("Maximum file limit reached").
//!   Both together: the size count restarts at each new period, FILE is strftime'd and
//!   numbered.
//!
//! One departure: tcpdump reads the clock when it writes a packet; here the clock is the
//! packet's own timestamp, which is when it arrived (the writer may run a little behind),
//! so a packet lands in the file of the period it arrived in.

use std::path::PathBuf;

/// What the user asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RotateSpec {
    /// `-C`: start a new file once the current one is larger than this many bytes.
    pub size: Option<u64>,
    /// `-G`: start a new file on the first packet this many seconds after the period began.
    pub seconds: Option<u64>,
    /// `-W`: the ring size with `-C`, the number of files with `-G` alone.
    pub files: Option<u32>,
}

impl RotateSpec {
    /// Whether files rotate at all.
    pub fn rotates(&self) -> bool {
        self.size.is_some() || self.seconds.is_some()
    }
}

/// What to do before writing a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Keep writing to the current file.
    Same,
    /// Close the current file and go on in this one.
    Rotate(PathBuf),
    /// Close the current file and stop: `-W` files were made with `-G` alone.
    LimitReached,
}

/// The rotation state of a file set.
#[derive(Debug, Clone)]
pub struct Rotation {
    spec: RotateSpec,
    template: String,
    /// Digits of the file number (tcpdump's `WflagChars`).
    width: usize,
    /// Number of the current file within its period (`Cflag_count`).
    size_count: u32,
    /// Periods started so far (`Gflag_count`).
    time_count: u32,
    /// When the current period began, seconds since the epoch (`Gflag_time`).
    period_start: i64,
}

impl Rotation {
    /// Rotation of the files named by `template` (the `-w` argument), starting at `now`
    /// (seconds since the epoch).
    pub fn new(template: &str, spec: RotateSpec, now: i64) -> Self {
        // Digits of N-1: -W 10 numbers 0..9 with one digit, -W 11 0..10 with two.
        let width = spec.files.map_or(0, |n| {
            n.saturating_sub(1).checked_ilog10().map_or(0, |d| d + 1)
        }) as usize;
        Rotation {
            spec,
            template: template.to_owned(),
            width,
            size_count: 0,
            time_count: 0,
            period_start: now,
        }
    }

    /// The first file's name.
    pub fn first_name(&self) -> PathBuf {
        self.name(0)
    }

    /// Decides, before a packet with timestamp `ts_ns` is written to a file that holds
    /// `bytes`, whether to go on in another file.
    pub fn before_packet(&mut self, ts_ns: u64, bytes: u64) -> Next {
        let now = (ts_ns / 1_000_000_000) as i64;
        if let Some(g) = self.spec.seconds {
            if now - self.period_start >= g as i64 {
                self.period_start = now;
                self.time_count += 1;
                if self.spec.size.is_none() && self.spec.files.is_some_and(|w| self.time_count >= w)
                {
                    return Next::LimitReached;
                }
                self.size_count = 0;
                return Next::Rotate(self.name(0));
            }
        }
        if let Some(c) = self.spec.size {
            if bytes > c {
                self.size_count += 1;
                if self.spec.files.is_some_and(|w| self.size_count >= w) {
                    self.size_count = 0;
                }
                return Next::Rotate(self.name(self.size_count));
            }
        }
        Next::Same
    }

    /// What [`Rotation::before_packet`] lets through without a rotation: packets with a
    /// timestamp before the first (ns) into a file that holds at most the second bytes
    /// before each. A run of packets within both is written without asking of each.
    pub fn room(&self) -> (u64, u64) {
        let until = self.spec.seconds.map_or(u64::MAX, |g| {
            let end = self
                .period_start
                .saturating_add(i64::try_from(g).unwrap_or(i64::MAX));
            u64::try_from(end).map_or(0, |s| s.saturating_mul(1_000_000_000))
        });
        (until, self.spec.size.unwrap_or(u64::MAX))
    }

    /// tcpdump's `MakeFilename`: strftime'd with `-G`, then numbered with `-C` unless it is
    /// file 0 and `-W` asks for no digits.
    fn name(&self, count: u32) -> PathBuf {
        let base = match self.spec.seconds {
            Some(_) => poolcap_sys::time::strftime_local(&self.template, self.period_start)
                .unwrap_or_else(|| self.template.clone()),
            None => self.template.clone(),
        };
        let width = if self.spec.size.is_some() {
            self.width
        } else {
            0
        };
        if count == 0 && width == 0 {
            PathBuf::from(base)
        } else {
            PathBuf::from(format!("{base}{count:0width$}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn spec(size: Option<u64>, seconds: Option<u64>, files: Option<u32>) -> RotateSpec {
        RotateSpec {
            size,
            seconds,
            files,
        }
    }

    #[test]
    fn the_room_before_a_rotation_is_what_before_packet_lets_through() {
        for (size, seconds) in [(Some(1000), None), (None, Some(60)), (Some(1000), Some(60))] {
            let mut r = Rotation::new("f", spec(size, seconds, None), 100);
            let (until, room) = r.room();
            assert_eq!(until, seconds.map_or(u64::MAX, |g| (100 + g) * SEC));
            assert_eq!(room, size.unwrap_or(u64::MAX));
            let last = (until.min(u64::MAX - 1) - 1, room.min(u64::MAX - 1));
            assert_eq!(
                r.before_packet(last.0, last.1),
                Next::Same,
                "{size:?} {seconds:?}"
            );
            if seconds.is_some() {
                assert!(matches!(r.clone().before_packet(until, 0), Next::Rotate(_)));
            }
            if size.is_some() {
                assert!(matches!(r.before_packet(0, room + 1), Next::Rotate(_)));
            }
        }
        let r = Rotation::new("f", spec(None, None, None), 100);
        assert_eq!(r.room(), (u64::MAX, u64::MAX));
    }

    /// The names of the files a run of packets `(time s, file bytes)` goes to.
    fn names(r: &mut Rotation, packets: &[(u64, u64)]) -> Vec<String> {
        let mut out = vec![r.first_name().display().to_string()];
        for &(t, bytes) in packets {
            match r.before_packet(t * SEC, bytes) {
                Next::Same => {}
                Next::Rotate(p) => out.push(p.display().to_string()),
                Next::LimitReached => out.push("limit".into()),
            }
        }
        out
    }

    #[test]
    fn size_alone_numbers_files_after_the_first_from_1() {
        let mut r = Rotation::new("x.pcap", spec(Some(100), None, None), 0);
        let got = names(
            &mut r,
            &[(0, 50), (0, 100), (0, 101), (0, 30), (0, 200), (0, 101)],
        );
        assert_eq!(got, ["x.pcap", "x.pcap1", "x.pcap2", "x.pcap3"]);
    }

    #[test]
    fn size_with_a_file_count_is_a_zero_padded_ring() {
        let mut r = Rotation::new("x", spec(Some(10), None, Some(3)), 0);
        let got = names(&mut r, &[(0, 11), (0, 11), (0, 11), (0, 11)]);
        assert_eq!(got, ["x0", "x1", "x2", "x0", "x1"]);
        let r = Rotation::new("x", spec(Some(10), None, Some(11)), 0);
        assert_eq!(r.first_name(), PathBuf::from("x00"));
        let r = Rotation::new("x", spec(Some(10), None, Some(1)), 0);
        assert_eq!(r.first_name(), PathBuf::from("x"), "-W 1 needs no digit");
    }

    #[test]
    fn time_alone_renames_by_strftime_and_stops_after_w_files() {
        // A pattern without time fields: every period reuses the name, as in tcpdump.
        let mut r = Rotation::new("t.pcap", spec(None, Some(10), Some(3)), 100);
        let got = names(&mut r, &[(105, 0), (110, 0), (119, 0), (120, 0), (131, 0)]);
        assert_eq!(got, ["t.pcap", "t.pcap", "t.pcap", "limit"]);
        let mut r = Rotation::new("t-%s.pcap", spec(None, Some(10), None), 100);
        let got = names(&mut r, &[(109, 0), (110, 0), (125, 0)]);
        assert_eq!(got, ["t-100.pcap", "t-110.pcap", "t-125.pcap"]);
    }

    #[test]
    fn time_and_size_restart_the_count_each_period() {
        let mut r = Rotation::new("b-%s-", spec(Some(10), Some(60), None), 0);
        let got = names(&mut r, &[(1, 11), (2, 11), (60, 11), (61, 11)]);
        assert_eq!(got, ["b-0-", "b-0-1", "b-0-2", "b-60-", "b-60-1"]);
    }
}
