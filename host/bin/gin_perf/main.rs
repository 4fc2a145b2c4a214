//! gin-perf: the put/signal microbenchmark. Runs the device-initiated path
//! (the device library posting straight to the NIC) and a model of RCCL's
//! proxy path (a host thread turning descriptors into RMA-plugin calls) side
//! by side, on the emulated NIC by default, and prints latency, bandwidth,
//! message rate, the NIC's counters per operation and host CPU per operation.

mod perf;

use clap::{Parser, ValueEnum};
use rccl_rust_gin::config::{Config, ProviderKind};
use rccl_rust_gin::gin::context::Settings;
use perf::{datapath, direct::Direct, report, Op, Params};
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum OpArg {
    Put,
    PutSignal,
    Signal,
    Get,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PathArg {
    Direct,
    Proxy,
    Both,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ProviderArg {
    Emu,
    Mlx5,
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
    /// Iterations per point (scaled down for large messages).
    #[arg(short = 'n', long, default_value_t = 2000)]
    iters: usize,
    /// Warm-up iterations per latency point.
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
    #[arg(short = 'f', long, value_enum, default_value = "table")]
    format: FormatArg,
    /// Where to write the SVG chart of latency and bandwidth against size.
    #[arg(long, default_value = "target/gin-perf.svg")]
    chart: std::path::PathBuf,
    /// Skip the data-path figures (WQEBBs per put, doorbells per batch, ...).
    #[arg(long)]
    no_datapath: bool,
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

fn run(args: Args) -> Result<(), String> {
    let sizes = sizes(&args.size)?;
    if args.ranks < 2 {
        return Err("--ranks must be at least 2".into());
    }
    if args.lanes == 0 || args.lanes > 64 {
        return Err("--lanes must be in 1..=64".into());
    }
    let ops = match args.op {
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
    let params = Params { sizes: sizes.clone(), iters: args.iters, warmup: args.warmup, ops, lanes: args.lanes };
    let max = *sizes.iter().max().unwrap_or(&8);
    let settings = Settings {
        n_signals: 4,
        n_counters: 4,
        n_contexts: 1,
        log_depth: 10,
        traffic_class: 0,
        backend_version: 0,
        rank_stride: 1,
    };
    let mut samples = Vec::new();
    let progress = |s: &perf::Sample| {
        if format == report::Format::Table {
            eprintln!("  {} {} {} B: rtt {:.2} us, {:.3} GB/s", s.path, s.op, s.bytes, s.rtt_median_us, s.bandwidth_gbs)
        }
    };
    if matches!(args.path, PathArg::Direct | PathArg::Both) {
        let world = perf::world::build(&config, args.ranks, settings, max as usize).map_err(|e| e.to_string())?;
        let d = Direct { ranks: world };
        samples.extend(perf::measure(&d, &params, progress).map_err(|e| e.to_string())?);
    }
    if matches!(args.path, PathArg::Proxy | PathArg::Both) {
        let p = perf::proxy::build(&config, args.ranks, max as usize).map_err(|e| e.to_string())?;
        samples.extend(perf::measure(&*p, &params, progress).map_err(|e| e.to_string())?);
    }
    print!("{}", report::render(&samples, format, emulated));
    if !args.no_datapath && emulated && format == report::Format::Table {
        let f = datapath::run(200).map_err(|e| e.to_string())?;
        println!("\n{}", report::title(true, "data-path figures (mlx5 producer, batches of 64 requests)"));
        println!("  WQEBBs per put              {:.2}   (goal 1)", f.wqebbs_per_put);
        println!("  WQEBBs per put+signal       {:.2}   (goal 2)", f.wqebbs_per_put_signal);
        println!("  doorbells per batch of 64   {:.2}   (goal 1)", f.doorbells_per_batch64);
        println!("  signalled CQEs per batch    {:.2}   (goal <= 1)", f.cqes_per_batch64);
        println!("  host-built posting rate     {:.2} M WQE/s per thread", f.post_mwqe_per_s);
    }
    if let Some(dir) = args.chart.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    perf::chart::write_svg(&args.chart, &samples, emulated)?;
    eprintln!("gin-perf: chart written to {}", args.chart.display());
    Ok(())
}
