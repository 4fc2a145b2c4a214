//! Hosts for the TCP fabric's tests: network namespaces on this machine,
//! one per host, each with a veth pair into a bridge that lives in a
//! namespace of its own (the "switch"), addresses 10.77.0.<host + 1>/24.
//! Names carry this process's id and a counter, so parallel runs never
//! share one; everything is deleted on drop (and namespaces a killed run
//! left behind are deleted by the next one).
//!
//! Where namespaces cannot be made (no privilege, no `ip`), or
//! RUST_GIN_TEST_NO_NETNS is set, the hosts are loopback addresses
//! 127.0.0.<host + 1> of this namespace instead, and that is printed loudly:
//! the same cases run, but faults that need a network (netem, partitions)
//! cannot be planted and say so.

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

const PREFIX: &str = "rgin";

pub struct Host {
    /// The namespace, or None on loopback.
    pub ns: Option<String>,
    pub ip: String,
}

pub struct Net {
    pub hosts: Vec<Host>,
    switch: Option<String>,
    /// The userspace wire of an impaired net (support/impair.rs).
    hub: Option<super::impair::Hub>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Prints past the test harness's capture (straight to file descriptor 2),
/// so that a passing test that could not do what it says is seen.
pub fn loud(msg: &str) {
    let bar = "!".repeat(78);
    let text = format!("\n{bar}\n!!! {msg}\n{bar}\n");
    // SAFETY: writing a valid buffer to fd 2.
    unsafe { libc::write(2, text.as_ptr() as *const libc::c_void, text.len()) };
}

/// Deletes namespaces of runs whose process is gone.
fn reap_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

impl Net {
    /// `n` hosts (2 to 4).
    pub fn new(n: usize) -> Net {
        assert!((1..=8).contains(&n));
        static RUN: AtomicU32 = AtomicU32::new(0);
        if std::env::var_os("RUST_GIN_TEST_NO_NETNS").is_some() {
            loud("RUST_GIN_TEST_NO_NETNS is set: NOT using network namespaces; the hosts are loopback addresses 127.0.0.x");
            return Net::loopback(n);
        }
        reap_stale();
        let base = format!("{PREFIX}{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed));
        let switch = format!("{base}-sw");
        let mut net = Net { hosts: Vec::new(), switch: None, hub: None };
        let made = (|| -> Result<(), String> {
            ip(&["netns", "add", &switch])?;
            net.switch = Some(switch.clone());
            ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
            ip(&["-n", &switch, "link", "set", "br0", "up"])?;
            for h in 0..n {
                let ns = format!("{base}-h{h}");
                ip(&["netns", "add", &ns])?;
                let addr = format!("10.77.0.{}", h + 1);
                net.hosts.push(Host { ns: Some(ns.clone()), ip: addr.clone() });
                let port = format!("p{h}");
                ip(&["link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port, "netns", &switch])?;
                ip(&["-n", &switch, "link", "set", &port, "master", "br0"])?;
                ip(&["-n", &switch, "link", "set", &port, "up"])?;
                ip(&["-n", &ns, "link", "set", "lo", "up"])?;
                ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
                ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            }
            Ok(())
        })();
        match made {
            Ok(()) => net,
            Err(e) => {
                drop(net); // deletes what was made
                loud(&format!(
                    "COULD NOT CREATE NETWORK NAMESPACES ({e}); running the same cases over loopback addresses 127.0.0.x \
                     instead: nothing here crosses a network"
                ));
                Net::loopback(n)
            }
        }
    }

    fn loopback(n: usize) -> Net {
        Net { hosts: (0..n).map(|h| Host { ns: None, ip: format!("127.0.0.{}", h + 1) }).collect(), switch: None, hub: None }
    }

    /// `n` hosts whose wire delays, loses and reorders frames as `imp`
    /// says: TAP interfaces joined by a thread of this process
    /// (support/impair.rs), because this kernel has no sch_netem. Loopback
    /// (loudly, without the impairments) where namespaces cannot be made.
    pub fn impaired(n: usize, imp: super::impair::Impair) -> Net {
        static RUN: AtomicU32 = AtomicU32::new(0);
        if std::env::var_os("RUST_GIN_TEST_NO_NETNS").is_some() {
            loud(&format!("RUST_GIN_TEST_NO_NETNS is set: loopback 127.0.0.x, and the impairments ({}) are NOT applied", imp.describe()));
            return Net::loopback(n);
        }
        reap_stale();
        let base = format!("{PREFIX}{}-i{}", std::process::id(), RUN.fetch_add(1, Ordering::Relaxed));
        let mut net = Net { hosts: Vec::new(), switch: None, hub: None };
        let mut taps = Vec::new();
        let made = (|| -> Result<(), String> {
            for h in 0..n {
                let ns = format!("{base}-h{h}");
                ip(&["netns", "add", &ns])?;
                let addr = format!("10.77.0.{}", h + 1);
                net.hosts.push(Host { ns: Some(ns.clone()), ip: addr.clone() });
                taps.push(super::impair::open_tap(&ns, "eth0")?);
                ip(&["-n", &ns, "link", "set", "lo", "up"])?;
                ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
                ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            }
            Ok(())
        })();
        match made {
            Ok(()) => {
                eprintln!("netns: {n} hosts on a userspace wire: {}", imp.describe());
                net.hub = Some(super::impair::Hub::start(taps, imp));
                net
            }
            Err(e) => {
                drop(taps);
                drop(net);
                loud(&format!(
                    "COULD NOT CREATE NAMESPACES WITH TAP INTERFACES ({e}); running over loopback 127.0.0.x WITHOUT the \
                     impairments ({})",
                    imp.describe()
                ));
                Net::loopback(n)
            }
        }
    }

    /// Frames the impaired wire dropped and sent ahead of their turn.
    pub fn impairments_seen(&self) -> Option<(u64, u64)> {
        self.hub.as_ref().map(|h| (h.dropped.load(Ordering::Relaxed), h.reordered.load(Ordering::Relaxed)))
    }

    pub fn isolated(&self) -> bool {
        self.switch.is_some()
    }

    /// A command run on host `h` (inside its namespace), with the
    /// environment that makes the emulated provider use the TCP fabric on
    /// that host's address.
    pub fn command(&self, h: usize, exe: &std::path::Path) -> Command {
        let host = &self.hosts[h];
        let mut c = match &host.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        c.env("RCCL_RUST_GIN_EMU_FABRIC", format!("tcp:{}", host.ip));
        c.env("RCCL_RUST_GIN_SOCKET_IFNAME", if host.ns.is_some() { "eth0" } else { "lo" });
        c.env("RUST_GIN_TEST_HOST_IP", &host.ip);
        c
    }

    /// Adds a netem qdisc to host `h`'s interface (`spec`: "delay 20ms" ...).
    /// False (printed loudly) on loopback, where it cannot be planted.
    pub fn netem(&self, h: usize, spec: &str) -> bool {
        let Some(ns) = &self.hosts[h].ns else {
            loud(&format!("NO NAMESPACES: cannot plant `tc netem {spec}` on loopback; this case runs WITHOUT it"));
            return false;
        };
        let mut args = vec!["netns", "exec", ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem"];
        args.extend(spec.split_whitespace());
        let out = Command::new("ip").args(&args).output().expect("ip netns exec tc");
        assert!(out.status.success(), "tc netem {spec}: {}", String::from_utf8_lossy(&out.stderr));
        true
    }
}

impl Net {
    /// Cuts host `h` off: its switch port goes down, so nothing it sends
    /// and nothing sent to it passes; its connections stay open at both
    /// ends, and neither end is told. False (printed loudly) on loopback.
    pub fn partition(&self, h: usize) -> bool {
        let Some(sw) = &self.switch else {
            loud("NO NAMESPACES: a partition cannot be planted on loopback");
            return false;
        };
        ip(&["-n", sw, "link", "set", &format!("p{h}"), "down"]).expect("switch port down");
        true
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        drop(self.hub.take());
        for h in &self.hosts {
            if let Some(ns) = &h.ns {
                let _ = ip(&["netns", "del", ns]);
            }
        }
        if let Some(sw) = &self.switch {
            let _ = ip(&["netns", "del", sw]);
        }
    }
}
