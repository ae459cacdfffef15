//! The device-mapper ioctl interface's bytes (`linux/dm-ioctl.h`, interface
//! version 4): encoding a request into a buffer and decoding, bounded and
//! checked, what the kernel wrote back. No system calls here (see
//! [`super::ioctl`]), so all of it is tested on any host.
//!
//! A request buffer is a `struct dm_ioctl` (312 bytes, native byte order)
//! followed by the command's data: for `DM_TABLE_LOAD`, one `struct
//! dm_target_spec` (40 bytes) and its NUL-terminated parameter string,
//! padded to 8 bytes.

use zeroize::Zeroizing;

use super::DmError;

/// `sizeof(struct dm_ioctl)`.
pub const DM_IOCTL_SIZE: usize = 312;
/// `offsetof(struct dm_ioctl, data)`: the `data_size` of a reply without
/// data.
pub const DM_IOCTL_DATA: usize = OFF_UUID + UUID_LEN;
/// `sizeof(struct dm_target_spec)`.
pub const TARGET_SPEC_SIZE: usize = 40;
/// `DM_NAME_LEN`: the name field, NUL included.
pub const NAME_LEN: usize = 128;
/// `DM_UUID_LEN`: the UUID field, NUL included.
pub const UUID_LEN: usize = 129;
/// `DM_MAX_TYPE_NAME`: the target type field, NUL included.
pub const TYPE_NAME_LEN: usize = 16;
/// The interface version asked for: major 4 (the only one), minor 0 (any).
pub const VERSION: [u32; 3] = [4, 0, 0];
/// The size of every buffer handed to the kernel (libdevmapper starts
/// with 16 KiB too): room for a crypt table and any reply this module reads.
pub const BUFFER_SIZE: usize = 16 * 1024;
/// The ioctl type byte, `DM_IOCTL`.
pub const DM_IOCTL_TYPE: u8 = 0xfd;

/// `DM_READONLY_FLAG`.
pub const FLAG_READONLY: u32 = 1 << 0;
/// `DM_SUSPEND_FLAG`: with `DM_DEV_SUSPEND`, suspend; without, resume.
pub const FLAG_SUSPEND: u32 = 1 << 1;
/// `DM_STATUS_TABLE_FLAG`: with `DM_TABLE_STATUS`, the table lines
/// instead of the targets' status.
pub const FLAG_STATUS_TABLE: u32 = 1 << 4;
/// `DM_BUFFER_FULL_FLAG`: (reply) the reply did not fit the buffer.
pub const FLAG_BUFFER_FULL: u32 = 1 << 8;
/// The most targets a table reply may hold to be read (a crypt mapping
/// has one).
pub const MAX_TABLE_TARGETS: u32 = 16;
/// `DM_ACTIVE_PRESENT_FLAG`: (reply) the device has a live table.
pub const FLAG_ACTIVE_PRESENT: u32 = 1 << 5;
/// `DM_SECURE_DATA_FLAG`: the kernel wipes its copies of the buffer (the
/// table carries the volume key).
pub const FLAG_SECURE_DATA: u32 = 1 << 15;

// Field offsets in struct dm_ioctl.
const OFF_VERSION: usize = 0;
const OFF_DATA_SIZE: usize = 12;
const OFF_DATA_START: usize = 16;
const OFF_TARGET_COUNT: usize = 20;
const OFF_OPEN_COUNT: usize = 24;
const OFF_FLAGS: usize = 28;
const OFF_EVENT_NR: usize = 32;
const OFF_DEV: usize = 40;
const OFF_NAME: usize = 48;
const OFF_UUID: usize = OFF_NAME + NAME_LEN;

/// The device-mapper commands this module uses (`DM_*_CMD`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `DM_VERSION`: the kernel's interface version.
    Version = 0,
    /// `DM_DEV_CREATE`: a new device, no table.
    DevCreate = 3,
    /// `DM_DEV_REMOVE`: removes a device.
    DevRemove = 4,
    /// `DM_DEV_SUSPEND`: suspends, or (without [`FLAG_SUSPEND`]) resumes,
    /// which makes a loaded table live.
    DevSuspend = 6,
    /// `DM_DEV_STATUS`: a device's state.
    DevStatus = 7,
    /// `DM_TABLE_LOAD`: loads the inactive table.
    TableLoad = 9,
    /// `DM_TABLE_STATUS`: the live table's targets (with
    /// [`FLAG_STATUS_TABLE`], their table lines).
    TableStatus = 12,
}

impl Command {
    /// Its name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Command::Version => "DM_VERSION",
            Command::DevCreate => "DM_DEV_CREATE",
            Command::DevRemove => "DM_DEV_REMOVE",
            Command::DevSuspend => "DM_DEV_SUSPEND",
            Command::DevStatus => "DM_DEV_STATUS",
            Command::TableLoad => "DM_TABLE_LOAD",
            Command::TableStatus => "DM_TABLE_STATUS",
        }
    }
}

/// One target of a table: `length` sectors (512 bytes) from
/// `sector_start`, of `target_type`, with `params`.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    /// First sector of the mapped device it covers.
    pub sector_start: u64,
    /// Its length in sectors.
    pub length: u64,
    /// The target type (`crypt`).
    pub target_type: &'a str,
    /// Its parameter string (a crypt table's holds the key: the caller
    /// keeps it in a zeroized buffer).
    pub params: &'a [u8],
}

/// A request buffer: zeroized when dropped (a table load's holds the key).
pub struct Request {
    buf: Zeroizing<Vec<u8>>,
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// Copies `s` into the `len`-byte field at `at`, NUL-terminated; refuses
/// a string that does not fit or holds a NUL.
fn put_str(buf: &mut [u8], at: usize, len: usize, s: &str, what: &str) -> Result<(), DmError> {
    if s.len() >= len || s.bytes().any(|b| b == 0) {
        return Err(DmError::Invalid(format!(
            "{what} of {} bytes (at most {} without NUL)",
            s.len(),
            len - 1
        )));
    }
    buf[at..at + s.len()].copy_from_slice(s.as_bytes());
    Ok(())
}

impl Request {
    /// A request for `command` on the device `name` (empty for
    /// [`Command::Version`]) with `uuid` (empty for none) and `flags`.
    pub fn new(name: &str, uuid: &str, flags: u32) -> Result<Request, DmError> {
        let mut buf = Zeroizing::new(vec![0u8; BUFFER_SIZE]);
        for (i, v) in VERSION.iter().enumerate() {
            put_u32(&mut buf, OFF_VERSION + 4 * i, *v);
        }
        put_u32(&mut buf, OFF_DATA_SIZE, BUFFER_SIZE as u32);
        put_u32(&mut buf, OFF_DATA_START, DM_IOCTL_SIZE as u32);
        put_u32(&mut buf, OFF_FLAGS, flags);
        put_str(&mut buf, OFF_NAME, NAME_LEN, name, "a device name")?;
        put_str(&mut buf, OFF_UUID, UUID_LEN, uuid, "a device UUID")?;
        Ok(Request { buf })
    }

    /// A `DM_TABLE_LOAD` request for `name` with one `target`.
    pub fn table_load(name: &str, flags: u32, target: &Target<'_>) -> Result<Request, DmError> {
        let mut req = Request::new(name, "", flags)?;
        let spec = DM_IOCTL_SIZE;
        let params = spec + TARGET_SPEC_SIZE;
        // The parameters, their NUL, padding to 8: must fit the buffer.
        let end = (params + target.params.len() + 1).next_multiple_of(8);
        if end > BUFFER_SIZE {
            return Err(DmError::Invalid(format!(
                "a table of {} bytes",
                target.params.len()
            )));
        }
        if target.params.contains(&0) {
            return Err(DmError::Invalid("a NUL in the table parameters".into()));
        }
        let buf = &mut req.buf;
        put_u32(buf, OFF_TARGET_COUNT, 1);
        put_u64(buf, spec, target.sector_start);
        put_u64(buf, spec + 8, target.length);
        // status (s32) stays 0; next: from this spec to the end of its data.
        put_u32(buf, spec + 20, (end - spec) as u32);
        put_str(
            buf,
            spec + 24,
            TYPE_NAME_LEN,
            target.target_type,
            "a target type",
        )?;
        buf[params..params + target.params.len()].copy_from_slice(target.params);
        Ok(req)
    }

    /// The bytes handed to the kernel, which writes its reply into them.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// The bytes as they are (the reply after the ioctl).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// What the kernel's reply header says, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The kernel's interface version.
    pub version: [u32; 3],
    /// Bytes of the buffer the kernel used (header included), at least
    /// [`DM_IOCTL_DATA`], at most the buffer.
    pub data_size: u32,
    /// Where the reply's data starts (data only if below `data_size`),
    /// inside the buffer.
    pub data_start: u32,
    /// Targets in the reply's table.
    pub target_count: u32,
    /// Openers of the device.
    pub open_count: i32,
    /// Flags (e.g. [`FLAG_ACTIVE_PRESENT`]).
    pub flags: u32,
    /// The uevent counter.
    pub event_nr: u32,
    /// The device number, in the kernel's `huge_encode_dev` form, which is
    /// the C library's `dev_t` form (what `mknod` takes).
    pub dev: u64,
    /// The device name.
    pub name: String,
}

/// A NUL-terminated printable-ASCII string in `field`; an error if it has
/// no NUL or holds other bytes.
fn get_str(field: &[u8], what: &str) -> Result<String, DmError> {
    let end = field
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| DmError::Reply(format!("{what} without NUL")))?;
    let s = &field[..end];
    if !s.iter().all(|b| b.is_ascii_graphic()) {
        return Err(DmError::Reply(format!("{what} is not printable ASCII")));
    }
    Ok(String::from_utf8_lossy(s).into_owned())
}

impl Reply {
    /// Reads the reply header from `buf` (the buffer handed to the
    /// kernel): the version's major must be 4, and the sizes and offsets
    /// the kernel reports must lie inside the buffer.
    pub fn parse(buf: &[u8]) -> Result<Reply, DmError> {
        if buf.len() < DM_IOCTL_SIZE {
            return Err(DmError::Reply(format!(
                "{} bytes, less than a dm_ioctl",
                buf.len()
            )));
        }
        let version = [
            get_u32(buf, OFF_VERSION),
            get_u32(buf, OFF_VERSION + 4),
            get_u32(buf, OFF_VERSION + 8),
        ];
        if version[0] != VERSION[0] {
            return Err(DmError::Reply(format!(
                "interface version {}.{}.{} (want 4.x)",
                version[0], version[1], version[2]
            )));
        }
        let data_size = get_u32(buf, OFF_DATA_SIZE);
        let data_start = get_u32(buf, OFF_DATA_START);
        // A reply without data says data_size = offsetof(dm_ioctl, data)
        // and leaves data_start as sent; with data, it lies between them.
        let within = DM_IOCTL_DATA..=buf.len();
        if !within.contains(&(data_size as usize)) {
            return Err(DmError::Reply(format!(
                "data_size {data_size} outside {DM_IOCTL_DATA}..={}",
                buf.len()
            )));
        }
        if !within.contains(&(data_start as usize)) {
            return Err(DmError::Reply(format!(
                "data_start {data_start} outside {DM_IOCTL_DATA}..={}",
                buf.len()
            )));
        }
        Ok(Reply {
            version,
            data_size,
            data_start,
            target_count: get_u32(buf, OFF_TARGET_COUNT),
            open_count: get_u32(buf, OFF_OPEN_COUNT) as i32,
            flags: get_u32(buf, OFF_FLAGS),
            event_nr: get_u32(buf, OFF_EVENT_NR),
            dev: get_u64(buf, OFF_DEV),
            name: get_str(&buf[OFF_NAME..OFF_NAME + NAME_LEN], "the device name")?,
        })
    }
}

/// One target of a live table, as `DM_TABLE_STATUS` with
/// [`FLAG_STATUS_TABLE`] reports it. A crypt target's line may hold the
/// volume key in hex: it is kept in a zeroized buffer and `Debug` prints
/// no parameters.
#[derive(Clone, PartialEq, Eq)]
pub struct TableTarget {
    /// First sector of the mapped device it covers.
    pub sector_start: u64,
    /// Its length in 512-byte sectors.
    pub length: u64,
    /// The target type (`crypt`).
    pub target_type: String,
    /// Its table line (printable ASCII).
    pub params: Zeroizing<String>,
}

impl std::fmt::Debug for TableTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TableTarget({} {} {}, <parameters redacted>)",
            self.sector_start, self.length, self.target_type
        )
    }
}

/// Reads the targets of a `DM_TABLE_STATUS` reply in `buf` (the buffer
/// handed to the kernel): the header as [`Reply::parse`] reads it, at most
/// [`MAX_TABLE_TARGETS`], a full buffer refused, and every target spec and
/// its NUL-terminated line inside the data the kernel reports. The
/// kernel's `next` is an offset from the data's start and only moves
/// forward.
pub fn table_targets(buf: &[u8]) -> Result<Vec<TableTarget>, DmError> {
    let reply = Reply::parse(buf)?;
    if reply.flags & FLAG_BUFFER_FULL != 0 {
        return Err(DmError::Reply("the table did not fit the buffer".into()));
    }
    if reply.target_count > MAX_TABLE_TARGETS {
        return Err(DmError::Reply(format!(
            "{} targets (at most {MAX_TABLE_TARGETS} read)",
            reply.target_count
        )));
    }
    let (start, end) = (reply.data_start as usize, reply.data_size as usize);
    let mut targets = Vec::with_capacity(reply.target_count as usize);
    let mut at = start;
    for i in 0..reply.target_count {
        let params = at + TARGET_SPEC_SIZE;
        if params >= end {
            return Err(DmError::Reply(format!(
                "target {i} at {at} outside the data ({start}..{end})"
            )));
        }
        let target_type = get_str(&buf[at + 24..at + 24 + TYPE_NAME_LEN], "a target type")?;
        let line = &buf[params..end];
        let nul = line
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| DmError::Reply(format!("target {i}: a line without NUL")))?;
        let line = &line[..nul];
        if !line.iter().all(|&b| b == b' ' || b.is_ascii_graphic()) {
            return Err(DmError::Reply(format!(
                "target {i}: a line that is not printable ASCII"
            )));
        }
        let mut text = Zeroizing::new(String::with_capacity(line.len()));
        text.extend(line.iter().map(|&b| char::from(b)));
        targets.push(TableTarget {
            sector_start: get_u64(buf, at),
            length: get_u64(buf, at + 8),
            target_type,
            params: text,
        });
        let next = start.saturating_add(get_u32(buf, at + 20) as usize);
        if i + 1 < reply.target_count && next < params + nul + 1 {
            return Err(DmError::Reply(format!(
                "target {i}: next target at {next} inside this one"
            )));
        }
        at = next;
    }
    Ok(targets)
}

/// The buffer the kernel leaves after a `DM_TABLE_STATUS` with
/// [`FLAG_STATUS_TABLE`] for the device `name` with `targets` (the layout
/// [`table_targets`] reads), for tests and fuzz seeds; `None` if it does
/// not fit.
pub fn encode_table_reply(name: &str, targets: &[Target<'_>]) -> Option<Request> {
    let mut req = Request::new(name, "", FLAG_STATUS_TABLE).ok()?;
    let start = DM_IOCTL_SIZE;
    let mut at = start;
    let mut used = start;
    for t in targets {
        let params = at + TARGET_SPEC_SIZE;
        let end = params + t.params.len() + 1;
        if end > BUFFER_SIZE || t.target_type.len() >= TYPE_NAME_LEN {
            return None;
        }
        let buf = &mut req.buf;
        put_u64(buf, at, t.sector_start);
        put_u64(buf, at + 8, t.length);
        buf[at + 24..at + 24 + t.target_type.len()].copy_from_slice(t.target_type.as_bytes());
        buf[params..params + t.params.len()].copy_from_slice(t.params);
        used = end;
        at = end.next_multiple_of(8);
        put_u32(buf, params - TARGET_SPEC_SIZE + 20, (at - start) as u32);
    }
    put_u32(&mut req.buf, OFF_TARGET_COUNT, targets.len() as u32);
    put_u32(&mut req.buf, OFF_DATA_SIZE, used as u32);
    Some(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_c_layout() {
        // struct dm_ioctl: 3 u32 version, 7 u32 fields + padding, u64 dev,
        // name[128], uuid[129], data[7].
        assert_eq!(OFF_DEV, 40);
        assert_eq!(OFF_UUID + UUID_LEN + 7, DM_IOCTL_SIZE);
        assert_eq!(DM_IOCTL_DATA, 305);
        assert_eq!(TARGET_SPEC_SIZE, 8 + 8 + 4 + 4 + TYPE_NAME_LEN);
    }

    #[test]
    fn a_request_header_is_encoded() {
        let req = Request::new("state", "CRYPT-x", FLAG_SECURE_DATA).unwrap();
        let b = req.bytes();
        assert_eq!(b.len(), BUFFER_SIZE);
        assert_eq!(get_u32(b, 0), 4);
        assert_eq!(get_u32(b, 4), 0);
        assert_eq!(get_u32(b, OFF_DATA_SIZE), BUFFER_SIZE as u32);
        assert_eq!(get_u32(b, OFF_DATA_START), 312);
        assert_eq!(get_u32(b, OFF_FLAGS), 1 << 15);
        assert_eq!(&b[48..54], b"state\0");
        assert_eq!(&b[176..184], b"CRYPT-x\0");
        let parsed = Reply::parse(b).unwrap();
        assert_eq!(parsed.name, "state");
        assert_eq!(parsed.version, VERSION);
    }

    #[test]
    fn names_and_uuids_are_bounded() {
        assert!(Request::new(&"n".repeat(127), "", 0).is_ok());
        assert!(matches!(
            Request::new(&"n".repeat(128), "", 0),
            Err(DmError::Invalid(_))
        ));
        assert!(Request::new("a", &"u".repeat(128), 0).is_ok());
        assert!(Request::new("a", &"u".repeat(129), 0).is_err());
        assert!(Request::new("a\0b", "", 0).is_err());
    }

    #[test]
    fn a_table_load_carries_one_target() {
        let params = b"aes-xts-plain64 00ff 0 254:0 32768 1 sector_size:4096";
        let t = Target {
            sector_start: 0,
            length: 98304,
            target_type: "crypt",
            params,
        };
        let req = Request::table_load("state", FLAG_SECURE_DATA, &t).unwrap();
        let b = req.bytes();
        assert_eq!(get_u32(b, OFF_TARGET_COUNT), 1);
        assert_eq!(get_u64(b, 312), 0);
        assert_eq!(get_u64(b, 320), 98304);
        assert_eq!(get_u32(b, 328), 0);
        let next = get_u32(b, 332) as usize;
        assert_eq!(next % 8, 0);
        assert!(next > TARGET_SPEC_SIZE + params.len());
        assert_eq!(&b[336..342], b"crypt\0");
        assert_eq!(&b[352..352 + params.len()], params);
        assert_eq!(b[352 + params.len()], 0);
        // Too long, or a NUL inside.
        let big = vec![b'a'; BUFFER_SIZE];
        let t = Target { params: &big, ..t };
        assert!(Request::table_load("state", 0, &t).is_err());
        let t = Target {
            params: b"a\0b",
            ..t
        };
        assert!(Request::table_load("state", 0, &t).is_err());
    }

    #[test]
    fn replies_are_bounded() {
        let ok = || Request::new("state", "", 0).unwrap().bytes().to_vec();
        assert!(Reply::parse(&ok()).is_ok());
        assert!(Reply::parse(&ok()[..311]).is_err());
        let mut b = ok();
        put_u32(&mut b, 0, 5);
        assert!(Reply::parse(&b).is_err());
        let mut b = ok();
        put_u32(&mut b, OFF_DATA_SIZE, BUFFER_SIZE as u32 + 1);
        assert!(Reply::parse(&b).is_err());
        // A reply without data, as the kernel writes it.
        let mut b = ok();
        put_u32(&mut b, OFF_DATA_SIZE, 305);
        assert_eq!(Reply::parse(&b).unwrap().data_size, 305);
        put_u32(&mut b, OFF_DATA_SIZE, 304);
        assert!(Reply::parse(&b).is_err());
        let mut b = ok();
        put_u32(&mut b, OFF_DATA_START, BUFFER_SIZE as u32 + 1);
        assert!(Reply::parse(&b).is_err());
        put_u32(&mut b, OFF_DATA_START, 304);
        assert!(Reply::parse(&b).is_err());
        let mut b = ok();
        b[OFF_NAME..OFF_NAME + NAME_LEN].fill(b'x');
        assert!(Reply::parse(&b).is_err());
        let mut b = ok();
        b[OFF_NAME] = 0x1b;
        assert!(Reply::parse(&b).is_err());
        let mut b = ok();
        put_u64(&mut b, OFF_DEV, (254 << 8) | 3);
        assert_eq!(Reply::parse(&b).unwrap().dev, (254 << 8) | 3);
    }

    #[test]
    fn a_table_status_reply_is_read_bounded() {
        let line = b"aes-xts-plain64 :64:logon:cryptsetup:x-d0 0 254:16 32768 1 sector_size:4096";
        let crypt = Target {
            sector_start: 0,
            length: 98304,
            target_type: "crypt",
            params: line,
        };
        let reply = encode_table_reply("state", &[crypt]).unwrap();
        let targets = table_targets(reply.bytes()).unwrap();
        assert_eq!(targets.len(), 1);
        assert_eq!((targets[0].sector_start, targets[0].length), (0, 98304));
        assert_eq!(targets[0].target_type, "crypt");
        assert_eq!(targets[0].params.as_bytes(), line);
        let hex = Target {
            params: b"aes-xts-plain64 00ff 0 254:16 32768",
            ..crypt
        };
        assert!(
            !format!(
                "{:?}",
                table_targets(encode_table_reply("s", &[hex]).unwrap().bytes()).unwrap()
            )
            .contains("00ff")
        );
        // Two targets; none.
        let two = encode_table_reply("state", &[crypt, hex]).unwrap();
        let read = table_targets(two.bytes()).unwrap();
        assert_eq!(read[1].params.as_bytes(), hex.params);
        assert!(
            table_targets(encode_table_reply("state", &[]).unwrap().bytes())
                .unwrap()
                .is_empty()
        );
        // A full buffer, too many targets, a line past data_size or
        // without NUL, a non-printable line, a next pointing backwards.
        let mut b = reply.bytes().to_vec();
        put_u32(&mut b, OFF_FLAGS, FLAG_STATUS_TABLE | FLAG_BUFFER_FULL);
        assert!(table_targets(&b).is_err());
        let mut b = reply.bytes().to_vec();
        put_u32(&mut b, OFF_TARGET_COUNT, MAX_TABLE_TARGETS + 1);
        assert!(table_targets(&b).is_err());
        let mut b = reply.bytes().to_vec();
        put_u32(
            &mut b,
            OFF_DATA_SIZE,
            (DM_IOCTL_SIZE + TARGET_SPEC_SIZE + 10) as u32,
        );
        assert!(table_targets(&b).is_err());
        let mut b = reply.bytes().to_vec();
        put_u32(&mut b, OFF_DATA_SIZE, (DM_IOCTL_SIZE + 8) as u32);
        assert!(table_targets(&b).is_err());
        let mut b = reply.bytes().to_vec();
        b[DM_IOCTL_SIZE + TARGET_SPEC_SIZE + 3] = 0x1b;
        assert!(table_targets(&b).is_err());
        let mut b = two.bytes().to_vec();
        put_u32(&mut b, DM_IOCTL_SIZE + 20, 8);
        assert!(table_targets(&b).is_err());
        let mut b = two.bytes().to_vec();
        put_u32(&mut b, DM_IOCTL_SIZE + 20, u32::MAX);
        assert!(table_targets(&b).is_err());
    }
}
