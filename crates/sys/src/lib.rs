//! The node's operating-system interfaces, without C and without a shell:
//! [`netlink`] (links, addresses, routes, generic netlink), [`dhcp`] (the
//! node's DHCPv4 messages), [`process`] (external programs in bounded time
//! with bounded output), [`signals`] (a clean stop on SIGTERM/SIGINT) and
//! [`ssh_users`] (the admin's SSH accounts applied to a root file system).

pub mod dhcp;
pub mod netlink;
pub mod process;
pub mod signals;
pub mod ssh_users;
