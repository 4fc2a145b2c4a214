//! The instruction-path report (docs/performance.md, "ISA path"): for each
//! built GPU architecture and each GIN operation, what a wave issues on the
//! common path (tests/support/isa_path.rs says how the path is found), and
//! the kernel's registers. Counts, not times: they do not move with the
//! machine's load. `cargo bench --bench isa_path` prints it; the test command
//! runs it too (cargo test --all-targets), and tests/isa_path.rs holds the
//! counter to what it must see.

#[path = "../tests/support/isa.rs"]
#[allow(dead_code)]
mod isa;
#[path = "../tests/support/isa_path.rs"]
#[allow(dead_code)]
mod isa_path;

use std::path::{Path, PathBuf};

fn main() {
    let (Some(objdump), Some(readelf), Some(symbolizer), Some(dir)) = (
        option_env!("RUST_GIN_LLVM_OBJDUMP"),
        option_env!("RUST_GIN_LLVM_READELF"),
        option_env!("RUST_GIN_LLVM_SYMBOLIZER"),
        option_env!("RUST_GIN_DEVICE_DIR"),
    ) else {
        eprintln!("isa_path: NO REPORT: the device code objects were not built (RUST_GIN_SKIP_DEVICE?)");
        std::process::exit(1);
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let marks = isa_path::markers(root, &["device"]);
    println!("ISA path report: what one wave issues on each operation's common path (mlx5, RC, shared queue)");
    println!(
        "{:7} {:24} {:>6} {:>7} {:>4} {:>4} {:>4} {:>8} {:>4} {:>5} {:>5} {:>6}",
        "arch", "operation", "insns", "atomics", "ret", "wb", "inv", "waitcnt", "db", "VGPR", "SGPR", "spills"
    );
    let mut breakdowns = vec![];
    let mut functions = vec![];
    let mut failed = false;
    for arch in option_env!("RUST_GIN_GPU_TARGETS").unwrap_or("").split(',').filter(|a| !a.is_empty()) {
        let hsaco = PathBuf::from(dir).join(arch).join(format!("{arch}.hsaco"));
        let funcs = isa::disassemble(Path::new(objdump), &hsaco, arch);
        let meta = isa::kernel_metadata(Path::new(readelf), &hsaco);
        for spec in isa_path::specs() {
            let Some(insns) = funcs.get(spec.kernel) else {
                println!("{arch:7} {:24} kernel {} missing", spec.op, spec.kernel);
                failed = true;
                continue;
            };
            let addrs: Vec<u64> = insns.iter().map(|i| i.addr).collect();
            let result = isa_path::inline_stacks(Path::new(symbolizer), &hsaco, &addrs).and_then(|stacks| {
                let path = isa_path::common_path(insns, &stacks, &spec, &marks)?;
                breakdowns.push(format!("{arch:7} {:24} {:?}", spec.op, isa_path::breakdown(&path, &stacks)));
                if arch == "gfx942" && spec.op == "put 8 B" {
                    functions = isa_path::other_functions(&path, &stacks, 20);
                }
                Ok(path)
            });
            let k = meta.iter().find(|k| k.name == spec.kernel).cloned().unwrap_or_default();
            match result {
                Ok(path) => {
                    let c = isa_path::counts(arch, &path);
                    println!(
                        "{arch:7} {:24} {:>6} {:>7} {:>4} {:>4} {:>4} {:>8} {:>4} {:>5} {:>5} {:>6}",
                        spec.op,
                        c.insns,
                        c.atomics,
                        c.returning,
                        c.writebacks,
                        c.invalidates,
                        c.waitcnts,
                        c.doorbells,
                        k.vgpr_count,
                        k.sgpr_count,
                        k.sgpr_spill_count + k.vgpr_spill_count
                    );
                }
                Err(e) => {
                    println!("{arch:7} {:24} NO PATH: {e}", spec.op);
                    failed = true;
                }
            }
        }
    }
    println!(
        "insns: instructions issued; atomics (ret: returning); wb: system-scope L2 write-backs; inv: cache \
         invalidates; db: doorbell (64-bit) stores; VGPR/SGPR/spills: the whole ISA kernel's."
    );
    println!("Where each path's instructions come from (innermost function of the inlined chain):");
    for b in breakdowns {
        println!("{b}");
    }
    println!("gfx942 put 8 B by innermost function (spills apart), most first: {functions:?}");
    if failed {
        std::process::exit(1);
    }
}
