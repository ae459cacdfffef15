//! A call's deadline is absolute on the client side: however the server
//! paces its bytes, the call returns DEADLINE_EXCEEDED by its deadline
//! (plus a little slack for the scheduler), not after the last byte.
//!
//! Here over plain TCP; `crates/atls/tests/deadlines.rs` does the same over
//! aTLS, where one read of the TLS stream is many reads of its socket.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use confboot_proto::join::IssueRejoinTicketRequest;
use confboot_testkit::deadlines::DEADLINE;
use confboot_wire::Client;
use confboot_wire::frame;
use slow_call::{CALL, answer, assert_call_ends_at_the_deadline};

mod slow_call;

/// How long the trickling server waits between two bytes: well under the
/// deadline, so that every read of the client gets a byte before a timeout
/// that counts from the read.
const BYTE_EVERY: Duration = Duration::from_millis(200);

#[test]
fn an_answer_trickled_a_byte_at_a_time_ends_the_call_at_its_deadline() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut sock, _) = l.accept().unwrap();
        // The call header and the request, read whole.
        for _ in 0..2 {
            frame::read_frame(&mut sock, frame::DEFAULT_MAX_FRAME_LEN).unwrap();
        }
        for byte in answer() {
            thread::sleep(BYTE_EVERY);
            if sock.write_all(&[byte]).is_err() {
                return; // the client gave up
            }
        }
    });
    let mut client = Client::new(TcpStream::connect(addr).unwrap());
    assert_call_ends_at_the_deadline(|| {
        client.unary(CALL, &IssueRejoinTicketRequest::default(), DEADLINE)
    });
    drop(client);
    server.join().unwrap();
}

#[test]
fn a_request_the_server_does_not_read_ends_the_call_at_its_deadline() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (done, wait) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        // Accepts, reads nothing, and keeps the connection open: the
        // socket buffers fill and the client's writes block.
        let (sock, _) = l.accept().unwrap();
        let _ = wait.recv();
        drop(sock);
    });
    let mut client = Client::new(TcpStream::connect(addr).unwrap());
    // More than loopback's socket buffers hold (4 MiB here, the most
    // `net.ipv4.tcp_wmem` lets a sender have; the receiver reads nothing).
    let request = IssueRejoinTicketRequest {
        disk_uuid: "x".repeat(6 << 20),
    };
    assert_call_ends_at_the_deadline(|| client.unary(CALL, &request, DEADLINE));
    drop(client);
    done.send(()).unwrap();
    server.join().unwrap();
}
