//! Ranks in separate processes over shared memory: this test process is rank
//! 0; it starts itself again as rank 1 (the ignored `rank_one` test below,
//! which only runs when asked for by name), and the two emulated NICs talk
//! through the shared-memory fabric.

#[path = "support/emu.rs"]
mod emu;

use emu::*;
use rccl_rust_gin::emu::{EmuQp, Fabric};
use rccl_rust_gin::gpu::{HostMemory, RingHome};
use rccl_rust_gin::mlx5::queue::QueueMem;
use std::io::{BufRead, BufReader, Write};

use std::process::{Command, Stdio};

const N: u64 = 2000;
const FLAG: u64 = 8 * N;

fn parse(line: &str) -> Vec<u64> {
    line.split_whitespace().map(|w| w.parse().expect("number")).collect()
}

#[test]
fn two_processes_share_a_fabric() {
    let name = format!("rust-gin-test-{}", std::process::id());
    let fabric = Fabric::shm_create(&name, 2).expect("create the shared-memory fabric");
    let a = Side::new(&fabric, "rank0", 1 << 16, ALL);
    a.nic.start_polling();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "rank_one", "--nocapture", "--test-threads=1"])
        .env("RUST_GIN_TEST_FABRIC", &name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start rank 1");
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // rank 1 announces: node qpn buffer-address rkey
    loop {
        line.clear();
        assert!(from_child.read_line(&mut line).unwrap() > 0, "rank 1 exited before announcing itself");
        // libtest may have printed "test rank_one ... " on the same line.
        if let Some(at) = line.find("RANK1 ") {
            line.drain(..at + "RANK1 ".len());
            break;
        }
    }
    let v = parse(&line);
    let (node, qpn, base, rkey) = (v[0] as u32, v[1] as u32, v[2], v[3] as u32);

    let qp = EmuQp::create(&a.nic, a.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
    qp.connect(node, qpn).unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "{} {}", a.nic.node(), qp.qpn).unwrap();

    let error = rccl_rust_gin::mlx5::sq::new_error_record(&HostMemory).unwrap();
    let sq = rccl_rust_gin::mlx5::sq::SendQueue::new(&HostMemory, &qp.descriptor(1, error.dev_addr(), 20_000_000_000)).unwrap();
    // Wait until rank 1's QP is connected back (its first line after ours).
    line.clear();
    from_child.read_line(&mut line).unwrap();
    assert!(line.contains("READY"), "rank 1 said {line:?}");
    for i in 0..N {
        sq.post(&[write_inline(i * 3 + 1, 8, base + 8 * i, rkey)]).unwrap();
    }
    // The flag goes last: a fetch-and-add the responder sees after every write.
    sq.post(&[fetch_add(a.addr(0), a.mr.lkey, base + FLAG, rkey, 1)]).unwrap();
    sq.quiet().unwrap_or_else(|e| panic!("quiet: {e:?} {:?}", sq.error()));
    let status = child.wait().unwrap();
    assert!(status.success(), "rank 1 found wrong data (exit {status})");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut from_child, &mut rest).unwrap();
    assert!(rest.contains(&format!("VERIFIED {N}")), "rank 1 did not report its check: {rest:?}");
    assert!(sq.error().is_none());
    drop(qp);
}

#[test]
#[ignore = "rank 1 of two_processes_share_a_fabric; that test starts it"]
fn rank_one() {
    let name = std::env::var("RUST_GIN_TEST_FABRIC").expect("started by two_processes_share_a_fabric");
    let fabric = Fabric::shm_attach(&name).expect("attach");
    let b = Side::new(&fabric, "rank1", (FLAG + 8) as usize, ALL);
    b.nic.start_polling();
    let qp = EmuQp::create(&b.nic, b.pd, QueueMem::new(&HostMemory, 8, RingHome::Host).unwrap()).unwrap();
    // Straight to file descriptor 1: the test harness captures the
    // standard-output handles of test threads.
    let say = |s: String| {
        // SAFETY: writing a valid buffer to fd 1, which the parent piped.
        let n = unsafe { libc::write(1, s.as_ptr() as *const libc::c_void, s.len()) };
        assert_eq!(n, s.len() as isize, "writing to the parent");
    };
    say(format!("RANK1 {} {} {} {}\n", b.nic.node(), qp.qpn, b.addr(0), b.mr.rkey));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let v = parse(&line);
    qp.connect(v[0] as u32, v[1] as u32).unwrap();
    say("READY\n".to_string());
    let flag = b.buf.atomic_u64(FLAG as usize);
    let t = std::time::Instant::now();
    while flag.load(std::sync::atomic::Ordering::Acquire) == 0 {
        assert!(t.elapsed().as_secs() < 30, "rank 1: the final fetch-and-add never arrived");
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    for i in 0..N {
        let mut w = [0u8; 8];
        b.buf.read(8 * i as usize, &mut w);
        assert_eq!(u64::from_ne_bytes(w), i * 3 + 1, "slot {i}");
    }
    say(format!("VERIFIED {N}\n"));
}
