//! CPU clocks: of the calling thread, of any thread of this process by its
//! kernel thread id (the emulated NIC's polling threads, found by name), and
//! of the whole process, so that each measurement can say who spent what.

/// CPU time (user + system) of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID).unwrap_or(0)
}

/// CPU time of every thread of this process, exited ones included, ns.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID).unwrap_or(0)
}

fn clock_ns(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the timespec we pass.
    let r = unsafe { libc::clock_gettime(id, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The whole machine's CPU time counters (Linux /proc/stat, its first line),
/// in clock ticks: what a hypervisor took from this VM's vCPUs for other
/// guests (steal), and everything (user, nice, system, idle, iowait, irq,
/// softirq, steal). None where there is no /proc/stat.
pub fn machine_ticks() -> Option<(u64, u64)> {
    parse_machine_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// machine_ticks from the text of /proc/stat.
pub fn parse_machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    (v.len() == 8).then(|| (v[7], v.iter().sum()))
}

/// The share of the machine's CPU time, in %, that the hypervisor took
/// between two readings of machine_ticks; NaN where either is missing or no
/// tick passed. Steal stretches wall-clock figures and parks waiters whose
/// waker lost its vCPU: slow repeats on this VM come with it
/// (docs/performance.md, "The slow regime is steal").
pub fn steal_pct(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> f64 {
    match (before, after) {
        (Some((s0, t0)), Some((s1, t1))) if t1 > t0 => 100.0 * s1.saturating_sub(s0) as f64 / (t1 - t0) as f64,
        _ => f64::NAN,
    }
}

/// CPU time of thread `tid` of this process, ns; None once it has exited.
/// The clock id is the kernel's per-thread CPU clock (MAKE_THREAD_CPUCLOCK:
/// `~tid << 3 | CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED`), what glibc's
/// pthread_getcpuclockid returns, reachable here without the pthread_t of a
/// thread this program did not spawn.
pub fn tid_cpu_ns(tid: i32) -> Option<u64> {
    clock_ns((!tid) << 3 | 6)
}

/// Kernel thread ids of this process's threads whose name starts with
/// `prefix` (names are cut at 15 bytes).
pub fn threads_named(prefix: &str) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return vec![] };
    let mut v: Vec<i32> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid: i32 = e.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
            name.starts_with(prefix).then_some(tid)
        })
        .collect();
    v.sort_unstable();
    v
}

/// Sum of the CPU clocks of `tids`, counting only those alive now.
pub fn tids_cpu_ns(tids: &[i32]) -> (u64, usize) {
    tids.iter().filter_map(|&t| tid_cpu_ns(t)).fold((0, 0), |(s, n), c| (s + c, n + 1))
}

/// User and system CPU time of the whole process, ns (getrusage).
pub fn process_user_sys_ns() -> (u64, u64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(u.ru_utime), ns(u.ru_stime))
}

/// Where the CPU went during one measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct Split {
    /// The requesting threads (the stand-in for the GPU's lanes).
    pub requester: u64,
    /// The emulated NIC's polling threads (the stand-in for the NIC).
    pub nic: u64,
    /// Everything else in the process: proxy threads, the main thread.
    pub host: u64,
    /// System (kernel) time of the whole process.
    pub sys: u64,
}

/// Clocks read at the start of a measurement.
pub struct Mark {
    nic_tids: Vec<i32>,
    nic: u64,
    process: u64,
    sys: u64,
}

impl Mark {
    pub fn now(nic_tids: &[i32]) -> Mark {
        let (nic, _) = tids_cpu_ns(nic_tids);
        let (_, sys) = process_user_sys_ns();
        Mark { nic_tids: nic_tids.to_vec(), nic, process: process_cpu_ns(), sys }
    }

    /// The split since `self`, given the requesters' own clocks.
    pub fn split(&self, requester: u64) -> Split {
        let (nic, _) = tids_cpu_ns(&self.nic_tids);
        let total = process_cpu_ns().saturating_sub(self.process);
        let nic = nic.saturating_sub(self.nic);
        let (_, sys) = process_user_sys_ns();
        Split { requester, nic, host: total.saturating_sub(requester + nic), sys: sys.saturating_sub(self.sys) }
    }
}
