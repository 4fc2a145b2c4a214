//! The expert-parallel figures: medians over repeats with their spread,
//! direct/proxy ratios paired within each repeat, as a table, JSON or CSV,
//! and a chart against the number of ranks (or tokens per rank).

use super::EpRun;
use crate::perf::chart::{legend, xy_panel, Line};
use crate::perf::report::{title, Format};
use crate::perf::stats::Stat;
use plotters::prelude::*;
use std::fmt::Write;

/// One (path, ranks, tokens) over its repeats.
#[derive(Clone, Debug, Default)]
pub struct EpSample {
    pub path: String,
    pub ranks: usize,
    pub tokens: usize,
    pub time_us: Stat,
    pub p99_us: Stat,
    pub dispatch_us: Stat,
    pub combine_us: Stat,
    pub mmsg_per_s: Stat,
    pub gb_per_s: Stat,
    pub messages: f64,
    pub bytes: f64,
    pub doorbells: f64,
    pub cqes: f64,
    pub wqebbs: f64,
    pub req_cpu_us: Stat,
    pub nic_cpu_us: Stat,
    pub host_cpu_us: Stat,
    pub sys_cpu_us: Stat,
    pub copies_checked: u64,
    pub bytes_checked: u64,
    pub full_waits: f64,
}

/// direct against proxy at one (ranks, tokens), within each repeat.
#[derive(Clone, Debug, Default)]
pub struct EpRatio {
    pub ranks: usize,
    pub tokens: usize,
    /// direct rate / proxy rate = proxy time / direct time.
    pub rate: Stat,
    /// direct host CPU / proxy host CPU, per iteration.
    pub host_cpu: Stat,
    /// The same for all CPU (drivers + NICs + host).
    pub all_cpu: Stat,
}

fn points(runs: &[EpRun]) -> Vec<(String, usize, usize)> {
    let mut k = Vec::new();
    for r in runs {
        let key = (r.path.clone(), r.ranks, r.tokens);
        if !k.contains(&key) {
            k.push(key);
        }
    }
    k
}

pub fn samples(runs: &[EpRun]) -> Vec<EpSample> {
    points(runs)
        .into_iter()
        .map(|(path, ranks, tokens)| {
            let rs: Vec<&EpRun> = runs.iter().filter(|r| r.path == path && r.ranks == ranks && r.tokens == tokens).collect();
            let st = |f: fn(&EpRun) -> f64| Stat::of(rs.iter().map(|r| f(r)));
            EpSample {
                time_us: st(|r| r.median_us),
                p99_us: st(|r| r.p99_us),
                dispatch_us: st(|r| r.dispatch_us),
                combine_us: st(|r| r.combine_us),
                mmsg_per_s: st(|r| r.mmsg_per_s()),
                gb_per_s: st(|r| r.gb_per_s()),
                messages: st(|r| r.messages).median,
                bytes: st(|r| r.bytes).median,
                doorbells: st(|r| r.doorbells).median,
                cqes: st(|r| r.cqes).median,
                wqebbs: st(|r| r.wqebbs).median,
                req_cpu_us: st(|r| r.req_cpu_us),
                nic_cpu_us: st(|r| r.nic_cpu_us),
                host_cpu_us: st(|r| r.host_cpu_us),
                sys_cpu_us: st(|r| r.sys_cpu_us),
                copies_checked: rs.iter().map(|r| r.copies_checked).sum(),
                bytes_checked: rs.iter().map(|r| r.bytes_checked).sum(),
                full_waits: st(|r| r.full_waits).median,
                path,
                ranks,
                tokens,
            }
        })
        .collect()
}

pub fn ratios(runs: &[EpRun]) -> Vec<EpRatio> {
    let mut out = Vec::new();
    for (path, ranks, tokens) in points(runs) {
        if path != "direct" {
            continue;
        }
        let pairs: Vec<(&EpRun, &EpRun)> = runs
            .iter()
            .filter(|d| d.path == "direct" && d.ranks == ranks && d.tokens == tokens)
            .filter_map(|d| runs.iter().find(|x| x.path == "proxy" && x.ranks == ranks && x.tokens == tokens && x.repeat == d.repeat).map(|x| (d, x)))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        let all = |r: &EpRun| r.req_cpu_us + r.nic_cpu_us + r.host_cpu_us;
        out.push(EpRatio {
            ranks,
            tokens,
            rate: Stat::of(pairs.iter().map(|(d, x)| div(x.median_us, d.median_us))),
            host_cpu: Stat::of(pairs.iter().map(|(d, x)| div(d.host_cpu_us, x.host_cpu_us))),
            all_cpu: Stat::of(pairs.iter().map(|(d, x)| div(all(d), all(x)))),
        });
    }
    out
}

/// The run's conditions, for the header.
#[derive(Clone, Debug, Default)]
pub struct EpSetup {
    pub emulated: bool,
    pub what: String,
    pub repeats: usize,
    pub iters: usize,
    pub threads: usize,
    pub cpus: usize,
    pub load: (f64, f64),
    pub steal_pct: f64,
    pub nic_threads: Option<String>,
}

fn pct(s: &Stat) -> String {
    format!("{:.0}%", s.spread() * 100.0)
}

fn range(s: &Stat, digits: usize) -> String {
    format!("{:.d$} [{:.d$}-{:.d$}]", s.median, s.min, s.max, d = digits)
}

fn stat_json(name: &str, s: &Stat) -> String {
    format!("\"{name}\":{{\"median\":{:.4},\"min\":{:.4},\"max\":{:.4},\"n\":{}}}", s.median, s.min, s.max, s.n)
}

pub fn render(samples: &[EpSample], ratios: &[EpRatio], format: Format, setup: &EpSetup) -> String {
    let mut s = String::new();
    match format {
        Format::Table => {
            let _ = writeln!(s, "{}", title(setup.emulated, "gin-perf: expert-parallel dispatch and combine"));
            let _ = writeln!(
                s,
                "{}; {} timed iterations per repeat, medians of {} repeats (spread = (max-min)/median); {} driver thread(s) stand in for the GPUs",
                setup.what, setup.iters, setup.repeats, setup.threads
            );
            let _ = writeln!(
                s,
                "machine: {} CPUs, load average {:.1} at the start, {:.1} at the end; hypervisor steal {:.1}%",
                setup.cpus, setup.load.0, setup.load.1, setup.steal_pct
            );
            if let Some(t) = &setup.nic_threads {
                let _ = writeln!(s, "emulated NIC threads: {t}");
            }
            let _ = writeln!(s, "  us: time per iteration (median of repeats' medians; p99: median of repeats' p99s); Mmsg/s: puts+signals");
            let _ = writeln!(s, "  per us of the median; dbell, CQE, msgs: per iteration, all ranks; CPU us per iteration: req = driver");
            let _ = writeln!(s, "  threads (the GPUs' part), nic = emulated NICs, host = every other thread (proxy threads); qfull: posts per");
            let _ = writeln!(s, "  iteration that found their queue full and waited (the proxy's 32-descriptor queue per peer)");
            let _ = writeln!(
                s,
                "{:<6} {:>5} {:>6} {:>10} {:>5} {:>10} {:>9} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9}",
                "path", "ranks", "tokens", "us", "sprd", "p99_us", "disp_us", "comb_us", "Mmsg/s", "GB/s", "msgs", "dbell", "CQE", "qfull", "req_us", "nic_us", "host_us"
            );
            for x in samples {
                let _ = writeln!(
                    s,
                    "{:<6} {:>5} {:>6} {:>10.1} {:>5} {:>10.1} {:>9.1} {:>9.1} {:>8.3} {:>7.3} {:>8.0} {:>8.1} {:>8.1} {:>7.1} {:>9.1} {:>9.1} {:>9.1}",
                    x.path,
                    x.ranks,
                    x.tokens,
                    x.time_us.median,
                    pct(&x.time_us),
                    x.p99_us.median,
                    x.dispatch_us.median,
                    x.combine_us.median,
                    x.mmsg_per_s.median,
                    x.gb_per_s.median,
                    x.messages,
                    x.doorbells,
                    x.cqes,
                    x.full_waits,
                    x.req_cpu_us.median,
                    x.nic_cpu_us.median,
                    x.host_cpu_us.median
                );
            }
            if !ratios.is_empty() {
                let _ = writeln!(s, "\n{}", title(setup.emulated, "direct vs proxy, within each repeat: median [min-max]"));
                let _ = writeln!(s, "  rate: proxy time / direct time (above 1 favours direct); CPU: direct / proxy (below 1 favours direct)");
                let _ = writeln!(s, "{:>5} {:>6} {:>20} {:>26} {:>20}", "ranks", "tokens", "rate x", "host CPU x", "all CPU x");
                for r in ratios {
                    let _ = writeln!(
                        s,
                        "{:>5} {:>6} {:>20} {:>26} {:>20}",
                        r.ranks,
                        r.tokens,
                        range(&r.rate, 2),
                        range(&r.host_cpu, 4),
                        range(&r.all_cpu, 3)
                    );
                }
            }
        }
        Format::Csv => {
            let _ = writeln!(s, "# {}; {}", title(setup.emulated, "gin-perf ep"), setup.what);
            let names = ["time_us", "p99_us", "dispatch_us", "combine_us", "mmsg_per_s", "gb_per_s", "req_cpu_us", "nic_cpu_us", "host_cpu_us", "sys_cpu_us"];
            let mut head = "path,ranks,tokens,messages,bytes,doorbells,cqes,wqebbs,copies_checked,bytes_checked,queue_full_waits".to_string();
            for n in names {
                let _ = write!(head, ",{n}_median,{n}_min,{n}_max");
            }
            let _ = writeln!(s, "{head}");
            for x in samples {
                let _ = write!(
                    s,
                    "{},{},{},{},{},{:.2},{:.2},{:.2},{},{},{:.1}",
                    x.path, x.ranks, x.tokens, x.messages, x.bytes, x.doorbells, x.cqes, x.wqebbs, x.copies_checked, x.bytes_checked, x.full_waits
                );
                for st in [&x.time_us, &x.p99_us, &x.dispatch_us, &x.combine_us, &x.mmsg_per_s, &x.gb_per_s, &x.req_cpu_us, &x.nic_cpu_us, &x.host_cpu_us, &x.sys_cpu_us] {
                    let _ = write!(s, ",{:.4},{:.4},{:.4}", st.median, st.min, st.max);
                }
                let _ = writeln!(s);
            }
        }
        Format::Json => {
            let _ = write!(
                s,
                "{{\"title\":{:?},\"emulated\":{},\"what\":{:?},\"repeats\":{},\"iters\":{},\"threads\":{},\"samples\":[",
                title(setup.emulated, "gin-perf ep"),
                setup.emulated,
                setup.what,
                setup.repeats,
                setup.iters,
                setup.threads
            );
            for (i, x) in samples.iter().enumerate() {
                let _ = write!(
                    s,
                    "{}{{\"path\":{:?},\"ranks\":{},\"tokens\":{},\"messages\":{},\"bytes\":{},\"doorbells\":{:.3},\"cqes\":{:.3},\"wqebbs\":{:.3},\"copies_checked\":{},\"queue_full_waits\":{:.1},{},{},{},{},{},{},{},{},{}}}",
                    if i == 0 { "" } else { "," },
                    x.path,
                    x.ranks,
                    x.tokens,
                    x.messages,
                    x.bytes,
                    x.doorbells,
                    x.cqes,
                    x.wqebbs,
                    x.copies_checked,
                    x.full_waits,
                    stat_json("time_us", &x.time_us),
                    stat_json("p99_us", &x.p99_us),
                    stat_json("dispatch_us", &x.dispatch_us),
                    stat_json("combine_us", &x.combine_us),
                    stat_json("mmsg_per_s", &x.mmsg_per_s),
                    stat_json("gb_per_s", &x.gb_per_s),
                    stat_json("req_cpu_us", &x.req_cpu_us),
                    stat_json("nic_cpu_us", &x.nic_cpu_us),
                    stat_json("host_cpu_us", &x.host_cpu_us),
                );
            }
            let _ = write!(s, "],\"ratios\":[");
            for (i, r) in ratios.iter().enumerate() {
                let _ = write!(
                    s,
                    "{}{{\"ranks\":{},\"tokens\":{},{},{},{}}}",
                    if i == 0 { "" } else { "," },
                    r.ranks,
                    r.tokens,
                    stat_json("rate_direct_over_proxy", &r.rate),
                    stat_json("host_cpu_direct_over_proxy", &r.host_cpu),
                    stat_json("all_cpu_direct_over_proxy", &r.all_cpu)
                );
            }
            let _ = writeln!(s, "]}}");
        }
    }
    s
}

/// Time per iteration, message rate and host CPU per iteration against the
/// number of ranks (when several were measured) or else tokens per rank;
/// one line per path (direct solid, proxy dashed).
pub fn write_svg(path: &std::path::Path, samples: &[EpSample], emulated: bool, what: &str) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut ranks: Vec<usize> = samples.iter().map(|s| s.ranks).collect();
    ranks.sort();
    ranks.dedup();
    let by_ranks = ranks.len() > 1;
    let line = |f: &dyn Fn(&EpSample) -> f64| -> Vec<Line> {
        ["direct", "proxy"]
            .iter()
            .map(|p| Line {
                op: what.to_string(),
                path: p.to_string(),
                points: samples
                    .iter()
                    .filter(|s| s.path == *p && f(s) > 0.0)
                    .map(|s| (((if by_ranks { s.ranks } else { s.tokens }) as f64).log2(), f(s)))
                    .collect(),
            })
            .filter(|l| !l.points.is_empty())
            .collect()
    };
    let root = SVGBackend::new(path, (1500, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(&title(emulated, &format!("rust-gin expert-parallel {what}: direct vs proxy")), ("sans-serif", 18)).map_err(|x| e(&x))?;
    let (panels, strip) = root.split_vertically(460);
    let areas = panels.split_evenly((1, 3));
    let x_desc = if by_ranks { "ranks" } else { "tokens per rank" };
    let lab = |x: f64| format!("{}", 1u64 << x as u32);
    let t = line(&|s| s.time_us.median);
    xy_panel(&areas[0], "time per iteration (median)", x_desc, "microseconds", &t, &lab)?;
    xy_panel(&areas[1], "message rate (puts + signals)", x_desc, "M messages/s", &line(&|s| s.mmsg_per_s.median), &lab)?;
    xy_panel(&areas[2], "host CPU per iteration", x_desc, "microseconds", &line(&|s| s.host_cpu_us.median), &lab)?;
    legend(&strip, &t, "solid: direct (device-initiated); dashed: proxy (RCCL type 2 over the RMA plugin)")?;
    root.present().map_err(|x| e(&x))
}
