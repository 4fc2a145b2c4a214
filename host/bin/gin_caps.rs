//! gin-caps: what each NIC (and the GPU behind it) can do for rust-gin, as
//! the provider probes it when it opens the NIC (the same line
//! `NCCL_DEBUG=INFO` prints), and the signal mode that follows. Reads the
//! same RCCL_RUST_GIN_* variables as the library; `--host` opens the NICs
//! without a GPU (host memory, as the RMA plugin does); `--self-test` runs
//! init's loopback self-test (rccl_rust_gin::selftest) and prints every
//! step. Exit status 1 when a NIC allows no signal mode, cannot be opened
//! or fails a self-test step.

use clap::Parser;
use rccl_rust_gin::config::Config;
use rccl_rust_gin::provider::{self, MemoryMode};
use std::process::ExitCode;

#[derive(Parser)]
#[command(about = "Print what each NIC and GPU can do for rust-gin (RCCL_RUST_GIN_* variables apply)")]
struct Args {
    /// Open the NICs for host memory instead of a GPU.
    #[arg(long)]
    host: bool,
    /// Also run init's loopback self-test on each NIC, step by step.
    #[arg(long)]
    self_test: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let run = || -> Result<bool, String> {
        let config = Config::from_env().map_err(|e| e.to_string())?;
        let mode = if args.host { MemoryMode::Host } else { MemoryMode::Gpu };
        let p = provider::select_for(&config, mode).map_err(|e| e.to_string())?;
        let mut all_ok = true;
        for dev in 0..p.devices() {
            match p.open(dev) {
                Ok(nic) => {
                    let caps = nic.capabilities();
                    println!("{caps}");
                    if let Some(why) = caps.atomics_unusable() {
                        println!("  note: {why}; signals travel as slot writes and VA signals are refused");
                    }
                }
                Err(e) => {
                    println!("device {dev}: cannot open: {e}");
                    all_ok = false;
                }
            }
        }
        // The platform around the NICs (rccl_rust_gin::preflight): what init
        // WARNs about, every check's line here.
        for f in rccl_rust_gin::preflight::run(std::path::Path::new("/"), &|k| std::env::var(k).ok()) {
            let tag = match f.ok {
                Some(true) => "ok",
                Some(false) => "PROBLEM",
                None => "not checked",
            };
            println!("pre-flight {}: {tag}: {}", f.check, f.line);
        }
        if args.self_test {
            all_ok &= self_test(&config)?;
        }
        Ok(all_ok)
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("gin-caps: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints each NIC's self-test, step by step; whether all passed.
fn self_test(config: &Config) -> Result<bool, String> {
    let reports = rccl_rust_gin::selftest::run(config).map_err(|e| format!("self-test: {e}"))?;
    let mut ok = true;
    for r in &reports {
        for o in &r.steps {
            let (tag, text) = match &o.failure {
                None => ("ok", &o.detail),
                Some(why) => ("FAILED", why),
            };
            println!("self-test {} ({}, signals as {}): {}: {tag}: {text}", r.nic, r.family, r.signal_mode, o.step.name());
        }
        if let Some(line) = r.failure_line() {
            println!("{line}");
            ok = false;
        }
    }
    Ok(ok)
}
