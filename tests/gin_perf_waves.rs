//! gin-perf's several-waves mode, run as a user runs it: waves of lockstep
//! lanes share one queue, every wave's operations are counted, and each wave
//! rings at most once per wave-wide post.

use std::process::Command;

fn gin_perf(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gin-perf")).args(args).output().expect("run gin-perf")
}

#[test]
fn waves_share_a_queue_and_each_rings_once_per_post() {
    let out = gin_perf(&[
        "-s", "8", "-o", "put", "-p", "direct", "-R", "1", "-t", "10", "-w", "5", "-l", "4", "--lane-mode", "wave",
        "--waves", "3", "--log-depth", "10", "--no-datapath", "-f", "csv",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "gin-perf failed: {}\n{}", String::from_utf8_lossy(&out.stderr), text);
    let mut lines = text.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().expect("csv header").split(',').collect();
    let row: Vec<&str> = lines.next().expect("csv row").split(',').collect();
    let col = |name: &str| -> f64 {
        let i = header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no column {name}"));
        row[i].parse().unwrap_or_else(|_| panic!("{name} = {:?}", row[i]))
    };
    // One WQEBB per counted put: the operations of all three waves are
    // counted (one wave's alone would read 3 WQEBBs per op, or 1/3)... The
    // flushes' NOPs (one per wave) add 3 in 192 puts to the shortest run,
    // which a slow machine may measure.
    let w = col("wqebbs_per_op");
    assert!((1.0..1.02).contains(&w), "WQEBBs per op {w}");
    // ...and each wave's 4 lanes ring at most once per post (flush NOPs add
    // a few), never once per lane (1.0). Fewer than one per post is right:
    // a wave that finds another wave ringing leaves its publish to that
    // doorbell (SendQueue::ring), which the shared poller's timing makes
    // common.
    let d = col("doorbells_per_op");
    assert!(d > 0.05 && d < 0.3, "doorbells per op {d}, want at most one per 4-lane post");
    assert!(col("mops_median") > 0.0);
}

#[test]
fn waves_need_wave_mode() {
    let out = gin_perf(&["-s", "8", "-o", "put", "-p", "direct", "--waves", "2", "--no-datapath"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--waves needs --lane-mode wave"), "stderr: {err}");
}
