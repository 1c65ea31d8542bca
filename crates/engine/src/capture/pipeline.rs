//! Which data path a capture runs, as one value decided once at start: [`Pipeline`].
//!
//! Why one type: the data paths (count in the kernel ring, straight from the capture
//! threads to a sink, through workers) used to be chosen by a set of flags whose
//! combinations each thread had to read the same way. Now the start-up chooses a variant,
//! and each thread is given only what its variant needs: a capture thread its [`Handoff`],
//! a worker its [`Analysis`] stage, the sink thread its [`Sink`](super::sink::Sink).
//!
//! The type is generic over the sink so that the choice can be made (and the kernel ring
//! tuned for it) from the sink's description before the output file is created, then the
//! same choice carries the opened sink ([`Pipeline::try_map_sink`]).

use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use poolcap_probe::Hub;

use super::doorbell::Doorbell;
use super::pool::Chunk;
use super::worker::Stage;

/// What workers run on each packet: the x-loop load, and the probe's rules when probing.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// x-loop iterations per packet.
    pub load: u32,
    /// The probe's rules (`poolcap probe`).
    pub probe: Option<Arc<Hub>>,
}

impl Analysis {
    /// The analysis asked for, or `None` when nothing looks at the packets.
    pub fn new(load: u32, probe: Option<Arc<Hub>>) -> Option<Self> {
        (load > 0 || probe.is_some()).then_some(Self { load, probe })
    }

    /// A worker's stage (each worker has its own probe analyser).
    pub fn stage(&self) -> Stage {
        Stage::new(self.load, self.probe.as_ref())
    }
}

/// See the module docs. `S` is the sink: its description, then the opened sink.
#[derive(Debug)]
pub enum Pipeline<S> {
    /// Nothing downstream looks at packets (no load, no sink: the papers' /dev/null case):
    /// capture threads count them where they lie in the kernel ring.
    Count,
    /// `--inplace`: capture threads run the x-loop where packets lie in the kernel ring, with
    /// no pool and no workers (the plain fanout reader, whose ring is the only buffer).
    InPlace {
        /// x-loop iterations per packet.
        load: u32,
    },
    /// No analysis: capture threads hand sealed chunks straight to the sink (no worker hop).
    Direct(S),
    /// Workers run the analysis on each chunk, then hand it to the sink, or send it home
    /// when there is none.
    Workers {
        /// What the workers run.
        analysis: Analysis,
        /// Where processed chunks go.
        sink: Option<S>,
    },
}

impl<S> Pipeline<S> {
    /// The pipeline for a capture: `in_place` (`--inplace`, which takes no sink), the
    /// analysis and the sink.
    pub fn choose(in_place: bool, load: u32, probe: Option<Arc<Hub>>, sink: Option<S>) -> Self {
        if in_place {
            return Self::InPlace { load };
        }
        match (Analysis::new(load, probe), sink) {
            (None, None) => Self::Count,
            (None, Some(s)) => Self::Direct(s),
            (Some(analysis), sink) => Self::Workers { analysis, sink },
        }
    }

    /// The sink, if any.
    pub fn sink(&self) -> Option<&S> {
        match self {
            Self::Direct(s) => Some(s),
            Self::Workers { sink, .. } => sink.as_ref(),
            Self::Count | Self::InPlace { .. } => None,
        }
    }

    /// The same pipeline with its sink replaced by `f(sink)`.
    pub fn try_map_sink<T, E>(self, f: impl FnOnce(S) -> Result<T, E>) -> Result<Pipeline<T>, E> {
        Ok(match self {
            Self::Count => Pipeline::Count,
            Self::InPlace { load } => Pipeline::InPlace { load },
            Self::Direct(s) => Pipeline::Direct(f(s)?),
            Self::Workers { analysis, sink } => Pipeline::Workers {
                analysis,
                sink: sink.map(f).transpose()?,
            },
        })
    }

    /// Splits into what the workers run (none: no worker runs) and the sink.
    pub fn into_parts(self) -> (Option<Analysis>, Option<S>) {
        match self {
            Self::Count | Self::InPlace { .. } => (None, None),
            Self::Direct(s) => (None, Some(s)),
            Self::Workers { analysis, sink } => (Some(analysis), sink),
        }
    }

    /// How many worker threads run, for `asked` (at least one when workers run).
    pub fn workers(&self, asked: usize) -> usize {
        match self {
            Self::Workers { .. } => asked.max(1),
            _ => 0,
        }
    }
}

/// Where a capture thread hands what it takes (its part of the [`Pipeline`]).
#[derive(Debug, Clone)]
pub enum Handoff {
    /// Packets are processed where they lie in the kernel ring, with this many x-loop
    /// iterations (0: only counted); no chunk is filled.
    InPlace {
        /// x-loop iterations per packet.
        load: u32,
    },
    /// Sealed chunks go straight into the sink's input.
    Sink {
        /// The sink's input (room for every chunk of every pool).
        input: Arc<ArrayQueue<Chunk>>,
        /// The sink thread's bell.
        bell: Arc<Doorbell>,
    },
    /// Sealed chunks go to the capture queue the offload policy picks; these are the bells
    /// of the workers serving each capture queue.
    Workers(Arc<Vec<Vec<Arc<Doorbell>>>>),
}

impl Handoff {
    /// The load run in place, when packets are processed in the kernel ring.
    pub fn in_place(&self) -> Option<u32> {
        match self {
            Self::InPlace { load } => Some(*load),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(p: &Pipeline<&str>) -> String {
        match p {
            Pipeline::Count => "count".into(),
            Pipeline::InPlace { load } => format!("in place {load}"),
            Pipeline::Direct(s) => format!("direct to {s}"),
            Pipeline::Workers { analysis, sink } => {
                format!("workers x{} to {}", analysis.load, sink.unwrap_or("home"))
            }
        }
    }

    #[test]
    fn each_combination_chooses_one_pipeline() {
        let cases = [
            (false, 0, None, "count"),
            (false, 0, Some("file"), "direct to file"),
            (false, 7, None, "workers x7 to home"),
            (false, 7, Some("file"), "workers x7 to file"),
            (true, 7, None, "in place 7"),
            (true, 0, None, "in place 0"),
        ];
        for (in_place, load, sink, want) in cases {
            let p = Pipeline::choose(in_place, load, None, sink);
            assert_eq!(shape(&p), want, "in_place {in_place} load {load} {sink:?}");
            let workers = usize::from(want.starts_with("workers")) * 2;
            assert_eq!(p.workers(2), workers, "{want}");
        }
    }

    #[test]
    fn mapping_the_sink_keeps_the_path() {
        let p = Pipeline::choose(false, 0, None, Some("spec"));
        let opened: Pipeline<String> = p.try_map_sink(|s| Ok::<_, ()>(s.to_uppercase())).unwrap();
        assert_eq!(opened.sink().map(String::as_str), Some("SPEC"));
        assert!(matches!(opened, Pipeline::Direct(_)));
        let failed = Pipeline::choose(false, 3, None, Some("x")).try_map_sink(|_| Err::<(), _>(9));
        assert_eq!(failed.err(), Some(9));
        let (analysis, sink) = Pipeline::choose(false, 3, None, Some("x")).into_parts();
        assert_eq!((analysis.map(|a| a.load), sink), (Some(3), Some("x")));
    }
}
