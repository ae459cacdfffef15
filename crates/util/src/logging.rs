//! Logging setup shared by every binary: `log` + `env_logger`, with klog's
//! verbosity levels (as Kubernetes components use them): `-v 2` start-up and requests (info), `-v 4`
//! general (debug), `-v 6` low level (trace). Below 2 only warnings and errors.
//! `RUST_LOG`, when set, overrides the level. Never log secrets.

use log::LevelFilter;

/// The crates whose log lines `-v` controls directly. env_logger matches a
/// module by prefix, so `confboot` covers every `confboot_*` library crate.
pub const OUR_CRATES: [&str; 7] = [
    "confboot",
    "confboot_cli",
    "confboot_tests",
    "joinsvc",
    "nodeagent",
    "bootstrapper",
    "confboot_tpm_provision",
];

/// The `log` level filter for a klog-style verbosity.
pub fn level_for(verbosity: u8) -> LevelFilter {
    match verbosity {
        0 | 1 => LevelFilter::Warn,
        2 | 3 => LevelFilter::Info,
        4 | 5 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// Installs the logger for a binary named `component`, writing to stderr.
/// Calling it twice is harmless.
pub fn init(component: &'static str, verbosity: u8) {
    let mut b = env_logger::Builder::new();
    // Dependencies (rustls, ureq, tiny_http) log four levels quieter than our own code.
    b.filter_level(level_for(verbosity.saturating_sub(4)));
    for ours in OUR_CRATES {
        b.filter_module(ours, level_for(verbosity));
    }
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    b.format(move |f, record| {
        use std::io::Write;
        writeln!(
            f,
            "{} {} {component}: {}",
            f.timestamp_millis(),
            record.level(),
            record.args()
        )
    });
    let _ = b.try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn klog_levels_map_to_log_levels() {
        assert_eq!(level_for(0), LevelFilter::Warn);
        assert_eq!(level_for(2), LevelFilter::Info);
        assert_eq!(level_for(4), LevelFilter::Debug);
        assert_eq!(level_for(6), LevelFilter::Trace);
        assert_eq!(level_for(9), LevelFilter::Trace);
    }
}
