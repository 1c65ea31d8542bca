//! Offload policies: where a freshly sealed chunk is processed, and whether a capture queue
//! takes packets from the kernel at all. Pure logic: a policy sees backlogs (chunks waiting
//! in each capture queue) and decides; it starts no thread, does no I/O and reads no clock,
//! so unit tests and `poolcap sim` drive exactly the code the engine runs.
//!
//! - [`Basic`] is WireCAP's B-(M,R): every chunk stays with its own queue's workers.
//! - [`Buddy`] is A-(M,R,T): once a queue's backlog exceeds T% of R, each new chunk goes to
//!   the buddy (a queue of the same buddy group) with the lowest backlog still under T%; if
//!   none is, it stays home. Chunks always return to their home pool, whoever processed them.
//! - [`Congestion`] is Ksensor's control: when the backlog reaches HIGH% of R the capture
//!   queue stops taking packets from the kernel (which counts what it then drops) until the
//!   backlog falls to LOW%, so no CPU is spent capturing what cannot be analysed.
//!
//! Adding a policy means adding one type that implements [`Policy`] and a [`PolicySpec`]
//! variant; the engine does not change.

use std::fmt;

/// What the engine asks a policy, for one capture queue.
pub trait Policy: Send + fmt::Debug {
    /// The capture queue whose workers should process a chunk just sealed on `queue`.
    /// `backlogs[i]` is the number of chunks waiting in capture queue i, `capacity` is R.
    fn route(&mut self, queue: usize, backlogs: &[usize], capacity: usize) -> usize;

    /// Whether `queue` should stop taking packets from the kernel now.
    fn pause(&mut self, _queue: usize, _backlogs: &[usize], _capacity: usize) -> bool {
        false
    }
}

/// B-(M,R): process at home.
#[derive(Debug, Clone, Copy, Default)]
pub struct Basic;

impl Policy for Basic {
    fn route(&mut self, queue: usize, _backlogs: &[usize], _capacity: usize) -> usize {
        queue
    }
}

/// Backlog as a share of capacity, in percent.
fn percent(backlog: usize, capacity: usize) -> f64 {
    100.0 * backlog as f64 / capacity.max(1) as f64
}

/// A-(M,R,T): offload to the least-loaded buddy under the threshold.
#[derive(Debug, Clone)]
pub struct Buddy {
    /// Threshold T in percent of R.
    pub threshold: f64,
    /// The queues of this queue's buddy group (itself included).
    pub group: Vec<usize>,
}

impl Policy for Buddy {
    fn route(&mut self, queue: usize, backlogs: &[usize], capacity: usize) -> usize {
        if percent(backlogs[queue], capacity) <= self.threshold {
            return queue;
        }
        self.group
            .iter()
            .copied()
            .filter(|&b| b != queue && percent(backlogs[b], capacity) < self.threshold)
            .min_by_key(|&b| (backlogs[b], b))
            .unwrap_or(queue)
    }
}

/// Ksensor's congestion control: pause at HIGH%, resume at LOW%.
#[derive(Debug, Clone)]
pub struct Congestion {
    /// Pause when the backlog reaches this percent of R.
    pub high: f64,
    /// Resume when it falls to this percent.
    pub low: f64,
    paused: bool,
}

impl Congestion {
    /// A controller that is not paused.
    pub fn new(high: f64, low: f64) -> Self {
        Self {
            high,
            low,
            paused: false,
        }
    }
}

impl Policy for Congestion {
    fn route(&mut self, queue: usize, _backlogs: &[usize], _capacity: usize) -> usize {
        queue
    }

    fn pause(&mut self, queue: usize, backlogs: &[usize], capacity: usize) -> bool {
        let p = percent(backlogs[queue], capacity);
        if self.paused {
            self.paused = p > self.low;
        } else {
            self.paused = p >= self.high;
        }
        self.paused
    }
}

/// A policy as chosen on the command line (`--offload`), instantiated once per queue.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicySpec {
    /// `basic`.
    Basic,
    /// `buddy:T`.
    Buddy {
        /// T in percent.
        threshold: f64,
    },
    /// `congestion:HIGH,LOW`.
    Congestion {
        /// HIGH in percent.
        high: f64,
        /// LOW in percent.
        low: f64,
    },
}

impl std::str::FromStr for PolicySpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let pct = |v: &str| -> Result<f64, String> {
            let x: f64 = v
                .trim()
                .trim_end_matches('%')
                .parse()
                .map_err(|_| format!("`{v}` is not a percentage"))?;
            if (0.0..=100.0).contains(&x) {
                Ok(x)
            } else {
                Err(format!("{x} is not between 0 and 100"))
            }
        };
        match s.split_once(':') {
            None if s == "basic" => Ok(PolicySpec::Basic),
            Some(("buddy", t)) => Ok(PolicySpec::Buddy { threshold: pct(t)? }),
            Some(("congestion", hl)) => {
                let (h, l) = hl
                    .split_once(',')
                    .ok_or("congestion takes HIGH,LOW (e.g. congestion:90,50)")?;
                let (high, low) = (pct(h)?, pct(l)?);
                if low >= high {
                    return Err(format!(
                        "congestion: LOW ({low}) must be below HIGH ({high})"
                    ));
                }
                Ok(PolicySpec::Congestion { high, low })
            }
            _ => Err(format!("`{s}`: use basic, buddy:T or congestion:HIGH,LOW")),
        }
    }
}

impl PolicySpec {
    /// The policy instance for `queue`, whose buddy group is `group`.
    pub fn build(&self, group: &[usize]) -> Box<dyn Policy> {
        match *self {
            PolicySpec::Basic => Box::new(Basic),
            PolicySpec::Buddy { threshold } => Box::new(Buddy {
                threshold,
                group: group.to_vec(),
            }),
            PolicySpec::Congestion { high, low } => Box::new(Congestion::new(high, low)),
        }
    }
}

/// Parses `--buddy-groups 0,1;2,3` for `queues` queues: every queue in exactly one group.
pub fn parse_buddy_groups(s: &str, queues: usize) -> Result<Vec<Vec<usize>>, String> {
    let mut seen = vec![false; queues];
    let mut groups = Vec::new();
    for part in s.split(';').filter(|p| !p.trim().is_empty()) {
        let mut g = Vec::new();
        for q in part.split(',') {
            let q: usize = q
                .trim()
                .parse()
                .map_err(|_| format!("`{q}` is not a queue number"))?;
            if q >= queues {
                return Err(format!(
                    "queue {q} does not exist (capturing with {queues} queues)"
                ));
            }
            if std::mem::replace(&mut seen[q], true) {
                return Err(format!("queue {q} is in two buddy groups"));
            }
            g.push(q);
        }
        groups.push(g);
    }
    // Queues not named form their own single-queue groups.
    for (q, s) in seen.iter().enumerate() {
        if !s {
            groups.push(vec![q]);
        }
    }
    Ok(groups)
}

/// The group of `queue` among `groups`.
pub fn group_of(groups: &[Vec<usize>], queue: usize) -> Vec<usize> {
    groups
        .iter()
        .find(|g| g.contains(&queue))
        .cloned()
        .unwrap_or_else(|| vec![queue])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_always_stays_home() {
        assert_eq!(Basic.route(1, &[0, 100, 0], 10), 1);
    }

    #[test]
    fn buddy_offloads_exactly_past_the_threshold() {
        let mut p = Buddy {
            threshold: 60.0,
            group: vec![0, 1, 2],
        };
        // R = 10: 6 chunks = 60% is not past T; 7 is.
        assert_eq!(p.route(0, &[6, 0, 0], 10), 0);
        assert_eq!(p.route(0, &[7, 3, 1], 10), 2, "lowest backlog buddy");
        assert_eq!(p.route(0, &[7, 1, 1], 10), 1, "ties go to the lower queue");
    }

    #[test]
    fn buddy_never_offloads_to_a_buddy_at_or_over_the_threshold() {
        let mut p = Buddy {
            threshold: 60.0,
            group: vec![0, 1, 2],
        };
        assert_eq!(
            p.route(0, &[9, 6, 8], 10),
            0,
            "every buddy is at or over T: stay home"
        );
        assert_eq!(p.route(0, &[9, 6, 5], 10), 2);
    }

    #[test]
    fn buddy_never_leaves_its_group() {
        let mut p = Buddy {
            threshold: 50.0,
            group: vec![0, 1],
        };
        assert_eq!(
            p.route(0, &[9, 8, 0, 0], 10),
            0,
            "queues 2 and 3 are idle but in another group"
        );
        assert_eq!(p.route(0, &[9, 2, 0, 0], 10), 1);
    }

    #[test]
    fn congestion_pauses_at_high_and_resumes_at_low() {
        let mut c = Congestion::new(80.0, 30.0);
        let script = [
            (5, false),
            (7, false),
            (8, true),
            (9, true),
            (5, true),
            (4, true),
            (3, false),
            (7, false),
            (8, true),
        ];
        for (i, (backlog, paused)) in script.into_iter().enumerate() {
            assert_eq!(
                c.pause(0, &[backlog], 10),
                paused,
                "step {i}: backlog {backlog}"
            );
        }
        assert_eq!(c.route(0, &[10], 10), 0);
    }

    #[test]
    fn specs_parse_and_reject_nonsense() {
        assert_eq!("basic".parse(), Ok(PolicySpec::Basic));
        assert_eq!(
            "buddy:60".parse(),
            Ok(PolicySpec::Buddy { threshold: 60.0 })
        );
        assert_eq!(
            "congestion:90,50".parse(),
            Ok(PolicySpec::Congestion {
                high: 90.0,
                low: 50.0
            })
        );
        assert!("congestion:50,90".parse::<PolicySpec>().is_err());
        assert!("buddy:160".parse::<PolicySpec>().is_err());
        assert!("fast".parse::<PolicySpec>().is_err());
    }

    #[test]
    fn buddy_groups_cover_every_queue_once() {
        assert_eq!(
            parse_buddy_groups("0,1;2,3", 4),
            Ok(vec![vec![0, 1], vec![2, 3]])
        );
        assert_eq!(parse_buddy_groups("0,2", 3), Ok(vec![vec![0, 2], vec![1]]));
        assert!(parse_buddy_groups("0,1;1,2", 3).is_err());
        assert!(parse_buddy_groups("0,5", 3).is_err());
        assert_eq!(group_of(&[vec![0, 1], vec![2]], 1), vec![0, 1]);
    }
}
