//! How command bytes reach a TPM: the kernel's character device on a node,
//! or swtpm's TCP socket in tests. Both carry raw TPM 2.0 command and
//! response frames; one [`Transport`] is one persistent connection.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::TpmError;
use confboot_util::IoFailure;

/// Size of a TPM command/response header: tag (2), size (4), code (4).
pub const HEADER_LEN: usize = 10;
/// Largest response accepted from a TPM. TPMs report `TPM_PT_MAX_RESPONSE_SIZE`
/// of 4 KiB; twice that leaves room and still bounds every allocation.
pub const MAX_RESPONSE_LEN: usize = 8192;
/// Device paths tried by [`DeviceTransport::open_default`], in order.
pub const DEFAULT_DEVICES: [&str; 2] = ["/dev/tpmrm0", "/dev/tpm0"];
/// Read/write timeout of a TCP transport (a TPM command takes milliseconds).
pub const TCP_TIMEOUT: Duration = Duration::from_secs(30);

/// One connection to a TPM that exchanges whole command and response frames.
pub trait Transport: Send {
    /// Sends one command frame and returns the whole response frame, whose
    /// size field was checked against the bytes received and
    /// [`MAX_RESPONSE_LEN`].
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError>;

    /// Short description for logs and errors (path or address).
    fn describe(&self) -> String;
}

/// Reads the size field of a response header and checks it is plausible.
fn response_len(header: &[u8; HEADER_LEN]) -> Result<usize, TpmError> {
    let size = u32::from_be_bytes([header[2], header[3], header[4], header[5]]) as usize;
    if !(HEADER_LEN..=MAX_RESPONSE_LEN).contains(&size) {
        return Err(TpmError::Malformed(format!(
            "response size {size} outside {HEADER_LEN}..={MAX_RESPONSE_LEN}"
        )));
    }
    Ok(size)
}

/// The TPM character device (`/dev/tpmrm0` with the kernel's resource manager,
/// or `/dev/tpm0`). The kernel returns a whole response per `read`.
pub struct DeviceTransport {
    file: File,
    path: PathBuf,
}

impl DeviceTransport {
    /// Opens one device path.
    pub fn open(path: &Path) -> Result<Self, TpmError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| TpmError::Io(IoFailure::new(format!("open {}", path.display()), e)))?;
        Ok(DeviceTransport {
            file,
            path: path.to_path_buf(),
        })
    }

    /// Opens the first device of [`DEFAULT_DEVICES`] that exists.
    pub fn open_default() -> Result<Self, TpmError> {
        let mut errors = Vec::new();
        for p in DEFAULT_DEVICES {
            match Self::open(Path::new(p)) {
                Ok(t) => return Ok(t),
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(TpmError::Transport(format!(
            "no TPM device: {}",
            errors.join("; ")
        )))
    }
}

impl Transport for DeviceTransport {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
        let io =
            |e: std::io::Error| TpmError::Io(IoFailure::new(self.path.display().to_string(), e));
        self.file.write_all(command).map_err(io)?;
        let mut buf = vec![0u8; MAX_RESPONSE_LEN];
        let n = self.file.read(&mut buf).map_err(io)?;
        if n < HEADER_LEN {
            return Err(TpmError::Malformed(format!(
                "response of {n} bytes is shorter than a header"
            )));
        }
        let header: [u8; HEADER_LEN] = buf[..HEADER_LEN].try_into().expect("length checked");
        let size = response_len(&header)?;
        if size != n {
            return Err(TpmError::Malformed(format!(
                "response size field {size} but {n} bytes read"
            )));
        }
        buf.truncate(n);
        Ok(buf)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// swtpm's TCP server socket (`swtpm socket --server type=tcp,...`), which
/// carries raw command/response frames. Kept open for the connection's life.
pub struct TcpTransport {
    stream: TcpStream,
    addr: SocketAddr,
}

impl TcpTransport {
    /// Connects to swtpm's data port.
    pub fn connect(addr: SocketAddr) -> Result<Self, TpmError> {
        let stream = TcpStream::connect_timeout(&addr, TCP_TIMEOUT)
            .map_err(|e| TpmError::Io(IoFailure::new(format!("connect {addr}"), e)))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(TCP_TIMEOUT))
            .and_then(|_| stream.set_write_timeout(Some(TCP_TIMEOUT)))
            .map_err(|e| TpmError::Io(IoFailure::new(addr.to_string(), e)))?;
        Ok(TcpTransport { stream, addr })
    }
}

impl Transport for TcpTransport {
    fn transact(&mut self, command: &[u8]) -> Result<Vec<u8>, TpmError> {
        let addr = self.addr;
        let io = |e: std::io::Error| TpmError::Io(IoFailure::new(addr.to_string(), e));
        self.stream.write_all(command).map_err(io)?;
        let mut header = [0u8; HEADER_LEN];
        self.stream.read_exact(&mut header).map_err(io)?;
        let size = response_len(&header)?;
        let mut buf = vec![0u8; size];
        buf[..HEADER_LEN].copy_from_slice(&header);
        self.stream.read_exact(&mut buf[HEADER_LEN..]).map_err(io)?;
        Ok(buf)
    }

    fn describe(&self) -> String {
        format!("swtpm at {}", self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_size_is_bounded() {
        let mut h = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0, 0];
        assert_eq!(response_len(&h).unwrap(), 10);
        h[2..6].copy_from_slice(&(MAX_RESPONSE_LEN as u32 + 1).to_be_bytes());
        assert!(matches!(response_len(&h), Err(TpmError::Malformed(_))));
        h[2..6].copy_from_slice(&9u32.to_be_bytes());
        assert!(matches!(response_len(&h), Err(TpmError::Malformed(_))));
        h[2..6].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(response_len(&h), Err(TpmError::Malformed(_))));
    }

    /// A peer that answers every command with `reply` and then closes.
    fn fake_tpm(reply: Vec<u8>) -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut cmd = [0u8; HEADER_LEN];
            s.read_exact(&mut cmd).unwrap();
            let _ = s.write_all(&reply);
        });
        addr
    }

    #[test]
    fn tcp_transport_refuses_oversized_and_short_responses() {
        let command = [0x80, 0x01, 0, 0, 0, 10, 0, 0, 0x01, 0x44];
        // Claims 2 GiB: refused from the header, nothing allocated.
        let mut huge = vec![0x80, 0x01];
        huge.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
        huge.extend_from_slice(&[0; 4]);
        let mut t = TcpTransport::connect(fake_tpm(huge)).unwrap();
        assert_eq!(
            t.transact(&command),
            Err(TpmError::Malformed(format!(
                "response size 2147483647 outside 10..={MAX_RESPONSE_LEN}"
            )))
        );
        // Claims 20 bytes, sends 12, closes: a transport error, not a hang.
        let mut short = vec![0x80, 0x01, 0, 0, 0, 20, 0, 0, 0, 0];
        short.extend_from_slice(&[1, 2]);
        let mut t = TcpTransport::connect(fake_tpm(short)).unwrap();
        assert!(
            matches!(t.transact(&command), Err(TpmError::Io(f)) if f.kind() == std::io::ErrorKind::UnexpectedEof)
        );
        // A whole response comes back as sent.
        let ok = vec![0x80, 0x01, 0, 0, 0, 12, 0, 0, 0, 0, 7, 7];
        let mut t = TcpTransport::connect(fake_tpm(ok.clone())).unwrap();
        assert_eq!(t.transact(&command).unwrap(), ok);
    }
}
