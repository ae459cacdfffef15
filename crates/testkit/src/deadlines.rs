//! The bounds the deadline tests over plain TCP
//! (`crates/wire/tests/deadlines.rs`) and over aTLS
//! (`crates/atls/tests/deadlines.rs`) share: the deadline under test, the
//! slack a loaded machine may add to it, and the check that a call ended by
//! them.

use std::time::{Duration, Instant};

/// The deadline under test (a call's, a connect's, a frame's).
pub const DEADLINE: Duration = Duration::from_secs(1);

/// What the scheduler may add to it on a loaded machine (the suite shares
/// two cores with VMs; an unread 6 MiB answer, encoded and encrypted by a
/// debug build at a load of 11, ended 2.1 s late). Generous on purpose:
/// what the tests tell apart is an end near the deadline from the
/// unbounded one (a paced answer takes 12 s or more, an unread answer
/// never ends).
pub const SLACK: Duration = Duration::from_secs(5);

/// Runs `call`, asserts that it ended by [`DEADLINE`] (plus [`SLACK`]) with
/// an error, and returns that error for the caller to check its kind.
pub fn error_by_the_deadline<R: std::fmt::Debug, E: std::fmt::Debug>(
    call: impl FnOnce() -> Result<R, E>,
) -> E {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    assert!(
        took < DEADLINE + SLACK,
        "a {DEADLINE:?} call took {took:?} ({result:?})"
    );
    result.expect_err("the call ended by its deadline without an error")
}
