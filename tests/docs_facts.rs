//! Facts the docs state about the code, read from the code (issue 27, item
//! 4): a number typed twice drifts (patches/README.md and
//! docs/building-rccl.md once named device ABI versions 1 and 2 while the
//! code was at 5). Each check is shown catching a planted stale fact.

#[path = "support/isa.rs"]
#[allow(dead_code)]
mod isa;

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `#define NAME <number>` in a C header.
fn define(text: &str, name: &str) -> u32 {
    let key = format!("#define {name} ");
    let line = text.lines().find(|l| l.trim_start().starts_with(&key)).unwrap_or_else(|| panic!("no {key}"));
    line.trim_start()[key.len()..].trim().parse().unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn abi_version() -> u32 {
    define(&read("device/include/rust_gin/abi/gin.h"), "RUST_GIN_DEVICE_ABI_VERSION")
}

/// The numbers that follow `marker` in `text` (as in "device ABI 7").
fn numbers_after(text: &str, marker: &str) -> Vec<u32> {
    text.match_indices(marker)
        .filter_map(|(i, _)| {
            let rest = &text[i + marker.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        })
        .collect()
}

/// Where a doc states the current device ABI version: (file, marker).
/// docs/architecture.md names versions in history ("Before device ABI 6"),
/// so it is held only to never naming one that does not exist yet.
const CURRENT_ABI: &[(&str, &str)] = &[
    ("patches/README.md", "the version the header was written for ("),
    ("docs/building-rccl.md", "(device ABI "),
];

fn abi_statements_wrong(current: u32, docs: &[(&str, String)]) -> Vec<String> {
    let mut wrong = vec![];
    for (file, text) in docs {
        if let Some((_, marker)) = CURRENT_ABI.iter().find(|(f, _)| f == file) {
            let found = numbers_after(text, marker);
            if found.is_empty() {
                wrong.push(format!("{file}: no statement {marker:?}<n> (the check reads nothing)"));
            }
            for n in found.into_iter().filter(|n| *n != current) {
                wrong.push(format!("{file}: {marker}{n}, the code is at {current}"));
            }
        }
        for n in numbers_after(text, "device ABI ").into_iter().filter(|n| *n > current) {
            wrong.push(format!("{file}: device ABI {n}, beyond the code's {current}"));
        }
    }
    wrong
}

fn abi_docs() -> Vec<(&'static str, String)> {
    ["patches/README.md", "docs/building-rccl.md", "docs/architecture.md", "docs/nic-families.md", "README.md"]
        .iter()
        .map(|f| (*f, read(f)))
        .collect()
}

#[test]
fn the_device_abi_version_the_docs_state_is_the_codes() {
    let current = abi_version();
    let wrong = abi_statements_wrong(current, &abi_docs());
    assert!(wrong.is_empty(), "stale device ABI versions:\n{}", wrong.join("\n"));
    // Patch 0004's header checks the same number at compile time.
    let patch = read("patches/0004-gin-device-dispatch-for-the-rust-gin-backend-type-8.patch");
    let stated = numbers_after(&patch, "+#define NCCL_GIN_RUST_DEVICE_ABI_VERSION ");
    assert_eq!(stated, vec![current], "patch 0004's NCCL_GIN_RUST_DEVICE_ABI_VERSION");
}

/// Planted: a doc one version behind, one ahead, and a statement removed.
#[test]
fn a_stale_device_abi_version_is_caught() {
    let current = abi_version();
    let docs = abi_docs();
    let plant = |file: &str, from: String, to: String| -> Vec<String> {
        let planted: Vec<(&str, String)> =
            docs.iter().map(|(f, t)| (*f, if *f == file { t.replacen(&from, &to, 1) } else { t.clone() })).collect();
        abi_statements_wrong(current, &planted)
    };
    let behind = plant("docs/building-rccl.md", format!("(device ABI {current})"), format!("(device ABI {})", current - 1));
    assert!(behind.iter().any(|w| w.contains("docs/building-rccl.md")), "{behind:?}");
    let ahead = plant("docs/architecture.md", "device ABI ".into(), format!("device ABI {} and ", current + 1));
    assert!(ahead.iter().any(|w| w.contains("beyond")), "{ahead:?}");
    let gone = plant("patches/README.md", "the version the header was written for (".into(), "the version (".into());
    assert!(gone.iter().any(|w| w.contains("reads nothing")), "{gone:?}");
}

/// docs/performance.md states the VGPR budget the ISA checks hold every
/// entry point to ("over N VGPRs (`VGPR_BUDGET`"): the constant's value.
fn budget_statements_wrong(doc: &str) -> Vec<String> {
    let found = numbers_after(doc, "fails any over ");
    if found.is_empty() {
        return vec!["docs/performance.md: no \"fails any over <n> VGPRs\" (the check reads nothing)".into()];
    }
    found
        .into_iter()
        .filter(|n| *n != isa::VGPR_BUDGET)
        .map(|n| format!("docs/performance.md: a budget of {n} VGPRs, VGPR_BUDGET is {}", isa::VGPR_BUDGET))
        .collect()
}

#[test]
fn the_vgpr_budget_the_docs_state_is_the_checks() {
    let doc = read("docs/performance.md");
    let wrong = budget_statements_wrong(&doc);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Planted: the budget as it once was in a draft.
    let planted = doc.replacen(&format!("fails any over {}", isa::VGPR_BUDGET), "fails any over 80", 1);
    assert!(!budget_statements_wrong(&planted).is_empty(), "a stale budget passed");
}
