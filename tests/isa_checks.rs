//! ISA checks on the per-architecture code objects (see tests/support/isa.rs
//! for what they assert and why). One set of trials per built architecture,
//! plus trials that prove the checks catch planted faults. The GIN
//! operations are templates over the NIC family and a GPU build inlines only
//! its families' instances (gin/family.h), so besides the library's own code
//! object each architecture has one per other family (build/device.rs,
//! isa_family_<family>_<gfx>.hsaco), checked by the same rules.

#[path = "support/isa.rs"]
mod isa;

use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};

/// API headers whose `extern "C"` device entry points must all be covered.
const API_HEADERS: &[&str] = &[
    "device/include/rust_gin/mlx5/api.h",
    "device/include/rust_gin/queue/api.h",
    "device/include/rust_gin/rust_gin_device.h",
];

/// Kernels that ring each NIC family's doorbell: each must be in every code
/// object, so that no family's doorbell goes unchecked.
const FAMILY_DOORBELL_KERNELS: &[&str] = &[
    "rust_gin_isa_db_rust_gin_mlx5_post",
    "rust_gin_isa_db_rust_gin_bnxt_post",
    "rust_gin_isa_db_rust_gin_ionic_post",
];

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

/// The NIC families, with the RUST_GIN_FAMILIES mask of each (build/device.rs FAMILIES).
const FAMILIES: &[(&str, u32)] = &[("mlx5", 1), ("bnxt", 2), ("ionic", 4)];

/// The family mask the library's own code objects were built with.
fn library_mask() -> u32 {
    option_env!("RUST_GIN_GPU_FAMILIES").and_then(|m| m.parse().ok()).unwrap_or(1)
}

/// The family whose GIN operations the library's own code object holds:
/// its one family, or "mixed" (checked by mlx5's doorbell rule).
fn library_family() -> &'static str {
    FAMILIES.iter().find(|(_, m)| *m == library_mask()).map_or("mixed", |(f, _)| *f)
}

/// The code object holding `family`'s GIN operations on `arch`: the
/// library's own if it is built for that family alone, else the family's.
fn family_object(t: &Tools, arch: &str, family: &str) -> PathBuf {
    if family == library_family() {
        t.device_dir.join(arch).join(format!("{arch}.hsaco"))
    } else {
        t.build_dir.join(format!("isa_family_{family}_{arch}.hsaco"))
    }
}

/// Checks every ISA kernel of one code object, whose GIN operations are
/// `family`'s, against the VGPR budgets of tests/support/isa.rs; returns a
/// printable report.
fn check_code_object(t: &Tools, arch: &str, family: &str, hsaco: &Path) -> Result<String, String> {
    check_code_object_with(t, arch, family, hsaco, &|k| isa::vgpr_budget(family, k))
}

/// As check_code_object, with the VGPR budget of each kernel given by
/// `budget` (the budget check's own test lowers it).
fn check_code_object_with(
    t: &Tools,
    arch: &str,
    family: &str,
    hsaco: &Path,
    budget: &dyn Fn(&str) -> u32,
) -> Result<String, String> {
    if !hsaco.exists() {
        return Err(format!("{arch}: no code object {} for the {family} GIN operations", hsaco.display()));
    }
    let funcs = isa::disassemble(&t.objdump, hsaco, arch);
    let meta = isa::kernel_metadata(&t.readelf, hsaco);
    let mut report = format!("{arch}, GIN operations of {family}, {}:\n", hsaco.display());
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
        if let Err(e) = isa::check_writeback_waits(arch, &insns) {
            errors.push(format!("{}: {e}", k.name));
        }
        if let Err(e) = isa::check_vgpr_budget(arch, k, budget(&k.name)) {
            errors.push(e);
        }
        if k.name.starts_with("rust_gin_isa_db_") {
            match isa::check_doorbell_rules_for(arch, &k.name, family, &insns) {
                Ok(r) => report.push_str(&format!(
                    "    {} {} doorbell store(s), doorbell record: {:?}\n",
                    r.doorbells,
                    isa::doorbell_family(&k.name, family),
                    isa::doorbell_record_of(&k.name, family)
                )),
                Err(e) => errors.push(format!("{}: {e}", k.name)),
            }
        } else if insns.iter().any(|i| isa::store_kind(i) == Some(isa::StoreKind::Bits64)) {
            // nodb: rings no send-queue doorbell. A kernel that polls a CQ
            // of bnxt_re or ionic returns CQ credit with the CQ doorbell
            // (rust_gin_wait); there every 64-bit store is held to that
            // family's doorbell rule. mlx5's CQ takes a 32-bit record.
            if isa::doorbell_record_of(&k.name, family) == isa::DoorbellRecord::None {
                match isa::check_doorbell_rules_for(arch, &k.name, family, &insns) {
                    Ok(r) => report.push_str(&format!(
                        "    {} {} CQ doorbell store(s), doorbell record: None\n",
                        r.doorbells,
                        isa::doorbell_family(&k.name, family)
                    )),
                    Err(e) => errors.push(format!("{}: {e}", k.name)),
                }
            } else {
                errors.push(format!("{}: is named nodb but contains a 64-bit store (a doorbell?)", k.name));
            }
        }
    }
    if meta.iter().all(|k| !k.name.starts_with("rust_gin_isa_db_")) {
        errors.push("no doorbell-ringing ISA kernel found".into());
    }
    for want in FAMILY_DOORBELL_KERNELS {
        if !meta.iter().any(|k| k.name == *want) {
            errors.push(format!("no ISA kernel {want}: that family's doorbell is not checked"));
        }
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
    let lib = library_family();
    let h = hsaco.clone();
    trials.push(Trial::test(format!("isa::{arch}::doorbell_fences_and_no_scratch"), move || {
        let report = check_code_object(t, arch, lib, &h)?;
        println!("{report}");
        Ok(())
    }));
    // Every other family's GIN operations, in their own code object.
    for &(family, _) in FAMILIES.iter().filter(|(f, _)| *f != lib) {
        trials.push(Trial::test(format!("isa::{arch}::{family}::doorbell_fences_and_no_scratch"), move || {
            let report = check_code_object(t, arch, family, &family_object(t, arch, family))?;
            println!("{report}");
            Ok(())
        }));
    }
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
        ("dropped_wait", "has no s_waitcnt vmcnt(0) before the next vector-memory access"),
    ] {
        let f = t.build_dir.join(format!("isa_fault_{fault}_{arch}.hsaco"));
        trials.push(Trial::test(format!("isa::{arch}::planted_fault_{fault}_is_caught"), move || {
            // The missing fence is planted in every family's ring: each
            // family's post kernel must be caught on its own rule.
            let per_family: &[&str] = if fault == "missing_fence" {
                &[
                    "rust_gin_isa_db_rust_gin_mlx5_post: no system-scope release between the last store before the doorbell record",
                    "rust_gin_isa_db_rust_gin_bnxt_post: no system-scope release between the last store before the doorbell (",
                    "rust_gin_isa_db_rust_gin_ionic_post: no system-scope release between the last store before the doorbell (",
                ]
            } else {
                &[]
            };
            match check_code_object(t, arch, lib, &f) {
                Ok(report) => Err(format!("the checks passed a code object with a planted {fault}:\n{report}").into()),
                Err(e) if e.contains(expect) && per_family.iter().all(|w| e.contains(w)) => Ok(()),
                Err(e) => Err(format!("planted {fault} failed for the wrong reason (wanted '{expect}'):\n{e}").into()),
            }
        }));
    }
    // The budget check's own test: the real code object, with a budget one
    // below its largest kernel, must fail on that kernel, naming the count.
    let h = hsaco.clone();
    trials.push(Trial::test(format!("isa::{arch}::vgpr_budget_overrun_is_caught"), move || {
        let meta = isa::kernel_metadata(&t.readelf, &h);
        let top = meta
            .iter()
            .filter(|k| k.name.starts_with("rust_gin_isa_"))
            .max_by_key(|k| k.vgpr_count)
            .ok_or("no ISA kernels")?;
        let budget = top.vgpr_count - 1;
        match check_code_object_with(t, arch, lib, &h, &|_| budget) {
            Ok(report) => Err(format!("a VGPR budget of {budget} was not enforced:\n{report}").into()),
            Err(e) => {
                let want = format!(
                    "{}: over the VGPR budget on {arch}: uses {} VGPRs, budget {budget}",
                    top.name, top.vgpr_count
                );
                if e.contains(&want) {
                    Ok(())
                } else {
                    Err(format!("budget overrun not reported as '{want}':\n{e}").into())
                }
            }
        }
    }));
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
            trials.push(Trial::test("isa::family_objects_match_the_build", || {
                // build/device.rs builds one code object per family from its
                // FAMILIES; this test's list must be the same families and masks.
                let built = option_env!("RUST_GIN_ISA_FAMILIES").unwrap_or("");
                let ours: Vec<String> = FAMILIES.iter().map(|(f, m)| format!("{f}={m}")).collect();
                if built == ours.join(",") {
                    Ok(())
                } else {
                    Err(format!("build/device.rs FAMILIES is {built:?}, tests/isa_checks.rs FAMILIES is {ours:?}").into())
                }
            }));
            let archs: Vec<&'static str> = targets.split(',').map(|a| &*Box::leak(a.to_string().into_boxed_str())).collect();
            trials.push(Trial::test("isa::vgpr_budget_exceptions_are_exact", move || {
                // An exception must still be needed, and no looser than the
                // kernel's largest count over the built architectures.
                for &(family, kernel, budget) in isa::VGPR_BUDGET_EXCEPTIONS {
                    let most = archs
                        .iter()
                        .map(|arch| {
                            let meta = isa::kernel_metadata(&t.readelf, &family_object(t, arch, family));
                            meta.iter().find(|k| k.name == kernel).map_or(0, |k| k.vgpr_count)
                        })
                        .max()
                        .unwrap_or(0);
                    // Exact only where every supported architecture was built.
                    let all = ["gfx90a", "gfx942", "gfx950"].iter().all(|a| archs.contains(a));
                    if most <= isa::VGPR_BUDGET || (all && most != budget) {
                        return Err(format!(
                            "VGPR_BUDGET_EXCEPTIONS ({family}, {kernel}, {budget}): it uses at most {most} VGPRs on \
                             {archs:?}; set the exception to that, or remove it if that is <= {}",
                            isa::VGPR_BUDGET
                        )
                        .into());
                    }
                }
                Ok(())
            }));
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
            trials.push(Trial::test("isa::doorbell_store_is_matched_exactly", || {
                // The same ring sequence with the doorbell line replaced: only
                // the exact system-scope form passes.
                let ring = |arch: &str, db: &str| {
                    let scope = if arch == "gfx90a" { "" } else { " sc0 sc1" };
                    let listing = format!(
                        "0000000000001600 <f>:\n\tbuffer_wbl2{scope} // 000000001600: E0A0C000\n\ts_waitcnt vmcnt(0) // 000000001608: BF8C0F70\n\tflat_store_dword v[2:3], v6{scope} // 00000000160C: DE710000\n\tbuffer_wbl2{scope} // 000000001614: E0A0C000\n\ts_waitcnt vmcnt(0) // 00000000161C: BF8C0070\n\t{db} // 000000001620: DE750000\n"
                    );
                    isa::check_doorbell_rules(arch, &isa::flatten(&isa::parse_objdump(&listing), "f"))
                };
                for (arch, db) in [
                    ("gfx942", "flat_store_dwordx2 v[4:5], v[12:13] sc0 sc1"),
                    ("gfx950", "flat_store_dwordx2 v[4:5], v[12:13] sc1 sc0"),
                    ("gfx942", "global_store_dwordx2 v[4:5], v[12:13], off sc0 sc1"),
                    ("gfx90a", "flat_store_dwordx2 v[4:5], v[12:13]"),
                ] {
                    ring(arch, db).map_err(|e| format!("{arch}: the doorbell form {db:?} was refused: {e}"))?;
                }
                for (arch, db) in [
                    ("gfx942", "flat_store_dwordx2 v[4:5], v[12:13] sc1"),
                    ("gfx942", "flat_store_dwordx2 v[4:5], v[12:13] sc0 sc1 nt"),
                    ("gfx942", "flat_store_dwordx2 v[4:5], v[12:13] offset:8 sc0 sc1"),
                    ("gfx942", "buffer_store_dwordx2 v[12:13], off, s[4:7], 0 sc0 sc1"),
                    ("gfx942", "global_store_dwordx2 v4, v[12:13], s[6:7] sc0 sc1"),
                    ("gfx942", "flat_store_dwordx2 v[4:5], v[12:14] sc0 sc1"),
                    ("gfx90a", "flat_store_dwordx2 v[4:5], v[12:13] glc"),
                    ("gfx90a", "flat_store_dwordx2 v[4:5], v[12:13] slc"),
                ] {
                    match ring(arch, db) {
                        Ok(_) => return Err(format!("{arch}: {db:?} accepted as the doorbell").into()),
                        Err(e) if e.contains("doorbell") && e.contains(db.split(' ').next().unwrap()) => {}
                        Err(e) => return Err(format!("{arch}: {db:?} refused for the wrong reason: {e}").into()),
                    }
                }
                Ok(())
            }));
            trials.push(Trial::test("isa::doorbell_without_record_is_checked", || {
                // bnxt_re / ionic: WQE stores, a release, the doorbell.
                let ring = |arch: &str, before_db: &str, extra: &str| {
                    let scope = if arch == "gfx90a" { "" } else { " sc0 sc1" };
                    let listing = format!(
                        "0000000000001600 <f>:\n\tflat_store_dwordx4 v[2:3], v[4:7] // 000000001600: DE7C0000\n{extra}{before_db}\tflat_store_dwordx2 v[8:9], v[10:11]{scope} // 000000001620: DE750000\n"
                    );
                    isa::check_doorbell_rules_for(arch, "rust_gin_isa_db_rust_gin_bnxt_post", "mlx5", &isa::flatten(&isa::parse_objdump(&listing), "f"))
                };
                for arch in ["gfx90a", "gfx942", "gfx950"] {
                    let scope = if arch == "gfx90a" { "" } else { " sc0 sc1" };
                    let release = format!("\tbuffer_wbl2{scope} // 000000001610: E0A0C000\n\ts_waitcnt vmcnt(0) // 000000001618: BF8C0F70\n");
                    ring(arch, &release, "").map_err(|e| format!("{arch}: a released doorbell was refused: {e}"))?;
                    match ring(arch, "", "") {
                        Ok(_) => return Err(format!("{arch}: a doorbell without a release was accepted").into()),
                        Err(e) if e.contains("no system-scope release between the last store before the doorbell (") => {}
                        Err(e) => return Err(format!("{arch}: refused for the wrong reason: {e}").into()),
                    }
                    // A store between the release and the doorbell voids the release.
                    let dword = format!("{release}\tflat_store_dword v[2:3], v6 // 000000001619: DE710000\n");
                    match ring(arch, "", &dword) {
                        Ok(_) => return Err(format!("{arch}: a store between the release and the doorbell was accepted").into()),
                        Err(e) if e.contains("flat_store_dword v[2:3], v6") => {}
                        Err(e) => return Err(format!("{arch}: refused for the wrong reason: {e}").into()),
                    }
                }
                // A family's own entry point is that family's whatever the
                // object; a GIN operation is the object's family's; mlx5
                // (and a mixed library) keep the record rule.
                for (kernel, object, want) in [
                    ("rust_gin_isa_db_rust_gin_ionic_poll", "mlx5", isa::DoorbellRecord::None),
                    ("rust_gin_isa_db_rust_gin_mlx5_post", "bnxt", isa::DoorbellRecord::Before),
                    ("rust_gin_isa_db_rust_gin_put", "mlx5", isa::DoorbellRecord::Before),
                    ("rust_gin_isa_db_rust_gin_put", "mixed", isa::DoorbellRecord::Before),
                    ("rust_gin_isa_db_rust_gin_put", "bnxt", isa::DoorbellRecord::None),
                    ("rust_gin_isa_db_rust_gin_get", "ionic", isa::DoorbellRecord::None),
                ] {
                    if isa::doorbell_record_of(kernel, object) != want {
                        return Err(format!("{kernel} in a {object} object: wrong doorbell family").into());
                    }
                }
                Ok(())
            }));
            trials.push(Trial::test("isa::writeback_wait_check_reads_a_listing", || {
                // An agent-scope release as clang 22 emits it on gfx942 with
                // the wait dropped, then with the explicit wait.
                let dropped = "0000000000002000 <g>:\n\tbuffer_wbl2 sc1 // 000000002000: E0A08000\n\tv_mov_b32_e32 v0, 0 // 000000002008: 7E000280\n\tbuffer_inv sc1 // 00000000200C: E0E48000\n\tflat_atomic_swap_x2 v[0:1], v[2:3] // 000000002014: DD800000\n";
                let f = isa::parse_objdump(dropped);
                match isa::check_writeback_waits("gfx942", &isa::flatten(&f, "g")) {
                    Ok(()) => return Err("a write-back without its wait was accepted".into()),
                    Err(e) if e.contains("0x2000") && e.contains("0x2014") && e.contains("gfx942") => {}
                    Err(e) => return Err(format!("wrong report (want arch and both offsets): {e}").into()),
                }
                let waited = dropped.replace(
                    "\tv_mov_b32_e32 v0, 0",
                    "\ts_waitcnt vmcnt(0) // 000000002008: BF8C0F70\n\tv_mov_b32_e32 v0, 0",
                );
                let f = isa::parse_objdump(&waited);
                isa::check_writeback_waits("gfx942", &isa::flatten(&f, "g")).map_err(Failed::from)
            }));
            trials.push(Trial::test("isa::vgpr_budget_check_reads_metadata", || {
                let note = "  - .agpr_count:     0\n    .name:           rust_gin_isa_db_x\n    .private_segment_fixed_size: 0\n    .sgpr_count:     40\n    .vgpr_count:     65\n  - .agpr_count:     0\n    .name:           rust_gin_isa_db_y\n    .vgpr_count:     64\n";
                let meta = isa::parse_metadata(note);
                let [x, y] = meta.as_slice() else { return Err(format!("parsed {meta:?}").into()) };
                isa::check_vgpr_budget("gfx942", y, isa::VGPR_BUDGET).map_err(Failed::from)?;
                match isa::check_vgpr_budget("gfx942", x, isa::VGPR_BUDGET) {
                    Ok(()) => Err("65 VGPRs passed a budget of 64".into()),
                    Err(e) if e.contains("rust_gin_isa_db_x") && e.contains("65") && e.contains("gfx942") => Ok(()),
                    Err(e) => Err(format!("wrong report: {e}").into()),
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
