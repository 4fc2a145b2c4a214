//! gin-perf's output: a table, JSON or CSV. Every title says "emulated" when
//! the emulated NIC made the numbers.

use super::Sample;
use std::fmt::Write;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

pub fn title(emulated: bool, what: &str) -> String {
    if emulated {
        format!("{what} (emulated NIC: functional model, not hardware timing)")
    } else {
        what.to_string()
    }
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

/// direct/proxy ratios for samples measured on both paths.
pub fn ratios(samples: &[Sample]) -> Vec<(String, u64, f64, f64, f64)> {
    let mut out = Vec::new();
    for d in samples.iter().filter(|s| s.path == "direct") {
        if let Some(p) = samples.iter().find(|s| s.path == "proxy" && s.op == d.op && s.bytes == d.bytes) {
            let lat = if d.rtt_median_us > 0.0 { p.rtt_median_us / d.rtt_median_us } else { 0.0 };
            let bw = if p.bandwidth_gbs > 0.0 { d.bandwidth_gbs / p.bandwidth_gbs } else { 0.0 };
            let rate = if p.mops > 0.0 { d.mops / p.mops } else { 0.0 };
            out.push((d.op.clone(), d.bytes, lat, bw, rate));
        }
    }
    out
}

pub fn render(samples: &[Sample], format: Format, emulated: bool) -> String {
    let mut s = String::new();
    match format {
        Format::Table => {
            let _ = writeln!(s, "{}", title(emulated, "gin-perf: put/signal microbenchmark"));
            let _ = writeln!(
                s,
                "{:<7} {:<11} {:>6} {:>5} {:>10} {:>10} {:>9} {:>8} {:>8} {:>9} {:>7} {:>12} {:>11}",
                "path", "op", "bytes", "lanes", "rtt_us", "p99_us", "GB/s", "Mops", "WQEBB/op", "doorbl/op",
                "CQE/op", "req_cpu_ns", "proxy_cpu_ns"
            );
            for x in samples {
                let _ = writeln!(
                    s,
                    "{:<7} {:<11} {:>6} {:>5} {:>10.2} {:>10.2} {:>9.3} {:>8.3} {:>8.2} {:>9.3} {:>7.3} {:>12.0} {:>11.0}",
                    x.path,
                    x.op,
                    human(x.bytes),
                    x.lanes,
                    x.rtt_median_us,
                    x.rtt_p99_us,
                    x.bandwidth_gbs,
                    x.mops,
                    x.wqebbs_per_op,
                    x.doorbells_per_op,
                    x.cqes_per_op,
                    x.requester_cpu_ns_per_op,
                    x.proxy_cpu_ns_per_op
                );
            }
            let r = ratios(samples);
            if !r.is_empty() {
                let _ = writeln!(s, "\n{}", title(emulated, "direct vs proxy (latency: proxy/direct, higher is better for direct; bandwidth and rate: direct/proxy)"));
                let _ = writeln!(s, "{:<11} {:>6} {:>10} {:>10} {:>10}", "op", "bytes", "latency x", "bw x", "rate x");
                for (op, b, lat, bw, rate) in r {
                    let _ = writeln!(s, "{:<11} {:>6} {:>10.2} {:>10.2} {:>10.2}", op, human(b), lat, bw, rate);
                }
            }
        }
        Format::Csv => {
            let _ = writeln!(s, "# {}", title(emulated, "gin-perf"));
            let _ = writeln!(s, "path,op,bytes,lanes,iters,rtt_median_us,rtt_p99_us,bandwidth_gbs,mops,wqebbs_per_op,doorbells_per_op,cqes_per_op,requester_cpu_ns_per_op,proxy_cpu_ns_per_op");
            for x in samples {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{:.3},{:.3},{:.4},{:.4},{:.3},{:.4},{:.4},{:.1},{:.1}",
                    x.path, x.op, x.bytes, x.lanes, x.iters, x.rtt_median_us, x.rtt_p99_us, x.bandwidth_gbs, x.mops,
                    x.wqebbs_per_op, x.doorbells_per_op, x.cqes_per_op, x.requester_cpu_ns_per_op, x.proxy_cpu_ns_per_op
                );
            }
        }
        Format::Json => {
            let _ = write!(s, "{{\"title\":{:?},\"emulated\":{emulated},\"samples\":[", title(emulated, "gin-perf"));
            for (i, x) in samples.iter().enumerate() {
                let _ = write!(
                    s,
                    "{}{{\"path\":{:?},\"op\":{:?},\"bytes\":{},\"lanes\":{},\"iters\":{},\"rtt_median_us\":{:.3},\"rtt_p99_us\":{:.3},\"bandwidth_gbs\":{:.4},\"mops\":{:.4},\"wqebbs_per_op\":{:.3},\"doorbells_per_op\":{:.4},\"cqes_per_op\":{:.4},\"requester_cpu_ns_per_op\":{:.1},\"proxy_cpu_ns_per_op\":{:.1}}}",
                    if i == 0 { "" } else { "," },
                    x.path, x.op, x.bytes, x.lanes, x.iters, x.rtt_median_us, x.rtt_p99_us, x.bandwidth_gbs, x.mops,
                    x.wqebbs_per_op, x.doorbells_per_op, x.cqes_per_op, x.requester_cpu_ns_per_op, x.proxy_cpu_ns_per_op
                );
            }
            let _ = write!(s, "],\"ratios\":[");
            for (i, (op, b, lat, bw, rate)) in ratios(samples).into_iter().enumerate() {
                let _ = write!(
                    s,
                    "{}{{\"op\":{op:?},\"bytes\":{b},\"latency_proxy_over_direct\":{lat:.3},\"bandwidth_direct_over_proxy\":{bw:.3},\"rate_direct_over_proxy\":{rate:.3}}}",
                    if i == 0 { "" } else { "," }
                );
            }
            let _ = writeln!(s, "]}}");
        }
    }
    s
}
