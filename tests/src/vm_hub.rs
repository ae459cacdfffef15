//! A network the test VMs share, with nothing leaving the machine: each VM
//! gets a second virtio NIC on a QEMU `-netdev dgram` over unix sockets,
//! whose far end is one socket of this hub. A thread relays Ethernet
//! frames between the VMs (a learning switch: a frame for a known MAC goes
//! to that VM, any other to every VM but its sender) and answers DHCP on
//! the segment itself, so each VM's address comes from the network (its
//! MAC), not from its measured command line.
//!
//! The DHCP server is minimal, for tests: an OFFER to a DISCOVER and an
//! ACK to a REQUEST, the address fixed by the VM's index, the mask of the
//! hub's /24 and no router (the segment leads nowhere).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use confboot_sys::dhcp::{CLIENT_PORT, SERVER_PORT};

/// The largest frame relayed (a 1500-byte MTU's frame plus slack).
const MAX_FRAME: usize = 1600;
/// DHCP's fixed part, before the magic cookie.
const DHCP_FIXED_LEN: usize = 236;
/// The DHCP magic cookie.
const DHCP_MAGIC: [u8; 4] = [99, 130, 83, 99];
/// The hub's own MAC (locally administered), the DHCP server's source.
const HUB_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0xff, 0xff, 0x01];
/// Ethernet header, IPv4 header (no options), UDP header.
const HEADERS: usize = 14 + 20 + 8;

/// The hub: its socket, the VMs it knows, its relay thread.
pub struct VmHub {
    dir: PathBuf,
    subnet: [u8; 3],
    vms: Arc<Mutex<Vec<PathBuf>>>,
    relayed: Arc<Mutex<u64>>,
    stop: confboot_util::stop::Stop,
    thread: Option<JoinHandle<()>>,
}

impl VmHub {
    /// A hub whose socket lives in `dir`, handing out `a.b.c.(10+i)/24`
    /// of `subnet` = `[a, b, c]` to VM `i`.
    pub fn start(dir: &Path, subnet: [u8; 3]) -> VmHub {
        let socket = UnixDatagram::bind(dir.join("hub.sock")).expect("hub socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let vms: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
        let relayed: Arc<Mutex<u64>> = Arc::default();
        let stop = confboot_util::stop::Stop::new();
        let thread = {
            let (vms, relayed, stop) = (Arc::clone(&vms), Arc::clone(&relayed), stop.clone());
            std::thread::spawn(move || relay(&socket, subnet, &vms, &relayed, &stop))
        };
        VmHub {
            dir: dir.to_path_buf(),
            subnet,
            vms,
            relayed,
            stop,
            thread: Some(thread),
        }
    }

    /// VM `index`'s MAC on the hub.
    pub fn mac(index: u8) -> [u8; 6] {
        [0x52, 0x54, 0x00, 0xaa, 0x00, index]
    }

    /// The host name the hub's DHCP gives VM `index` (option 12): PID 1
    /// sets it, and a node without `--node-name` takes it as its name.
    pub fn host_name(index: u8) -> String {
        format!("vm-{index}")
    }

    /// The address the hub's DHCP gives VM `index`.
    pub fn address(&self, index: u8) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 10 + index)
    }

    /// The path of VM `index`'s end, registered with the hub.
    pub fn vm_socket(&self, index: u8) -> PathBuf {
        let path = self.dir.join(format!("vm-{index}.sock"));
        let mut vms = self.vms.lock().unwrap();
        if !vms.contains(&path) {
            vms.push(path.clone());
        }
        path
    }

    /// QEMU's arguments for VM `index`'s NIC on the hub.
    pub fn qemu_args(&self, index: u8) -> Vec<String> {
        let local = self.vm_socket(index);
        // QEMU binds its end itself.
        let _ = std::fs::remove_file(&local);
        let mac = VmHub::mac(index);
        vec![
            "-netdev".into(),
            format!(
                "dgram,id=hub,local.type=unix,local.path={},remote.type=unix,remote.path={}",
                local.display(),
                self.dir.join("hub.sock").display()
            ),
            "-device".into(),
            format!(
                "virtio-net-pci,netdev=hub,mac={}",
                mac.map(|b| format!("{b:02x}")).join(":")
            ),
        ]
    }

    /// Frames relayed so far (DHCP answers not counted).
    pub fn relayed(&self) -> u64 {
        *self.relayed.lock().unwrap()
    }
}

impl Drop for VmHub {
    fn drop(&mut self) {
        self.stop.raise();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn relay(
    socket: &UnixDatagram,
    subnet: [u8; 3],
    vms: &Mutex<Vec<PathBuf>>,
    relayed: &Mutex<u64>,
    stop: &confboot_util::stop::Stop,
) {
    let mut macs: HashMap<[u8; 6], PathBuf> = HashMap::new();
    let mut buf = vec![0u8; MAX_FRAME];
    while !stop.is_raised() {
        let Ok((n, from)) = socket.recv_from(&mut buf) else {
            continue;
        };
        let Some(from) = from.as_pathname().map(Path::to_path_buf) else {
            continue;
        };
        let frame = &buf[..n];
        if frame.len() < 14 {
            continue;
        }
        let src: [u8; 6] = frame[6..12].try_into().unwrap();
        macs.insert(src, from.clone());
        if let Some(answer) = dhcp_answer(frame, subnet) {
            let _ = socket.send_to(&answer, &from);
            continue;
        }
        let dst: [u8; 6] = frame[0..6].try_into().unwrap();
        let targets: Vec<PathBuf> = match macs.get(&dst) {
            Some(path) => vec![path.clone()],
            None => vms
                .lock()
                .unwrap()
                .iter()
                .filter(|p| **p != from)
                .cloned()
                .collect(),
        };
        for t in targets {
            let _ = socket.send_to(frame, &t);
        }
        *relayed.lock().unwrap() += 1;
    }
}

/// The answer to a DHCP DISCOVER or REQUEST in `frame` (an Ethernet frame
/// with IPv4 and UDP to port 67), or `None` for any other frame.
pub fn dhcp_answer(frame: &[u8], subnet: [u8; 3]) -> Option<Vec<u8>> {
    if frame.len() < HEADERS + DHCP_FIXED_LEN + 4 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 17 || ip.len() < ihl + 8 {
        return None;
    }
    let udp = &ip[ihl..];
    if u16::from_be_bytes([udp[2], udp[3]]) != SERVER_PORT {
        return None;
    }
    let dhcp = &udp[8..];
    if dhcp.len() < DHCP_FIXED_LEN + 4 || dhcp[0] != 1 || dhcp[DHCP_FIXED_LEN..][..4] != DHCP_MAGIC
    {
        return None;
    }
    let kind = dhcp_message_type(&dhcp[DHCP_FIXED_LEN + 4..])?;
    let reply_kind = match kind {
        1 => 2, // DISCOVER -> OFFER
        3 => 5, // REQUEST -> ACK
        _ => return None,
    };
    let mac: [u8; 6] = dhcp[28..34].try_into().unwrap();
    // The address is fixed by the MAC: VmHub::mac(i) gets .10+i.
    let index = if mac[..5] == VmHub::mac(0)[..5] {
        mac[5]
    } else {
        return None;
    };
    let [a, b, c] = subnet;
    let server = Ipv4Addr::new(a, b, c, 1);
    let address = Ipv4Addr::new(a, b, c, 10u8.checked_add(index)?);
    let mut reply = vec![0u8; DHCP_FIXED_LEN];
    reply[0] = 2;
    reply[1] = 1;
    reply[2] = 6;
    reply[4..8].copy_from_slice(&dhcp[4..8]);
    reply[10..12].copy_from_slice(&dhcp[10..12]);
    reply[16..20].copy_from_slice(&address.octets());
    reply[20..24].copy_from_slice(&server.octets());
    reply[28..34].copy_from_slice(&mac);
    reply.extend_from_slice(&DHCP_MAGIC);
    reply.extend_from_slice(&[53, 1, reply_kind]);
    reply.extend_from_slice(&[54, 4]);
    reply.extend_from_slice(&server.octets());
    reply.extend_from_slice(&[1, 4, 255, 255, 255, 0]);
    reply.extend_from_slice(&[51, 4]);
    reply.extend_from_slice(&86_400u32.to_be_bytes());
    let host = VmHub::host_name(index);
    reply.extend_from_slice(&[12, host.len() as u8]);
    reply.extend_from_slice(host.as_bytes());
    reply.push(255);
    Some(udp_frame(
        HUB_MAC,
        [0xff; 6],
        server,
        Ipv4Addr::BROADCAST,
        SERVER_PORT,
        CLIENT_PORT,
        &reply,
    ))
}

/// Option 53 among DHCP options.
fn dhcp_message_type(mut options: &[u8]) -> Option<u8> {
    while let Some((&code, rest)) = options.split_first() {
        match code {
            0 => options = rest,
            255 => return None,
            _ => {
                let (&len, rest) = rest.split_first()?;
                let value = rest.get(..usize::from(len))?;
                if code == 53 && len == 1 {
                    return Some(value[0]);
                }
                options = &rest[usize::from(len)..];
            }
        }
    }
    None
}

/// An Ethernet frame carrying `payload` in UDP over IPv4 (UDP checksum 0,
/// which IPv4 allows).
pub fn udp_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADERS + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&src_port.to_be_bytes());
    f.extend_from_slice(&dst_port.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// A VM's end as a plain socket, for tests of the hub itself.
pub fn fake_vm(hub: &VmHub, index: u8) -> UnixDatagram {
    let path = hub.vm_socket(index);
    let _ = std::fs::remove_file(&path);
    let s = UnixDatagram::bind(&path).unwrap();
    s.connect(hub.dir.join("hub.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use confboot_sys::dhcp::{DhcpMessageType, DhcpReply, DhcpRequest};

    fn dhcp_frame(index: u8, request: &DhcpRequest) -> Vec<u8> {
        udp_frame(
            VmHub::mac(index),
            [0xff; 6],
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::BROADCAST,
            CLIENT_PORT,
            SERVER_PORT,
            &request.encode(),
        )
    }

    fn reply(vm: &UnixDatagram) -> DhcpReply {
        let mut buf = [0u8; MAX_FRAME];
        let n = vm.recv(&mut buf).unwrap();
        DhcpReply::parse(&buf[HEADERS..n]).unwrap()
    }

    #[test]
    fn vms_get_their_address_by_dhcp_and_frames_reach_the_others_only() {
        let dir = crate::TempDir::new("vm-hub");
        let hub = VmHub::start(dir.path(), [192, 168, 118]);
        let (a, b, c) = (fake_vm(&hub, 1), fake_vm(&hub, 2), fake_vm(&hub, 3));
        // DISCOVER -> OFFER, REQUEST -> ACK, as PID 1's client asks.
        let discover = DhcpRequest {
            kind: DhcpMessageType::Discover,
            xid: 7,
            mac: VmHub::mac(2),
            selected: None,
        };
        b.send(&dhcp_frame(2, &discover)).unwrap();
        let offer = reply(&b);
        assert_eq!(offer.kind, DhcpMessageType::Offer);
        assert_eq!((offer.xid, offer.mac), (7, VmHub::mac(2)));
        assert_eq!(offer.address, hub.address(2));
        assert_eq!(offer.netmask, Some(Ipv4Addr::new(255, 255, 255, 0)));
        assert_eq!(offer.router, None);
        assert_eq!(offer.host_name.as_deref(), Some("vm-2"));
        let request = DhcpRequest {
            kind: DhcpMessageType::Request,
            selected: Some((offer.address, offer.server.unwrap())),
            ..discover
        };
        b.send(&dhcp_frame(2, &request)).unwrap();
        let ack = reply(&b);
        assert_eq!(ack.kind, DhcpMessageType::Ack);
        assert_eq!(ack.address, Ipv4Addr::new(192, 168, 118, 12));

        // A broadcast from A reaches B and C, not A; then B's MAC is known
        // and a frame for it reaches B alone.
        let hello = udp_frame(
            VmHub::mac(1),
            [0xff; 6],
            hub.address(1),
            Ipv4Addr::BROADCAST,
            9,
            9,
            b"hello",
        );
        a.send(&hello).unwrap();
        let mut buf = [0u8; MAX_FRAME];
        for vm in [&b, &c] {
            let n = vm.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &hello[..]);
        }
        let to_b = udp_frame(
            VmHub::mac(1),
            VmHub::mac(2),
            hub.address(1),
            hub.address(2),
            9,
            9,
            b"for b",
        );
        a.send(&to_b).unwrap();
        let n = b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &to_b[..]);
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        a.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert!(c.recv(&mut buf).is_err(), "C got B's frame");
        assert!(a.recv(&mut buf).is_err(), "A got its own frame");
        assert_eq!(hub.relayed(), 2);
        // Not DHCP: no answer is made up.
        assert!(dhcp_answer(&to_b, [192, 168, 118]).is_none());
    }
}
