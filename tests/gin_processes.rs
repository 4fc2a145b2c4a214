//! The GIN vtable with two ranks as two processes: this test is rank 0 and
//! starts itself again as rank 1 (the ignored `rank_one` test, run only by
//! name). Each process dlopens the plugin; the emulated NICs share a
//! shared-memory fabric; handles and barriers travel over the child's pipes.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use rccl_host::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
fn unhex(s: &str) -> [u8; 128] {
    let mut out = [0u8; 128];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex");
    }
    out
}

/// Reads lines until one carries `tag`; returns what follows it. (libtest may
/// print "test rank_one ... " on the same line.)
fn expect(r: &mut impl BufRead, tag: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the other rank exited while we waited for {tag}");
        if let Some(at) = line.find(tag) {
            return line[at + tag.len()..].trim().to_string();
        }
    }
}

fn say(s: &str) {
    // Straight to fd 1: the test harness captures println!.
    let line = format!("{s}\n");
    // SAFETY: writing a valid buffer to fd 1 (a pipe to the parent).
    let n = unsafe { libc::write(1, line.as_ptr() as *const libc::c_void, line.len()) };
    assert_eq!(n, line.len() as isize);
}

fn fabric_env(name: &str) {
    // SAFETY: set before this process starts any thread that reads it.
    unsafe { std::env::set_var("RCCL_RUST_GIN_EMU_FABRIC", format!("shm:{name}")) };
}

#[test]
fn two_ranks_as_processes() {
    let name = format!("rust-gin-gin-{}", std::process::id());
    fabric_env(&name);
    let p = plugin();
    let mut me = p.open_rank(0, 2);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "rank_one", "--nocapture", "--test-threads=1"])
        .env("RUST_GIN_TEST_FABRIC", &name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start rank 1");
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut to = child.stdin.take().unwrap();
    let theirs = unhex(&expect(&mut from, "HANDLE "));
    writeln!(to, "HANDLE {}", hex(&me.handle)).unwrap();
    let mine = me.handle;
    assert_eq!(p.connect(&mut me, &[mine, theirs]), OK, "connect");
    let mut k = 0;
    let sync = || {
        k += 1;
        writeln!(&to, "SYNC {k}").unwrap();
        assert_eq!(expect(&mut from, "SYNC "), k.to_string());
    };
    let sync = std::cell::RefCell::new(sync);
    gin_flow::run_connected(p, &me, &|| (sync.borrow_mut())());
    drop(sync);
    let status = child.wait().unwrap();
    assert!(status.success(), "rank 1 failed (exit {status})");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut from, &mut rest).unwrap();
    assert!(rest.contains("RANK1-DONE"), "rank 1 did not finish its checks: {rest:?}");
}

#[test]
#[ignore = "rank 1 of two_ranks_as_processes; that test starts it"]
fn rank_one() {
    let name = std::env::var("RUST_GIN_TEST_FABRIC").expect("started by two_ranks_as_processes");
    fabric_env(&name);
    let p = plugin();
    let mut me = p.open_rank(1, 2);
    say(&format!("HANDLE {}", hex(&me.handle)));
    let stdin = std::io::stdin();
    let mut from = stdin.lock();
    let theirs = unhex(&expect(&mut from, "HANDLE "));
    let mine = me.handle;
    assert_eq!(p.connect(&mut me, &[theirs, mine]), OK, "connect");
    let k = std::cell::Cell::new(0);
    let from = std::cell::RefCell::new(from);
    gin_flow::run_connected(p, &me, &|| {
        k.set(k.get() + 1);
        say(&format!("SYNC {}", k.get()));
        assert_eq!(expect(&mut *from.borrow_mut(), "SYNC "), k.get().to_string());
    });
    say("RANK1-DONE");
}

/// The two-process run again with the emulated NICs presenting bnxt_re and
/// ionic, in both signal modes: their WQEs, doorbells and CQEs over the
/// shared-memory fabric between processes.
#[test]
fn two_ranks_as_processes_on_bnxt_re_and_ionic() {
    rerun_on_families(&["two_ranks_as_processes"]);
}
