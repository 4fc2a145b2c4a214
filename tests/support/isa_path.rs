//! The instruction-path counter: what a wave issues on the common path of a
//! GIN operation, read from the per-architecture code objects
//! (docs/performance.md, "ISA path"), and the rule on loads of memory the
//! NIC writes.
//!
//! The code objects carry line tables (build/device.rs; .text is the same
//! byte for byte without them), so every instruction has its inlined call
//! chain: function names and source lines. A path is specified in those
//! terms, never by addresses:
//!
//! - `steps`: what the operation must do on this path (the data post, the
//!   ticket, the doorbell store ...): a function name (`fn:reserve`) or a
//!   marker, a source line tagged `// isa-path: <name>` in device/ (on a
//!   comment-only line it tags the next line);
//! - `cold`: what the common path never runs: error records, timeout checks,
//!   back-off, CQ polls, the DC branch, and whatever the variant excludes.
//!
//! The counter builds the kernel's control-flow graph, drops the back edges
//! (every loop runs once: each wait's first test succeeds), drops the blocks
//! with cold instructions, and takes the shortest route from the entry to
//! `s_endpgm` through blocks that cover every step. Shortest, because a
//! branch both of whose sides are neither cold nor a step is one the common
//! path need not take (a region no lane enters is skipped by
//! `s_cbranch_execz`). The count is that route's instructions, each issued
//! once by the wave.

use crate::isa::Insn;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

/// One frame of an instruction's inlined call chain: the function and the
/// source position in it (the innermost frame first).
#[derive(Clone, Debug)]
pub struct Frame {
    pub func: String,
    pub file: String,
    pub line: u32,
}

/// Short function name without template arguments: "put_on<...>" → "put_on".
fn base_name(f: &str) -> &str {
    f.split('<').next().unwrap_or(f).trim()
}

/// Each address's inlined call chain, from llvm-symbolizer.
pub fn inline_stacks(symbolizer: &Path, hsaco: &Path, addrs: &[u64]) -> Result<HashMap<u64, Vec<Frame>>, String> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut child = Command::new(symbolizer)
        .arg("--inlining")
        .arg("--functions=short")
        .arg(format!("--obj={}", hsaco.display()))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", symbolizer.display()))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(input.as_bytes()).map_err(|e| format!("llvm-symbolizer stdin: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("llvm-symbolizer: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let blocks: Vec<&str> = text.trim_end_matches('\n').split("\n\n").collect();
    if blocks.len() != addrs.len() {
        return Err(format!("llvm-symbolizer answered {} of {} addresses", blocks.len(), addrs.len()));
    }
    let mut map = HashMap::new();
    for (a, b) in addrs.iter().zip(blocks) {
        let lines: Vec<&str> = b.lines().collect();
        let frames = lines
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| {
                // "/path/file.h:148:10"
                let mut parts = c[1].rsplitn(3, ':');
                let _col = parts.next();
                let line = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
                let file = parts.next().unwrap_or("").to_string();
                Frame { func: base_name(c[0]).to_string(), file, line }
            })
            .collect();
        map.insert(*a, frames);
    }
    if map.values().all(|f: &Vec<Frame>| f.iter().all(|fr| fr.line == 0)) {
        return Err(format!("{} has no line tables (built without -gline-tables-only?)", hsaco.display()));
    }
    Ok(map)
}

/// Every readable text file under `dirs`: (path relative to `root`, text).
fn source_files(root: &Path, dirs: &[&str]) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut stack: Vec<std::path::PathBuf> = dirs.iter().map(|d| root.join(d)).collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display())) {
                stack.push(e.expect("dir entry").path());
            }
        } else if let Ok(text) = std::fs::read_to_string(&p) {
            out.push((p.strip_prefix(root).unwrap_or(&p).display().to_string(), text));
        }
    }
    out
}

/// The `// isa-path: <name>` markers under `dir`: name → (path relative to
/// the repository, line).
pub fn markers(root: &Path, dirs: &[&str]) -> BTreeMap<String, (String, u32)> {
    let mut out = BTreeMap::new();
    for (rel, text) in source_files(root, dirs) {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let Some((code, tag)) = l.split_once("// isa-path: ") else { continue };
            let name = tag.trim().to_string();
            // A tag alone on its line names the next line.
            let line = if code.trim().is_empty() { i + 2 } else { i + 1 };
            let prev = out.insert(name.clone(), (rel.clone(), line as u32));
            assert!(prev.is_none(), "isa-path marker {name:?} appears twice");
        }
    }
    out
}

/// A common path: the kernel, what it must do, and what it never runs.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The operation, as the report names it.
    pub op: &'static str,
    pub kernel: &'static str,
    /// Steps: "fn:<function>" or a marker name.
    pub steps: Vec<&'static str>,
    /// Cold: "fn:<function>" or a marker name, besides COLD.
    pub cold: Vec<&'static str>,
}

/// Never on any common path: errors, timeouts, retries and error CQEs.
pub const COLD: &[&str] = &[
    "fn:record_error",
    "fn:invalid",
    "fn:fail_wait",
    "fn:check", // Bound::check: runs only once a wait's first test failed
    "fn:backoff",
    "fn:on_error_cqe",
    "fn:cqe_error",
    "dc",
];

/// The posting steps every put-like operation has on the shared queue.
const POST: &[&str] = &["fn:reserve", "fn:store_seg", "fn:release", "fn:mmio_store64"];

/// The same on a queue the caller owns (rust_gin_put_exclusive), where
/// the shared protocol's steps are cold.
const POST_EXCLUSIVE: &[&str] =
    &["fn:reserve_exclusive", "fn:store_seg", "fn:release_exclusive", "fn:mmio_store64"];
const SHARED_ONLY: &[&str] = &["fn:reserve", "fn:wait_turn", "fn:publish"];

/// Steps or cold entries that differ from the first-pass put: a queue's
/// first pass needs no credit (`reusable` is not read); once the ring has
/// wrapped, each post reads it.
fn spec(op: &'static str, kernel: &'static str, steps: &[&'static str], cold: &[&'static str]) -> Spec {
    let mut s: Vec<&'static str> = POST.to_vec();
    s.extend_from_slice(steps);
    Spec { op, kernel, steps: s, cold: cold.to_vec() }
}

/// The same operation on an exclusive queue.
fn exclusive(op: &'static str, shared: &Spec) -> Spec {
    let mut steps: Vec<&'static str> = POST_EXCLUSIVE.to_vec();
    steps.extend(shared.steps.iter().filter(|s| !POST.contains(s)));
    let mut cold = shared.cold.clone();
    cold.extend_from_slice(SHARED_ONLY);
    let kernel = match shared.kernel {
        "rust_gin_isa_db_rccl_put_shared" => "rust_gin_isa_db_rccl_put_exclusive",
        "rust_gin_isa_db_rust_gin_signal_peer" => "rust_gin_isa_db_rust_gin_signal_peer_exclusive",
        "rust_gin_isa_db_rust_gin_put_value" => "rust_gin_isa_db_rust_gin_put_value_exclusive",
        "rust_gin_isa_db_rust_gin_get" => "rust_gin_isa_db_rust_gin_get_exclusive",
        k => k,
    };
    Spec { op, kernel, steps, cold }
}

/// The operations the report covers (mlx5 RC, the shared queue protocol).
pub fn specs() -> Vec<Spec> {
    // The put as RCCL compiles it: constant flags (isa_entry.hip), one
    // kernel per sharing mode.
    const PUT: &str = "rust_gin_isa_db_rccl_put_shared";
    // Off every put's common path: no counter, no chunk loop.
    let put_cold = ["put.big", "fn:note_counter", "fn:credit_counters", "fn:poll"];
    let mut v = vec![
        spec(
            "put 8 B",
            PUT,
            &["put.dst", "put.src", "put.data"],
            &[&put_cold[..], &["put.signal", "fn:signal_wqe", "fn:reusable"]].concat(),
        ),
        spec(
            "put 8 B, ring wrapped",
            PUT,
            &["put.dst", "put.src", "put.data", "fn:reusable"],
            &[&put_cold[..], &["put.signal", "fn:signal_wqe"]].concat(),
        ),
        spec(
            "put 8 B + signal",
            PUT,
            &["put.dst", "put.src", "put.data", "put.signal", "fn:signal_wqe"],
            &[&put_cold[..], &["fn:reusable", "fn:fold_signal"]].concat(),
        ),
        spec(
            "signal",
            "rust_gin_isa_db_rust_gin_signal_peer",
            &["signal.post", "fn:signal_wqe"],
            &["fn:note_counter", "fn:credit_counters", "fn:poll", "fn:reusable"],
        ),
        spec(
            "put_value 8 B",
            "rust_gin_isa_db_rust_gin_put_value",
            &["put_value.dst", "put_value.data"],
            &["put_value.signal", "fn:signal_wqe", "fn:poll", "fn:reusable"],
        ),
        spec(
            "get 8 B",
            "rust_gin_isa_db_rust_gin_get",
            &["get.remote", "get.local", "get.post", "fn:note_read"],
            &["get.big", "fn:poll", "fn:reusable"],
        ),
    ];
    let more = [
        exclusive("put 8 B, exclusive", &v[0]),
        exclusive("put 8 B + signal, exclusive", &v[2]),
        exclusive("signal, exclusive", &v[3]),
        exclusive("put_value 8 B, exclusive", &v[4]),
        exclusive("get 8 B, exclusive", &v[5]),
    ];
    v.extend(more);
    v
}

/// Target of a branch: the signed 16-bit word offset after the instruction.
pub fn branch_target(i: &Insn) -> Option<u64> {
    if i.mnemonic != "s_branch" && !i.mnemonic.starts_with("s_cbranch_") {
        return None;
    }
    let imm: i64 = i.operands.split_whitespace().next()?.parse().ok()?;
    let simm = imm as u16 as i16 as i64;
    Some((i.addr as i64 + 4 + simm * 4) as u64)
}

/// What the wave issues along a path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub insns: usize,
    /// Atomic read-modify-writes (flat, global, buffer), and how many return.
    pub atomics: usize,
    pub returning: usize,
    /// System-scope L2 write-backs (`buffer_wbl2`, with `sc0 sc1` on
    /// gfx942/gfx950) and invalidates (`buffer_inv`, `buffer_invl2`, `buffer_wbinvl1`).
    pub writebacks: usize,
    pub invalidates: usize,
    pub waitcnts: usize,
    /// 64-bit stores (the doorbell; the device code's only plain 64-bit store)
    /// and 128-bit stores (WQE segments).
    pub doorbells: usize,
    pub wqe_stores: usize,
}

fn is_atomic(m: &str) -> bool {
    (m.starts_with("flat_atomic_") || m.starts_with("global_atomic_") || m.starts_with("buffer_atomic_"))
        && !m.starts_with("buffer_atomic_fence")
}

/// Whether an atomic returns its old value (gfx90a `glc`, gfx94x/95x `sc0`).
fn returns(arch: &str, i: &Insn) -> bool {
    let bit = if arch == "gfx90a" { "glc" } else { "sc0" };
    i.operands.split_whitespace().any(|w| w == bit)
}

pub fn counts(arch: &str, path: &[Insn]) -> Counts {
    let mut c = Counts { insns: path.len(), ..Counts::default() };
    for i in path {
        let m = i.mnemonic.as_str();
        if is_atomic(m) {
            c.atomics += 1;
            c.returning += returns(arch, i) as usize;
        }
        if m == "buffer_wbl2" && (arch == "gfx90a" || i.operands.contains("sc0 sc1")) {
            c.writebacks += 1;
        }
        if m == "buffer_inv" || m == "buffer_invl2" || m.starts_with("buffer_wbinvl1") {
            c.invalidates += 1;
        }
        if m == "s_waitcnt" {
            c.waitcnts += 1;
        }
        match crate::isa::store_kind(i) {
            Some(crate::isa::StoreKind::Bits64) => c.doorbells += 1,
            Some(crate::isa::StoreKind::Bits128) => c.wqe_stores += 1,
            _ => {}
        }
    }
    c
}

/// Where a path's instructions come from: argument checks, the shared
/// queue's protocol (ticket, credit, turn, publish, ring lock), the WQE
/// writes, the doorbell sequence, and the rest (entry, wave scaffolding,
/// request building). Each instruction goes to the first category whose
/// function is in its inlined call chain, innermost first.
pub fn breakdown(path: &[Insn], stacks: &HashMap<u64, Vec<Frame>>) -> BTreeMap<&'static str, usize> {
    const CATS: &[(&str, &[&str])] = &[
        ("doorbell", &["mmio_store64", "dbr_store32", "fence_release_system"]),
        ("wqe", &["write", "emit_wqe", "store_seg"]),
        ("checks", &["resolve", "peer_ok", "window_ok", "signal_ok", "connected", "bad", "record"]),
        ("protocol", &["reserve", "wait_credit", "wait_turn", "publish", "release", "ring", "end_wants_cqe", "failed"]),
    ];
    let mut out = BTreeMap::new();
    for i in path {
        if is_spill(i) {
            *out.entry("sgpr spill").or_default() += 1;
            continue;
        }
        let frames = stacks.get(&i.addr).map(Vec::as_slice).unwrap_or(&[]);
        let cat = frames
            .iter()
            .find_map(|f| CATS.iter().find(|(_, fs)| fs.contains(&f.func.as_str())).map(|(c, _)| *c))
            .unwrap_or("other");
        *out.entry(cat).or_default() += 1;
    }
    out
}

/// An SGPR spill or reload through a VGPR lane: `v_writelane_b32 vN, sM, K`
/// or `v_readlane_b32 sM, vN, K` with a constant lane K (the wave layer's
/// readlanes name their lane in an SGPR).
pub fn is_spill(i: &Insn) -> bool {
    (i.mnemonic == "v_writelane_b32" || i.mnemonic == "v_readlane_b32")
        && i.operands.rsplit(',').next().is_some_and(|l| l.trim().parse::<u32>().is_ok())
}

/// The innermost functions of a path's uncategorised instructions (not
/// spills, not in breakdown's categories), most first: where "other" goes.
pub fn other_functions(path: &[Insn], stacks: &HashMap<u64, Vec<Frame>>, n: usize) -> Vec<(String, usize)> {
    let mut by: HashMap<String, usize> = HashMap::new();
    for i in path.iter().filter(|i| !is_spill(i)) {
        let frames = stacks.get(&i.addr).map(Vec::as_slice).unwrap_or(&[]);
        let f = frames.first().map_or("?".to_string(), |f| f.func.clone());
        *by.entry(f).or_default() += 1;
    }
    let mut v: Vec<(String, usize)> = by.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// Whether `frames` match the entry `e` ("fn:<name>" or a marker).
fn matches(e: &str, frames: &[Frame], marks: &BTreeMap<String, (String, u32)>) -> Result<bool, String> {
    if let Some(f) = e.strip_prefix("fn:") {
        return Ok(frames.iter().any(|fr| fr.func == f));
    }
    let (file, line) = marks.get(e).ok_or_else(|| format!("no `// isa-path: {e}` marker in device/"))?;
    Ok(frames.iter().any(|fr| fr.line == *line && fr.file.ends_with(file.as_str())))
}

/// The common path of `spec` through `insns` (one kernel, no calls).
pub fn common_path(
    insns: &[Insn],
    stacks: &HashMap<u64, Vec<Frame>>,
    spec: &Spec,
    marks: &BTreeMap<String, (String, u32)>,
) -> Result<Vec<Insn>, String> {
    if let Some(c) = insns.iter().find(|i| i.mnemonic == "s_swappc_b64" || i.mnemonic == "s_setpc_b64") {
        return Err(format!("{}: a call ({}); the counter reads inlined code only", spec.kernel, c.text()));
    }
    let index: HashMap<u64, usize> = insns.iter().enumerate().map(|(k, i)| (i.addr, k)).collect();
    // Basic blocks.
    let mut leader = vec![false; insns.len() + 1];
    leader[0] = true;
    for (k, i) in insns.iter().enumerate() {
        if let Some(t) = branch_target(i) {
            let tk = *index.get(&t).ok_or_else(|| format!("branch out of the kernel: {}", i.text()))?;
            leader[tk] = true;
            leader[k + 1] = true;
        }
        if i.mnemonic == "s_endpgm" {
            leader[k + 1] = true;
        }
    }
    let starts: Vec<usize> = (0..insns.len()).filter(|&k| leader[k]).collect();
    let block_of: HashMap<usize, usize> = starts.iter().enumerate().map(|(b, &s)| (s, b)).collect();
    let ranges: Vec<(usize, usize)> =
        starts.iter().enumerate().map(|(b, &s)| (s, starts.get(b + 1).copied().unwrap_or(insns.len()))).collect();
    let n = ranges.len();
    let mut succ = vec![Vec::new(); n];
    for (b, &(_, e)) in ranges.iter().enumerate() {
        let last = &insns[e - 1];
        let target = branch_target(last).map(|t| block_of[&index[&t]]);
        match (last.mnemonic.as_str(), target) {
            ("s_endpgm", _) => {}
            ("s_branch", Some(t)) => succ[b].push(t),
            (_, Some(t)) => {
                if b + 1 < n {
                    succ[b].push(b + 1);
                }
                succ[b].push(t);
            }
            _ => {
                if b + 1 < n {
                    succ[b].push(b + 1);
                }
            }
        }
    }
    // Back edges (iterative DFS) and a topological order of what remains.
    let mut state = vec![0u8; n];
    let mut back = std::collections::HashSet::new();
    let mut order = Vec::with_capacity(n);
    let mut stack = vec![(0usize, 0usize)];
    state[0] = 1;
    while let Some(&mut (u, ref mut k)) = stack.last_mut() {
        if *k < succ[u].len() {
            let v = succ[u][*k];
            *k += 1;
            match state[v] {
                0 => {
                    state[v] = 1;
                    stack.push((v, 0));
                }
                1 => {
                    back.insert((u, v));
                }
                _ => {}
            }
        } else {
            state[u] = 2;
            order.push(u);
            stack.pop();
        }
    }
    order.reverse();
    // Cold blocks and the steps each block covers.
    let cold: Vec<&str> = COLD.iter().copied().chain(spec.cold.iter().copied()).collect();
    let mut is_cold = vec![false; n];
    let mut covers = vec![0u32; n];
    assert!(spec.steps.len() <= 16, "at most 16 steps");
    for (b, &(s, e)) in ranges.iter().enumerate() {
        for i in &insns[s..e] {
            let frames = stacks.get(&i.addr).map(Vec::as_slice).unwrap_or(&[]);
            for c in &cold {
                if matches(c, frames, marks)? {
                    is_cold[b] = true;
                }
            }
            for (k, st) in spec.steps.iter().enumerate() {
                if matches(st, frames, marks)? {
                    covers[b] |= 1 << k;
                }
            }
        }
    }
    for (k, st) in spec.steps.iter().enumerate() {
        if !covers.iter().any(|c| c & (1 << k) != 0) {
            return Err(format!("{}: step {st:?} is nowhere in {}", spec.op, spec.kernel));
        }
    }
    // Shortest route over (block, steps covered).
    let full = (1u32 << spec.steps.len()) - 1;
    let len = |b: usize| ranges[b].1 - ranges[b].0;
    let mut best: HashMap<(usize, u32), (usize, Option<(usize, u32)>)> = HashMap::new();
    if is_cold[0] {
        return Err(format!("{}: the entry block is cold", spec.op));
    }
    best.insert((0, covers[0]), (len(0), None));
    for &u in &order {
        let masks: Vec<(u32, usize)> =
            best.iter().filter(|((b, _), _)| *b == u).map(|((_, m), (c, _))| (*m, *c)).collect();
        for (m, c) in masks {
            for &v in &succ[u] {
                if back.contains(&(u, v)) || is_cold[v] {
                    continue;
                }
                let nm = m | covers[v];
                let nc = c + len(v);
                if best.get(&(v, nm)).is_none_or(|(bc, _)| nc < *bc) {
                    best.insert((v, nm), (nc, Some((u, m))));
                }
            }
        }
    }
    let end = (0..n)
        .filter(|&b| insns[ranges[b].1 - 1].mnemonic == "s_endpgm")
        .filter_map(|b| best.get(&(b, full)).map(|(c, _)| (*c, b)))
        .min()
        .ok_or_else(|| format!("{}: no route from the entry to s_endpgm covers every step", spec.op))?;
    let mut blocks = vec![];
    let mut key = Some((end.1, full));
    while let Some(k) = key {
        blocks.push(k.0);
        key = best[&k].1;
    }
    blocks.reverse();
    Ok(blocks.iter().flat_map(|&b| insns[ranges[b].0..ranges[b].1].iter().cloned()).collect())
}

/// Functions that read memory the NIC (or the host) writes. In them no
/// vector load may be a plain one: the compiler may hoist a plain load out
/// of a poll loop, and the CU's cache may serve a stale line.
pub const NIC_READERS: &[&str] = &[
    "cqe_next",
    "cqe_end",
    "cqe_error",
    "fold_signal",
    "wait_word",
    "rust_gin_signal_read",
    "rust_gin_signal_reset",
];

/// Every source line in `dirs` that calls `atomic_load(` with
/// `Scope::system` (the call may span three lines): (path, line).
pub fn system_load_sites(root: &Path, dirs: &[&str]) -> Vec<(String, u32)> {
    let mut out = vec![];
    for (rel, text) in source_files(root, dirs) {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if !l.contains("atomic_load(") || l.trim_start().starts_with("//") {
                continue;
            }
            let call: String = lines[i..(i + 3).min(lines.len())].concat();
            let call = &call[call.find("atomic_load(").unwrap_or(0)..];
            let end = call.find(';').unwrap_or(call.len());
            if call[..end].contains("Scope::system") {
                out.push((rel.clone(), i as u32 + 1));
            }
        }
    }
    out
}

/// Frames a NIC reader's own loads pass through: the port's load and byte
/// helpers and a wait's spin loop and lambda.
const PASS_THROUGH: &[&str] =
    &["atomic_load", "load_invariant", "bswap16", "bswap32", "bswap64", "word", "rd", "operator()", "spin"];

pub fn is_vector_load(i: &Insn) -> bool {
    let m = i.mnemonic.as_str();
    m.starts_with("global_load_") || m.starts_with("flat_load_") || m.starts_with("buffer_load_")
}

/// The cache-policy bits a load of NIC-written memory carries on `arch`: a
/// relaxed system-scope atomic load (AMDGPUUsage memory model: gfx90a
/// `glc`, the same bit as agent scope; gfx942/gfx950 `sc0 sc1`, where agent
/// scope is `sc1` alone).
pub fn system_load_bits(arch: &str) -> &'static [&'static str] {
    if arch == "gfx90a" {
        &["glc"]
    } else {
        &["sc0", "sc1"]
    }
}

/// Loads of NIC-written memory that lack the system-scope form: any vector
/// load inlined from a NIC reader (NIC_READERS) that is plain (no cache
/// bits), and any load at a site the device code marks `isa-path: nic-load*`
/// without the system-scope bits. Returns the offending instructions.
pub fn nic_load_violations(
    arch: &str,
    insns: &[Insn],
    stacks: &HashMap<u64, Vec<Frame>>,
    sites: &[(String, u32)],
) -> Vec<String> {
    let want = system_load_bits(arch);
    let mut bad = vec![];
    for i in insns.iter().filter(|i| is_vector_load(i)) {
        let frames = stacks.get(&i.addr).map(Vec::as_slice).unwrap_or(&[]);
        let words: Vec<&str> = i.operands.split_whitespace().collect();
        let plain = !words.iter().any(|w| matches!(*w, "glc" | "sc0" | "sc1" | "nt"));
        // The reader's own code: the innermost frame that is not a port
        // helper or a wait's lambda. A descriptor read (load_invariant)
        // is plain by design: the host wrote it before the launch.
        let own = frames.iter().find(|f| !PASS_THROUGH.contains(&f.func.as_str()));
        let invariant = frames.first().is_some_and(|f| f.func == "load_invariant");
        let in_reader = own.filter(|f| NIC_READERS.contains(&f.func.as_str()) && !invariant);
        let at_site = frames.iter().any(|f| sites.iter().any(|(file, line)| f.line == *line && f.file.ends_with(file.as_str())));
        if let Some(r) = in_reader.filter(|_| plain) {
            bad.push(format!("plain load in {} ({}:{}): {}", r.func, r.file, r.line, i.text()));
        } else if at_site && !want.iter().all(|b| words.contains(b)) {
            let f = &frames[0];
            bad.push(format!("NIC-written load without {want:?} ({}:{}): {}", f.file, f.line, i.text()));
        }
    }
    bad
}
