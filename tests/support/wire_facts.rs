//! What the wire-format oracle tests share (wire_oracle.rs for mlx5,
//! wire_oracle_bnxt.rs, wire_oracle_ionic.rs): a fact of ours named after the
//! upstream fact it must equal, the comparison of two tables name by name,
//! the C++ tables the host-only layout files export, and the scans that find
//! every constant of a C++ header and of a Rust module (the closed-list
//! checks).

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::fmt::Debug;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// One of our facts, named after the upstream fact it must equal.
#[derive(Clone, Debug)]
pub struct Row {
    pub oracle: String,
    pub ours: String,
    pub value: u64,
}

impl Row {
    pub fn new(oracle: &str, ours: &str, value: u64) -> Row {
        Row { oracle: oracle.to_string(), ours: ours.replace(' ', ""), value }
    }
}

/// A Rust constant as a row: its path is its name.
macro_rules! rust_row {
    ($oracle:expr, $path:expr) => {
        Row::new($oracle, stringify!($path), $path as u64)
    };
}

/// A row of a C++ fact table (device/src/host_only/wire_layout*.cpp).
#[repr(C)]
pub struct CxxFact {
    pub oracle: *const c_char,
    pub ours: *const c_char,
    pub value: u64,
}

/// A row of a C oracle table (build/*_oracle.c).
#[repr(C)]
pub struct OracleFact {
    pub name: *const c_char,
    pub value: u64,
}

pub fn cstr(p: *const c_char) -> String {
    // SAFETY: the tables hold NUL-terminated string literals.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The rows of a C++ fact table.
///
/// # Safety
/// `base` points at `len` immutable rows whose strings are literals.
pub unsafe fn cxx_table(base: *const CxxFact, len: usize) -> Vec<Row> {
    (0..len)
        .map(|i| {
            let f = &*base.add(i);
            Row::new(&cstr(f.oracle), &cstr(f.ours), f.value)
        })
        .collect()
}

/// The (name, value) pairs of a C oracle table.
///
/// # Safety
/// `base` points at `len` immutable rows whose names are literals.
pub unsafe fn oracle_table(base: *const OracleFact, len: usize) -> Vec<(String, u64)> {
    (0..len)
        .map(|i| {
            let f = &*base.add(i);
            (cstr(f.name), f.value)
        })
        .collect()
}

/// Compares our facts with the oracle's, name by name. Reports every oracle
/// fact we lack, every fact of ours the oracle lacks (an unchecked value) and
/// every disagreement.
pub fn compare(oracle: &[(String, u64)], ours: &[Row], side: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let by_name: BTreeMap<&str, u64> = oracle.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    for (name, _) in oracle {
        if !ours.iter().any(|r| &r.oracle == name) {
            problems.push(format!("missing: {side} has no fact for oracle {name}"));
        }
    }
    for r in ours {
        match by_name.get(r.oracle.as_str()) {
            None => problems.push(format!("unchecked: {side} {} claims {}, which the oracle lacks", r.ours, r.oracle)),
            Some(&v) if v != r.value => problems
                .push(format!("mismatch: {side} {} = {:#x}, upstream {} = {:#x}", r.ours, r.value, r.oracle, v)),
            Some(_) => {}
        }
    }
    problems
}

/// Where `needle` (a field's bytes) sits in an encoded segment:
/// the offset the Rust encoder actually uses for that field.
pub fn measured_offset(encoded: &[u8], needle: &[u8]) -> u64 {
    let hits: Vec<usize> =
        (0..=encoded.len() - needle.len()).filter(|&i| &encoded[i..i + needle.len()] == needle).collect();
    assert_eq!(hits.len(), 1, "marker {needle:02x?} must occur once in {encoded:02x?}");
    hits[0] as u64
}

/// First byte the encoder leaves zero when every field is all ones: where a
/// trailing reserved field starts.
pub fn first_untouched(encoded: &[u8]) -> u64 {
    encoded.iter().position(|&b| b == 0).expect("a reserved field") as u64
}

pub fn assert_no_problems(problems: Vec<String>) {
    assert!(problems.is_empty(), "{} problem(s):\n  {}", problems.len(), problems.join("\n  "));
}

/// The comparison reports what it must on `ours`: a perturbed fact (each of
/// `victims`), a missing fact (`dropped`), an unchecked fact. Without this,
/// an empty problem list proves nothing.
pub fn assert_comparison_catches(oracle: &[(String, u64)], ours: &[Row], side: &str, victims: &[&str], dropped: &str) {
    assert_no_problems(compare(oracle, ours, side));
    for victim in victims {
        let mut perturbed = oracle.to_vec();
        perturbed.iter_mut().find(|(n, _)| n == victim).unwrap().1 += 1;
        let problems = compare(&perturbed, ours, side);
        assert!(
            !problems.is_empty() && problems.iter().all(|p| p.starts_with("mismatch") && p.contains(victim)),
            "perturbing {victim} must be reported as a mismatch on {side}: {problems:?}"
        );
    }
    let mut lacking = ours.to_vec();
    lacking.retain(|r| r.oracle != dropped);
    let problems = compare(oracle, &lacking, side);
    assert!(
        problems.len() == 1 && problems[0].starts_with("missing") && problems[0].contains(dropped),
        "{side}: {problems:?}"
    );
    let mut extra = ours.to_vec();
    extra.push(Row::new("FROBNICATE", "OP_FROBNICATE", 0x42));
    let problems = compare(oracle, &extra, side);
    assert!(
        problems.len() == 1 && problems[0].starts_with("unchecked") && problems[0].contains("FROBNICATE"),
        "{side}: {problems:?}"
    );
}

/// Names of the enumerators of every enum in a C++ header.
pub fn cxx_enumerators(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth_in_enum = false;
    for raw in src.lines() {
        let line = raw.split("//").next().unwrap().trim();
        if !depth_in_enum {
            if line.starts_with("enum") && line.contains('{') {
                depth_in_enum = true;
                let body = line.split_once('{').unwrap().1;
                if let Some((inner, _)) = body.split_once('}') {
                    out.extend(enumerators_of(inner));
                    depth_in_enum = false;
                } else {
                    out.extend(enumerators_of(body));
                }
            }
            continue;
        }
        if let Some((inner, _)) = line.split_once('}') {
            out.extend(enumerators_of(inner));
            depth_in_enum = false;
        } else {
            out.extend(enumerators_of(line));
        }
    }
    out
}

fn enumerators_of(s: &str) -> Vec<String> {
    s.split(',')
        .filter_map(|item| {
            let name: String = item.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// `pub const` names of a Rust module file, qualified by their inline module.
pub fn rust_consts(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut module: Option<String> = None;
    for line in src.lines() {
        if let Some(rest) = line.strip_prefix("pub mod ") {
            if let Some(name) = rest.strip_suffix(" {") {
                module = Some(name.trim().to_string());
            }
            continue;
        }
        if line == "}" {
            module = None;
            continue;
        }
        if let Some(rest) = line.trim_start().strip_prefix("pub const ") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            out.push(match &module {
                Some(m) => format!("{m}::{name}"),
                None => name,
            });
        }
    }
    out
}

/// The closed list: every enumerator of a C++ header is some row's `ours`,
/// and every `pub const` of a Rust file is some row's `ours` or one of
/// `rust_elsewhere` (derived values checked by the test itself).
pub fn assert_every_constant_is_checked(
    header: &str,
    twin: &str,
    cxx: &[Row],
    rust: &[Row],
    rust_elsewhere: &[&str],
    min_each: usize,
) {
    let root = env!("CARGO_MANIFEST_DIR");
    let h = std::fs::read_to_string(format!("{root}/{header}")).unwrap();
    let rs = std::fs::read_to_string(format!("{root}/{twin}")).unwrap();
    let enumerators = cxx_enumerators(&h);
    assert!(enumerators.len() > min_each, "parsed only {} enumerators from {header}", enumerators.len());
    let consts = rust_consts(&rs);
    assert!(consts.len() > min_each, "parsed only {} constants from {twin}", consts.len());
    let mut unchecked: Vec<String> = enumerators
        .iter()
        .filter(|e| !cxx.iter().any(|r| &r.ours == *e))
        .map(|e| format!("{header} {e}"))
        .collect();
    unchecked.extend(
        consts
            .iter()
            .filter(|c| !rust.iter().any(|r| &r.ours == *c) && !rust_elsewhere.contains(&c.as_str()))
            .map(|c| format!("{twin} {c}")),
    );
    assert!(unchecked.is_empty(), "constants compared with no upstream fact:\n  {}", unchecked.join("\n  "));
}

/// The work requests the device library posts, for the whole-WQE checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Write,
    WriteImm,
    Read,
    WriteInline,
    FetchAdd,
    CmpSwap,
}

pub fn kind_strategy() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Write),
        Just(Kind::WriteImm),
        Just(Kind::Read),
        Just(Kind::WriteInline),
        Just(Kind::FetchAdd),
        Just(Kind::CmpSwap),
    ]
}

/// An ibv_send_wr, reduced to what the device library posts; each family's
/// test adds the queue state its posting code reads.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub kind: Kind,
    pub signaled: bool,
    pub fence: bool,
    pub raddr: u64,
    pub rkey: u32,
    pub laddr: u64,
    pub lkey: u32,
    /// Payload bytes (1..=8 for an inline WRITE).
    pub length: u32,
    /// ibv's imm_data: big-endian storage.
    pub imm_data: u32,
    /// wr.atomic.compare_add (the add value of FA) and wr.atomic.swap.
    pub compare_add: u64,
    pub swap: u64,
    /// An inline WRITE's payload: its first `length` bytes in memory order.
    pub inline_value: u64,
}

impl Request {
    /// A signalled request of `kind` with distinct, recognisable fields.
    pub fn example(kind: Kind) -> Request {
        Request {
            kind,
            signaled: true,
            fence: false,
            raddr: 0x1122_3344_5566_7788,
            rkey: 0xdead_beef,
            laddr: 0x99aa_bbcc_ddee_ff00,
            lkey: 0x0bad_f00d,
            length: if kind == Kind::WriteInline { 8 } else { 4096 },
            imm_data: 0x0102_0304,
            compare_add: 0x0a0b_0c0d_0e0f_1011,
            swap: 0x2122_2324_2526_2728,
            inline_value: 0x3132_3334_3536_3738,
        }
    }
}

pub fn request_strategy() -> impl Strategy<Value = Request> {
    (
        kind_strategy(),
        any::<(bool, bool)>(),
        any::<(u64, u32, u64, u32)>(),
        (0u32..=(1 << 20), 1u32..=8),
        any::<(u32, u64, u64, u64)>(),
    )
        .prop_map(|(kind, (signaled, fence), (raddr, rkey, laddr, lkey), (len, ilen), (imm, ca, sw, iv))| Request {
            kind,
            signaled,
            fence,
            raddr,
            rkey,
            laddr,
            lkey,
            length: if kind == Kind::WriteInline { ilen } else { len },
            imm_data: imm,
            compare_add: ca,
            swap: sw,
            inline_value: iv,
        })
}

/// 512 cases from a fixed seed: the same requests on every run.
pub fn runner() -> TestRunner {
    TestRunner::new_with_rng(Config { cases: 512, ..Config::default() }, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

/// For every generated request, each of our descriptions' bytes (named)
/// equals the bytes upstream's code builds.
pub fn assert_each_matches_reference<W: Debug + Clone, B: PartialEq + Debug>(
    requests: impl Strategy<Value = W>,
    reference: impl Fn(&W) -> B,
    ours: impl Fn(&W) -> Vec<(&'static str, B)>,
) {
    runner()
        .run(&requests, |wr| {
            let expect = reference(&wr);
            for (who, bytes) in ours(&wr) {
                prop_assert_eq!(&bytes, &expect, "{} vs upstream for {:?}", who, wr);
            }
            Ok(())
        })
        .unwrap();
}
