//! The console lines with the boot's measurements: the SHA-256 PCR bank
//! and the firmware's TCG event log (public values, printed on every boot
//! so golden measurements come from the production command line).

use std::path::Path;

use confboot_util::fs::read_bounded;

/// The PCR bank's directory in sysfs.
pub const PCR_DIR: &str = "/sys/class/tpm/tpm0/pcr-sha256";
/// The firmware's event log in securityfs.
pub const EVENT_LOG: &str = "/sys/kernel/security/tpm0/binary_bios_measurements";
/// Largest event log printed (a firmware's is tens of KiB); a larger one
/// is refused, not cut.
pub const MAX_EVENT_LOG_LEN: u64 = 4 << 20;
/// Most bytes read of one PCR file: sysfs reports a page as the size of
/// every attribute, whatever it holds (64 hex digits and a newline here).
const MAX_PCR_FILE_LEN: u64 = 4096;

/// `CONFBOOT-PCRS {"0":"<hex>",...,"23":"<hex>"}` (lowercase hex; a PCR
/// that cannot be read is an empty string), or `CONFBOOT-PCRS-ERROR ...`
/// without the bank.
pub fn pcr_line(dir: &Path) -> String {
    if !dir.is_dir() {
        return format!("CONFBOOT-PCRS-ERROR no {}", dir.display());
    }
    let values: Vec<String> = (0..24)
        .map(|i| {
            let v = read_bounded(&dir.join(i.to_string()), MAX_PCR_FILE_LEN)
                .map(|b| String::from_utf8_lossy(&b).trim().to_ascii_lowercase())
                .unwrap_or_default();
            format!("\"{i}\":\"{v}\"")
        })
        .collect();
    format!("CONFBOOT-PCRS {{{}}}", values.join(","))
}

/// `CONFBOOT-EVENTLOG <base64>` or `CONFBOOT-EVENTLOG-ERROR ...`.
pub fn event_log_line(path: &Path) -> String {
    match read_bounded(path, MAX_EVENT_LOG_LEN) {
        Ok(log) => format!("CONFBOOT-EVENTLOG {}", confboot_util::base64::encode(&log)),
        Err(e) => format!("CONFBOOT-EVENTLOG-ERROR no {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_testkit::TempDir;

    #[test]
    fn the_pcr_line_is_what_the_tests_parse() {
        let dir = TempDir::new("init-pcrs");
        for i in 0..24 {
            let v = if i == 4 {
                "AB01".to_string()
            } else {
                "00".repeat(2)
            };
            std::fs::write(dir.path().join(i.to_string()), format!("{v}\n")).unwrap();
        }
        std::fs::remove_file(dir.path().join("23")).unwrap();
        let line = pcr_line(dir.path());
        assert!(line.starts_with("CONFBOOT-PCRS {\"0\":\"0000\",\"1\":\"0000\","));
        assert!(line.contains(",\"4\":\"ab01\","), "{line}");
        assert!(line.ends_with(",\"23\":\"\"}"), "{line}");
        assert!(pcr_line(&dir.path().join("none")).starts_with("CONFBOOT-PCRS-ERROR no "));
    }

    #[test]
    fn the_event_log_is_one_base64_line() {
        let dir = TempDir::new("init-eventlog");
        let log = dir.path().join("log");
        std::fs::write(&log, [0u8, 1, 2, 255]).unwrap();
        assert_eq!(event_log_line(&log), "CONFBOOT-EVENTLOG AAEC/w==");
        assert!(event_log_line(&dir.path().join("none")).starts_with("CONFBOOT-EVENTLOG-ERROR"));
    }
}
