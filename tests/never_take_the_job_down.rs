//! Issue 26, item 8, "Never take the job down": faults a held-out fault
//! harness found that ended the whole process. Each must end in an error the
//! caller sees, with the process alive. The faults run in a child process
//! (this binary again, running one ignored test by name), so that a crash
//! fails the test here with its signal instead of taking the test binary
//! down; each test was run against the code before its fix and failed so.

#[path = "support/emu.rs"]
mod emu;

use emu::{write, Side, ALL};
use rccl_rust_gin::emu::{EmuQp, Fabric};
use rccl_rust_gin::gpu::{HostMemory, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use rccl_rust_gin::mlx5::sq::{new_error_record, SendQueue};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const SECOND: u64 = 1_000_000_000;

/// Starts this test binary again as the ignored test `test`, with `env`.
fn child(test: &str, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", test, "--nocapture", "--test-threads=1"]);
    c.envs(env.iter().copied());
    c
}

/// How a child ended, in words (a signal named).
fn ended(s: ExitStatus) -> String {
    let name = |sig| match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGABRT => "SIGABRT",
        _ => "another signal",
    };
    match s.signal() {
        Some(sig) => format!("died of signal {sig} ({})", name(sig)),
        None => format!("exited with {s}"),
    }
}

/// Writes to fd 1 (libtest captures the test thread's stdout handle).
fn say(s: &str) {
    // SAFETY: a valid buffer written to fd 1.
    let n = unsafe { libc::write(1, s.as_ptr() as *const libc::c_void, s.len()) };
    assert_eq!(n, s.len() as isize);
}

/// Reads the child's stdout up to a line holding `tag`; returns what follows.
fn expect(from: &mut impl BufRead, tag: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(from.read_line(&mut line).unwrap() > 0, "the child exited before saying {tag}");
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..].trim().to_string();
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

// --- 1. A forked child's exit and the parent's fabric segment ---------------

fn segment_exists(name: &str) -> bool {
    std::path::Path::new(&format!("/dev/shm/{name}")).exists()
}

/// A forked child that exits (running the exit hooks, as a worker forked by
/// a data loader does) leaves its parent's shared-memory fabric: the segment
/// stays, and a rank started later attaches and puts into the parent.
/// Before the fix the child's exit hook cleared the parent's attach slot and
/// removed /dev/shm/<name> (seen failing: "the forked child removed the
/// parent's segment").
#[test]
fn a_forked_child_that_exits_leaves_its_parents_fabric() {
    let n = format!("rust-gin-test-fork-{}", std::process::id());
    let f = Fabric::shm_create(&n, 4).unwrap();
    let a = Side::new(&f, "parent", 1 << 16, ALL);
    a.nic.start_polling();
    let qp = EmuQp::create(&a.nic, a.pd, QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap()).unwrap();

    // SAFETY: the child calls only exit(), which runs the atexit hooks the
    // parent registered (the fabric's among them), then ends.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ends the forked child.
        unsafe { libc::exit(0) };
    }
    assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
    let mut status = 0;
    let t = Instant::now();
    // SAFETY: waiting for our own child, without blocking.
    while unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == 0 {
        assert!(t.elapsed() < Duration::from_secs(20), "the forked child did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "forked child status {status:#x}");
    assert!(segment_exists(&n), "the forked child removed the parent's segment /dev/shm/{n}");

    // A rank started now finds the fabric and reaches the parent.
    let who = format!("{n} {} {} {} {}", a.nic.node(), qp.qpn, a.addr(0), a.mr.rkey);
    let mut c = child("later_rank", &[("RUST_GIN_TEST_LATER_RANK", &who)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the later rank");
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let v: Vec<u32> = expect(&mut out, "LATER").split_whitespace().map(|w| w.parse().unwrap()).collect();
    qp.connect(v[0], v[1]).unwrap();
    writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
    let status = c.wait().unwrap();
    assert!(status.success(), "the later rank {}", ended(status));
    let mut got = vec![0u8; 4096];
    a.buf.read(0, &mut got);
    assert!(got == pattern(4096, 5), "the later rank's put did not land in the parent");
}

#[test]
#[ignore = "started by a_forked_child_that_exits_leaves_its_parents_fabric"]
fn later_rank() {
    let who = std::env::var("RUST_GIN_TEST_LATER_RANK").expect("started by a_forked_child_that_exits_leaves_its_parents_fabric");
    let w: Vec<&str> = who.split_whitespace().collect();
    let num = |i: usize| w[i].parse::<u64>().unwrap();
    let (node, qpn, addr, rkey) = (num(1) as u32, num(2) as u32, num(3), num(4) as u32);
    let f = Fabric::shm_attach(w[0]).unwrap_or_else(|e| panic!("a later rank attaches to /dev/shm/{}: {e}", w[0]));
    let b = Side::new(&f, "later", 1 << 16, ALL);
    b.nic.start_polling();
    let qp = EmuQp::create(&b.nic, b.pd, QueueMem::new(&HostMemory, 6, RingHome::Host).unwrap()).unwrap();
    qp.connect(node, qpn).unwrap();
    say(&format!("LATER {} {}\n", b.nic.node(), qp.qpn));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let error = new_error_record(&HostMemory).unwrap();
    let sq = SendQueue::new(&HostMemory, &qp.descriptor(1, error.dev_addr(), 20 * SECOND)).unwrap();
    b.buf.write(0, &pattern(4096, 5));
    sq.post(&[write(b.addr(0), b.mr.lkey, addr, rkey, 4096)]).unwrap();
    sq.quiet().unwrap_or_else(|e| panic!("the later rank's put: {e:?} {:?}", sq.error()));
}
