//! Which address the connection-setup socket listens on, chosen as NCCL
//! chooses its socket interface (NCCL_SOCKET_IFNAME): a comma-separated list
//! of name prefixes; `=` before the list makes the names exact; `^` before
//! that excludes what matches instead. IPv4 and IPv6 both work; an IPv6
//! link-local address is skipped (a peer would need its scope id, which the
//! handle does not carry).

use crate::error::{Error, Result};
use std::net::{IpAddr, Ipv4Addr};

/// One address of one interface that is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    pub name: String,
    pub ip: IpAddr,
}

/// Every IPv4 and IPv6 address of the interfaces that are up.
pub fn interfaces() -> Vec<IfAddr> {
    let mut found = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below; we only read it.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return found;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned.
        let e = unsafe { &*p };
        p = e.ifa_next;
        if e.ifa_addr.is_null() || e.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: a non-null sockaddr; the family tells its real type.
        let ip = match unsafe { (*e.ifa_addr).sa_family } as i32 {
            // SAFETY: AF_INET means sockaddr_in.
            libc::AF_INET => IpAddr::from(unsafe { &*(e.ifa_addr as *const libc::sockaddr_in) }.sin_addr.s_addr.to_ne_bytes()),
            // SAFETY: AF_INET6 means sockaddr_in6.
            libc::AF_INET6 => IpAddr::from(unsafe { &*(e.ifa_addr as *const libc::sockaddr_in6) }.sin6_addr.s6_addr),
            _ => continue,
        };
        // SAFETY: ifa_name is a NUL-terminated C string.
        let name = unsafe { std::ffi::CStr::from_ptr(e.ifa_name) }.to_string_lossy().into_owned();
        found.push(IfAddr { name, ip });
    }
    // SAFETY: freeing what getifaddrs allocated.
    unsafe { libc::freeifaddrs(ifa) };
    found
}

fn usable(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => true,
        // fe80::/10 needs a scope id the handle does not carry.
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 != 0xfe80,
    }
}

/// The address to listen on among `found`: with `spec`, the first address
/// (IPv4 before IPv6) of an interface it selects; without, the first
/// non-loopback IPv4, else non-loopback IPv6, else loopback.
pub fn choose(found: &[IfAddr], spec: Option<&str>) -> Result<IpAddr> {
    let candidates = |want: &dyn Fn(&IfAddr) -> bool| -> Option<IpAddr> {
        let ok = |a: &&IfAddr| usable(&a.ip) && want(a);
        let v4 = found.iter().filter(ok).find(|a| a.ip.is_ipv4());
        v4.or_else(|| found.iter().filter(ok).find(|a| a.ip.is_ipv6())).map(|a| a.ip)
    };
    let Some(spec) = spec else {
        return Ok(candidates(&|a| !a.ip.is_loopback())
            .or_else(|| candidates(&|a| a.ip.is_loopback()))
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    };
    let (exclude, rest) = spec.strip_prefix('^').map_or((false, spec), |r| (true, r));
    let (exact, list) = rest.strip_prefix('=').map_or((false, rest), |r| (true, r));
    let names: Vec<&str> = list.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if names.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "RCCL_RUST_GIN_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) {spec:?} names no interface"
        )));
    }
    let selects = |n: &str| names.iter().any(|w| if exact { n == *w } else { n.starts_with(w) }) != exclude;
    candidates(&|a| selects(&a.name)).ok_or_else(|| {
        let mut have: Vec<String> = found.iter().map(|a| format!("{} {}", a.name, a.ip)).collect();
        have.dedup();
        Error::InvalidArgument(format!(
            "no interface matches RCCL_RUST_GIN_SOCKET_IFNAME (or NCCL_SOCKET_IFNAME) {spec:?} ({}{}; have: {})",
            if exclude { "excluding " } else { "" },
            if exact { "exact names" } else { "name prefixes" },
            have.join(", ")
        ))
    })
}

/// The address of the interface to listen on (see [`choose`]).
pub fn pick_address(spec: Option<&str>) -> Result<IpAddr> {
    choose(&interfaces(), spec)
}
