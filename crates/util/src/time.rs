//! Wall-clock instants as Unix seconds, and their RFC 3339 UTC form (for
//! Kubernetes objects, and for people naming a moment on a command line).

use std::num::ParseIntError;
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Formats a time as RFC 3339 UTC with seconds, e.g. `2026-11-22T03:04:05Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Why text does not name an instant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InstantError {
    /// All digits, but not a number of seconds that fits (too many digits).
    #[error("{text:?}: {error}")]
    Seconds {
        /// The text, trimmed.
        text: String,
        /// Why it is not a number.
        #[source]
        error: ParseIntError,
    },
    /// Neither Unix seconds nor a valid UTC date or time (the text, trimmed).
    #[error("{0:?} is not Unix seconds, YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ")]
    Form(String),
}

/// Reads an instant given as Unix seconds (`1767225600`), a UTC date
/// (`2026-01-01`, its midnight) or an RFC 3339 UTC time
/// (`2026-01-01T12:00:00Z`).
pub fn parse_instant(s: &str) -> Result<i64, InstantError> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<i64>().map_err(|error| InstantError::Seconds {
            text: s.to_string(),
            error,
        });
    }
    let bad = || InstantError::Form(s.to_string());
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t.strip_suffix('Z').ok_or_else(bad)?)),
        None => (s, None),
    };
    let num = |part: &str, len: usize| -> Result<i64, InstantError> {
        if part.len() == len && part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    let ymd: Vec<&str> = date.split('-').collect();
    let [y, m, d] = ymd[..] else {
        return Err(bad());
    };
    let (year, month, day) = (num(y, 4)?, num(m, 2)?, num(d, 2)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad());
    }
    let mut secs = days_from_civil(year, month, day) * 86_400;
    if let Some(time) = time {
        let hms: Vec<&str> = time.split(':').collect();
        let [h, mi, se] = hms[..] else {
            return Err(bad());
        };
        let (h, mi, se) = (num(h, 2)?, num(mi, 2)?, num(se, 2)?);
        if h > 23 || mi > 59 || se > 59 {
            return Err(bad());
        }
        secs += h * 3600 + mi * 60 + se;
    }
    Ok(secs)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01 (the inverse).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        for (secs, text) in [
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (4_107_542_399, "2100-02-28T23:59:59Z"),
        ] {
            assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(secs)), text);
            assert_eq!(parse_instant(text), Ok(secs as i64));
        }
    }

    #[test]
    fn instants_parse_in_three_forms_and_nothing_else() {
        assert_eq!(parse_instant("1767225600"), Ok(1_767_225_600));
        assert_eq!(parse_instant("2026-01-01"), Ok(1_767_225_600));
        assert_eq!(parse_instant("2026-01-01T00:00:01Z"), Ok(1_767_225_601));
        assert_eq!(parse_instant("1969-12-31"), Ok(-86_400));
        for bad in [
            "",
            "2026-1-01",
            "2026-13-01",
            "2026-02-29",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00+01:00",
            "yesterday",
            "-5",
        ] {
            assert!(parse_instant(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_instant("2024-02-29"), Ok(1_709_164_800));
        // Every day of four centuries round-trips.
        for days in (-146_097..146_097).step_by(37) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }
}
