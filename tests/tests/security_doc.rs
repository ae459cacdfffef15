//! SECURITY.md names, for each threat, the tests that show it is stopped,
//! after "Tests:", by their function name. This keeps the file honest:
//! every name it lists there is a `#[test]` function somewhere in the
//! workspace's sources (wherever it lives, so moving a test between files
//! or crates keeps the file true), it names enough of them that a change
//! of format cannot empty the check, and its lines stay short enough to
//! read. Each of the guarantees G1 to G8 has at least one row under
//! "Threats, mechanisms, tests" whose title names it, and every such row
//! names a test that exists and says what stays "Not covered".

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The marker after which a threat lists its tests.
const TESTS_MARKER: &str = "Tests:";

/// Fewer named tests than this means the list was not found, not that the
/// threats went away.
const MIN_NAMED_TESTS: usize = 150;

/// The guarantees every one of which needs a row: `G1` to `G8`.
const GUARANTEES: std::ops::RangeInclusive<u8> = 1..=8;

/// The section whose rows state the guarantees.
const ROWS_SECTION: &str = "## Threats, mechanisms, tests";

/// What a guarantee's row says of what it leaves open.
const NOT_COVERED: &str = "Not covered";

/// The longest line SECURITY.md may have.
const MAX_LINE_CHARS: usize = 200;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Every backquoted name in a "Tests:" list: from the marker to the end of
/// its paragraph or list item (a blank line, the next item, a heading) or
/// to a "Not covered" that follows it.
fn named_tests(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut in_list = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let ends_list = trimmed.is_empty() || trimmed.starts_with("- ") || trimmed.starts_with('#');
        if ends_list {
            in_list = false;
        }
        let rest = match trimmed.find(TESTS_MARKER) {
            Some(at) => {
                in_list = true;
                &trimmed[at + TESTS_MARKER.len()..]
            }
            None if in_list => trimmed,
            None => continue,
        };
        let rest = match rest.find(NOT_COVERED) {
            Some(at) => {
                in_list = false;
                &rest[..at]
            }
            None => rest,
        };
        for quoted in rest.split('`').skip(1).step_by(2) {
            found.insert(quoted.to_string());
        }
    }
    found
}

/// Whether `source` defines `fn name(` as a test: a `#[test]` among the
/// attributes and comments right above one of its definitions.
fn is_test(source: &str, name: &str) -> Option<bool> {
    let needle = format!("fn {name}(");
    let mut defined = false;
    for (at, _) in source.match_indices(&needle) {
        let before = source[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        defined = true;
        let line_start = source[..at].rfind('\n').map_or(0, |i| i + 1);
        let above = source[..line_start].lines().rev().map(str::trim);
        let mut attributes = above.take_while(|l| l.starts_with("#[") || l.starts_with("//"));
        if attributes.any(|l| l.starts_with("#[test]")) {
            return Some(true);
        }
    }
    defined.then_some(false)
}

/// Every `.rs` file of the repository, build output and the fuzz corpora
/// aside.
fn rust_sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let file_type = entry.file_type().expect("file type");
        if file_type.is_dir() {
            let skipped = name.starts_with('.') || name == "target" || name.starts_with("corpus");
            if !skipped {
                rust_sources(&path, found);
            }
        } else if file_type.is_file() && name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// The names among `named` that are not a test anywhere in `sources`, each
/// with why.
fn missing(named: &BTreeSet<String>, sources: &[String]) -> Vec<String> {
    named
        .iter()
        .filter_map(|name| {
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !valid {
                return Some(format!("`{name}` (not a test name)"));
            }
            let found: Vec<bool> = sources.iter().filter_map(|s| is_test(s, name)).collect();
            match (found.is_empty(), found.contains(&true)) {
                (true, _) => Some(format!("{name} (no `fn {name}` in the workspace)")),
                (false, false) => Some(format!("{name} (defined, but not a #[test])")),
                (false, true) => None,
            }
        })
        .collect()
}

fn workspace_sources() -> Vec<String> {
    let mut paths = Vec::new();
    rust_sources(repo(), &mut paths);
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

/// The list items ("- " to the next item, blank line or heading) of the
/// section headed `section`, up to the next `## ` heading.
fn section_items(text: &str, section: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current: Option<String> = None;
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("## ") {
            inside = trimmed == section;
        }
        let ends_item = trimmed.is_empty() || trimmed.starts_with("- ") || trimmed.starts_with('#');
        if ends_item {
            items.extend(current.take());
        }
        if inside && trimmed.starts_with("- ") {
            current = Some(String::new());
        }
        if let Some(item) = current.as_mut() {
            item.push_str(trimmed);
            item.push('\n');
        }
    }
    items.extend(current);
    items
}

/// The guarantees an item's title names: `Gn` (not part of a longer word)
/// in its bold title and the sentence that ends it.
fn guarantees_named(item: &str) -> BTreeSet<u8> {
    let Some(open) = item.find("**") else {
        return BTreeSet::new();
    };
    let after_open = open + 2;
    let Some(close) = item[after_open..].find("**").map(|i| after_open + i + 2) else {
        return BTreeSet::new();
    };
    // A title that is a sentence ends the head; one that is not ends at
    // the next full stop (`**A threat** (G1).`).
    let head_end = if item[..close - 2].ends_with('.') {
        close
    } else {
        item[close..].find('.').map_or(item.len(), |i| close + i)
    };
    let head = &item[..head_end];
    let bytes = head.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = BTreeSet::new();
    for (at, _) in head.match_indices('G') {
        let digits: String = head[at + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let before_ok = at == 0 || !word(bytes[at - 1]);
        let after = at + 1 + digits.len();
        let after_ok = after >= bytes.len() || !word(bytes[after]);
        if let (true, true, Ok(n)) = (before_ok, after_ok, digits.parse::<u8>()) {
            found.insert(n);
        }
    }
    found
}

/// What is wrong with the guarantees' rows: a guarantee without a row, a
/// row that names no test that exists, a row that does not say what stays
/// not covered.
fn guarantee_rows_faults(text: &str, sources: &[String]) -> Vec<String> {
    let items = section_items(text, ROWS_SECTION);
    let mut faults = Vec::new();
    for n in GUARANTEES {
        let rows: Vec<&String> = items
            .iter()
            .filter(|item| guarantees_named(item).contains(&n))
            .collect();
        if rows.is_empty() {
            faults.push(format!("G{n}: no row under \"{ROWS_SECTION}\" names it"));
        }
        for row in rows {
            let title: String = row
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(60)
                .collect();
            let named = named_tests(row);
            let missing = missing(&named, sources);
            if named.len() == missing.len() {
                faults.push(format!("G{n} ({title}): names no test that exists"));
            }
            if !row.contains(NOT_COVERED) {
                faults.push(format!("G{n} ({title}): says nothing \"{NOT_COVERED}\""));
            }
        }
    }
    faults
}

#[test]
fn every_guarantee_g1_to_g8_has_rows_naming_real_tests_and_what_is_not_covered() {
    let text = std::fs::read_to_string(repo().join("SECURITY.md")).expect("SECURITY.md");
    let faults = guarantee_rows_faults(&text, &workspace_sources());
    assert!(faults.is_empty(), "SECURITY.md's G1..G8 rows: {faults:#?}");
}

#[test]
fn a_guarantee_row_without_a_real_test_or_not_covered_is_reported() {
    let source = vec!["#[test]\nfn a_test() {}\nfn a_helper() {}\n".to_string()];
    let mut text = String::from("# T\n\n## Threats, mechanisms, tests\n\n");
    for n in GUARANTEES {
        text.push_str(&format!(
            "- **G{n}: a threat.** Mechanism.\n  Tests: `a_test`.\n  Not covered: x.\n"
        ));
    }
    assert_eq!(guarantee_rows_faults(&text, &source), Vec::<String>::new());
    // G2 names only a helper, G5 says nothing not covered, G7's row is
    // gone (G17 and a later "as G7" are no title of it), and a row in
    // another section does not count.
    let broken = text
        .replace(
            "**G2: a threat.** Mechanism.\n  Tests: `a_test`",
            "**G2: a threat.** Mechanism.\n  Tests: `a_helper`",
        )
        .replace(
            "**G5: a threat.** Mechanism.\n  Tests: `a_test`.\n  Not covered: x.",
            "**G5: a threat.** Mechanism.\n  Tests: `a_test`.",
        )
        .replace("**G7: a threat.**", "**G17: a threat.** Refused as G7.")
        + "\n## Not covered\n\n- **G7: elsewhere.** Tests: `a_test`. Not covered: x.\n";
    let faults = guarantee_rows_faults(&broken, &source);
    assert_eq!(faults.len(), 3, "{faults:#?}");
    assert!(
        faults[0].starts_with("G2 ") && faults[0].contains("no test"),
        "{faults:?}"
    );
    assert!(
        faults[1].starts_with("G5 ") && faults[1].contains("Not covered"),
        "{faults:?}"
    );
    assert!(faults[2].starts_with("G7: no row"), "{faults:?}");
}

#[test]
fn every_test_security_md_names_is_a_test_in_the_workspace() {
    let text = std::fs::read_to_string(repo().join("SECURITY.md")).expect("SECURITY.md");
    let named = named_tests(&text);
    assert!(
        named.len() >= MIN_NAMED_TESTS,
        "only {} tests named after \"{TESTS_MARKER}\" in SECURITY.md",
        named.len()
    );
    let missing = missing(&named, &workspace_sources());
    assert!(
        missing.is_empty(),
        "SECURITY.md names tests the code does not have: {missing:#?}"
    );
}

#[test]
fn security_md_lines_are_short() {
    let text = std::fs::read_to_string(repo().join("SECURITY.md")).expect("SECURITY.md");
    let long: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| line.chars().count() > MAX_LINE_CHARS)
        .map(|(i, _)| i + 1)
        .collect();
    assert!(
        long.is_empty(),
        "SECURITY.md lines over {MAX_LINE_CHARS} characters: {long:?}"
    );
}

#[test]
fn only_a_test_counts_as_a_named_test() {
    let source = "/// Doc.\n#[test]\n#[ignore]\nfn a_test() {}\n\nfn a_helper() {}\n\n    #[test]\n    // why\n    fn indented() {}\n";
    assert_eq!(is_test(source, "a_test"), Some(true));
    assert_eq!(is_test(source, "indented"), Some(true));
    assert_eq!(is_test(source, "a_helper"), Some(false));
    assert_eq!(is_test(source, "absent"), None);
    assert_eq!(
        is_test(source, "test"),
        None,
        "a suffix of another name is not the name"
    );
}

#[test]
fn a_name_that_is_no_test_in_the_workspace_is_reported() {
    let text = "- **A threat.** Its mechanism, `not_a_test_name_here`.\n  Tests: `a_test`,\n  `a_helper`, `absent_everywhere`. Not covered: `a_gap`,\n  `another_gap`.\n\nLater `outside_the_list`.\n";
    let named = named_tests(text);
    let expected: BTreeSet<String> = ["a_test", "a_helper", "absent_everywhere"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(named, expected);
    let sources = vec!["#[test]\nfn a_test() {}\nfn a_helper() {}\n".to_string()];
    let missing = missing(&named, &sources);
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(missing[0].starts_with("a_helper"), "{missing:?}");
    assert!(missing[1].starts_with("absent_everywhere"), "{missing:?}");
}
