//! Messages for people, on stderr and stdout, that can never end the process.
//!
//! `eprintln!` panics when stderr is a closed pipe (`poolcap capture 2> >(head -c 1)`): the
//! panic unwinds out of a capture before its statistics and file are finished. Everything a
//! capture prints while it runs or stops goes through [`say!`](crate::say) instead, which drops a message
//! nobody can read and carries on: a lost message costs nothing, a lost capture costs the
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
