//! ISA checks on the per-architecture code objects (see tests/support/isa.rs
//! for what they assert and why). One set of trials per built architecture,
//! plus trials that prove the checks catch planted faults.

#[path = "support/isa.rs"]
mod isa;

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};

/// API headers whose `extern "C"` device entry points must all be covered.
const API_HEADERS: &[&str] = &["device/include/rust_gin/mlx5/api.h", "device/include/rust_gin/rust_gin_device.h"];

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from).filter(|p| !p.as_os_str().is_empty())
}

struct Tools {
    objdump: PathBuf,
    readelf: PathBuf,
    device_dir: PathBuf,
    build_dir: PathBuf,
}

fn tools() -> Option<Tools> {
    Some(Tools {
        objdump: PathBuf::from(option_env!("RUST_GIN_LLVM_OBJDUMP")?),
        readelf: PathBuf::from(option_env!("RUST_GIN_LLVM_READELF")?),
        device_dir: env_path("RUST_GIN_DEVICE_DIR_OVERRIDE")
            .unwrap_or_else(|| PathBuf::from(option_env!("RUST_GIN_DEVICE_DIR").unwrap_or(""))),
        build_dir: PathBuf::from(option_env!("RUST_GIN_DEVICE_BUILD_DIR")?),
    })
}

fn entry_points() -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    API_HEADERS
        .iter()
        .flat_map(|h| {
            let text = std::fs::read_to_string(root.join(h)).unwrap_or_else(|e| panic!("read {h}: {e}"));
            isa::declared_entry_points(&text)
        })
        .collect()
}

/// Checks every ISA kernel of one code object; returns a printable report.
fn check_code_object(t: &Tools, arch: &str, hsaco: &Path) -> Result<String, String> {
    let funcs = isa::disassemble(&t.objdump, hsaco, arch);
    let meta = isa::kernel_metadata(&t.readelf, hsaco);
    let mut report = format!("{arch} {}:\n", hsaco.display());
    let mut errors = Vec::new();
    for k in meta.iter().filter(|k| k.name.starts_with("rust_gin_isa_")) {
        let insns = isa::flatten(&funcs, &k.name);
        report.push_str(&format!(
            "  {:<58} vgpr {:>3} sgpr {:>3} agpr {:>2} private {:>3}\n",
            k.name, k.vgpr_count, k.sgpr_count, k.agpr_count, k.private_segment_fixed_size
        ));
        if k.private_segment_fixed_size != 0 || k.uses_dynamic_stack {
            errors.push(format!(
                "{}: uses private memory (private_segment_fixed_size {}, dynamic stack {})",
                k.name, k.private_segment_fixed_size, k.uses_dynamic_stack
            ));
        }
        if let Err(e) = isa::check_no_scratch_insns(&insns) {
            errors.push(format!("{}: {e}", k.name));
        }
        if k.name.starts_with("rust_gin_isa_db_") {
            if let Err(e) = isa::check_doorbell_rules(arch, &insns) {
                errors.push(format!("{}: {e}", k.name));
            }
        } else if insns.iter().any(|i| isa::store_kind(i) == Some(isa::StoreKind::Bits64)) {
            errors.push(format!("{}: is named nodb but contains a 64-bit store (a doorbell?)", k.name));
        }
    }
    if meta.iter().all(|k| !k.name.starts_with("rust_gin_isa_db_")) {
        errors.push("no doorbell-ringing ISA kernel found".into());
    }
    if errors.is_empty() {
        Ok(report)
    } else {
        Err(format!("{report}{}", errors.join("\n")))
    }
}

fn arch_trials(t: &'static Tools, arch: &'static str) -> Vec<Trial> {
    let hsaco = t.device_dir.join(arch).join(format!("{arch}.hsaco"));
    let mut trials = vec![];
    let h = hsaco.clone();
    trials.push(Trial::test(format!("isa::{arch}::doorbell_fences_and_no_scratch"), move || {
        let report = check_code_object(t, arch, &h)?;
        println!("{report}");
        Ok(())
    }));
    let h = hsaco.clone();
    trials.push(Trial::test(format!("isa::{arch}::every_entry_point_has_an_isa_kernel"), move || {
        let meta = isa::kernel_metadata(&t.readelf, &h);
        let missing: Vec<String> = entry_points()
            .into_iter()
            .filter(|e| {
                !meta
                    .iter()
                    .any(|k| k.name == format!("rust_gin_isa_db_{e}") || k.name == format!("rust_gin_isa_nodb_{e}"))
            })
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("entry points without an ISA kernel in device/src/isa_entry.hip: {missing:?}").into())
        }
    }));
    for (fault, expect) in [
        ("split_doorbell", "no single 64-bit doorbell store"),
        ("missing_fence", "no system-scope release between the last store before the doorbell record"),
        ("scratch", "private memory"),
    ] {
        let f = t.build_dir.join(format!("isa_fault_{fault}_{arch}.hsaco"));
        trials.push(Trial::test(format!("isa::{arch}::planted_fault_{fault}_is_caught"), move || {
            match check_code_object(t, arch, &f) {
                Ok(report) => Err(format!("the checks passed a code object with a planted {fault}:\n{report}").into()),
                Err(e) if e.contains(expect) => Ok(()),
                Err(e) => Err(format!("planted {fault} failed for the wrong reason (wanted '{expect}'):\n{e}").into()),
            }
        }));
    }
    trials
}

fn main() {
    let args = Arguments::from_args();
    let targets = option_env!("RUST_GIN_GPU_TARGETS").unwrap_or("");
    let mut trials = Vec::new();
    match tools() {
        Some(t) if !targets.is_empty() => {
            let t: &'static Tools = Box::leak(Box::new(t));
            for arch in targets.split(',') {
                let arch: &'static str = Box::leak(arch.to_string().into_boxed_str());
                trials.extend(arch_trials(t, arch));
            }
            trials.push(Trial::test("isa::checker_parses_a_listing", || {
                let listing = "0000000000001600 <f>:\n\tbuffer_wbl2 sc0 sc1 // 000000001600: E0A0C000\n\ts_waitcnt vmcnt(0) // 000000001608: BF8C0F70\n\tflat_store_dword v[2:3], v6 sc0 sc1 // 00000000160C: DE710000\n\tbuffer_wbl2 sc0 sc1 // 000000001614: E0A0C000\n\ts_waitcnt vmcnt(0) lgkmcnt(0) // 00000000161C: BF8C0070\n\tflat_store_dwordx2 v[4:5], v[12:13] sc0 sc1 // 000000001620: DE750000\n";
                let f = isa::parse_objdump(listing);
                let insns = isa::flatten(&f, "f");
                isa::check_doorbell_rules("gfx942", &insns).map_err(Failed::from)?;
                // The same listing with agent-scope write-backs must fail.
                let agent = listing.replace("buffer_wbl2 sc0 sc1", "buffer_wbl2 sc1");
                let f = isa::parse_objdump(&agent);
                match isa::check_doorbell_rules("gfx942", &isa::flatten(&f, "f")) {
                    Ok(_) => Err("agent-scope write-back accepted as a system-scope release".into()),
                    Err(_) => Ok(()),
                }
            }));
        }
        _ => {
            trials.push(Trial::test("isa::device_artefacts_were_built", || {
                Err("DEVICE ARTEFACTS WERE NOT BUILT (RUST_GIN_SKIP_DEVICE set?): the ISA checks cannot run. \
                     Build with a device toolchain (see docs/building.md)."
                    .into())
            }));
        }
    }
    libtest_mimic::run(&args, trials).exit();
}
