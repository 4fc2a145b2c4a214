//! Ranks as processes on the hosts of a [`Net`]: the test process starts
//! its own binary again once per rank (an ignored test, run by name) on
//! each host (inside its namespace, through `ip netns exec`), and relays
//! what RCCL's bootstrap would: the listen handles (allgather) and
//! barriers. Lines on the children's stdout and stdin carry it; every wait
//! is bounded and says what it waited for.

#![allow(dead_code)]

use super::netns::Net;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const HANDLE_BYTES: usize = 128;

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex")).collect()
}

pub struct Kid {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Everything the child wrote to stderr (its log).
    pub stderr: Arc<Mutex<String>>,
    pub pid: u32,
}

/// Starts `test` (an ignored test of this binary) on host `h` as rank
/// `rank` of `n`.
pub fn start(net: &Net, h: usize, test: &str, rank: usize, n: usize, env: &[(&str, String)]) -> Kid {
    let exe = std::env::current_exe().unwrap();
    let mut c: Command = net.command(h, &exe);
    c.args(["--ignored", "--exact", test, "--nocapture", "--test-threads=1"])
        .env("RUST_GIN_TEST_RANK", rank.to_string())
        .env("RUST_GIN_TEST_NRANKS", n.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap_or_else(|e| panic!("start {test} on host {h}: {e}"));
    let pid = child.id();
    let (tx, lines) = channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let stderr = Arc::new(Mutex::new(String::new()));
    let err = child.stderr.take().unwrap();
    let sink = stderr.clone();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            let mut s = sink.lock().unwrap();
            s.push_str(&l);
            s.push('\n');
        }
    });
    Kid { stdin: child.stdin.take(), child, lines, stderr, pid }
}

impl Kid {
    /// Waits (at most `secs`) for a line carrying `tag`; returns what follows.
    pub fn expect(&self, tag: &str, secs: u64) -> String {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(at) = l.find(tag) {
                        return l[at + tag.len()..].trim().to_string();
                    }
                }
                Err(e) => panic!(
                    "pid {}: no line {tag:?} within {secs} s ({e}); its log:\n{}",
                    self.pid,
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }

    pub fn send(&mut self, line: &str) {
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{line}").unwrap_or_else(|e| panic!("pid {}: writing {line:?}: {e}", self.pid));
    }

    /// Waits (bounded) for the exit; asserts success.
    pub fn finish(mut self, secs: u64) {
        drop(self.stdin.take());
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "pid {} failed ({st}); its log:\n{}", self.pid, self.stderr.lock().unwrap());
                return;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("pid {} did not exit within {secs} s; its log:\n{}", self.pid, self.stderr.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the process (SIGSTOP) and waits (bounded) until every thread
    /// of it is stopped: the signal is asynchronous, and a thread running on
    /// another CPU may go on for a moment.
    pub fn stop(&self) {
        self.signal(libc::SIGSTOP);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid)).map(|d| d.flatten().collect::<Vec<_>>());
            let all_stopped = tasks.is_ok_and(|t| {
                t.iter().all(|e| {
                    std::fs::read_to_string(e.path().join("stat"))
                        .is_ok_and(|st| st.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('T')))
                })
            });
            if all_stopped {
                return;
            }
            assert!(Instant::now() < end, "pid {}: not all threads stopped within 10 s of SIGSTOP", self.pid);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to our own child (ip netns exec execs the test
        // binary in place, so the pid is the rank's).
        unsafe { libc::kill(self.pid as i32, sig) };
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a collective across `kids`: relays the HANDLE allgather, then
/// barriers (SYNC k -> GO k) until every rank says RANK-DONE.
pub fn relay(kids: &mut [Kid], secs: u64) {
    let handles: Vec<String> = kids.iter().map(|k| k.expect("HANDLE ", secs)).collect();
    let all = format!("HANDLES {}", handles.join(" "));
    for k in kids.iter_mut() {
        k.send(&all);
    }
    let mut round = 0u64;
    loop {
        round += 1;
        let said: Vec<String> = kids.iter().map(|k| k.expect("STEP ", secs)).collect();
        if said.iter().all(|s| s == "DONE") {
            return;
        }
        assert!(said.iter().all(|s| *s == round.to_string()), "ranks out of step at barrier {round}: {said:?}");
        for k in kids.iter_mut() {
            k.send(&format!("GO {round}"));
        }
    }
}

// --- the rank's side -----------------------------------------------------------

/// (rank, nranks) of this child.
pub fn me() -> (usize, usize) {
    let get = |v: &str| std::env::var(v).unwrap_or_else(|_| panic!("{v}: started by a test")).parse().unwrap();
    (get("RUST_GIN_TEST_RANK"), get("RUST_GIN_TEST_NRANKS"))
}

/// Straight to fd 1: the harness captures println!.
pub fn say(s: &str) {
    let line = format!("{s}\n");
    // SAFETY: writing a valid buffer to fd 1 (a pipe to the parent).
    let n = unsafe { libc::write(1, line.as_ptr() as *const libc::c_void, line.len()) };
    assert_eq!(n, line.len() as isize);
}

/// The next stdin line carrying `tag` (the parent's; it closes stdin if it
/// gives up, which ends this wait).
pub fn hear(tag: &str) -> String {
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(stdin.lock().read_line(&mut line).unwrap() > 0, "the parent went away while we waited for {tag}");
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..].trim().to_string();
        }
    }
}

pub fn allgather(h: &[u8; HANDLE_BYTES]) -> Vec<[u8; HANDLE_BYTES]> {
    say(&format!("HANDLE {}", hex(h)));
    hear("HANDLES ").split_whitespace().map(|w| unhex(w).try_into().expect("128 bytes")).collect()
}

pub fn barrier() {
    static ROUND: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    say(&format!("STEP {k}"));
    assert_eq!(hear("GO "), k.to_string());
}

pub fn done() {
    say("STEP DONE");
}
