//! docs/configuration.md lists every knob the code reads, with the code's default.

use rccl_rust_gin::config::{Config, KNOBS};

#[test]
fn every_knob_is_documented_with_its_default() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).unwrap();
    for (name, default, _) in KNOBS {
        let row = doc.lines().find(|l| l.contains(&format!("`{name}`"))).unwrap_or_else(|| panic!("{name} is not in docs/configuration.md"));
        assert!(row.contains(default), "{name}: the documented default differs from the code's {default:?}: {row}");
    }
    // And the code reads no knob the table lacks.
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/host/config.rs")).unwrap();
    for w in src.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("RCCL_RUST_GIN_") && w.len() > "RCCL_RUST_GIN_".len()) {
        assert!(KNOBS.iter().any(|(n, _, _)| *n == w), "{w} is read but missing from KNOBS");
    }
}

#[test]
fn defaults_match_the_table() {
    let c = Config::from_lookup(|_| None).unwrap();
    assert_eq!(c.timeout_ms.to_string(), KNOBS.iter().find(|k| k.0 == "RCCL_RUST_GIN_TIMEOUT_MS").unwrap().1);
    assert_eq!(c.queue_depth.to_string(), KNOBS.iter().find(|k| k.0 == "RCCL_RUST_GIN_QUEUE_DEPTH").unwrap().1);
}

#[test]
fn bad_values_name_the_variable() {
    for (k, v) in [
        ("RCCL_RUST_GIN_PROVIDER", "rxe"),
        ("RCCL_RUST_GIN_TIMEOUT_MS", "soon"),
        ("RCCL_RUST_GIN_TIMEOUT_MS", "0"),
        ("RCCL_RUST_GIN_QUEUE_DEPTH", "8"),
        ("RCCL_RUST_GIN_EMU_FABRIC", "nfs:/x"),
        ("RCCL_RUST_GIN_EMU_MTU", "1000"),
        ("RCCL_RUST_GIN_QUEUE_PLACEMENT", "gpu"),
    ] {
        let e = Config::from_lookup(|name| (name == k).then(|| v.to_string())).unwrap_err();
        assert!(e.to_string().contains(k), "{k}={v}: {e}");
    }
}
