//! The firmware-version gate's parser and comparison (nic/gates.rs)
//! with the exact strings of mori#471 (shared/reference/anchors.md §8:
//! AINIC >= 1.117.5-a-45; Thor2 237.1.137.x or 235.2.86.x) and the forms
//! `ibv_query_device`'s fw_ver takes on each family. The provider-level gate
//! (WARN / refuse / off, RCCL_RUST_GIN_FW_CHECK) is tested over the recording
//! stand-in in tests/family_providers.rs.

use rccl_rust_gin::nic::NicFamily as Family;
use rccl_rust_gin::nic::gates::{fw_compare, fw_shortfall, fw_tokens, ionic_wqe_abi, bnxt_wqe_mode, FwToken};
use std::cmp::Ordering::*;

#[test]
fn versions_split_into_numbers_and_words() {
    use FwToken::{Num, Text};
    assert_eq!(fw_tokens("1.117.5-a-45"), [Num(1), Num(117), Num(5), Text("a".into()), Num(45)]);
    assert_eq!(fw_tokens("237.1.137.0"), [Num(237), Num(1), Num(137), Num(0)]);
    assert_eq!(fw_tokens(" 235.2.86.0\n"), [Num(235), Num(2), Num(86), Num(0)]);
    assert_eq!(fw_tokens("1.117.5a45"), [Num(1), Num(117), Num(5), Text("a".into()), Num(45)]);
    assert!(fw_tokens("").is_empty());
}

#[test]
fn comparison_is_numeric_token_by_token() {
    assert_eq!(fw_compare("1.117.5-a-45", "1.117.5-a-45"), Some(Equal));
    assert_eq!(fw_compare("1.117.5-a-44", "1.117.5-a-45"), Some(Less));
    assert_eq!(fw_compare("1.117.5-a-100", "1.117.5-a-45"), Some(Greater), "45 < 100 as numbers, not text");
    assert_eq!(fw_compare("1.117.10-a-1", "1.117.5-a-45"), Some(Greater));
    assert_eq!(fw_compare("1.117.5", "1.117.5-a-45"), Some(Less), "a shorter version is older");
    assert_eq!(fw_compare("1.118.0-a-1", "1.117.5-a-45"), Some(Greater));
    assert_eq!(fw_compare("237.1.137.0", "237.1.137"), Some(Equal));
    assert_eq!(fw_compare("237.1.136.9", "237.1.137"), Some(Less));
    assert_eq!(fw_compare("v1.2", "1.117.5-a-45"), None, "another numbering scheme");
    assert_eq!(fw_compare("", "1.117.5-a-45"), None);
}

#[test]
fn the_versions_mori_471_names() {
    // AINIC (Pollara): 1.117.5-a-45 and later.
    for ok in ["1.117.5-a-45", "1.117.5-a-46", "1.117.6-a-1", "1.118.0-a-0", "2.0.0-a-1"] {
        assert_eq!(fw_shortfall(Family::Ionic, ok), None, "{ok}");
    }
    for old in ["1.117.5-a-44", "1.117.4-a-99", "1.116.0-a-50", "1.117.5", "0.9.0-a-45"] {
        assert!(fw_shortfall(Family::Ionic, old).is_some_and(|w| w.contains("older than 1.117.5-a-45")), "{old}");
    }
    // Thor2: 237.1.137.x, or on the 235.2 branch 235.2.86.x.
    for ok in ["237.1.137.0", "237.1.137.4", "237.1.140.0", "237.2.0.0", "238.0.1.0", "235.2.86.0", "235.2.90.1"] {
        assert_eq!(fw_shortfall(Family::Bnxt, ok), None, "{ok}");
    }
    for old in ["237.1.136.0", "236.1.140.0", "235.2.85.0", "235.1.200.0", "230.0.1.0"] {
        assert!(fw_shortfall(Family::Bnxt, old).is_some_and(|w| w.contains("older than")), "{old}");
    }
    // Unparseable: said so, never taken as new enough.
    assert!(fw_shortfall(Family::Bnxt, "").is_some_and(|w| w.contains("could not be compared")));
    // Nothing is known for ConnectX.
    assert_eq!(fw_shortfall(Family::Mlx5, "16.35.2000"), None);
}

#[test]
fn abi_gates_accept_exactly_what_the_device_writes() {
    assert_eq!(ionic_wqe_abi("ionic_0", 1).unwrap(), 1);
    assert_eq!(ionic_wqe_abi("ionic_0", 2).unwrap(), 2);
    for v in [-1, 0, 3, 255] {
        let e = ionic_wqe_abi("ionic_0", v).err().expect("refused");
        assert!(e.message().contains(&format!("ionic_0: ionic firmware WQE ABI version {v}")), "{e}");
    }
    bnxt_wqe_mode("bnxt_re0", 0).expect("static");
    let e = bnxt_wqe_mode("bnxt_re0", 1).err().expect("variable refused");
    assert!(e.message().contains("bnxt_re0") && e.message().contains("variable WQE mode"), "{e}");
}
