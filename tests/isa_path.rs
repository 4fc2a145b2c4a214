//! The instruction-path counter and the rule on loads of NIC-written memory
//! (tests/support/isa_path.rs), held to what they must see: every common
//! path resolves through its steps and rings one doorbell; one planted
//! instruction on the post's path is on the counted route; no load of memory the
//! NIC writes is plain, and planted plain loads are caught. The figures
//! themselves are a report (`cargo bench --bench isa_path`), not asserted.

#[path = "support/isa.rs"]
#[allow(dead_code)]
mod isa;
#[path = "support/isa_path.rs"]
mod isa_path;

use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

struct Tools {
    objdump: PathBuf,
    symbolizer: PathBuf,
    device_dir: PathBuf,
    build_dir: PathBuf,
}

fn tools() -> Option<Tools> {
    Some(Tools {
        objdump: PathBuf::from(option_env!("RUST_GIN_LLVM_OBJDUMP")?),
        symbolizer: PathBuf::from(option_env!("RUST_GIN_LLVM_SYMBOLIZER")?),
        device_dir: PathBuf::from(option_env!("RUST_GIN_DEVICE_DIR")?),
        build_dir: PathBuf::from(option_env!("RUST_GIN_DEVICE_BUILD_DIR")?),
    })
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn marks() -> BTreeMap<String, (String, u32)> {
    isa_path::markers(root(), &["device"])
}

/// One spec's common path in one code object, with each instruction's
/// inlined call chain.
fn path_of(
    t: &Tools,
    arch: &str,
    hsaco: &Path,
    spec: &isa_path::Spec,
) -> Result<(Vec<isa::Insn>, std::collections::HashMap<u64, Vec<isa_path::Frame>>), String> {
    let funcs = isa::disassemble(&t.objdump, hsaco, arch);
    let insns = funcs.get(spec.kernel).ok_or_else(|| format!("{} not in {}", spec.kernel, hsaco.display()))?;
    let addrs: Vec<u64> = insns.iter().map(|i| i.addr).collect();
    let stacks = isa_path::inline_stacks(&t.symbolizer, hsaco, &addrs)?;
    let path = isa_path::common_path(insns, &stacks, spec, &marks())?;
    Ok((path, stacks))
}

/// Counts of one spec's common path in one code object.
fn path_counts(t: &Tools, arch: &str, hsaco: &Path, spec: &isa_path::Spec) -> Result<isa_path::Counts, String> {
    let (path, _) = path_of(t, arch, hsaco, spec)?;
    Ok(isa_path::counts(arch, &path))
}

/// The source line of the planted `s_nop` (queue/send_queue.h).
fn planted_nop_line() -> u32 {
    let src = std::fs::read_to_string(root().join("device/include/rust_gin/queue/send_queue.h")).expect("send_queue.h");
    let k = src.lines().position(|l| l.contains("asm volatile(\"s_nop 0\")")).expect("the planted s_nop in send_queue.h");
    k as u32 + 1
}

/// Every NIC-written-load violation in every kernel of a code object.
fn nic_load_violations(t: &Tools, arch: &str, hsaco: &Path) -> Result<Vec<String>, String> {
    let funcs = isa::disassemble(&t.objdump, hsaco, arch);
    let sites = isa_path::system_load_sites(root(), &["device"]);
    let mut bad = vec![];
    for (name, insns) in funcs.iter().filter(|(n, _)| n.starts_with("rust_gin_isa_")) {
        let addrs: Vec<u64> = insns.iter().filter(|i| isa_path::is_vector_load(i)).map(|i| i.addr).collect();
        if addrs.is_empty() {
            continue;
        }
        let stacks = isa_path::inline_stacks(&t.symbolizer, hsaco, &addrs)?;
        bad.extend(isa_path::nic_load_violations(arch, insns, &stacks, &sites).into_iter().map(|v| format!("{name}: {v}")));
    }
    Ok(bad)
}

fn code_objects(t: &Tools, arch: &str) -> Vec<PathBuf> {
    let mut v = vec![t.device_dir.join(arch).join(format!("{arch}.hsaco"))];
    for f in ["mlx5", "bnxt", "ionic"] {
        let p = t.build_dir.join(format!("isa_family_{f}_{arch}.hsaco"));
        if p.exists() {
            v.push(p);
        }
    }
    v
}

fn arch_trials(t: &'static Tools, arch: &'static str) -> Vec<Trial> {
    let lib = t.device_dir.join(arch).join(format!("{arch}.hsaco"));
    let mut trials = vec![];
    for spec in isa_path::specs() {
        let lib = lib.clone();
        let name = format!("isa_path::{arch}::{}", spec.op.replace([' ', ',', '+'], "_"));
        trials.push(Trial::test(name, move || {
            let c = path_counts(t, arch, &lib, &spec)?;
            // Each of these operations rings once, with WQE segment stores
            // before it: a route that skips either is not the operation.
            if c.doorbells != 1 || c.wqe_stores == 0 {
                return Err(format!("{}: the path rings {} doorbells and stores {} WQE segments: {c:?}", spec.op, c.doorbells, c.wqe_stores).into());
            }
            println!("{arch} {}: {c:?}", spec.op);
            Ok(())
        }));
    }
    let nop = t.build_dir.join(format!("isa_fault_path_nop_{arch}.hsaco"));
    trials.push(Trial::test(format!("isa_path::{arch}::planted_instruction_is_on_the_counted_route"), move || {
        let spec = isa_path::specs().into_iter().next().expect("a spec");
        // The route is the cheapest one through the spec's steps, and one
        // more instruction can move the compiler's block layout (on gfx90a
        // it saves one elsewhere), so the check is that the counted route
        // carries the planted instruction, found by its source line, and
        // the unplanted build's carries nothing from that line.
        let line = planted_nop_line();
        let from_line = |path: &[isa::Insn], stacks: &std::collections::HashMap<u64, Vec<isa_path::Frame>>| -> Vec<String> {
            path.iter()
                .filter(|i| {
                    stacks.get(&i.addr).and_then(|f| f.first()).is_some_and(|f| f.file.ends_with("send_queue.h") && f.line == line)
                })
                .map(|i| i.mnemonic.clone())
                .collect()
        };
        let (base, base_stacks) = path_of(t, arch, &lib, &spec)?;
        let (planted, planted_stacks) = path_of(t, arch, &nop, &spec)?;
        let b = from_line(&base, &base_stacks);
        let p = from_line(&planted, &planted_stacks);
        if !b.is_empty() || p != ["s_nop"] {
            return Err(format!(
                "send_queue.h:{line} on the counted {} route: {b:?} unplanted, {p:?} planted (want [] and [\"s_nop\"]); \
                 counts {} and {}",
                spec.op,
                base.len(),
                planted.len()
            )
            .into());
        }
        println!("{arch}: planted s_nop on the route; {} -> {} instructions", base.len(), planted.len());
        Ok(())
    }));
    for obj in code_objects(t, arch) {
        let label = obj.file_stem().unwrap().to_string_lossy().to_string();
        trials.push(Trial::test(format!("isa_nic_loads::{arch}::{label}"), move || {
            let bad = nic_load_violations(t, arch, &obj)?;
            if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("\n").into())
            }
        }));
    }
    for fault in ["plain_cqe_load", "plain_signal_load"] {
        let obj = t.build_dir.join(format!("isa_fault_{fault}_{arch}.hsaco"));
        trials.push(Trial::test(format!("isa_nic_loads::{arch}::planted_{fault}_is_caught"), move || {
            let bad = nic_load_violations(t, arch, &obj)?;
            if bad.is_empty() {
                return Err(format!("{fault}: the planted plain load passed the rule").into());
            }
            Ok(())
        }));
    }
    trials
}

fn main() {
    let args = Arguments::from_args();
    let Some(t) = tools() else {
        // Loud, and failing: the device build is part of the test command.
        let trial = Trial::test("isa_path::device_build_present", || {
            Err("the device code objects were not built (RUST_GIN_SKIP_DEVICE?): no ISA path can be counted".into())
        });
        libtest_mimic::run(&args, vec![trial]).exit();
    };
    let t: &'static Tools = Box::leak(Box::new(t));
    let mut trials = vec![Trial::test("isa_path::markers_are_unique_and_found", || {
        let m = marks();
        for spec in isa_path::specs() {
            for e in spec.steps.iter().chain(&spec.cold).filter(|e| !e.starts_with("fn:")) {
                if !m.contains_key(*e) {
                    return Err(format!("{}: no `// isa-path: {e}` marker in device/", spec.op).into());
                }
            }
        }
        if isa_path::system_load_sites(root(), &["device"]).len() < 8 {
            return Err("fewer than 8 system-scope load sites found in device/: the scan is broken".into());
        }
        Ok(())
    })];
    for arch in option_env!("RUST_GIN_GPU_TARGETS").unwrap_or("").split(',').filter(|a| !a.is_empty()) {
        let arch: &'static str = Box::leak(arch.split(':').next().unwrap().to_string().into_boxed_str());
        trials.extend(arch_trials(t, arch));
    }
    libtest_mimic::run(&args, trials).exit();
}
