//! Watching the capture interface while capturing: down, up again, or gone.
//!
//! A packet socket stops receiving when its interface goes down and receives again when it
//! comes back up; if the interface is deleted it never will. The supervisor looks at the
//! interface each time it wakes (a few times a second) and says so once per change on
//! stderr (as tcpdump keeps capturing across a down/up); capture threads wait long while the
//! link is down, since no packet can come, instead of waking for nothing. A deleted
//! interface ends the capture.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use poolcap_sys::socket::IfAsker;
use poolcap_sys::SysError;

/// What the interface looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Administratively up.
    Up,
    /// Down.
    Down,
    /// Deleted (or replaced by another interface of the same name).
    Gone,
}

/// What changed since the previous look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// It went down.
    Down,
    /// It came back up.
    Up,
    /// It was deleted.
    Gone,
}

/// The supervisor's view of the capture interface; see the module docs.
#[derive(Debug)]
pub struct LinkWatch {
    asker: IfAsker,
    ifindex: u32,
    up: bool,
    /// Shared with the capture threads: true while the link is down.
    pub down: Arc<AtomicBool>,
}

impl LinkWatch {
    /// Watches `iface` (index `ifindex`), assumed up.
    pub fn new(iface: &str, ifindex: u32) -> Result<Self, SysError> {
        Ok(Self {
            asker: IfAsker::new(iface)?,
            ifindex,
            up: true,
            down: Arc::default(),
        })
    }

    /// Looks at the interface: the index of its name, and its flags (two ioctls).
    pub fn look(&self) -> Seen {
        match self.asker.index() {
            Ok(i) if i == self.ifindex => {
                if self.asker.is_up().unwrap_or(true) {
                    Seen::Up
                } else {
                    Seen::Down
                }
            }
            _ => Seen::Gone,
        }
    }

    /// Takes in what was seen; returns the change to report, if any.
    pub fn observe(&mut self, seen: Seen) -> Option<LinkEvent> {
        let event = match (self.up, seen) {
            (_, Seen::Gone) => Some(LinkEvent::Gone),
            (true, Seen::Down) => Some(LinkEvent::Down),
            (false, Seen::Up) => Some(LinkEvent::Up),
            _ => None,
        };
        self.up = seen == Seen::Up;
        self.down.store(!self.up, Ordering::Relaxed);
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_is_reported_once() {
        let mut w = LinkWatch::new("t0", 7).unwrap();
        let seen = [
            Seen::Up,
            Seen::Down,
            Seen::Down,
            Seen::Up,
            Seen::Up,
            Seen::Gone,
        ];
        let events: Vec<_> = seen.iter().map(|&s| w.observe(s)).collect();
        assert_eq!(
            events,
            [
                None,
                Some(LinkEvent::Down),
                None,
                Some(LinkEvent::Up),
                None,
                Some(LinkEvent::Gone)
            ]
        );
    }

    #[test]
    fn capture_threads_see_the_link_down_while_it_is() {
        let mut w = LinkWatch::new("t0", 7).unwrap();
        w.observe(Seen::Down);
        assert!(w.down.load(Ordering::Relaxed));
        w.observe(Seen::Up);
        assert!(!w.down.load(Ordering::Relaxed));
    }

    #[test]
    fn a_missing_interface_is_gone() {
        assert_eq!(LinkWatch::new("no-such-if0", 1).unwrap().look(), Seen::Gone);
    }
}
