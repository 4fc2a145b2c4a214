//! Firmware and ABI gates (issue 26, item 2): what a family's device policy
//! depends on, read from the NIC and checked before a queue is made, so that
//! a mismatch is one WARN line naming it (the vtable boundary writes the
//! error returned here) instead of WQEs the NIC reads as something else.
//! docs/nic-families.md, "Firmware and ABI gates", says what each reads and
//! what is unverified on hardware.
//!
//! It lives in nic/, below the configuration (RCCL_RUST_GIN_FW_CHECK), the
//! emulated NIC (which gates its ionic ABI the same way) and the providers.
//!
//! - ionic: the firmware WQE ABI version (the alloc-ucontext response's
//!   `version`): 1 and 2 are written as the NIC says (rust_gin_nic_sq.wqe_abi
//!   picks the opcode table and atomic body), any other is refused. rdma-core
//!   accepts exactly IONIC_MIN_RDMA_VERSION..=IONIC_MAX_RDMA_VERSION (1..=2,
//!   providers/ionic/ionic.c:36-52) and every operation this crate posts
//!   (WRITE, WRITE_IMM, READ, FETCH_ADD, CMP_SWAP) exists in both tables.
//! - bnxt_re: the WQE mode (the ucontext response's `mode` when its
//!   comp_mask has BNXT_RE_UCNTX_CMASK_HAVE_MODE; static otherwise,
//!   providers/bnxt_re/main.c:222-223): the device policy writes static mode
//!   only, so a variable-mode context is refused.
//! - firmware versions known to be needed (mori#471): Thor2 237.1.137 or
//!   235.2.86, AINIC 1.117.5-a-45; below them a WARN, or a refusal with
//!   RCCL_RUST_GIN_FW_CHECK=refuse.

use super::NicFamily as Family;
use crate::error::{Error, Result};
use crate::ionic::wire as iw;
use std::cmp::Ordering;

/// ionic: the WQE ABI version a queue is written with, or the refusal.
pub fn ionic_wqe_abi(nic: &str, version: i64) -> Result<u32> {
    if (iw::MIN_RDMA_VERSION as i64..=iw::MAX_RDMA_VERSION as i64).contains(&version) {
        return Ok(version as u32);
    }
    Err(Error::System(format!(
        "{nic}: ionic firmware WQE ABI version {version}: rust-gin writes versions {} and {} only (their opcode \
         tables overlap, so WQEs of another version would run as other operations); refusing this NIC",
        iw::MIN_RDMA_VERSION,
        iw::MAX_RDMA_VERSION
    )))
}

/// `enum bnxt_re_wqe_mode` (kernel-headers/rdma/bnxt_re-abi.h:62-66).
pub const BNXT_WQE_MODE_STATIC: u32 = 0;
pub const BNXT_WQE_MODE_VARIABLE: u32 = 1;

/// bnxt_re: the context's WQE mode must be the static mode the device
/// policy writes (bnxt/family.h: 8 slots per WQE, doorbell index = WQE
/// index, MSN table of one entry per WQE).
pub fn bnxt_wqe_mode(nic: &str, mode: u32) -> Result<()> {
    // rdma-core reads the mode as `wqe_mode & BNXT_RE_WQE_MODE_VARIABLE`
    // (verbs.c:2094, dv.c:408 at PR 1654).
    if mode & BNXT_WQE_MODE_VARIABLE == 0 {
        return Ok(());
    }
    Err(Error::System(format!(
        "{nic}: bnxt_re context in variable WQE mode (ucontext mode {mode:#x}); rust-gin's Thor2 device policy writes \
         static-mode WQEs only (8 slots each, doorbell index = WQE index), which a variable-mode QP would read at \
         other slots; refusing this NIC"
    )))
}

/// What a firmware below the known-needed version does
/// (RCCL_RUST_GIN_FW_CHECK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwCheck {
    Warn,
    Refuse,
    Off,
}

/// One token of a firmware version string: numbers compare as numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FwToken {
    Num(u64),
    Text(String),
}

/// "1.117.5-a-45" -> [1, 117, 5, "a", 45]; separators are '.', '-', '_'
/// and spaces, and a change between digits and letters.
pub fn fw_tokens(s: &str) -> Vec<FwToken> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let flush = |cur: &mut String, out: &mut Vec<FwToken>| {
        if !cur.is_empty() {
            out.push(match cur.parse::<u64>() {
                Ok(n) => FwToken::Num(n),
                Err(_) => FwToken::Text(cur.to_ascii_lowercase()),
            });
            cur.clear();
        }
    };
    for c in s.trim().chars() {
        if matches!(c, '.' | '-' | '_' | ' ' | '/' | '(' | ')') {
            flush(&mut cur, &mut out);
            continue;
        }
        if let Some(last) = cur.chars().last() {
            if last.is_ascii_digit() != c.is_ascii_digit() {
                flush(&mut cur, &mut out);
            }
        }
        cur.push(c);
    }
    flush(&mut cur, &mut out);
    out
}

/// `have` against `need`, token by token; None where they cannot be
/// compared (a number against text: another numbering scheme). A version
/// that runs out first is older ("1.117" < "1.117.5").
pub fn fw_compare(have: &str, need: &str) -> Option<Ordering> {
    let (h, n) = (fw_tokens(have), fw_tokens(need));
    if h.is_empty() {
        return None;
    }
    for (a, b) in h.iter().zip(&n) {
        let o = match (a, b) {
            (FwToken::Num(x), FwToken::Num(y)) => x.cmp(y),
            (FwToken::Text(x), FwToken::Text(y)) => x.cmp(y),
            _ => return None,
        };
        if o != Ordering::Equal {
            return Some(o);
        }
    }
    Some(if h.len() < n.len() { Ordering::Less } else { Ordering::Equal })
}

/// The firmware versions known to be needed (mori#471): (family, minimum,
/// what it applies to). For Thor2 either 237.1.137 and later, or, on the
/// 235.2 branch, 235.2.86 and later.
pub const FW_NEEDED: &[(Family, &str, &str)] = &[
    (Family::Bnxt, "237.1.137", "Thor2"),
    (Family::Bnxt, "235.2.86", "Thor2 (235.2 branch)"),
    (Family::Ionic, "1.117.5-a-45", "AINIC (Pollara)"),
];

/// Why `fw_ver` of a `family` NIC is below what is known to be needed, or
/// None when it is not (or when nothing is known for the family).
pub fn fw_shortfall(family: Family, fw_ver: &str) -> Option<String> {
    let needed: Vec<_> = FW_NEEDED.iter().filter(|(f, _, _)| *f == family).collect();
    if needed.is_empty() {
        return None;
    }
    let names = needed.iter().map(|(_, v, _)| *v).collect::<Vec<_>>().join(" or ");
    if family == Family::Bnxt {
        // The 235.2 branch has its own fixed build; any other version must
        // be at least 237.1.137.
        let t = fw_tokens(fw_ver);
        let branch_235_2 = matches!(t.as_slice(), [FwToken::Num(235), FwToken::Num(2), ..]);
        let need = if branch_235_2 { "235.2.86" } else { "237.1.137" };
        return match fw_compare(fw_ver, need) {
            Some(Ordering::Less) => Some(format!("firmware {fw_ver:?} is older than {names} (mori#471)")),
            Some(_) => None,
            None => Some(format!("firmware {fw_ver:?} could not be compared with {names} (mori#471)")),
        };
    }
    let (_, need, _) = needed[0];
    match fw_compare(fw_ver, need) {
        Some(Ordering::Less) => Some(format!("firmware {fw_ver:?} is older than {need} (mori#471)")),
        Some(_) => None,
        None => Some(format!("firmware {fw_ver:?} could not be compared with {need} (mori#471)")),
    }
}

/// The firmware gate: a WARN line (Warn), an error (Refuse) or nothing.
pub fn check_firmware(family: Family, nic: &str, fw_ver: &str, mode: FwCheck) -> Result<()> {
    if mode == FwCheck::Off {
        return Ok(());
    }
    let Some(why) = fw_shortfall(family, fw_ver) else { return Ok(()) };
    let what = FW_NEEDED.iter().find(|(f, _, _)| *f == family).map_or("", |(_, _, w)| *w);
    match mode {
        FwCheck::Refuse => Err(Error::System(format!(
            "{nic}: {what} {why}; update the NIC firmware, or set RCCL_RUST_GIN_FW_CHECK=warn to go on"
        ))),
        _ => {
            crate::warn_line!(
                "{nic}: {what} {why}; known problems below it (hangs, wrong completions): update the NIC firmware \
                 (RCCL_RUST_GIN_FW_CHECK=refuse refuses such NICs, off silences this)"
            );
            Ok(())
        }
    }
}
