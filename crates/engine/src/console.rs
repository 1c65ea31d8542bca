//! The lines for people that are not log messages: the status line and the final
//! accounting, which a capture prints as they are whatever the log level and format. Messages
//! about the run (start-up lines, warnings, errors) go through the `log` facade instead, to
//! the logger the `poolcap` command installs.
//!
//! Neither may end the process: `eprintln!` panics when stderr is a closed pipe (`poolcap
//! capture 2> >(head -c 1)`), and the panic would unwind out of a capture before its
//! statistics and file are finished. [`say!`](crate::say), like the logger, drops a line
//! nobody can read and carries on: a lost line costs nothing, a lost capture costs the
//! packets in it.

use std::fmt;
use std::io::Write;

/// Writes one line to stderr, ignoring any error (a closed pipe or terminal).
pub fn stderr_line(args: fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args);
    let _ = err.write_all(b"\n");
    let _ = err.flush();
}

/// `eprintln!` that never panics: see the module docs.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::stderr_line(format_args!($($arg)*))
    };
}
