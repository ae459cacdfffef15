//! An in-memory connection for the RPC targets: the peer's bytes come from
//! the fuzz input, in pieces of the sizes the input's first byte chooses
//! (a network hands a reader any split of a stream), and what is written
//! back is kept. It never times out: a read past the input is the peer
//! closing its side.

use std::io::{self, Read, Write};
use std::time::Duration;

use confboot_wire::Transport;

/// One end of a connection whose peer sent `input` and then closed.
pub struct Scripted<'a> {
    input: &'a [u8],
    /// Bytes handed out per read: 0 means as many as asked for.
    piece: usize,
    reads: usize,
    /// What this end wrote.
    pub written: Vec<u8>,
}

impl<'a> Scripted<'a> {
    /// Splits `data` into the piece size (its first byte) and the peer's
    /// bytes (the rest). Piece byte `0` hands out whole reads; `n` hands out
    /// `1 + (n + i) % 8` bytes on the i-th read.
    pub fn new(data: &'a [u8]) -> Scripted<'a> {
        let (piece, input) = match data.split_first() {
            Some((p, rest)) => (*p as usize, rest),
            None => (0, data),
        };
        Scripted {
            input,
            piece,
            reads: 0,
            written: Vec::new(),
        }
    }

    /// The peer's bytes (without the piece byte).
    pub fn input(&self) -> &'a [u8] {
        self.input
    }
}

impl Read for Scripted<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let mut n = out.len().min(self.input.len());
        if self.piece != 0 {
            n = n.min(1 + (self.piece + self.reads) % 8);
        }
        self.reads = self.reads.wrapping_add(1);
        out[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Ok(n)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.written.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for Scripted<'_> {
    fn set_read_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }

    fn set_write_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}
