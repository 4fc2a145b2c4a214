//! Medians over repeats, with their range, for every figure and for the
//! direct/proxy ratios (each ratio taken within one repeat, then the median
//! of those).

/// One repeat's figures for one (path, op, size).
#[derive(Clone, Debug, Default)]
pub struct Run {
    pub path: String,
    pub op: String,
    pub bytes: u64,
    pub repeat: usize,
    /// Ping-pong round trip (put/get: post to completion), microseconds.
    pub rtt_median_us: f64,
    pub rtt_p99_us: f64,
    pub rtt_secs: f64,
    /// Message rate: `lanes` lanes posting, until all have flushed.
    pub mops: f64,
    pub rate_secs: f64,
    /// Bandwidth: one lane streaming, until the data is at its destination
    /// (put+signal: the target saw the last signal). 0 for signal.
    pub bandwidth_gbs: f64,
    pub bw_secs: f64,
    /// NIC counters per operation in the message-rate run.
    pub wqebbs_per_op: f64,
    pub doorbells_per_op: f64,
    pub cqes_per_op: f64,
    /// CPU per operation in the message-rate run, ns: the requesting
    /// threads (on hardware: GPU lanes), the emulated NIC's threads, every
    /// other thread of the process (proxy threads, main), and the kernel's
    /// share of all of it.
    pub requester_cpu_ns: f64,
    pub nic_cpu_ns: f64,
    pub host_cpu_ns: f64,
    pub sys_cpu_ns: f64,
    /// The machine's CPU time the hypervisor took during the repeat, %
    /// (cpu::steal_pct; NaN where unknown).
    pub steal_pct: f64,
}

impl Run {
    pub fn total_cpu_ns(&self) -> f64 {
        self.requester_cpu_ns + self.nic_cpu_ns + self.host_cpu_ns
    }
}

/// A figure over repeats: median, smallest and largest.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Stat {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Stat {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Stat::default();
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let m = v.len() / 2;
        let median = if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 };
        Stat { median, min: v[0], max: v[v.len() - 1], n: v.len() }
    }

    /// The range as a fraction of the median: (max - min) / median.
    pub fn spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            (self.max - self.min) / self.median
        }
    }
}

/// One (path, op, size) over all repeats.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub path: String,
    pub op: String,
    pub bytes: u64,
    pub rtt_us: Stat,
    pub rtt_p99_us: Stat,
    pub mops: Stat,
    pub bandwidth_gbs: Stat,
    pub wqebbs_per_op: f64,
    pub doorbells_per_op: f64,
    pub cqes_per_op: f64,
    pub requester_cpu_ns: Stat,
    pub nic_cpu_ns: Stat,
    pub host_cpu_ns: Stat,
    pub sys_cpu_ns: Stat,
    /// The shortest timed run behind this sample, seconds.
    pub shortest_run_s: f64,
}

/// direct/proxy for one (op, size), from the repeats that measured both.
#[derive(Clone, Debug, Default)]
pub struct Ratio {
    pub op: String,
    pub bytes: u64,
    /// proxy round trip / direct round trip (above 1: direct is faster).
    pub latency: Stat,
    /// direct message rate / proxy message rate.
    pub rate: Stat,
    /// direct bandwidth / proxy bandwidth (separate runs from the rate).
    pub bandwidth: Stat,
    /// direct host CPU per op / proxy host CPU per op.
    pub host_cpu: Stat,
    /// The same for all CPU per op (requesters + NIC + host): robust to a
    /// loaded machine, where wall-clock rates are not.
    pub total_cpu: Stat,
}

fn keys(runs: &[Run]) -> Vec<(String, String, u64)> {
    let mut k: Vec<_> = Vec::new();
    for r in runs {
        let key = (r.path.clone(), r.op.clone(), r.bytes);
        if !k.contains(&key) {
            k.push(key);
        }
    }
    k
}

pub fn samples(runs: &[Run]) -> Vec<Sample> {
    keys(runs)
        .into_iter()
        .map(|(path, op, bytes)| {
            let rs: Vec<&Run> = runs.iter().filter(|r| r.path == path && r.op == op && r.bytes == bytes).collect();
            let st = |f: fn(&Run) -> f64| Stat::of(rs.iter().map(|r| f(r)));
            let shortest = rs
                .iter()
                .flat_map(|r| [r.rtt_secs, r.rate_secs, if r.bandwidth_gbs > 0.0 { r.bw_secs } else { f64::MAX }])
                .fold(f64::MAX, f64::min);
            Sample {
                rtt_us: st(|r| r.rtt_median_us),
                rtt_p99_us: st(|r| r.rtt_p99_us),
                mops: st(|r| r.mops),
                bandwidth_gbs: st(|r| r.bandwidth_gbs),
                wqebbs_per_op: st(|r| r.wqebbs_per_op).median,
                doorbells_per_op: st(|r| r.doorbells_per_op).median,
                cqes_per_op: st(|r| r.cqes_per_op).median,
                requester_cpu_ns: st(|r| r.requester_cpu_ns),
                nic_cpu_ns: st(|r| r.nic_cpu_ns),
                host_cpu_ns: st(|r| r.host_cpu_ns),
                sys_cpu_ns: st(|r| r.sys_cpu_ns),
                shortest_run_s: if shortest == f64::MAX { 0.0 } else { shortest },
                path,
                op,
                bytes,
            }
        })
        .collect()
}

pub fn ratios(runs: &[Run]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for (path, op, bytes) in keys(runs) {
        if path != "direct" {
            continue;
        }
        let pairs: Vec<(&Run, &Run)> = runs
            .iter()
            .filter(|d| d.path == "direct" && d.op == op && d.bytes == bytes)
            .filter_map(|d| {
                runs.iter().find(|p| p.path == "proxy" && p.op == op && p.bytes == bytes && p.repeat == d.repeat).map(|p| (d, p))
            })
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        out.push(Ratio {
            latency: Stat::of(pairs.iter().map(|(d, p)| div(p.rtt_median_us, d.rtt_median_us))),
            rate: Stat::of(pairs.iter().map(|(d, p)| div(d.mops, p.mops))),
            bandwidth: Stat::of(pairs.iter().map(|(d, p)| div(d.bandwidth_gbs, p.bandwidth_gbs))),
            host_cpu: Stat::of(pairs.iter().map(|(d, p)| div(d.host_cpu_ns, p.host_cpu_ns))),
            total_cpu: Stat::of(pairs.iter().map(|(d, p)| div(d.total_cpu_ns(), p.total_cpu_ns()))),
            op,
            bytes,
        });
    }
    out
}
