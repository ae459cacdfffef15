//! An I/O operation that failed, with the system's error kept as the
//! source rather than flattened into text.

use std::fmt;
use std::io;
use std::sync::Arc;

/// An I/O operation that failed: what was being done and on what (`reading
/// /dev/vdb`; empty when the error says it all), and the system's error,
/// kept as the [`source`](std::error::Error::source).
///
/// Its text is `OP: ERROR`, or the error's alone when there is no
/// operation. Two failures are equal when their operations and error kinds
/// are (the error is shared, so a failure clones cheaply).
#[derive(Clone, Debug)]
pub struct IoFailure {
    op: String,
    source: Arc<io::Error>,
}

impl IoFailure {
    /// `source` while doing `op`.
    pub fn new(op: impl Into<String>, source: io::Error) -> IoFailure {
        IoFailure {
            op: op.into(),
            source: Arc::new(source),
        }
    }

    /// `source` alone, where the error names what failed.
    pub fn bare(source: io::Error) -> IoFailure {
        IoFailure::new(String::new(), source)
    }

    /// This failure inside `outer` (a path, an action): its text becomes
    /// `OUTER: ` followed by its own.
    pub fn within(self, outer: impl Into<String>) -> IoFailure {
        let outer = outer.into();
        let op = match self.op.is_empty() {
            true => outer,
            false => format!("{outer}: {}", self.op),
        };
        IoFailure { op, ..self }
    }

    /// What was being done (empty: not said).
    pub fn op(&self) -> &str {
        &self.op
    }

    /// The system's error.
    pub fn error(&self) -> &io::Error {
        &self.source
    }

    /// The system's error's kind.
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op.is_empty() {
            write!(f, "{}", self.source)
        } else {
            write!(f, "{}: {}", self.op, self.source)
        }
    }
}

impl std::error::Error for IoFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

impl PartialEq for IoFailure {
    fn eq(&self, other: &IoFailure) -> bool {
        self.op == other.op && self.kind() == other.kind()
    }
}

impl Eq for IoFailure {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[test]
    fn the_text_is_the_operation_and_the_error_and_the_error_stays_the_source() {
        let e = IoFailure::new("reading /x", io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(
            e.to_string(),
            format!("reading /x: {}", io::Error::from(io::ErrorKind::NotFound))
        );
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.source().is_some());
        let bare = IoFailure::bare(io::Error::other("boom"));
        assert_eq!(bare.to_string(), "boom");
        assert_eq!(bare.op(), "");
        assert_eq!(e.clone(), e);
        assert_ne!(e, bare);
        assert_eq!(e.clone().within("/dev/vdb").op(), "/dev/vdb: reading /x");
        assert_eq!(bare.within("/dev/vdb").to_string(), "/dev/vdb: boom");
    }
}
