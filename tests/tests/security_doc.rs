//! SECURITY.md names, for each threat, the tests that show it is stopped.
//! This keeps the file honest: every `file: test` it names is a test in
//! that file, and the count it states is the number it names.

use std::collections::BTreeSet;
use std::path::Path;

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

#[test]
fn every_test_security_md_names_exists_and_the_count_is_right() {
    let text = std::fs::read_to_string(repo().join("SECURITY.md")).expect("SECURITY.md");
    let named = named_tests(&text);
    assert!(named.len() > 40, "only {} tests named", named.len());
    for (file, name) in &named {
        let source = std::fs::read_to_string(repo().join(file))
            .unwrap_or_else(|e| panic!("SECURITY.md names {file}: {e}"));
        assert!(
            source.contains(&format!("fn {name}(")),
            "SECURITY.md names {file}: {name}, which is not there"
        );
    }
    let stated = format!("{} named tests", named.len());
    assert!(
        text.contains(&stated),
        "SECURITY.md should say \"{stated}\""
    );
}
