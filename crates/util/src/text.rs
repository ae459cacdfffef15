//! Text another party wrote (a host, a peer, a disk), made safe to print:
//! [`printable`] keeps printable ASCII, writes every other byte as `\xNN`
//! (and a backslash as `\\`, so the escapes are unambiguous), and bounds
//! the result, saying how long the original was. A terminal or a log
//! reader sees one line of plain characters, whatever was sent: no escape
//! sequences, no line breaks that forge log lines, no megabytes.

/// The most characters [`printable`] keeps by default at a print site.
pub const MAX_PRINTED_CHARS: usize = 64;

/// `text` as at most `max` printable ASCII characters (plus, when cut, an
/// ellipsis and the original's length in bytes: `abc…(4096 bytes)`). An
/// escape is never split.
pub fn printable(text: &[u8], max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 16);
    for &b in text {
        let escaped;
        let piece = match b {
            b'\\' => "\\\\",
            0x20..=0x7e => {
                escaped = (b as char).to_string();
                escaped.as_str()
            }
            _ => {
                escaped = format!("\\x{b:02x}");
                escaped.as_str()
            }
        };
        if out.len() + piece.len() > max {
            out.push_str(&format!("…({} bytes)", text.len()));
            return out;
        }
        out.push_str(piece);
    }
    out
}

/// [`printable`] of a string's bytes.
pub fn printable_str(text: &str, max: usize) -> String {
    printable(text.as_bytes(), max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_kept_and_everything_else_escaped() {
        assert_eq!(printable(b"Linux initrd", 64), "Linux initrd");
        assert_eq!(printable(b"", 64), "");
        assert_eq!(
            printable(b"\x1b[31mred\x1b[0m\r\nforged line\0", 64),
            "\\x1b[31mred\\x1b[0m\\x0d\\x0aforged line\\x00"
        );
        assert_eq!(printable(b"a\\x41", 64), "a\\\\x41");
        assert_eq!(printable_str("é\u{202e}", 64), "\\xc3\\xa9\\xe2\\x80\\xae");
        assert_eq!(printable(&[0x7f, 0x80, 0xff], 64), "\\x7f\\x80\\xff");
    }

    #[test]
    fn the_result_is_bounded_says_how_long_the_original_was_and_splits_no_escape() {
        let huge = vec![b'A'; 1 << 20];
        assert_eq!(printable(&huge, 8), format!("AAAAAAAA…({} bytes)", 1 << 20));
        assert_eq!(printable(b"abc\x1bdef", 5), "abc…(7 bytes)");
        assert_eq!(printable(b"abcdefgh", 8), "abcdefgh");
        let many_escapes = vec![0x1bu8; 100_000];
        let out = printable(&many_escapes, MAX_PRINTED_CHARS);
        assert!(out.starts_with("\\x1b\\x1b"));
        assert!(out.ends_with("…(100000 bytes)"));
        assert!(out.chars().count() <= MAX_PRINTED_CHARS + 20);
        assert!(out.chars().all(|c| c == '…' || (' '..='~').contains(&c)));
    }
}
