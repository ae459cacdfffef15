//! An in-memory duplex byte stream with read and write timeouts, for tests
//! of anything that runs over a [`super::Transport`].
//!
//! Each direction holds at most [`PIPE_CAPACITY`] bytes; a writer blocks
//! (up to its write timeout) while the buffer is full. Dropping an end closes
//! both directions: the other end reads EOF and its writes fail.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Bytes buffered in one direction before writes block.
pub const PIPE_CAPACITY: usize = 1 << 20;

#[derive(Default)]
struct State {
    buf: VecDeque<u8>,
    closed: bool,
}

#[derive(Default)]
struct Half {
    state: Mutex<State>,
    changed: Condvar,
}

impl Half {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }
}

/// One end of a pipe made by [`pair`].
pub struct PipeEnd {
    rx: Arc<Half>,
    tx: Arc<Half>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// Makes two connected ends.
pub fn pair() -> (PipeEnd, PipeEnd) {
    let a = Arc::new(Half::default());
    let b = Arc::new(Half::default());
    (
        PipeEnd {
            rx: a.clone(),
            tx: b.clone(),
            read_timeout: None,
            write_timeout: None,
        },
        PipeEnd {
            rx: b,
            tx: a,
            read_timeout: None,
            write_timeout: None,
        },
    )
}

fn wait<'a>(
    half: &'a Half,
    guard: std::sync::MutexGuard<'a, State>,
    deadline: Option<Instant>,
) -> io::Result<std::sync::MutexGuard<'a, State>> {
    match deadline {
        None => Ok(half.changed.wait(guard).unwrap_or_else(|p| p.into_inner())),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "pipe timed out"));
            }
            Ok(half
                .changed
                .wait_timeout(guard, left)
                .unwrap_or_else(|p| p.into_inner())
                .0)
        }
    }
}

impl Read for PipeEnd {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let deadline = self.read_timeout.map(|t| Instant::now() + t);
        let mut st = self.rx.lock();
        loop {
            if !st.buf.is_empty() {
                let n = out.len().min(st.buf.len());
                for (o, b) in out.iter_mut().zip(st.buf.drain(..n)) {
                    *o = b;
                }
                drop(st);
                self.rx.changed.notify_all();
                return Ok(n);
            }
            if st.closed {
                return Ok(0);
            }
            st = wait(&self.rx, st, deadline)?;
        }
    }
}

impl Write for PipeEnd {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let deadline = self.write_timeout.map(|t| Instant::now() + t);
        let mut st = self.tx.lock();
        loop {
            if st.closed {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "pipe closed"));
            }
            let room = PIPE_CAPACITY - st.buf.len();
            if room > 0 {
                let n = room.min(data.len());
                st.buf.extend(&data[..n]);
                drop(st);
                self.tx.changed.notify_all();
                return Ok(n);
            }
            st = wait(&self.tx, st, deadline)?;
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl super::Transport for PipeEnd {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout = timeout;
        Ok(())
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.write_timeout = timeout;
        Ok(())
    }
}

impl Drop for PipeEnd {
    fn drop(&mut self) {
        self.rx.close();
        self.tx.close();
    }
}

#[cfg(test)]
mod tests {
    use super::super::Transport;
    use super::*;

    #[test]
    fn bytes_flow_both_ways_and_close_gives_eof() {
        let (mut a, mut b) = pair();
        a.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        b.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        b.write_all(b"pong").unwrap();
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
        drop(a);
        assert_eq!(b.read(&mut buf).unwrap(), 0);
        assert_eq!(b.write(b"x").unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn read_times_out() {
        let (_a, mut b) = pair();
        b.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
        let err = b.read(&mut [0u8; 1]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn full_pipe_blocks_writer_until_timeout() {
        let (mut a, _b) = pair();
        a.set_write_timeout(Some(Duration::from_millis(5))).unwrap();
        a.write_all(&vec![0u8; PIPE_CAPACITY]).unwrap();
        assert_eq!(a.write(b"x").unwrap_err().kind(), io::ErrorKind::TimedOut);
    }
}
