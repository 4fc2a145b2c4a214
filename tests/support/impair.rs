//! A userspace netem: where the kernel has no `sch_netem` (this machine's
//! has none: `tc qdisc add ... netem` says "Specified qdisc kind is
//! unknown"), the hosts' interfaces are TAP devices, one per namespace, and
//! a thread of the test process is the wire between them: it reads every
//! Ethernet frame a host sends and hands it to the others (a hub), after
//! netem's impairments: a delay with jitter, random loss, and reordering
//! (a share of the frames skips the delay, as netem's `reorder`).

#![allow(dead_code)]

use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    pub delay: Duration,
    pub jitter: Duration,
    /// Probability a frame is dropped.
    pub loss: f64,
    /// Probability a frame skips the delay (and so overtakes delayed ones).
    pub reorder: f64,
}

impl Impair {
    pub fn describe(&self) -> String {
        format!(
            "delay {:?} ± {:?}, loss {:.0}%, reorder {:.0}%",
            self.delay,
            self.jitter,
            self.loss * 100.0,
            self.reorder * 100.0
        )
    }
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;

/// Opens TAP device `name` inside namespace `ns` (from a thread that
/// enters it: the device is made in the namespace of the caller).
pub fn open_tap(ns: &str, name: &str) -> Result<File, String> {
    let (ns, name) = (ns.to_string(), name.to_string());
    std::thread::spawn(move || -> Result<File, String> {
        let nsf = File::open(format!("/run/netns/{ns}")).map_err(|e| format!("open namespace {ns}: {e}"))?;
        // SAFETY: setns on a valid namespace descriptor; affects this
        // (short-lived) thread only.
        if unsafe { libc::setns(nsf.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(format!("setns {ns}: {}", std::io::Error::last_os_error()));
        }
        let tun = std::fs::OpenOptions::new().read(true).write(true).open("/dev/net/tun").map_err(|e| format!("/dev/net/tun: {e}"))?;
        let mut ifr = [0u8; 40];
        ifr[..name.len()].copy_from_slice(name.as_bytes());
        ifr[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
        // SAFETY: TUNSETIFF reads a 40-byte struct ifreq we own.
        if unsafe { libc::ioctl(tun.as_raw_fd(), TUNSETIFF, ifr.as_mut_ptr()) } != 0 {
            return Err(format!("TUNSETIFF {name} in {ns}: {}", std::io::Error::last_os_error()));
        }
        Ok(tun)
    })
    .join()
    .map_err(|_| "the tap thread panicked".to_string())?
}

struct Due {
    at: Instant,
    seq: u64,
    to: usize,
    frame: Vec<u8>,
}
impl PartialEq for Due {
    fn eq(&self, o: &Due) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Due) -> std::cmp::Ordering {
        // BinaryHeap is a max-heap: the earliest first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The wire: forwards frames among `taps` until dropped.
pub struct Hub {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub dropped: Arc<AtomicU64>,
    pub reordered: Arc<AtomicU64>,
}

impl Hub {
    pub fn start(taps: Vec<File>, imp: Impair) -> Hub {
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let reordered = Arc::new(AtomicU64::new(0));
        let (s, d, r) = (stop.clone(), dropped.clone(), reordered.clone());
        let thread = std::thread::spawn(move || run(taps, imp, &s, &d, &r));
        Hub { stop, thread: Some(thread), dropped, reordered }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut taps: Vec<File>, imp: Impair, stop: &AtomicBool, dropped: &AtomicU64, reordered: &AtomicU64) {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ std::process::id() as u64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let wait = heap.peek().map_or(10, |d: &Due| d.at.saturating_duration_since(now).as_millis().clamp(0, 10) as i32);
        let mut fds: Vec<libc::pollfd> =
            taps.iter().map(|t| libc::pollfd { fd: t.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: a valid array of pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        for (i, f) in fds.iter().enumerate() {
            if f.revents & libc::POLLIN == 0 {
                continue;
            }
            let Ok(n) = taps[i].read(&mut buf) else { continue };
            if rand() < imp.loss {
                dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let at = if rand() < imp.reorder {
                reordered.fetch_add(1, Ordering::Relaxed);
                Instant::now()
            } else {
                let j = imp.jitter.as_secs_f64() * (2.0 * rand() - 1.0);
                Instant::now() + Duration::from_secs_f64((imp.delay.as_secs_f64() + j).max(0.0))
            };
            for to in (0..taps.len()).filter(|&t| t != i) {
                seq += 1;
                heap.push(Due { at, seq, to, frame: buf[..n].to_vec() });
            }
        }
        let now = Instant::now();
        while heap.peek().is_some_and(|d| d.at <= now) {
            let d = heap.pop().unwrap();
            let _ = taps[d.to].write(&d.frame);
        }
    }
}
