//! What the deadline tests over plain TCP (`crates/wire/tests/deadlines.rs`)
//! and over aTLS (`crates/atls/tests/deadlines.rs`) share: the call, the
//! deadline and its slack, the answer a slow server paces, and the check
//! that a call ended by its deadline.

use std::time::{Duration, Instant};

use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_proto::{Message, Method};
use confboot_wire::frame::{self, FrameKind};
use confboot_wire::{Code, Status};

/// The call a slow server answers.
pub const CALL: Method<IssueRejoinTicketRequest, IssueRejoinTicketResponse> =
    Method::new("/test.Slow/Call");

/// The deadline under test (a call's, a connect's, a frame's).
pub const DEADLINE: Duration = Duration::from_secs(1);

/// What the scheduler may add to it on a loaded machine (the suite shares
/// two cores with VMs; 0.9 s late was seen). Generous on purpose: what the
/// tests tell apart is an end near the deadline from the unbounded one
/// (a paced answer takes 12 s or more, an unread answer never ends).
pub const SLACK: Duration = Duration::from_secs(2);

/// A whole answer to [`CALL`] as plaintext frames: the response (a 40-byte
/// key: some 60 bytes on the wire) and an OK trailer.
pub fn answer() -> Vec<u8> {
    let response = IssueRejoinTicketResponse {
        state_disk_key: vec![7; 40],
        measurement_secret: vec![],
        generation: 0,
        measurement_salt: vec![],
        sealed_secrets: Vec::new(),
    };
    let mut bytes = Vec::new();
    frame::write_frame(&mut bytes, FrameKind::Message, &response.encode_to_vec()).unwrap();
    frame::write_frame(
        &mut bytes,
        FrameKind::Trailer,
        &Status::ok().to_proto().encode_to_vec(),
    )
    .unwrap();
    bytes
}

/// Runs `call` and asserts that it ended with DEADLINE_EXCEEDED by
/// [`DEADLINE`] (plus [`SLACK`]).
pub fn assert_call_ends_at_the_deadline<R: std::fmt::Debug>(
    call: impl FnOnce() -> Result<R, Status>,
) {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    assert!(
        took < DEADLINE + SLACK,
        "a {DEADLINE:?} call took {took:?} ({result:?})"
    );
    assert_eq!(result.unwrap_err().code, Code::DeadlineExceeded);
}
