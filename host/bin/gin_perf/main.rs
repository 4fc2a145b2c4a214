//! gin-perf: the put/signal microbenchmark. Runs the device-initiated path
//! (the device library posting straight to the NIC) and a model of RCCL's
//! proxy path (a host thread turning descriptors into RMA-plugin calls) side
//! by side, on the emulated NIC by default, and prints round-trip latency,
//! message rate and bandwidth (separate runs), the NIC's counters per
//! operation and the CPU per operation of the requesters, the emulated NIC
//! and the rest of the host, as medians over repeats with their spread.

mod perf;

use clap::{Parser, ValueEnum};
use rccl_rust_gin::config::{Config, ProviderKind, SignalModeKnob};
use rccl_rust_gin::gin::context::Settings;
use perf::{cpu, datapath, direct::Direct, report, stats, LaneMode, Op, Params};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OpArg {
    Put,
    PutSignal,
    Signal,
    Get,
    All,
    /// Expert-parallel dispatch over --ep-ranks ranks (perf/ep/).
    EpDispatch,
    /// Expert-parallel combine (after one untimed dispatch).
    EpCombine,
    /// Dispatch then combine, timed together.
    EpRoundTrip,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum EpModeArg {
    /// Low latency: one put per token copy, one signal per (sender, receiver) pair.
    Ll,
    /// High throughput: copies packed per receiver, puts of --ep-chunk tokens, one signal per put.
    Ht,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RoutingArg {
    /// Seeded top-k, every expert equally likely.
    Uniform,
    /// Seeded top-k with 8 hot experts drawn 20x as often.
    Skewed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PathArg {
    Direct,
    Proxy,
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LaneArg {
    /// One thread per lane, each on its own queue (direct: its own context).
    Queues,
    /// The lanes as one lockstep wave on one queue: one ticket and one doorbell per wave-wide post.
    Wave,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProviderArg {
    Emu,
    Mlx5,
}

/// How the direct path's signals travel (RCCL_RUST_GIN_SIGNAL_MODE).
#[derive(Clone, Copy, Debug, ValueEnum)]
enum SignalModeArg {
    Auto,
    Atomic,
    Write,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum TransportArg {
    Rc,
    Dc,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FamilyArg {
    Mlx5,
    #[value(name = "bnxt_re")]
    Bnxt,
    Ionic,
}

/// What joins the emulated NICs of the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FabricArg {
    /// Memory: the ranks are threads of this process, their NICs one fabric.
    Local,
    /// TCP: each rank's NIC on its own TCP fabric on its --hosts address.
    Tcp,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Table,
    Json,
    Csv,
}

#[derive(Parser, Debug)]
#[command(name = "gin-perf", about = "rust-gin put/signal microbenchmark: device-initiated vs proxy GIN")]
struct Args {
    /// Message size or range MIN:MAX in bytes (powers of two between; K and M suffixes), 8 B to 16 MiB.
    #[arg(short = 's', long, default_value = "8:1M")]
    size: String,
    /// Least duration of every timed run, ms (each point runs latency, rate and bandwidth this long).
    #[arg(short = 't', long, default_value_t = 100)]
    min_time_ms: u64,
    /// Repeats of the whole sweep, both paths in each; figures are medians with their spread.
    #[arg(short = 'R', long, default_value_t = 3)]
    repeats: usize,
    /// Warm-up round trips per latency point.
    #[arg(short = 'w', long, default_value_t = 100)]
    warmup: usize,
    #[arg(short = 'o', long, value_enum, default_value = "all")]
    op: OpArg,
    #[arg(short = 'p', long, value_enum, default_value = "both")]
    path: PathArg,
    /// NIC provider: the emulated NIC (default; says so in every title) or mlx5 hardware.
    #[arg(long, value_enum, default_value = "emu")]
    provider: ProviderArg,
    /// Ranks (threads of this process on the emulated NIC); ranks 0 and 1 are measured.
    #[arg(short = 'r', long, default_value_t = 2)]
    ranks: usize,
    /// Concurrent requesters (lanes) on rank 0 for bandwidth and message rate.
    #[arg(short = 'l', long, default_value_t = 1)]
    lanes: usize,
    /// log2 of the direct path's send-queue depth in WQEBBs (6..=15).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(6..=15))]
    log_depth: u32,
    /// How the lanes reach the NIC: their own queues or one wave sharing a queue.
    #[arg(long, value_enum, default_value = "queues")]
    lane_mode: LaneArg,
    /// With --lane-mode wave: waves of --lanes lanes each (one thread each), all on one queue.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    waves: u64,
    /// NICs per rank (rails) of the direct path: context c on rail c mod N, so --lanes of at least N
    /// use every rail (RCCL_RUST_GIN_RAILS; emulated: one NIC thread each). The proxy path keeps one.
    /// A list (1,2,4) measures the direct path once per value and prints message rate and bandwidth
    /// against the number of NICs.
    #[arg(long, default_value = "1")]
    rails: String,
    /// How the direct path's signals travel: auto (the capability probe), atomic (RDMA
    /// fetch-and-add) or write (slot writes folded by the reader; docs/nic-families.md, section 7).
    /// The proxy path's signals are the RMA plugin's. Default: RCCL_RUST_GIN_SIGNAL_MODE, else auto.
    #[arg(long, value_enum)]
    signal_mode: Option<SignalModeArg>,
    /// Transport of the direct path: rc (a queue pair per context and peer) or dc (DC initiators per
    /// context, RCCL_RUST_GIN_DCIS of them, one DC target per rank; RCCL_RUST_GIN_TRANSPORT). The
    /// proxy path stays RC. docs/architecture.md, "DC transport".
    #[arg(long, value_enum, default_value = "rc")]
    transport: TransportArg,
    /// The NIC family the emulated NICs present, on both paths: mlx5, bnxt_re (Thor2) or ionic
    /// (Pollara); the direct path posts that family's WQEs (RCCL_RUST_GIN_EMU_FAMILY;
    /// docs/nic-families.md). With --provider mlx5 the hardware decides.
    #[arg(long, value_enum, default_value = "mlx5")]
    family: FamilyArg,
    /// The emulated NICs' fabric: local (in memory) or tcp (each rank's NIC listening on its
    /// --hosts address, packets over TCP; docs/performance.md, "Across network namespaces").
    /// tcp measures the direct path (the proxy path's plugin takes its fabric from the
    /// environment, one per process).
    #[arg(long, value_enum, default_value = "local")]
    fabric: FabricArg,
    /// With --fabric tcp: one host per rank, IP or IP@NETNS (a network namespace under
    /// /run/netns, which the rank's thread enters for its sockets), comma-separated.
    #[arg(long, value_delimiter = ',')]
    hosts: Vec<perf::world::Host>,
    #[arg(short = 'f', long, value_enum, default_value = "table")]
    format: FormatArg,
    /// Where to write the SVG chart of latency, message rate and bandwidth against size.
    #[arg(long, default_value = "target/gin-perf.svg")]
    chart: std::path::PathBuf,
    /// Skip the data-path figures (WQEBBs per put, doorbells per batch, ...).
    #[arg(long)]
    no_datapath: bool,
    /// -o ep-*: ranks, one number or a comma-separated list (each 2..=64; --experts must divide evenly).
    #[arg(long, default_value = "16")]
    ep_ranks: String,
    /// -o ep-*: tokens per rank, one number or a comma-separated list (each 1..=1024).
    #[arg(long, default_value = "128")]
    tokens: String,
    /// -o ep-*: hidden size in bf16 elements (2 bytes each; a multiple of 4, 4..=65536).
    #[arg(long, default_value_t = 7168)]
    hidden: usize,
    /// -o ep-*: experts each token is routed to.
    #[arg(long, default_value_t = 8)]
    topk: usize,
    /// -o ep-*: experts in all, spread evenly over the ranks.
    #[arg(long, default_value_t = 256)]
    experts: usize,
    /// -o ep-*: how experts are drawn.
    #[arg(long, value_enum, default_value = "uniform")]
    routing: RoutingArg,
    /// -o ep-*: the routing's seed.
    #[arg(long, default_value_t = 28)]
    seed: u64,
    /// -o ep-*: low-latency or high-throughput dispatch and combine.
    #[arg(long, value_enum, default_value = "ll")]
    ep_mode: EpModeArg,
    /// -o ep-* with --ep-mode ht: tokens per put (1..=1024).
    #[arg(long, default_value_t = 16)]
    ep_chunk: usize,
    /// -o ep-*: timed iterations per repeat (1..=100000).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// -o ep-*: untimed iterations before them (1..=1000).
    #[arg(long, default_value_t = 2)]
    ep_warmup: usize,
    /// -o ep-*: driver threads standing in for the GPUs (ranks dealt out in turn); default: the CPUs.
    #[arg(long)]
    ep_threads: Option<usize>,
    /// -o ep-* --ep-mode ll, direct path: lanes of the lockstep wave posting a peer's tokens (1..=64;
    /// 1: one thread posts each put alone, a doorbell each).
    #[arg(long, default_value_t = 1)]
    ep_lanes: usize,
    /// -o ep-* --ep-mode ll, direct path: post a peer's token puts with the aggregate flag
    /// (ncclGinOptFlagsAggregateRequests: no doorbell until the peer's signal), as the proxy's RMA
    /// plugin aggregates what it finds queued.
    #[arg(long)]
    ep_aggregate: bool,
    /// -o ep-*: the most memory one point may take, MiB (windows of all ranks plus the direct path's
    /// send rings); a larger point is refused before anything is allocated. Default: 80% of MemAvailable.
    #[arg(long)]
    ep_max_mem: Option<u64>,
    /// Testing only: rank 0 leaves out one token of its last dispatch (the receivers' check must fail).
    #[arg(long, hide = true)]
    ep_fault_drop: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let v = n * mul;
    if !(8..=16 << 20).contains(&v) {
        return Err(format!("size {s} outside 8 B .. 16 MiB"));
    }
    Ok(v)
}

fn sizes(spec: &str) -> Result<Vec<u64>, String> {
    match spec.split_once(':') {
        None => Ok(vec![parse_size(spec)?]),
        Some((a, b)) => {
            let (lo, hi) = (parse_size(a)?, parse_size(b)?);
            if lo > hi {
                return Err(format!("size range {spec}: MIN > MAX"));
            }
            let mut v = vec![];
            let mut x = lo;
            while x <= hi {
                v.push(x);
                x *= 2;
            }
            Ok(v)
        }
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gin-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mut args: Args) -> Result<(), String> {
    let sizes = sizes(&args.size)?;
    match args.fabric {
        FabricArg::Local if !args.hosts.is_empty() => return Err("--hosts needs --fabric tcp".into()),
        FabricArg::Local => {}
        FabricArg::Tcp => {
            if args.hosts.len() < 2 {
                return Err("--fabric tcp needs --hosts with one address per rank (at least 2)".into());
            }
            if !matches!(args.provider, ProviderArg::Emu) {
                return Err("--fabric tcp is the emulated NIC's (--provider emu)".into());
            }
            if args.path == PathArg::Proxy {
                return Err("--fabric tcp measures the direct path only (--path direct)".into());
            }
            if matches!(args.op, OpArg::EpDispatch | OpArg::EpCombine | OpArg::EpRoundTrip) {
                // The EP drivers build --ep-ranks ranks of one process, many
                // more than a few namespaces hold; they run on the local fabric.
                return Err("--fabric tcp runs the point-to-point operations (put, put+signal, signal, get); the EP operations run on the local fabric".into());
            }
            if args.path == PathArg::Both {
                eprintln!("gin-perf: --fabric tcp: measuring the direct path only");
                args.path = PathArg::Direct;
            }
            args.ranks = args.hosts.len();
            eprintln!(
                "gin-perf: {} ranks on the TCP fabric: {}",
                args.ranks,
                args.hosts.iter().map(|h| format!("{}{}", h.ip, h.netns.as_ref().map_or(String::new(), |n| format!(" (netns {n})")))).collect::<Vec<_>>().join(", ")
            );
        }
    }
    if args.ranks < 2 {
        return Err("--ranks must be at least 2".into());
    }
    if args.lanes == 0 || args.lanes > 64 {
        return Err("--lanes must be in 1..=64".into());
    }
    let ep_phase = match args.op {
        OpArg::EpDispatch => Some(perf::ep::Phase::Dispatch),
        OpArg::EpCombine => Some(perf::ep::Phase::Combine),
        OpArg::EpRoundTrip => Some(perf::ep::Phase::RoundTrip),
        _ => None,
    };
    let ops = match args.op {
        OpArg::EpDispatch | OpArg::EpCombine | OpArg::EpRoundTrip => vec![],
        OpArg::Put => vec![Op::Put],
        OpArg::PutSignal => vec![Op::PutSignal],
        OpArg::Signal => vec![Op::Signal],
        OpArg::Get => vec![Op::Get],
        OpArg::All => vec![Op::Put, Op::PutSignal, Op::Signal, Op::Get],
    };
    let mut config = Config::from_env().map_err(|e| e.to_string())?;
    config.provider = match args.provider {
        ProviderArg::Emu => ProviderKind::Emu,
        ProviderArg::Mlx5 => ProviderKind::Mlx5,
    };
    let rails = rails_list(&args.rails)?;
    config.rails = rails[0];
    if let Some(m) = args.signal_mode {
        config.signal_mode = match m {
            SignalModeArg::Auto => SignalModeKnob::Auto,
            SignalModeArg::Atomic => SignalModeKnob::Atomic,
            SignalModeArg::Write => SignalModeKnob::Write,
        };
    }
    config.transport = match args.transport {
        TransportArg::Rc => rccl_rust_gin::config::Transport::Rc,
        TransportArg::Dc => rccl_rust_gin::config::Transport::Dc,
    };
    config.emu_family = match args.family {
        FamilyArg::Mlx5 => rccl_rust_gin::nic::NicFamily::Mlx5,
        FamilyArg::Bnxt => rccl_rust_gin::nic::NicFamily::Bnxt,
        FamilyArg::Ionic => rccl_rust_gin::nic::NicFamily::Ionic,
    };
    // The proxy path's RMA plugin reads it from the environment, as the
    // provider below.
    // SAFETY: no other thread of this process exists yet.
    unsafe { std::env::set_var("RCCL_RUST_GIN_EMU_FAMILY", config.emu_family.name()) };
    if config.emu_family != rccl_rust_gin::nic::NicFamily::Mlx5 {
        // The RMA plugin's signals are remote atomics, which it refuses on
        // NICs without them (docs/rma-plugin.md); the emulated NIC executes
        // them in any family, so the proxy path runs with them asked for.
        // SAFETY: as above.
        unsafe { std::env::set_var("RCCL_RUST_GIN_SIGNAL_MODE", "atomic") };
        eprintln!(
            "gin-perf: proxy path on {}: atomic signals (the RMA plugin's only kind; emulated, the hardware has none)",
            config.emu_family.name()
        );
    }
    let emulated = config.provider == ProviderKind::Emu;
    // The RMA plugin (the proxy path) reads its provider from the
    // environment, as it does under RCCL.
    // SAFETY: no other thread of this process exists yet.
    unsafe { std::env::set_var("RCCL_RUST_GIN_PROVIDER", if emulated { "emu" } else { "mlx5" }) };
    if emulated {
        eprintln!("gin-perf: running on the EMULATED NIC (RCCL_RUST_GIN_PROVIDER=emu); figures are emulated, not hardware");
    }
    let format = match args.format {
        FormatArg::Table => report::Format::Table,
        FormatArg::Json => report::Format::Json,
        FormatArg::Csv => report::Format::Csv,
    };
    if args.repeats == 0 {
        return Err("--repeats must be at least 1".into());
    }
    if let Some(phase) = ep_phase {
        return ep_main(&args, &config, phase, format, emulated);
    }
    let lane_mode = match args.lane_mode {
        LaneArg::Queues => LaneMode::Queues,
        LaneArg::Wave => LaneMode::Wave,
    };
    let min_time = std::time::Duration::from_millis(args.min_time_ms.max(1));
    if args.waves > 1 && lane_mode != LaneMode::Wave {
        return Err("--waves needs --lane-mode wave".into());
    }
    let waves = args.waves as usize;
    let params =
        Params { sizes: sizes.clone(), ops, lanes: args.lanes, lane_mode, waves, min_time, warmup: args.warmup };
    let max = *sizes.iter().max().unwrap_or(&8);
    let settings = Settings {
        n_signals: 4,
        n_counters: 4,
        // Own queues: one context (a QP per peer) per lane.
        n_contexts: if lane_mode == LaneMode::Queues { args.lanes as u32 } else { 1 },
        log_depth: args.log_depth,
        traffic_class: 0,
        backend_version: 0,
        rank_stride: 1,
    };
    let progress = |r: &perf::Run| {
        if format == report::Format::Table {
            eprintln!(
                "  [{}] {} {} {}: rtt {:.2} us, {:.3} Mops, {:.3} GB/s, steal {:.1}%",
                r.repeat,
                r.path,
                r.op,
                report::size_label(r.bytes),
                r.rtt_median_us,
                r.mops,
                r.bandwidth_gbs,
                r.steal_pct
            )
        }
    };
    let mut paths = vec![];
    if matches!(args.path, PathArg::Direct | PathArg::Both) {
        paths.push(PathArg::Direct);
    }
    if matches!(args.path, PathArg::Proxy | PathArg::Both) {
        paths.push(PathArg::Proxy);
    }
    // Each point is measured `repeats` times on each path, the repeats of
    // both paths back to back (the order alternating) so that a same-run
    // ratio compares measurements seconds apart, not a sweep apart, on a
    // machine whose load drifts. Every measurement gets a fresh world,
    // alone in the process: no idle proxy or NIC thread of the other path
    // competes for the cores or lands in its CPU figures.
    let load_start = report::load_average();
    let ticks_start = cpu::machine_ticks();
    if rails.len() > 1 {
        return rails_sweep(&config, &rails, &args, &params, settings, emulated, load_start);
    }
    let mut runs = Vec::new();
    let build = |which: PathArg| -> Result<(Box<dyn perf::Path>, Vec<i32>), String> {
        let before = cpu::threads_named("emu-nic");
        let path: Box<dyn perf::Path> = match which {
            PathArg::Proxy => perf::proxy::build(&config, args.ranks, max as usize).map_err(|e| e.to_string())?,
            _ => {
                let world = perf::world::build(&config, args.ranks, settings, max as usize, &args.hosts).map_err(|e| e.to_string())?;
                Box::new(Direct { ranks: world, lane_contexts: lane_mode == LaneMode::Queues })
            }
        };
        // The emulated NIC threads this world started (one per rank).
        let nic_tids: Vec<i32> = cpu::threads_named("emu-nic").into_iter().filter(|t| !before.contains(t)).collect();
        if emulated && nic_tids.is_empty() {
            eprintln!("gin-perf: found no emulated NIC thread for the {} path; its NIC CPU reads 0", path.name());
        }
        Ok((path, nic_tids))
    };
    for (op, bytes) in perf::points(&params) {
        for rep in 0..args.repeats {
            let mut order = paths.clone();
            if rep % 2 == 1 {
                order.reverse();
            }
            for &which in &order {
                let (path, nic_tids) = build(which)?;
                let run = perf::measure(&*path, &nic_tids, &params, op, bytes, rep).map_err(|e| e.to_string())?;
                progress(&run);
                runs.push(run);
            }
        }
    }
    let samples = stats::samples(&runs);
    let ratios = stats::ratios(&runs);
    let mut lane_desc = if waves > 1 { format!("{}, {waves} waves", lane_mode.name()) } else { lane_mode.name().into() };
    if config.rails > 1 {
        lane_desc += &format!("; {} rails (NICs per rank) on the direct path", config.rails);
    }
    if config.emu_family != rccl_rust_gin::nic::NicFamily::Mlx5 && emulated {
        lane_desc += &format!("; emulated NICs present {}", config.emu_family.name());
    }
    if config.signal_mode != SignalModeKnob::Auto {
        lane_desc += &format!("; direct-path signals: {:?}", config.signal_mode).to_lowercase();
    }
    if config.transport == rccl_rust_gin::config::Transport::Dc {
        lane_desc += &format!("; DC transport on the direct path ({} DCIs per context)", config.dcis);
    }
    let setup = report::Setup {
        emulated,
        ranks: args.ranks,
        lanes: args.lanes,
        lane_mode: lane_desc,
        repeats: args.repeats,
        min_time_ms: min_time.as_millis() as u64,
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load: (load_start, report::load_average()),
        steal_pct: cpu::steal_pct(ticks_start, cpu::machine_ticks()),
        nic_threads: emulated.then(|| match config.emu_threads.resolve() {
            Some(n) => format!("each world's NICs take turns on {n} thread(s) (RCCL_RUST_GIN_EMU_THREADS; `nic`: one per NIC)"),
            None => "one per NIC (RCCL_RUST_GIN_EMU_THREADS=nic)".into(),
        }),
    };
    print!("{}", report::render(&samples, &ratios, format, &setup));
    if !args.no_datapath && emulated && format == report::Format::Table && args.fabric == FabricArg::Local {
        let f = datapath::run(&config, min_time).map_err(|e| e.to_string())?;
        println!("\n{}", report::title(true, "data-path figures (mlx5 producer, one thread each)"));
        println!("  (store loop and posting: per second of the thread's own CPU time, median of its rounds; other jobs on these cores stretch wall time)");
        println!("  64-byte store loop (ceiling)       {:>7.1} M stores/s", f.store_loop_m_per_s);
        let (share, lo, hi) = f.producer_share;
        println!(
            "  posting, producer alone            {:>7.1} M WQE/s per thread, {:.1} ns CPU/WQE = {:.0}% [{:.0}-{:.0}%] of the store loop (batches of 64, 2^15 queue, ring resident, no NIC running; {} rounds of 32,000, each against a store-loop pass run just before it)",
            f.producer_mwqe_per_s,
            f.producer_cpu_ns_per_wqe,
            100.0 * share,
            100.0 * lo,
            100.0 * hi,
            f.producer_rounds
        );
        println!(
            "  put posting, poster alone          {:>7.0} ns CPU per plain 8-byte put, {:.0} ns with a counter: {:.2}x [{:.2}-{:.2}] (goal: within 1.20x)",
            f.put_cpu_ns, f.counted_put_cpu_ns, f.counted_ratio.0, f.counted_ratio.1, f.counted_ratio.2
        );
        println!(
            "  emulated NIC consumption, alone    {:>7.2} M WQE/s, {:.0} ns CPU/WQE (8-byte loopback WRITEs, one NIC stepping a filled queue)",
            f.nic_mwqe_per_s, f.nic_cpu_ns_per_wqe
        );
        println!(
            "  producer + NIC thread together     {:>7.2} M WQE/s (2^10 queue: posting waits for the NIC)",
            f.pipeline_mwqe_per_s
        );
        println!("  WQEBBs per put              {:.2}   (goal 1)", f.wqebbs_per_put);
        println!("  WQEBBs per put+signal       {:.2}   (goal 2)", f.wqebbs_per_put_signal);
        println!("  doorbells per batch of 64   {:.2}   (goal 1)", f.doorbells_per_batch64);
        println!("  signalled CQEs per batch    {:.2}   (goal <= 1)", f.cqes_per_batch64);
    }
    if let Some(dir) = args.chart.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    perf::chart::write_svg(&args.chart, &samples, emulated)?;
    eprintln!("gin-perf: chart written to {}", args.chart.display());
    Ok(())
}

/// `--rails`: one number, or a comma-separated list of them, each 1..=16.
fn rails_list(spec: &str) -> Result<Vec<u32>, String> {
    let v: Vec<u32> = spec
        .split(',')
        .map(|x| x.trim().parse::<u32>().ok().filter(|n| (1..=16).contains(n)).ok_or(format!("--rails {spec:?}: each value in 1..=16")))
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(format!("--rails {spec:?}: no value"));
    }
    Ok(v)
}

/// The direct path measured once per rails value (fresh worlds, repeats
/// interleaved across values so that load drift hits each alike): message
/// rate of all lanes, the bandwidth that rate moves (Mops x size: every
/// lane's context on its rail) and the one-lane stream, medians.
fn rails_sweep(
    config: &Config,
    rails: &[u32],
    args: &Args,
    params: &Params,
    settings: Settings,
    emulated: bool,
    load_start: f64,
) -> Result<(), String> {
    let max = *params.sizes.iter().max().unwrap_or(&8) as usize;
    let mut runs: Vec<(u32, perf::Run)> = Vec::new();
    for (op, bytes) in perf::points(params) {
        for rep in 0..args.repeats {
            for &r in rails {
                let config = Config { rails: r, ..config.clone() };
                let before = cpu::threads_named("emu-nic");
                let world = perf::world::build(&config, args.ranks, settings, max, &args.hosts).map_err(|e| e.to_string())?;
                let path = Direct { ranks: world, lane_contexts: params.lane_mode == LaneMode::Queues };
                let tids: Vec<i32> = cpu::threads_named("emu-nic").into_iter().filter(|t| !before.contains(t)).collect();
                let run = perf::measure(&path, &tids, params, op, bytes, rep).map_err(|e| e.to_string())?;
                eprintln!(
                    "  [{rep}] {r} rail(s) {} {}: {:.3} Mops, {:.3} GB/s one lane",
                    run.op,
                    report::size_label(bytes),
                    run.mops,
                    run.bandwidth_gbs
                );
                runs.push((r, run));
            }
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    println!("{}", report::title(emulated, "gin-perf: direct path against the number of NICs (rails)"));
    println!(
        "{} ranks, {} lane(s) = {} context(s), context c on rail c mod rails; medians of {} repeats; load average {:.1} at the start, {:.1} at the end; {} CPUs",
        args.ranks,
        params.lanes,
        settings.n_contexts,
        args.repeats,
        load_start,
        report::load_average(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    println!("  Mops: all lanes; GB/s all lanes = Mops x size; GB/s one lane: a single context (one rail) streaming");
    println!("rails  op            size        Mops   GB/s-all  GB/s-1lane   vs 1st");
    for (op, bytes) in perf::points(params) {
        let mut first = None;
        for &r in rails {
            let of = |f: fn(&perf::Run) -> f64| {
                median(runs.iter().filter(|(x, run)| *x == r && run.op == op.name() && run.bytes == bytes).map(|(_, run)| f(run)).collect())
            };
            let mops = of(|x| x.mops);
            let bw1 = of(|x| x.bandwidth_gbs);
            let base = *first.get_or_insert(mops);
            println!(
                "{r:>5}  {:<12} {:>6}  {mops:>10.5}  {:>9.3}  {bw1:>10.3}  {:>6.2}x",
                op.name(),
                report::size_label(bytes),
                mops * bytes as f64 / 1e3,
                if base > 0.0 { mops / base } else { 0.0 }
            );
        }
    }
    Ok(())
}

/// A comma-separated list of numbers, each in `lo..=hi`.
fn number_list(flag: &str, spec: &str, lo: usize, hi: usize) -> Result<Vec<usize>, String> {
    let v: Vec<usize> = spec
        .split(',')
        .map(|x| x.trim().parse::<usize>().ok().filter(|n| (lo..=hi).contains(n)).ok_or(format!("{flag} {spec:?}: each value in {lo}..={hi}")))
        .collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err(format!("{flag} {spec:?}: no value"));
    }
    Ok(v)
}

/// -o ep-dispatch, ep-combine, ep-round-trip: the expert-parallel sweep
/// (perf/ep/), each point measured `repeats` times on each path, the two
/// paths' repeats back to back in alternating order, every measurement in a
/// fresh world.
fn ep_main(args: &Args, config: &Config, phase: perf::ep::Phase, format: report::Format, emulated: bool) -> Result<(), String> {
    use perf::ep::{self, fabric, routing};
    let ranks = number_list("--ep-ranks", &args.ep_ranks, 2, 64)?;
    let tokens = number_list("--tokens", &args.tokens, 1, 1024)?;
    if args.hidden < 4 || args.hidden > 65536 || args.hidden % 4 != 0 {
        return Err(format!("--hidden {}: a multiple of 4 in 4..=65536 (bf16 elements; tokens are 8-byte aligned)", args.hidden));
    }
    if args.experts == 0 || args.topk == 0 || args.topk > args.experts {
        return Err(format!("--topk {} of --experts {}: need 1 <= topk <= experts", args.topk, args.experts));
    }
    if let Some(r) = ranks.iter().find(|&&r| args.experts % r != 0) {
        return Err(format!("--experts {} do not divide evenly over {r} ranks (--ep-ranks)", args.experts));
    }
    if !(1..=64).contains(&args.ep_lanes) {
        return Err(format!("--ep-lanes {}: in 1..=64", args.ep_lanes));
    }
    if !(1..=1024).contains(&args.ep_chunk) {
        return Err(format!("--ep-chunk {}: in 1..=1024", args.ep_chunk));
    }
    if !(1..=100_000).contains(&args.iters) {
        return Err(format!("--iters {}: in 1..=100000", args.iters));
    }
    if !(1..=1000).contains(&args.ep_warmup) {
        return Err(format!("--ep-warmup {}: in 1..=1000", args.ep_warmup));
    }
    if args.repeats == 0 {
        return Err("--repeats must be at least 1".into());
    }
    if !emulated {
        return Err("-o ep-* runs N ranks in one process on the emulated NIC only (--provider emu); on hardware use benches/hw (docs/benchmarks.md)".into());
    }
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = args.ep_threads.unwrap_or(cpus);
    if !(1..=64).contains(&threads) {
        return Err(format!("--ep-threads {threads}: in 1..=64"));
    }
    let mode = match args.ep_mode {
        EpModeArg::Ll => ep::Mode::LowLatency,
        EpModeArg::Ht => ep::Mode::HighThroughput,
    };
    let skew = match args.routing {
        RoutingArg::Uniform => routing::Skew::Uniform,
        RoutingArg::Skewed => routing::Skew::Hot,
    };
    let params = ep::Params {
        mode,
        phase,
        token_bytes: 2 * args.hidden,
        chunk: args.ep_chunk,
        iters: args.iters,
        warmup: args.ep_warmup,
        threads,
        fault_drop: args.ep_fault_drop,
    };
    let mut paths = vec![];
    if matches!(args.path, PathArg::Direct | PathArg::Both) {
        paths.push(PathArg::Direct);
    }
    if matches!(args.path, PathArg::Proxy | PathArg::Both) {
        paths.push(PathArg::Proxy);
    }
    let max_mem = match args.ep_max_mem {
        Some(0) => return Err("--ep-max-mem 0: give MiB, at least 1".into()),
        Some(m) => m << 20,
        None => mem_available().map_or(u64::MAX, |a| a / 10 * 8),
    };
    let load_start = report::load_average();
    let ticks_start = cpu::machine_ticks();
    let mut runs = vec![];
    for &n in &ranks {
        for &t in &tokens {
            let plan = routing::Plan::route(n, t, args.experts, args.topk, skew, args.seed)?;
            let (sb, db) = ep::window_bytes(&plan, &params);
            // The direct path's send rings: a queue per (context, peer) of 2^log_depth 64-byte WQEBBs.
            let need = (n * (sb + db) + n * n * (64usize << args.log_depth)) as u64;
            if need > max_mem {
                return Err(format!(
                    "{n} ranks x {t} tokens x hidden {} need about {} MiB (windows and send rings), over the limit of {} MiB \
                     (--ep-max-mem; default 80% of MemAvailable): lower --hidden, --tokens or --ep-ranks",
                    args.hidden,
                    need >> 20,
                    max_mem >> 20
                ));
            }
            let recv = plan.received();
            eprintln!(
                "gin-perf: {n} ranks x {t} tokens: {} copies per dispatch, {} to {} tokens per receiver, windows {:.1} + {:.1} MiB per rank ({:.0} MiB in all)",
                plan.copies(),
                recv.iter().min().unwrap_or(&0),
                recv.iter().max().unwrap_or(&0),
                sb as f64 / (1 << 20) as f64,
                db as f64 / (1 << 20) as f64,
                (n * (sb + db)) as f64 / (1 << 20) as f64
            );
            for rep in 0..args.repeats {
                let mut order = paths.clone();
                if rep % 2 == 1 {
                    order.reverse();
                }
                for &which in &order {
                    let before = cpu::threads_named("emu-nic");
                    let f: Box<dyn fabric::Fabric> = match which {
                        PathArg::Proxy => Box::new(fabric::ProxyFabric {
                            proxy: perf::proxy::build_world(n, sb, db, ep::signals(n)).map_err(|e| e.to_string())?,
                        }),
                        _ => {
                            let settings = Settings {
                                n_signals: ep::signals(n) as u32,
                                n_counters: 1,
                                n_contexts: 1,
                                log_depth: args.log_depth,
                                traffic_class: 0,
                                backend_version: 0,
                                rank_stride: 1,
                            };
                            Box::new(fabric::Direct {
                                ranks: perf::world::build_sized(config, n, settings, sb, db, &[]).map_err(|e| e.to_string())?,
                                lanes: args.ep_lanes,
                                aggregate: args.ep_aggregate,
                            })
                        }
                    };
                    let tids: Vec<i32> = cpu::threads_named("emu-nic").into_iter().filter(|x| !before.contains(x)).collect();
                    let run = ep::measure(&*f, &tids, &plan, &params, rep).map_err(|e| format!("{} path, {n} ranks, {t} tokens: {e}", f.name()))?;
                    if format == report::Format::Table {
                        eprintln!(
                            "  [{rep}] {} {n} ranks {t} tokens: {:.1} us (p99 {:.1}), {:.1} doorbells, host {:.1} us CPU, {} copies checked",
                            run.path, run.median_us, run.p99_us, run.doorbells, run.host_cpu_us, run.copies_checked
                        );
                    }
                    runs.push(run);
                }
            }
        }
    }
    let samples = ep::report::samples(&runs);
    let ratios = ep::report::ratios(&runs);
    let what = format!(
        "{} {} mode, hidden {} x bf16 ({} B per token), top-{} of {} experts, {} routing (seed {}){}",
        phase.name(),
        mode.name(),
        args.hidden,
        2 * args.hidden,
        args.topk,
        args.experts,
        match skew {
            routing::Skew::Uniform => "uniform",
            routing::Skew::Hot => "skewed",
        },
        args.seed,
        if mode == ep::Mode::HighThroughput { format!(", {} tokens per put", args.ep_chunk) } else { String::new() }
    ) + &{
        // What differs from the default direct path, so a table says what it measured.
        let mut extra = String::new();
        if config.emu_family != rccl_rust_gin::nic::NicFamily::Mlx5 {
            extra += &format!("; emulated NICs present {}", config.emu_family.name());
        }
        if config.transport == rccl_rust_gin::config::Transport::Dc {
            extra += "; DC transport on the direct path";
        }
        if config.signal_mode != SignalModeKnob::Auto {
            extra += &format!("; direct-path signals: {:?}", config.signal_mode).to_lowercase();
        }
        if args.ep_aggregate {
            extra += "; direct puts aggregated (one doorbell per peer signal)";
        }
        if args.ep_lanes > 1 {
            extra += &format!("; direct puts from lockstep waves of {} lanes", args.ep_lanes);
        }
        extra
    };
    let setup = ep::report::EpSetup {
        emulated,
        what: what.clone(),
        repeats: args.repeats,
        iters: args.iters,
        threads,
        cpus,
        load: (load_start, report::load_average()),
        steal_pct: cpu::steal_pct(ticks_start, cpu::machine_ticks()),
        nic_threads: emulated.then(|| match config.emu_threads.resolve() {
            Some(n) => format!("each world's NICs take turns on {n} thread(s) (RCCL_RUST_GIN_EMU_THREADS)"),
            None => "one per NIC (RCCL_RUST_GIN_EMU_THREADS=nic)".into(),
        }),
    };
    print!("{}", ep::report::render(&samples, &ratios, format, &setup));
    if let Some(dir) = args.chart.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    ep::report::write_svg(&args.chart, &samples, emulated, phase.name())?;
    eprintln!("gin-perf: chart written to {}", args.chart.display());
    Ok(())
}

/// MemAvailable of /proc/meminfo, bytes (None where unknown).
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}
