//! The slow call the deadline tests over plain TCP (`deadlines.rs` here)
//! and over aTLS (`crates/atls/tests/deadlines.rs`, which includes this
//! file) share: the call, the answer a slow server paces, and the check
//! that a call ended by its deadline (the bounds are the test kit's).

use confboot_proto::join::{IssueRejoinTicketRequest, IssueRejoinTicketResponse};
use confboot_proto::{Message, Method};
use confboot_testkit::deadlines;
use confboot_wire::frame::{self, FrameKind};
use confboot_wire::{Code, Status};

/// The call a slow server answers.
pub const CALL: Method<IssueRejoinTicketRequest, IssueRejoinTicketResponse> =
    Method::new("/test.Slow/Call");

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
/// [`DEADLINE`](deadlines::DEADLINE) (plus [`SLACK`](deadlines::SLACK)).
pub fn assert_call_ends_at_the_deadline<R: std::fmt::Debug>(
    call: impl FnOnce() -> Result<R, Status>,
) {
    let status = deadlines::error_by_the_deadline(call);
    assert_eq!(status.code, Code::DeadlineExceeded);
}
