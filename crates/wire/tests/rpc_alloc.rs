//! A length prefix of 4 GiB is refused before anything large is allocated.
//! This test binary counts every allocation through a global allocator.
// A global allocator is an unsafe trait; see `Counting` below.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use confboot_proto::Message;
use confboot_util::stop::Stop;
use confboot_wire::{Code, Router, ServerLimits, Status, frame, pipe, serve_connection};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// The one `unsafe` in this test: a global allocator must implement the
// unsafe `GlobalAlloc` trait. It records the largest size asked for and
// delegates everything to the system allocator, so its safety is System's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn four_gib_length_prefix_allocates_nothing_large() {
    let (mut server_end, mut client_end) = pipe::pair();
    let router = Router::new();
    let server = std::thread::spawn(move || {
        serve_connection(
            &mut server_end,
            &router,
            &ServerLimits::default(),
            &Stop::new(),
        )
    });
    let before = LARGEST.load(Ordering::Relaxed);
    // The largest u32 length, announced for the call header and then for a
    // request after a valid header: neither may be allocated.
    client_end
        .write_all(&[0x00, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    let f = frame::read_frame(&mut client_end, 1 << 16).unwrap();
    let s = Status::from_proto(confboot_proto::rpc::Status::decode(&f.payload[..]).unwrap());
    assert_eq!(s.code, Code::ResourceExhausted);
    server.join().unwrap();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest < (2 << 20),
        "largest allocation {largest} bytes (before the call: {before})"
    );
}
