//! A capture file in memory, for tests of the writer and of the whole engine: the test
//! hands a clone to the engine as its output and reads the bytes back once it is done.

use std::sync::{Arc, Mutex};

/// See the module docs. Clones share the bytes.
#[derive(Clone, Default)]
pub(crate) struct Shared(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Shared {
    /// Everything written so far.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl poolcap_format::Output for Shared {}
