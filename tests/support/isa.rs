//! Reads AMDGPU code objects with the compiler's own llvm-objdump and
//! llvm-readelf, and checks what only the machine code can show:
//!
//! - the doorbell is one 64-bit store, of the exact form a relaxed
//!   system-scope store takes on each architecture (doorbell_form_error);
//! - a system-scope release (gfx90a: `buffer_wbl2`; gfx942/gfx950:
//!   `buffer_wbl2 sc0 sc1`; each followed by `s_waitcnt vmcnt(0)`) sits
//!   between the last store before the doorbell record and the doorbell
//!   record, and again between the doorbell record and the doorbell;
//! - every L2 write-back (`buffer_wbl2`, any scope) is followed by an
//!   `s_waitcnt vmcnt(0)` before the next vector-memory access: clang 22
//!   drops that wait on gfx942 (LLVM PR 178316), so the device code issues it
//!   explicitly after every release (port/port.h, fence_release);
//! - no scratch (private memory) is used;
//! - no kernel uses more VGPRs than its budget (these operations are inlined
//!   into RCCL's kernels, where their registers cap occupancy).
//!
//! Store classes rely on a rule of the device code (core/error.h): its only
//! plain stores are WQE stores (128-bit), doorbell records (32-bit) and the
//! doorbell (64-bit); every other write is an atomic read-modify-write.
//!
//! The analysis reads each kernel's instructions in address order, with
//! callees spliced in at their call sites. It is a linear reading, not a
//! control-flow analysis: a fence placed on another branch would look
//! present. The device code keeps the ring sequence straight-line, and the
//! planted-fault tests show the checks do fail when a fence or the single
//! store is missing.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

#[derive(Clone, Debug)]
pub struct Insn {
    pub addr: u64,
    pub mnemonic: String,
    pub operands: String,
}

impl Insn {
    pub fn text(&self) -> String {
        format!("{:#x}: {} {}", self.addr, self.mnemonic, self.operands)
    }
}

/// Every function symbol of the code object with its instructions.
pub fn disassemble(objdump: &Path, hsaco: &Path, mcpu: &str) -> BTreeMap<String, Vec<Insn>> {
    let out = Command::new(objdump)
        .arg("-d")
        .arg(format!("--mcpu={mcpu}"))
        .arg(hsaco)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", objdump.display()));
    assert!(
        out.status.success(),
        "{} failed on {}: {}",
        objdump.display(),
        hsaco.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse_objdump(&String::from_utf8_lossy(&out.stdout))
}

pub fn parse_objdump(text: &str) -> BTreeMap<String, Vec<Insn>> {
    let mut funcs: BTreeMap<String, Vec<Insn>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        // "0000000000001600 <rg_ring>:"
        if let Some(rest) = line.strip_suffix(">:") {
            if let Some((_, name)) = rest.split_once(" <") {
                current = Some(name.to_string());
                funcs.entry(name.to_string()).or_default();
                continue;
            }
        }
        let Some(name) = &current else { continue };
        // "\tflat_store_dword v[2:3], v6 sc0 sc1   // 000000001630: DE710000 ..."
        let Some((code, comment)) = line.split_once("//") else { continue };
        let code = code.trim();
        if code.is_empty() {
            continue;
        }
        let addr_text = comment.trim().split(':').next().unwrap_or("");
        let Ok(addr) = u64::from_str_radix(addr_text.trim(), 16) else { continue };
        let (mnemonic, operands) = match code.split_once(char::is_whitespace) {
            Some((m, o)) => (m.to_string(), o.trim().to_string()),
            None => (code.to_string(), String::new()),
        };
        funcs.get_mut(name).expect("current function").push(Insn { addr, mnemonic, operands });
    }
    funcs
}

fn parse_literal(s: &str) -> Option<i64> {
    let s = s.trim();
    let s = s.strip_prefix("lit(").and_then(|x| x.strip_suffix(')')).unwrap_or(s);
    if let Some(h) = s.strip_prefix("0x") {
        u32::from_str_radix(h, 16).ok().map(|v| v as i32 as i64)
    } else {
        s.parse::<i64>().ok()
    }
}

/// Address a `s_getpc_b64 / s_add_u32 / s_addc_u32 / s_swappc_b64` sequence
/// calls, if `i` is such a call.
fn call_target(insns: &[Insn], i: usize) -> Option<u64> {
    if insns[i].mnemonic != "s_swappc_b64" {
        return None;
    }
    let target_reg = insns[i].operands.split(',').nth(1)?.trim().to_string(); // "s[0:1]"
    let lo_reg = target_reg.trim_start_matches("s[").split(':').next()?.to_string(); // "0"
    let mut getpc_next = None;
    let mut offset = None;
    for j in (0..i).rev() {
        let ins = &insns[j];
        if ins.mnemonic == "s_add_u32" && offset.is_none() {
            let ops: Vec<&str> = ins.operands.split(',').map(str::trim).collect();
            if ops.first() == Some(&format!("s{lo_reg}").as_str()) {
                offset = ops.get(2).and_then(|v| parse_literal(v));
            }
        }
        if ins.mnemonic == "s_getpc_b64" && ins.operands.trim() == target_reg {
            getpc_next = Some(ins.addr + 4);
            break;
        }
    }
    Some((getpc_next? as i64 + offset?) as u64)
}

/// The kernel's instructions with every callee spliced in at its call.
pub fn flatten(funcs: &BTreeMap<String, Vec<Insn>>, name: &str) -> Vec<Insn> {
    fn go(funcs: &BTreeMap<String, Vec<Insn>>, name: &str, depth: u32, out: &mut Vec<Insn>) {
        let insns = &funcs[name];
        for i in 0..insns.len() {
            out.push(insns[i].clone());
            if depth >= 8 {
                continue;
            }
            if let Some(target) = call_target(insns, i) {
                let callee = funcs
                    .iter()
                    .find(|(_, v)| v.first().map(|f| f.addr) == Some(target))
                    .map(|(k, _)| k.clone());
                if let Some(callee) = callee {
                    go(funcs, &callee, depth + 1, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    go(funcs, name, 0, &mut out);
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Bits32,
    Bits64,
    Bits128,
    Other,
}

/// A global, flat or buffer store (scratch stores are reported separately).
pub fn store_kind(i: &Insn) -> Option<StoreKind> {
    let m = i.mnemonic.as_str();
    let is_store = (m.starts_with("flat_store_") || m.starts_with("global_store_") || m.starts_with("buffer_store_"))
        && !is_scratch(i);
    if !is_store {
        return None;
    }
    Some(match m.rsplit('_').next().unwrap_or("") {
        "dword" | "b32" => StoreKind::Bits32,
        "dwordx2" | "b64" => StoreKind::Bits64,
        "dwordx4" | "b128" => StoreKind::Bits128,
        _ => StoreKind::Other,
    })
}

/// Private-memory access: scratch_* instructions, or buffer accesses through
/// the scratch resource descriptor s[0:3] with an SGPR offset.
pub fn is_scratch(i: &Insn) -> bool {
    i.mnemonic.starts_with("scratch_")
        || (i.mnemonic.starts_with("buffer_") && i.operands.contains("s[0:3]"))
}

fn is_system_release_wb(arch: &str, i: &Insn) -> bool {
    if i.mnemonic != "buffer_wbl2" {
        return false;
    }
    match arch {
        // gfx90a: buffer_wbl2 is emitted only for system scope.
        "gfx90a" => true,
        // gfx942/gfx950: system scope is sc0 sc1 (agent scope is sc1 alone).
        _ => i.operands.contains("sc0") && i.operands.contains("sc1"),
    }
}

fn waits_vm0(i: &Insn) -> bool {
    i.mnemonic == "s_waitcnt" && (i.operands.contains("vmcnt(0)") || i.operands.trim() == "0")
}

/// A vector-memory access: global, flat, scratch or buffer instructions,
/// except the cache-maintenance ones (write-back, invalidate), which move no
/// data of their own.
pub fn is_vector_memory(i: &Insn) -> bool {
    let m = i.mnemonic.as_str();
    if m.starts_with("global_") || m.starts_with("flat_") || m.starts_with("scratch_") {
        return true;
    }
    m.starts_with("buffer_") && !(m == "buffer_wbl2" || m.starts_with("buffer_inv") || m.starts_with("buffer_wbinv"))
}

/// Every `buffer_wbl2` (any scope bits) must be followed by an
/// `s_waitcnt vmcnt(0)` before the next vector-memory access, or that access
/// may overtake the write-back. Linear reading, as for the doorbell rules.
pub fn check_writeback_waits(arch: &str, insns: &[Insn]) -> Result<(), String> {
    let mut pending: Option<&Insn> = None;
    for i in insns {
        if i.mnemonic == "buffer_wbl2" {
            pending.get_or_insert(i);
        } else if waits_vm0(i) {
            pending = None;
        } else if is_vector_memory(i) {
            if let Some(wb) = pending {
                return Err(format!(
                    "{arch}: write-back at offset {:#x} ({}) has no s_waitcnt vmcnt(0) before the next \
                     vector-memory access at offset {:#x} ({})",
                    wb.addr,
                    wb.text(),
                    i.addr,
                    i.text()
                ));
            }
        }
    }
    Ok(())
}

fn has_system_scope_bits(arch: &str, i: &Insn) -> bool {
    arch == "gfx90a" || (i.operands.contains("sc0") && i.operands.contains("sc1"))
}

/// Whether insns[from..to] hold a system-scope release: the write-back, then
/// a wait for vector memory to drain, with no store in between.
fn release_between(arch: &str, insns: &[Insn], from: usize, to: usize) -> bool {
    let mut seen_wb = false;
    for i in &insns[from..to] {
        if store_kind(i).is_some() {
            seen_wb = false;
        }
        if is_system_release_wb(arch, i) {
            seen_wb = true;
        } else if seen_wb && waits_vm0(i) {
            return true;
        }
    }
    false
}

/// Whether `s` is a VGPR pair `v[n:n+1]`.
fn is_vgpr_pair(s: &str) -> bool {
    let Some((a, b)) = s.strip_prefix("v[").and_then(|r| r.strip_suffix(']')).and_then(|r| r.split_once(':')) else {
        return false;
    };
    matches!((a.parse::<u32>(), b.parse::<u32>()), (Ok(a), Ok(b)) if b == a + 1)
}

/// The doorbell is one exact instruction, not any 64-bit store: what a
/// relaxed system-scope 64-bit atomic store (port.h, mmio_store64) compiles
/// to under the AMDGPU memory model. A flat (or global) `store_dwordx2` of a
/// VGPR pair through a VGPR-pair address, no offset, and exactly the
/// system-scope cache bits: none on gfx90a (the memory model adds none for a
/// relaxed store there), `sc0 sc1` on gfx942/gfx950; never `nt`, `glc`, `slc`.
pub fn doorbell_form_error(arch: &str, i: &Insn) -> Option<String> {
    let ops: Vec<&str> = i.operands.split([',', ' ']).filter(|t| !t.is_empty()).collect();
    let (addr_data, modifiers): (&[&str], &[&str]) = match i.mnemonic.as_str() {
        "flat_store_dwordx2" if ops.len() >= 2 => (&ops[..2], &ops[2..]),
        // The global form's third operand is the scalar base: `off` (none).
        "global_store_dwordx2" if ops.len() >= 3 && ops[2] == "off" => (&ops[..2], &ops[3..]),
        _ => return Some(format!("the doorbell must be flat_store_dwordx2 (or global_store_dwordx2 ..., off), not {}", i.text())),
    };
    if !addr_data.iter().all(|r| is_vgpr_pair(r)) {
        return Some(format!("the doorbell's address and data must be VGPR pairs: {}", i.text()));
    }
    let want: &[&str] = if arch == "gfx90a" { &[] } else { &["sc0", "sc1"] };
    let mut got = modifiers.to_vec();
    got.sort_unstable();
    if got != want {
        return Some(format!("doorbell store has cache bits {got:?}, a system-scope store on {arch} has exactly {want:?}: {}", i.text()));
    }
    None
}

#[derive(Debug)]
pub struct RingReport {
    pub doorbells: usize,
}

/// Whether a NIC family writes a doorbell record before its doorbell. mlx5
/// does (the NIC fetches WQEs up to the record's index, so the record is
/// released before the doorbell and the WQEs before the record); bnxt_re and
/// ionic do not: their doorbell carries the producer index itself
/// (docs/nic-families.md §2, §3), so the rule there is one release between
/// the last store before the doorbell (a WQE, the CQ doorbell of a poll, or
/// the agent-scope unlock of the credit lock) and the doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DoorbellRecord {
    Before,
    None,
}

/// The NIC family whose doorbell an ISA kernel rings: a family's own entry
/// points (`rust_gin_isa_db_rust_gin_{mlx5,bnxt,ionic}_*`,
/// device/src/isa_entry.hip) ring that family's; the GIN operations ring the
/// family of the code object (`gin_family`: the one family it was built for,
/// build/device.rs; "mixed" for a library built with several, whose
/// operations are checked by mlx5's rule).
pub fn doorbell_family<'a>(kernel: &str, gin_family: &'a str) -> &'a str {
    let entry = kernel.trim_start_matches("rust_gin_isa_db_").trim_start_matches("rust_gin_isa_nodb_");
    for f in ["mlx5", "bnxt", "ionic"] {
        if entry.starts_with(&format!("rust_gin_{f}_")) {
            return f;
        }
    }
    gin_family
}

/// Whether an ISA kernel's doorbell comes with a record (mlx5) or not
/// (bnxt_re, ionic), by its family (doorbell_family).
pub fn doorbell_record_of(kernel: &str, gin_family: &str) -> DoorbellRecord {
    match doorbell_family(kernel, gin_family) {
        "bnxt" | "ionic" => DoorbellRecord::None,
        _ => DoorbellRecord::Before,
    }
}

/// The doorbell rules of a family without a doorbell record: every 64-bit
/// store is a doorbell of the exact form, with a system-scope release
/// between the store before it and itself.
pub fn check_doorbell_rules_without_record(arch: &str, insns: &[Insn]) -> Result<RingReport, String> {
    let doorbells: Vec<usize> =
        (0..insns.len()).filter(|&k| store_kind(&insns[k]) == Some(StoreKind::Bits64)).collect();
    if doorbells.is_empty() {
        return Err("no single 64-bit doorbell store found (a split doorbell?)".into());
    }
    for &d in &doorbells {
        let db = &insns[d];
        if let Some(e) = doorbell_form_error(arch, db) {
            return Err(e);
        }
        let prev = (0..d).rev().find(|&k| store_kind(&insns[k]).is_some());
        let from = prev.map_or(0, |k| k + 1);
        if !release_between(arch, insns, from, d) {
            let what = prev.map_or("none".to_string(), |k| insns[k].text());
            return Err(format!(
                "no system-scope release between the last store before the doorbell ({what}) and the doorbell {}",
                db.text()
            ));
        }
    }
    Ok(RingReport { doorbells: doorbells.len() })
}

/// The doorbell rules of one kernel, by its family (doorbell_record_of).
pub fn check_doorbell_rules_for(arch: &str, kernel: &str, gin_family: &str, insns: &[Insn]) -> Result<RingReport, String> {
    match doorbell_record_of(kernel, gin_family) {
        DoorbellRecord::Before => check_doorbell_rules(arch, insns),
        DoorbellRecord::None => check_doorbell_rules_without_record(arch, insns),
    }
}

/// The doorbell rules for one entry point's instruction stream (mlx5: a
/// doorbell record before every doorbell).
pub fn check_doorbell_rules(arch: &str, insns: &[Insn]) -> Result<RingReport, String> {
    let doorbells: Vec<usize> = (0..insns.len())
        .filter(|&k| store_kind(&insns[k]) == Some(StoreKind::Bits64))
        .collect();
    if doorbells.is_empty() {
        let thirty_two: Vec<String> = insns
            .iter()
            .filter(|i| store_kind(i) == Some(StoreKind::Bits32))
            .map(Insn::text)
            .collect();
        return Err(format!(
            "no single 64-bit doorbell store found (a split doorbell?); 32-bit stores: {thirty_two:?}"
        ));
    }
    for &d in &doorbells {
        let db = &insns[d];
        if let Some(e) = doorbell_form_error(arch, db) {
            return Err(e);
        }
        let prev_store = (0..d).rev().find(|&k| store_kind(&insns[k]).is_some());
        let Some(dbr) = prev_store else {
            return Err(format!("doorbell {} has no doorbell-record store before it", db.text()));
        };
        if store_kind(&insns[dbr]) != Some(StoreKind::Bits32) {
            return Err(format!(
                "the store before doorbell {} is {}, not a 32-bit doorbell-record store",
                db.text(),
                insns[dbr].text()
            ));
        }
        if !has_system_scope_bits(arch, &insns[dbr]) {
            return Err(format!("doorbell-record store lacks system scope: {}", insns[dbr].text()));
        }
        if !release_between(arch, insns, dbr + 1, d) {
            return Err(format!(
                "no system-scope release (write-back, then s_waitcnt vmcnt(0)) between doorbell record {} and doorbell {}",
                insns[dbr].text(),
                db.text()
            ));
        }
        let before = (0..dbr).rev().find(|&k| store_kind(&insns[k]).is_some()).unwrap_or(0);
        let from = if store_kind(&insns[before]).is_some() { before + 1 } else { 0 };
        if !release_between(arch, insns, from, dbr) {
            return Err(format!(
                "no system-scope release between the last store before the doorbell record ({}) and the doorbell record {}",
                insns[before].text(),
                insns[dbr].text()
            ));
        }
    }
    Ok(RingReport { doorbells: doorbells.len() })
}

/// Fails if the stream touches private memory.
pub fn check_no_scratch_insns(insns: &[Insn]) -> Result<(), String> {
    match insns.iter().find(|i| is_scratch(i)) {
        Some(i) => Err(format!("scratch access: {}", i.text())),
        None => Ok(()),
    }
}

#[derive(Clone, Debug, Default)]
pub struct KernelMeta {
    pub name: String,
    pub vgpr_count: u32,
    pub sgpr_count: u32,
    pub agpr_count: u32,
    pub private_segment_fixed_size: u32,
    pub uses_dynamic_stack: bool,
    pub sgpr_spill_count: u32,
    pub vgpr_spill_count: u32,
}

/// The most VGPRs an ISA kernel may use (`.vgpr_count`, which for a kernel
/// that calls is the call graph's maximum). The GIN operations are inlined
/// into RCCL's kernels; 64 VGPRs keep 8 waves per SIMD on gfx90a/gfx942/gfx950
/// (512 VGPRs per lane per SIMD), so an operation never lowers the
/// occupancy of a kernel that does not need more registers itself.
pub const VGPR_BUDGET: u32 = 64;

/// Kernels allowed more than VGPR_BUDGET in the code object of one NIC
/// family (build/device.rs: "mlx5", "bnxt", "ionic"), each with the reason
/// and a measurement of why (docs/nic-families.md, "Register budgets"). None
/// today: bnxt_re's and ionic's flush (68) came under 64 when its WRITE was
/// built after its credit wait, ionic's put and get (67) when the CQ poll
/// computed a CQE's end once. Never add one without measuring why.
pub const VGPR_BUDGET_EXCEPTIONS: &[(&str, &str, u32)] = &[];

/// The VGPR budget of one kernel in the code object of `family`.
pub fn vgpr_budget(family: &str, kernel: &str) -> u32 {
    VGPR_BUDGET_EXCEPTIONS
        .iter()
        .find(|(f, k, _)| *f == family && *k == kernel)
        .map(|(_, _, b)| *b)
        .unwrap_or(VGPR_BUDGET)
}

/// Fails if a kernel's `.vgpr_count` exceeds `budget`.
pub fn check_vgpr_budget(arch: &str, k: &KernelMeta, budget: u32) -> Result<(), String> {
    if k.vgpr_count > budget {
        return Err(format!(
            "{}: over the VGPR budget on {arch}: uses {} VGPRs, budget {budget} (VGPR_BUDGET in tests/support/isa.rs)",
            k.name, k.vgpr_count
        ));
    }
    Ok(())
}

/// Kernel metadata from the code object's AMDGPU note.
pub fn kernel_metadata(readelf: &Path, hsaco: &Path) -> Vec<KernelMeta> {
    let out = Command::new(readelf)
        .arg("--notes")
        .arg(hsaco)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", readelf.display()));
    assert!(out.status.success(), "{} failed", readelf.display());
    parse_metadata(&String::from_utf8_lossy(&out.stdout))
}

pub fn parse_metadata(text: &str) -> Vec<KernelMeta> {
    let mut kernels = Vec::new();
    let mut cur: Option<KernelMeta> = None;
    for line in text.lines() {
        if line.starts_with("  - .") {
            if let Some(k) = cur.take() {
                kernels.push(k);
            }
            cur = Some(KernelMeta::default());
        }
        let Some(k) = cur.as_mut() else { continue };
        let t = line.trim_start_matches([' ', '-']);
        let Some((key, value)) = t.split_once(':') else { continue };
        let value = value.trim();
        let num = || value.parse::<u32>().unwrap_or(0);
        // Kernel-level keys sit at four spaces (or "  - " on the first line).
        let indent = line.len() - line.trim_start().len();
        if indent > 4 {
            continue;
        }
        match key {
            ".name" => k.name = value.to_string(),
            ".vgpr_count" => k.vgpr_count = num(),
            ".sgpr_count" => k.sgpr_count = num(),
            ".agpr_count" => k.agpr_count = num(),
            ".private_segment_fixed_size" => k.private_segment_fixed_size = num(),
            ".uses_dynamic_stack" => k.uses_dynamic_stack = value == "true",
            ".sgpr_spill_count" => k.sgpr_spill_count = num(),
            ".vgpr_spill_count" => k.vgpr_spill_count = num(),
            _ => {}
        }
    }
    if let Some(k) = cur {
        kernels.push(k);
    }
    kernels
}

/// Names of the `extern "C"` device entry points declared in a header:
/// declarations of the form `RG_EXTERN_C RG_DEV <type> rust_gin_<name>(`.
pub fn declared_entry_points(header_text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let joined = header_text.replace('\n', " ");
    for part in joined.split("RG_EXTERN_C RG_DEV").skip(1) {
        if let Some(open) = part.find('(') {
            if let Some(name) = part[..open].split_whitespace().last() {
                let name = name.trim_start_matches('*');
                if name.starts_with("rust_gin_") {
                    names.push(name.to_string());
                }
            }
        }
    }
    names
}
