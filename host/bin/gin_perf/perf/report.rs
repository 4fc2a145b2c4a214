//! gin-perf's output: a table, JSON or CSV. Every title says "emulated" when
//! the emulated NIC made the numbers. Figures are medians over repeats; the
//! table prints each one's spread ((max - min) / median) and each ratio's
//! range.

use super::stats::{Ratio, Sample, Stat};
use std::fmt::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

/// What the run was, for the header.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    pub emulated: bool,
    pub ranks: usize,
    pub lanes: usize,
    pub lane_mode: String,
    pub repeats: usize,
    pub min_time_ms: u64,
    /// CPUs and the 1-minute load average at the start and the end: wall
    /// clock figures from a loaded machine mean less (CPU figures hold up).
    pub cpus: usize,
    pub load: (f64, f64),
    /// The machine's CPU time the hypervisor took during the run, % (NaN:
    /// unknown): slow repeats on a VM come with it.
    pub steal_pct: f64,
    /// How the emulated NICs were run (RCCL_RUST_GIN_EMU_THREADS), if emulated.
    pub nic_threads: Option<String>,
}

/// The 1-minute load average (Linux), or NaN.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(f64::NAN)
}

pub fn title(emulated: bool, what: &str) -> String {
    if emulated {
        format!("{what} (emulated NIC: functional model, not hardware timing)")
    } else {
        what.to_string()
    }
}

/// A message size in B, KiB or MiB.
pub fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn pct(s: &Stat) -> String {
    format!("{:.0}%", s.spread() * 100.0)
}

fn range(s: &Stat) -> String {
    format!("{:.2} [{:.2}-{:.2}]", s.median, s.min, s.max)
}

fn stat_json(name: &str, s: &Stat) -> String {
    format!("\"{name}\":{{\"median\":{:.4},\"min\":{:.4},\"max\":{:.4},\"n\":{}}}", s.median, s.min, s.max, s.n)
}

const STATS: [&str; 8] = ["rtt_us", "rtt_p99_us", "mops", "bandwidth_gbs", "requester_cpu_ns", "nic_cpu_ns", "host_cpu_ns", "sys_cpu_ns"];

fn stats_of(x: &Sample) -> [&Stat; 8] {
    [&x.rtt_us, &x.rtt_p99_us, &x.mops, &x.bandwidth_gbs, &x.requester_cpu_ns, &x.nic_cpu_ns, &x.host_cpu_ns, &x.sys_cpu_ns]
}

pub fn render(samples: &[Sample], ratios: &[Ratio], format: Format, setup: &Setup) -> String {
    let emulated = setup.emulated;
    let mut s = String::new();
    match format {
        Format::Table => {
            let _ = writeln!(s, "{}", title(emulated, "gin-perf: put/signal microbenchmark"));
            let _ = writeln!(
                s,
                "{} ranks, {} lane(s) ({}), medians of {} repeats, every timed run >= {} ms; spread = (max-min)/median",
                setup.ranks, setup.lanes, setup.lane_mode, setup.repeats, setup.min_time_ms
            );
            let _ = writeln!(
                s,
                "machine: {} CPUs, load average {:.1} at the start, {:.1} at the end (other processes compete for the cores); hypervisor steal {:.1}% of CPU time (other guests of the host)",
                setup.cpus, setup.load.0, setup.load.1, setup.steal_pct
            );
            if let Some(t) = &setup.nic_threads {
                let _ = writeln!(s, "emulated NIC threads: {t}");
            }
            let _ = writeln!(s, "  rtt: ping-pong round trip (put, get: post to completion); Mops: message rate, all lanes, until flushed;");
            let _ = writeln!(s, "  GB/s: separate one-lane stream, until the data is at its destination; per-op counters and CPU come from");
            let _ = writeln!(s, "  the message-rate run: req = requesting threads (the GPU's part), nic = emulated NIC threads,");
            let _ = writeln!(s, "  host = every other thread (proxy threads, main), sys = kernel time of the whole process");
            let _ = writeln!(
                s,
                "{:<6} {:<10} {:>7} {:>8} {:>5} {:>8} {:>8} {:>5} {:>8} {:>5} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>7}",
                "path", "op", "size", "rtt_us", "sprd", "p99_us", "Mops", "sprd", "GB/s", "sprd", "WQEBB", "dbell", "CQE",
                "req_ns", "nic_ns", "host_ns", "sys_ns"
            );
            for x in samples {
                let _ = writeln!(
                    s,
                    "{:<6} {:<10} {:>7} {:>8.2} {:>5} {:>8.2} {:>8.3} {:>5} {:>8.3} {:>5} {:>6.2} {:>6.3} {:>6.3} {:>7.0} {:>7.0} {:>7.0} {:>7.0}",
                    x.path,
                    x.op,
                    if x.op == "signal" { "-".into() } else { size_label(x.bytes) },
                    x.rtt_us.median,
                    pct(&x.rtt_us),
                    x.rtt_p99_us.median,
                    x.mops.median,
                    pct(&x.mops),
                    x.bandwidth_gbs.median,
                    if x.bandwidth_gbs.median > 0.0 { pct(&x.bandwidth_gbs) } else { "-".into() },
                    x.wqebbs_per_op,
                    x.doorbells_per_op,
                    x.cqes_per_op,
                    x.requester_cpu_ns.median,
                    x.nic_cpu_ns.median,
                    x.host_cpu_ns.median,
                    x.sys_cpu_ns.median,
                );
            }
            if !ratios.is_empty() {
                let _ = writeln!(s, "\n{}", title(emulated, "direct vs proxy, ratio within each repeat: median [min-max]"));
                let _ = writeln!(s, "  latency: proxy rtt / direct rtt; rate, bandwidth: direct / proxy (above 1 favours direct);");
                let _ = writeln!(s, "  host CPU, all CPU (req + nic + host) per op: direct / proxy (below 1 favours direct)");
                let _ = writeln!(
                    s,
                    "{:<10} {:>7} {:>18} {:>18} {:>18} {:>22} {:>18}",
                    "op", "size", "latency x", "rate x", "bandwidth x", "host CPU x", "all CPU x"
                );
                for r in ratios {
                    let _ = writeln!(
                        s,
                        "{:<10} {:>7} {:>18} {:>18} {:>18} {:>22} {:>18}",
                        r.op,
                        if r.op == "signal" { "-".into() } else { size_label(r.bytes) },
                        range(&r.latency),
                        range(&r.rate),
                        if r.bandwidth.n > 0 { range(&r.bandwidth) } else { "-".into() },
                        if r.host_cpu.n > 0 { format!("{:.4} [{:.4}-{:.4}]", r.host_cpu.median, r.host_cpu.min, r.host_cpu.max) } else { "-".into() },
                        range(&r.total_cpu),
                    );
                }
            }
        }
        Format::Csv => {
            let _ = writeln!(s, "# {}", title(emulated, "gin-perf"));
            let mut head = "path,op,bytes,wqebbs_per_op,doorbells_per_op,cqes_per_op,shortest_run_s".to_string();
            for n in STATS {
                let _ = write!(head, ",{n}_median,{n}_min,{n}_max");
            }
            let _ = writeln!(s, "{head}");
            for x in samples {
                let _ = write!(
                    s,
                    "{},{},{},{:.3},{:.4},{:.4},{:.3}",
                    x.path, x.op, x.bytes, x.wqebbs_per_op, x.doorbells_per_op, x.cqes_per_op, x.shortest_run_s
                );
                for st in stats_of(x) {
                    let _ = write!(s, ",{:.4},{:.4},{:.4}", st.median, st.min, st.max);
                }
                let _ = writeln!(s);
            }
        }
        Format::Json => {
            let _ = write!(
                s,
                "{{\"title\":{:?},\"emulated\":{emulated},\"ranks\":{},\"lanes\":{},\"lane_mode\":{:?},\"repeats\":{},\"min_time_ms\":{},\"cpus\":{},\"load_start\":{:.2},\"load_end\":{:.2},\"steal_pct\":{},\"samples\":[",
                title(emulated, "gin-perf"),
                setup.ranks,
                setup.lanes,
                setup.lane_mode,
                setup.repeats,
                setup.min_time_ms,
                setup.cpus,
                setup.load.0,
                setup.load.1,
                // JSON has no NaN: unknown is null.
                if setup.steal_pct.is_finite() { format!("{:.2}", setup.steal_pct) } else { "null".into() }
            );
            for (i, x) in samples.iter().enumerate() {
                let stats: Vec<String> = STATS.iter().zip(stats_of(x)).map(|(n, st)| stat_json(n, st)).collect();
                let _ = write!(
                    s,
                    "{}{{\"path\":{:?},\"op\":{:?},\"bytes\":{},\"wqebbs_per_op\":{:.3},\"doorbells_per_op\":{:.4},\"cqes_per_op\":{:.4},\"shortest_run_s\":{:.3},{}}}",
                    if i == 0 { "" } else { "," },
                    x.path, x.op, x.bytes, x.wqebbs_per_op, x.doorbells_per_op, x.cqes_per_op, x.shortest_run_s, stats.join(",")
                );
            }
            let _ = write!(s, "],\"ratios\":[");
            for (i, r) in ratios.iter().enumerate() {
                let _ = write!(
                    s,
                    "{}{{\"op\":{:?},\"bytes\":{},{},{},{},{},{}}}",
                    if i == 0 { "" } else { "," },
                    r.op,
                    r.bytes,
                    stat_json("latency_proxy_over_direct", &r.latency),
                    stat_json("rate_direct_over_proxy", &r.rate),
                    stat_json("bandwidth_direct_over_proxy", &r.bandwidth),
                    stat_json("host_cpu_direct_over_proxy", &r.host_cpu),
                    stat_json("all_cpu_direct_over_proxy", &r.total_cpu)
                );
            }
            let _ = writeln!(s, "]}}");
        }
    }
    s
}
