//! SECURITY.md names, for each threat, the tests that show it is stopped,
//! and lists apart the functional tests the mechanisms rely on. This keeps
//! the file honest: every `file: test` it names is a test in that file, no
//! test is both a hostile case and a functional one, and each of the two
//! counts it states is the number it names.

use std::collections::BTreeSet;
use std::path::Path;

/// The heading of the one section whose tests are functional, not hostile.
const FUNCTIONAL_HEADING: &str = "## Functional tests the mechanisms rely on";

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Every `` `path.rs: name` `` in the text.
fn named_tests(text: &str) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for quoted in text.split('`').skip(1).step_by(2) {
        if let Some((file, name)) = quoted.split_once(".rs: ") {
            let name_ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if name_ok {
                found.insert((format!("{file}.rs"), name.to_string()));
            }
        }
    }
    found
}

/// The text split into the functional section (from its heading to the
/// next `## ` heading) and everything else, where the hostile cases are.
fn split_sections(text: &str) -> (String, String) {
    let start = text
        .find(FUNCTIONAL_HEADING)
        .unwrap_or_else(|| panic!("SECURITY.md has no \"{FUNCTIONAL_HEADING}\" section"));
    let body = start + FUNCTIONAL_HEADING.len();
    let end = text[body..]
        .find("\n## ")
        .map_or(text.len(), |at| body + at);
    let hostile = format!("{}{}", &text[..start], &text[end..]);
    (hostile, text[start..end].to_string())
}

/// Whether `source` defines `fn name(` as a test: a `#[test]` among the
/// attributes and comments right above it.
fn is_test(source: &str, name: &str) -> Option<bool> {
    let at = source.find(&format!("fn {name}("))?;
    let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
    let above = source[..line_start].lines().rev().map(str::trim);
    let mut attributes = above.take_while(|l| l.starts_with("#[") || l.starts_with("//"));
    Some(attributes.any(|l| l.starts_with("#[test]")))
}

fn check_exist(named: &BTreeSet<(String, String)>) {
    for (file, name) in named {
        let source = std::fs::read_to_string(repo().join(file))
            .unwrap_or_else(|e| panic!("SECURITY.md names {file}: {e}"));
        match is_test(&source, name) {
            None => panic!("SECURITY.md names {file}: {name}, which is not there"),
            Some(false) => panic!("SECURITY.md names {file}: {name}, which is not a test"),
            Some(true) => {}
        }
    }
}

#[test]
fn every_test_security_md_names_exists_and_both_counts_are_right() {
    let text = std::fs::read_to_string(repo().join("SECURITY.md")).expect("SECURITY.md");
    let (hostile_text, functional_text) = split_sections(&text);
    let hostile = named_tests(&hostile_text);
    let functional = named_tests(&functional_text);
    assert!(
        hostile.len() > 40,
        "only {} hostile tests named",
        hostile.len()
    );
    check_exist(&hostile);
    check_exist(&functional);
    let both: Vec<_> = hostile.intersection(&functional).collect();
    assert!(
        both.is_empty(),
        "SECURITY.md names these both as hostile cases and as functional tests: {both:?}"
    );
    let stated = format!("{} named tests", hostile.len());
    assert!(
        hostile_text.contains(&stated),
        "SECURITY.md should say \"{stated}\" (the hostile cases)"
    );
    let stated = format!("{} functional tests", functional.len());
    assert!(
        functional_text.contains(&stated),
        "SECURITY.md's functional section should say \"{stated}\""
    );
}

#[test]
fn only_a_test_counts_as_a_named_test() {
    let source = "/// Doc.\n#[test]\n#[ignore]\nfn a_test() {}\n\nfn a_helper() {}\n\n    #[test]\n    // why\n    fn indented() {}\n";
    assert_eq!(is_test(source, "a_test"), Some(true));
    assert_eq!(is_test(source, "indented"), Some(true));
    assert_eq!(is_test(source, "a_helper"), Some(false));
    assert_eq!(is_test(source, "absent"), None);
}
