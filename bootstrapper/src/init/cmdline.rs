//! The kernel command line's `confboot.KEY=VALUE` words and the
//! percent-encoded argument list of `confboot.args`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Largest command line read (the kernel's own limit on x86 is 2 KiB; a
/// longer file is cut).
pub const MAX_CMDLINE_LEN: usize = 64 * 1024;

/// The value of the first word `confboot.KEY=VALUE` in `cmdline` (words
/// separated by white space, as the shell split them).
pub fn value<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline.split_ascii_whitespace().find_map(|word| {
        word.strip_prefix("confboot.")
            .and_then(|w| w.strip_prefix(key))
            .and_then(|w| w.strip_prefix('='))
    })
}

/// Decodes `%XX` (any byte, hex either case); a `%` not followed by two hex
/// digits stays as it is.
pub fn percent_decode(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex_digit(b[i + 1]), hex_digit(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn hex_digit(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// `confboot.args`: comma-separated, each argument percent-encoded. As the
/// shell's field splitting did: `a,,b` has an empty second argument, a
/// trailing comma adds none, an empty value is no argument.
pub fn bootstrapper_args(cmdline: &str) -> Vec<OsString> {
    arg_list(cmdline, "args")
}

/// `confboot.agentargs`: the node agent's arguments, encoded as
/// [`bootstrapper_args`]'s (its `--vpn-*` options, the same for every
/// node: what differs between nodes comes from their disk, TPM and
/// network).
pub fn agent_args(cmdline: &str) -> Vec<OsString> {
    arg_list(cmdline, "agentargs")
}

/// The comma-separated, percent-encoded list of `confboot.KEY`.
fn arg_list(cmdline: &str, key: &str) -> Vec<OsString> {
    let Some(raw) = value(cmdline, key) else {
        return Vec::new();
    };
    let mut words: Vec<&str> = raw.split(',').collect();
    if words.last() == Some(&"") {
        words.pop();
    }
    words
        .into_iter()
        .map(|a| OsString::from_vec(percent_decode(a)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_their_whole_key() {
        let line = "console=ttyS0 confboot.probe=1 confboot.tasks=a,b confboot.probex=2\n";
        assert_eq!(value(line, "probe"), Some("1"));
        assert_eq!(value(line, "tasks"), Some("a,b"));
        assert_eq!(value(line, "prob"), None);
        assert_eq!(value(line, "console"), None);
        // The first word wins.
        assert_eq!(value("confboot.a=1 confboot.a=2", "a"), Some("1"));
        assert_eq!(value("confboot.a=", "a"), Some(""));
    }

    #[test]
    fn percent_decoding_takes_any_byte() {
        assert_eq!(percent_decode("a%2Cb%20c%25"), b"a,b c%");
        assert_eq!(percent_decode("%ff%FE"), vec![0xff, 0xfe]);
        // Incomplete or non-hex escapes stay.
        assert_eq!(percent_decode("%"), b"%");
        assert_eq!(percent_decode("x%4"), b"x%4");
        assert_eq!(percent_decode("%zz%41"), b"%zzA");
    }

    #[test]
    fn args_are_split_on_commas_then_decoded() {
        let line = "quiet confboot.args=join,--endpoint,10.0.2.100:9000,--bogus%2Cx%20y,,-v,";
        let args = bootstrapper_args(line);
        let want: Vec<OsString> = [
            "join",
            "--endpoint",
            "10.0.2.100:9000",
            "--bogus,x y",
            "",
            "-v",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        assert_eq!(args, want);
        assert!(bootstrapper_args("quiet").is_empty());
        assert!(bootstrapper_args("confboot.args=").is_empty());
        // The agent's list is its own key.
        let both = "confboot.args=-v,4 confboot.agentargs=--vpn-cidr,10.118.0.0%2F24";
        assert_eq!(bootstrapper_args(both), [OsString::from("-v"), "4".into()]);
        assert_eq!(
            agent_args(both),
            [OsString::from("--vpn-cidr"), "10.118.0.0/24".into()]
        );
        assert!(agent_args(line).is_empty());
    }
}
