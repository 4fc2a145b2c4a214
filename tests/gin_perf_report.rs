//! gin-perf's statistics, report and chart code (host/bin/gin_perf/perf/):
//! medians and ranges over repeats, ratios paired within a repeat, sizes in
//! B/KiB/MiB, and a chart whose paths differ by dash, not colour.

#[path = "../host/bin/gin_perf/perf/chart.rs"]
mod chart;
// Only its /proc/stat readers are tested here.
#[allow(dead_code)]
#[path = "../host/bin/gin_perf/perf/cpu.rs"]
mod cpu;
#[path = "../host/bin/gin_perf/perf/report.rs"]
mod report;
#[path = "../host/bin/gin_perf/perf/stats.rs"]
mod stats;

use stats::{Run, Stat};

fn run(path: &str, op: &str, bytes: u64, repeat: usize, rtt: f64, mops: f64, gbs: f64, host: f64) -> Run {
    Run {
        path: path.into(),
        op: op.into(),
        bytes,
        repeat,
        rtt_median_us: rtt,
        rtt_p99_us: rtt * 2.0,
        rtt_secs: 0.1,
        mops,
        rate_secs: 0.1,
        bandwidth_gbs: gbs,
        bw_secs: 0.1,
        host_cpu_ns: host,
        ..Default::default()
    }
}

#[test]
fn stat_is_median_and_range() {
    let s = Stat::of([3.0, 1.0, 2.0]);
    assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
    assert_eq!(Stat::of([4.0, 1.0, 2.0, 3.0]).median, 2.5);
    assert!((Stat::of([1.0, 2.0, 3.0]).spread() - 1.0).abs() < 1e-12);
    assert_eq!(Stat::of([f64::NAN, 5.0]).n, 1, "a missing ratio is left out");
}

#[test]
fn ratios_pair_paths_within_a_repeat() {
    // Repeat 1's proxy is slow: paired within repeats the rate ratios are
    // 5, 3 and 4; pairing medians of each path would give 9/2 = 4.5.
    let runs = vec![
        run("direct", "put+signal", 8, 0, 2.0, 10.0, 1.0, 10.0),
        run("proxy", "put+signal", 8, 0, 8.0, 2.0, 0.5, 1000.0),
        run("direct", "put+signal", 8, 1, 2.0, 9.0, 1.0, 20.0),
        run("proxy", "put+signal", 8, 1, 4.0, 3.0, 0.25, 1000.0),
        run("direct", "put+signal", 8, 2, 2.0, 8.0, 1.0, 30.0),
        run("proxy", "put+signal", 8, 2, 6.0, 2.0, 1.0, 1000.0),
    ];
    let r = stats::ratios(&runs);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].rate.median, r[0].rate.min, r[0].rate.max), (4.0, 3.0, 5.0));
    assert_eq!((r[0].latency.median, r[0].latency.min, r[0].latency.max), (3.0, 2.0, 4.0));
    // Bandwidth comes from its own runs, not from the message rate.
    assert_eq!((r[0].bandwidth.median, r[0].bandwidth.min, r[0].bandwidth.max), (2.0, 1.0, 4.0));
    assert_eq!(r[0].host_cpu.median, 0.02);
    let s = stats::samples(&runs);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].mops.median, 9.0);
    assert_eq!(s[1].rtt_us.median, 6.0);
}

#[test]
fn sizes_read_in_b_kib_mib() {
    assert_eq!(report::size_label(8), "8 B");
    assert_eq!(report::size_label(1536), "1536 B");
    assert_eq!(report::size_label(64 << 10), "64 KiB");
    assert_eq!(report::size_label(1 << 20), "1 MiB");
}

fn sweep() -> Vec<Run> {
    let mut runs = vec![];
    for rep in 0..3 {
        for (i, bytes) in [8u64, 64 << 10, 1 << 20].into_iter().enumerate() {
            let k = 1.0 + i as f64 + rep as f64 * 0.1;
            runs.push(run("direct", "put", bytes, rep, k, 4.0 / k, k, 5.0));
            runs.push(run("proxy", "put", bytes, rep, 3.0 * k, 1.0 / k, k / 2.0, 900.0));
        }
    }
    runs
}

#[test]
fn table_says_emulated_and_prints_spread_and_ranges() {
    let runs = sweep();
    let setup = report::Setup { emulated: true, ranks: 2, lanes: 1, lane_mode: "queues".into(), repeats: 3, min_time_ms: 100, cpus: 2, load: (0.5, 1.5), steal_pct: 2.5, nic_threads: Some("on 1 thread".into()) };
    let t = report::render(&stats::samples(&runs), &stats::ratios(&runs), report::Format::Table, &setup);
    assert!(t.contains("emulated NIC"), "{t}");
    assert!(t.contains("medians of 3 repeats, every timed run >= 100 ms"), "{t}");
    assert!(t.contains("2 CPUs, load average 0.5 at the start, 1.5 at the end"), "{t}");
    assert!(t.contains("hypervisor steal 2.5% of CPU time"), "{t}");
    assert!(t.contains("emulated NIC threads: on 1 thread"), "{t}");
    assert!(t.contains("64 KiB") && t.contains("1 MiB") && t.contains("8 B"), "{t}");
    // 8-byte put, repeats k = 1.0, 1.1, 1.2: proxy/direct rtt is 3 in each.
    assert!(t.contains("3.00 [3.00-3.00]"), "{t}");
    let j = report::render(&stats::samples(&runs), &stats::ratios(&runs), report::Format::Json, &setup);
    assert!(j.contains("\"steal_pct\":2.50,"), "{j}");
    let unknown = report::Setup { steal_pct: f64::NAN, ..setup.clone() };
    let ju = report::render(&stats::samples(&runs), &stats::ratios(&runs), report::Format::Json, &unknown);
    assert!(ju.contains("\"steal_pct\":null,"), "JSON has no NaN: {ju}");
    assert!(j.contains("\"rate_direct_over_proxy\":{\"median\":4.0000,\"min\":4.0000,\"max\":4.0000,\"n\":3}"), "{j}");
    let c = report::render(&stats::samples(&runs), &[], report::Format::Csv, &setup);
    let lines: Vec<&str> = c.lines().collect();
    assert_eq!(lines.len(), 2 + 6, "{c}");
    let cols = lines[1].split(',').count();
    assert!(lines[2..].iter().all(|l| l.split(',').count() == cols), "{c}");
}

#[test]
fn chart_has_a_rate_panel_sizes_in_units_and_one_colour_per_op() {
    let samples = stats::samples(&sweep());
    let lines = chart::lines(&samples, |s| s.mops.median);
    assert_eq!(lines.len(), 2);
    let (d, p) = (&lines[0], &lines[1]);
    assert_eq!((d.path.as_str(), p.path.as_str()), ("direct", "proxy"));
    assert!(!d.dashed() && p.dashed());
    assert_eq!(chart::colour(&d.op), chart::colour(&p.op), "one operation, one colour");
    assert_ne!(chart::colour("put"), chart::colour("get"));
    assert_eq!(d.points[1].0, 16.0, "x is log2 of the size");
    assert_eq!((chart::axis_number(700.0), chart::axis_number(2.5), chart::axis_number(0.01)), ("700".into(), "2.5".into(), "0.01".into()));

    let path = std::env::temp_dir().join(format!("gin-perf-chart-{}.svg", std::process::id()));
    chart::write_svg(&path, &samples, true).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    for want in ["message rate", "bandwidth", "round trip", "64 KiB", "1 MiB", "emulated", "dashed: proxy"] {
        assert!(svg.contains(want), "chart lacks {want:?}");
    }
}

#[test]
fn all_cpu_ratio_counts_requesters_nic_and_host() {
    let mut d = run("direct", "put", 8, 0, 1.0, 1.0, 1.0, 0.0);
    (d.requester_cpu_ns, d.nic_cpu_ns) = (100.0, 200.0);
    let mut p = run("proxy", "put", 8, 0, 1.0, 1.0, 1.0, 600.0);
    (p.requester_cpu_ns, p.nic_cpu_ns) = (100.0, 300.0);
    let r = stats::ratios(&[d, p]);
    assert_eq!(r[0].total_cpu.median, 0.3);
    assert_eq!(r[0].host_cpu.median, 0.0);
}

/// The load average the report prints parses from /proc/loadavg (NaN only
/// where the file is missing, which a Linux test machine never is).
#[test]
fn the_load_average_is_read_from_proc() {
    let l = report::load_average();
    assert!(l.is_finite() && l >= 0.0, "load average {l}");
}

/// Steal is the eighth counter of /proc/stat's first line, the total the sum
/// of the first eight (guest time is already in user); the share is of the
/// ticks between two readings, NaN where one is missing or none passed.
#[test]
fn steal_is_read_from_the_first_line_of_proc_stat() {
    let a = cpu::parse_machine_ticks("cpu  100 1 50 800 9 0 2 38 0 0\ncpu0 50 0 25 400 4 0 1 19 0 0\n");
    assert_eq!(a, Some((38, 1000)));
    let b = cpu::parse_machine_ticks("cpu  150 1 60 900 9 0 2 78 0 0\n");
    assert_eq!(b, Some((78, 1200)));
    assert_eq!(cpu::steal_pct(a, b), 20.0);
    assert!(cpu::steal_pct(a, a).is_nan(), "no tick passed");
    assert!(cpu::steal_pct(None, b).is_nan());
    assert_eq!(cpu::parse_machine_ticks("cpu0 1 2 3 4 5 6 7 8\n"), None, "not the all-CPU line");
    assert_eq!(cpu::parse_machine_ticks("cpu  1 2 3\n"), None, "too few counters");
    let now = cpu::machine_ticks().expect("a Linux test machine has /proc/stat");
    assert!(now.1 > 0 && now.0 <= now.1, "{now:?}");
}
