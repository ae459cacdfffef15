//! The cluster's VPN address range and the allotment of node addresses.

use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use super::{VpnError, quote};

/// An IPv4 range `a.b.c.d/prefix` (prefix 8 to 30, no host bits set) from
/// which every node gets one VPN address; the network and broadcast
/// addresses are never a node's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VpnNetwork {
    network: u32,
    prefix: u8,
}

impl VpnNetwork {
    /// The range's first address and prefix length.
    pub fn new(network: Ipv4Addr, prefix: u8) -> Result<VpnNetwork, VpnError> {
        let n = u32::from(network);
        let invalid = || VpnError::InvalidNetwork(format!("{network}/{prefix}"));
        if !(8..=30).contains(&prefix) || n & !mask(prefix) != 0 {
            return Err(invalid());
        }
        Ok(VpnNetwork { network: n, prefix })
    }

    /// Whether `ip` is a host address of the range (inside it, and neither
    /// its network nor its broadcast address).
    pub fn is_host(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip & mask(self.prefix) == self.network && ip != self.network && ip != self.broadcast()
    }

    /// How many host addresses the range has.
    pub fn host_count(&self) -> u32 {
        self.broadcast() - self.network - 1
    }

    /// The lowest host address not in `used`.
    pub fn allot(&self, used: &BTreeSet<Ipv4Addr>) -> Result<Ipv4Addr, VpnError> {
        (self.network + 1..self.broadcast())
            .map(Ipv4Addr::from)
            .find(|ip| !used.contains(ip))
            .ok_or(VpnError::RangeExhausted)
    }

    /// The range's prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn broadcast(&self) -> u32 {
        self.network | !mask(self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    u32::MAX << (32 - u32::from(prefix))
}

impl FromStr for VpnNetwork {
    type Err = VpnError;

    /// `a.b.c.d/prefix`.
    fn from_str(s: &str) -> Result<VpnNetwork, VpnError> {
        let invalid = || VpnError::InvalidNetwork(quote(s));
        let (ip, prefix) = s.split_once('/').ok_or_else(invalid)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| invalid())?;
        // Digits only: `u8::from_str` would take "+16".
        if prefix.is_empty() || prefix.len() > 2 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        VpnNetwork::new(ip, prefix.parse().map_err(|_| invalid())?)
    }
}

impl fmt::Display for VpnNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_strictly() {
        let n: VpnNetwork = "10.118.0.0/16".parse().unwrap();
        assert_eq!(n.to_string(), "10.118.0.0/16");
        assert_eq!(n.host_count(), 65_534);
        for bad in [
            "10.118.0.0",
            "10.118.0.1/16",
            "10.118.0.0/7",
            "10.118.0.0/31",
            "10.118.0.0/+16",
            "10.118.0.0/",
            "10.118.0.0/016",
            "10.118.0/16",
            "fd00::/64",
            "",
        ] {
            assert!(bad.parse::<VpnNetwork>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_exclude_network_and_broadcast() {
        let n: VpnNetwork = "10.118.0.0/30".parse().unwrap();
        let hosts: Vec<bool> = (0..5)
            .map(|i| n.is_host(Ipv4Addr::new(10, 118, 0, i)))
            .collect();
        assert_eq!(hosts, [false, true, true, false, false]);
        assert!(!n.is_host(Ipv4Addr::new(10, 119, 0, 1)));
    }

    #[test]
    fn allotment_takes_the_lowest_free_address_until_none_is_left() {
        let n: VpnNetwork = "10.118.0.0/30".parse().unwrap();
        let mut used = BTreeSet::new();
        for want in [Ipv4Addr::new(10, 118, 0, 1), Ipv4Addr::new(10, 118, 0, 2)] {
            let ip = n.allot(&used).unwrap();
            assert_eq!(ip, want);
            used.insert(ip);
        }
        assert_eq!(n.allot(&used), Err(VpnError::RangeExhausted));
        used.remove(&Ipv4Addr::new(10, 118, 0, 1));
        assert_eq!(n.allot(&used), Ok(Ipv4Addr::new(10, 118, 0, 1)));
    }
}
