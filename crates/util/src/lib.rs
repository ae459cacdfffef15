//! Small pieces every confboot crate shares: encodings ([`hex`], [`base64`]),
//! the bounded byte reader of the binary formats ([`bytes`]),
//! bounded file reads and private writes ([`fs`]), wall-clock instants
//! ([`time`]) and the time floor that keeps them from going back
//! ([`floor`]), the stop signal every loop watches ([`stop`]), retry delays
//! ([`backoff`]), the binaries' option parser ([`args`]), logging setup
//! ([`logging`]) and text another party wrote made safe to print
//! ([`text`]).

pub mod args;
pub mod backoff;
pub mod base64;
pub mod bytes;
pub mod floor;
pub mod fs;
pub mod hex;
pub mod io_failure;
pub mod json;
pub mod logging;
pub mod stop;
pub mod text;
pub mod time;

pub use io_failure::IoFailure;
