//! docs/configuration.md and host/config.rs agree, in both directions: the
//! same knobs, the same defaults exactly (checked by what the code does with
//! them, not by matching text), the same meanings; every knob changes the
//! configuration when set and refuses a bad value with an error naming it;
//! and every environment variable the code reads is documented.

use rccl_rust_gin::config::{Config, KNOBS};
use rccl_rust_gin::error::Error;
use std::collections::BTreeMap;
use std::path::Path;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).unwrap()
}

/// The rows of the markdown table under `heading`: first cell (without
/// backticks) -> the other cells, trimmed.
fn table(doc: &str, heading: &str) -> BTreeMap<String, Vec<String>> {
    let start = doc.find(heading).unwrap_or_else(|| panic!("docs/configuration.md has no section {heading:?}"));
    let mut rows = BTreeMap::new();
    for line in doc[start..].lines().skip(1).skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')) {
        let cells: Vec<String> = line.trim_matches('|').split(" | ").map(|c| c.trim().to_string()).collect();
        if cells[0] == "variable" || cells[0].starts_with("---") {
            continue;
        }
        for name in cells[0].split(", ") {
            assert!(rows.insert(name.trim_matches('`').to_string(), cells[1..].to_vec()).is_none(), "{name} twice");
        }
    }
    rows
}

fn load(name: &str, value: &str) -> Result<Config, Error> {
    Config::from_lookup(|n| (n == name).then(|| value.to_string()))
}

fn shown(c: &Config) -> String {
    format!("{c:?}")
}

/// A valid value other than the default, and how a bad value is refused.
type Spec = (&'static str, fn() -> Result<(), Error>);

/// Per knob, its [`Spec`]. Knobs with free-form values are refused where
/// they are used (the interface at listen, the device at probe).
fn spec(name: &str) -> Option<Spec> {
    fn at_load(name: &'static str, bad: &'static str) -> Result<(), Error> {
        load(name, bad).map(drop)
    }
    Some(match name {
        "RCCL_RUST_GIN_PROVIDER" => ("emu", || at_load("RCCL_RUST_GIN_PROVIDER", "rxe")),
        "RCCL_RUST_GIN_TIMEOUT_MS" => ("5", || at_load("RCCL_RUST_GIN_TIMEOUT_MS", "0")),
        "RCCL_RUST_GIN_QUEUE_DEPTH" => ("1024", || at_load("RCCL_RUST_GIN_QUEUE_DEPTH", "8")),
        "RCCL_RUST_GIN_QUEUE_PLACEMENT" => ("device", || at_load("RCCL_RUST_GIN_QUEUE_PLACEMENT", "gpu")),
        "RCCL_RUST_GIN_SOCKET_IFNAME" => ("lo", || {
            let c = load("RCCL_RUST_GIN_SOCKET_IFNAME", "=no_such_if0")?;
            rccl_rust_gin::oob::pick_address(c.socket_ifname.as_deref()).map(drop)
        }),
        "RCCL_RUST_GIN_CONNECT_TIMEOUT_MS" => ("100", || at_load("RCCL_RUST_GIN_CONNECT_TIMEOUT_MS", "soon")),
        "RCCL_RUST_GIN_EMU_FABRIC" => ("shm:x", || at_load("RCCL_RUST_GIN_EMU_FABRIC", "nfs:/x")),
        "RCCL_RUST_GIN_EMU_TCP_TIMEOUT_MS" => ("1000", || at_load("RCCL_RUST_GIN_EMU_TCP_TIMEOUT_MS", "10")),
        "RCCL_RUST_GIN_EMU_READ_DELAY_US" => ("30000000", || at_load("RCCL_RUST_GIN_EMU_READ_DELAY_US", "60000001")),
        "RCCL_RUST_GIN_EMU_PROGRESS" => ("proxy", || at_load("RCCL_RUST_GIN_EMU_PROGRESS", "never")),
        "RCCL_RUST_GIN_EMU_THREADS" => ("nic", || at_load("RCCL_RUST_GIN_EMU_THREADS", "0")),
        "RCCL_RUST_GIN_EMU_FAMILY" => ("ionic", || at_load("RCCL_RUST_GIN_EMU_FAMILY", "cxl")),
        "RCCL_RUST_GIN_EMU_MTU" => ("1024", || at_load("RCCL_RUST_GIN_EMU_MTU", "1000")),
        "RCCL_RUST_GIN_EMU_IONIC_ABI" => ("1", || at_load("RCCL_RUST_GIN_EMU_IONIC_ABI", "256")),
        "RCCL_RUST_GIN_FW_CHECK" => ("refuse", || at_load("RCCL_RUST_GIN_FW_CHECK", "strict")),
        "RCCL_RUST_GIN_EMU_FAULT" => ("collapsed-cq", || at_load("RCCL_RUST_GIN_EMU_FAULT", "flaky")),
        "RCCL_RUST_GIN_SELF_TEST" => ("off", || at_load("RCCL_RUST_GIN_SELF_TEST", "maybe")),
        "RCCL_RUST_GIN_EMU_QP_SKEW" => ("revmod3:50000", || at_load("RCCL_RUST_GIN_EMU_QP_SKEW", "mod1:50")),
        "RCCL_RUST_GIN_BNXT_DOORBELL" => ("peer", || at_load("RCCL_RUST_GIN_BNXT_DOORBELL", "batch")),
        "RCCL_RUST_GIN_NIC" => ("mlx5_1", || {
            let c = load("RCCL_RUST_GIN_NIC", "mlx5_does_not_exist")?;
            rccl_rust_gin::provider::mlx5::Mlx5Provider::probe(&c).map(drop)
        }),
        "RCCL_RUST_GIN_IB_PORT" => ("2", || at_load("RCCL_RUST_GIN_IB_PORT", "0")),
        "RCCL_RUST_GIN_GID_INDEX" => ("3", || at_load("RCCL_RUST_GIN_GID_INDEX", "-2")),
        "RCCL_RUST_GIN_TRAFFIC_CLASS" => ("106", || at_load("RCCL_RUST_GIN_TRAFFIC_CLASS", "256")),
        "RCCL_RUST_GIN_QPS_PER_UAR" => ("1", || at_load("RCCL_RUST_GIN_QPS_PER_UAR", "-1")),
        "RCCL_RUST_GIN_RAILS" => ("2", || at_load("RCCL_RUST_GIN_RAILS", "17")),
        "RCCL_RUST_GIN_SIGNAL_MODE" => ("write", || at_load("RCCL_RUST_GIN_SIGNAL_MODE", "slots")),
        "RCCL_RUST_GIN_TRANSPORT" => ("dc", || at_load("RCCL_RUST_GIN_TRANSPORT", "ud")),
        "RCCL_RUST_GIN_DCIS" => ("8", || at_load("RCCL_RUST_GIN_DCIS", "3")),
        _ => return None,
    })
}

#[test]
fn the_documented_knobs_are_the_code_knobs_with_the_same_defaults_and_meanings() {
    let rows = table(&doc(), "## rust-gin's knobs");
    let code: BTreeMap<String, (String, String)> =
        KNOBS.iter().map(|(n, d, m)| (n.to_string(), (d.to_string(), m.to_string()))).collect();
    let documented: Vec<&String> = rows.keys().collect();
    let known: Vec<&String> = code.keys().collect();
    assert_eq!(documented, known, "knobs in docs/configuration.md vs host/config.rs KNOBS");
    for (name, cells) in &rows {
        let (default, meaning) = &code[name];
        assert_eq!(&cells[0], default, "{name}: documented default vs KNOBS");
        assert_eq!(&cells[1], meaning, "{name}: documented meaning vs KNOBS");
    }
}

#[test]
fn every_documented_default_is_what_the_code_does_unset() {
    let unset = Config::from_lookup(|_| None).unwrap();
    assert_eq!(shown(&unset), shown(&Config::default()));
    for (name, default, _) in KNOBS {
        if default.starts_with('(') {
            // "(…)" documents a behaviour, not a value: the knob is unset.
            match *name {
                "RCCL_RUST_GIN_SOCKET_IFNAME" => assert_eq!(unset.socket_ifname, None),
                "RCCL_RUST_GIN_NIC" => assert_eq!(unset.nic_filter, None),
                other => panic!("{other}: a default in parentheses this test does not know how to check"),
            }
            continue;
        }
        let set = load(name, default).unwrap_or_else(|e| panic!("{name}={default} (the documented default): {e}"));
        assert_eq!(shown(&set), shown(&unset), "{name}: setting the documented default {default} changes the config");
    }
}

#[test]
fn every_knob_takes_effect_and_refuses_a_bad_value_by_name() {
    let unset = shown(&Config::from_lookup(|_| None).unwrap());
    for (name, _, _) in KNOBS {
        let (other, bad) = spec(name).unwrap_or_else(|| panic!("{name}: no valid and bad value in this test's table"));
        let set = load(name, other).unwrap_or_else(|e| panic!("{name}={other}: {e}"));
        assert_ne!(shown(&set), unset, "{name}={other} changed nothing");
        let e = bad().expect_err(name);
        assert!(
            matches!(e, Error::InvalidArgument(_) | Error::System(_)),
            "{name}: a bad value is refused as an argument or system error, got {e:?}"
        );
        assert!(e.message().contains(name), "{name}: the error does not name the variable: {e}");
    }
    for row in table(&doc(), "## rust-gin's knobs").keys() {
        assert!(spec(row).is_some(), "{row} is documented but this test's table lacks it");
    }
}

/// Every `RCCL_RUST_GIN_*` name anywhere in host/ (read, or cited in a
/// message) is a knob, and every variable the code reads is documented in
/// one of the two tables.
#[test]
fn the_code_reads_and_cites_only_documented_variables() {
    let doc = doc();
    let ours = table(&doc, "## rust-gin's knobs");
    let rccl = table(&doc, "## RCCL's knobs it honours");
    let mut files = vec![];
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("host")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut reads = 0;
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let words = src.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        for w in words.filter(|w| w.starts_with("RCCL_RUST_GIN_") && w.len() > "RCCL_RUST_GIN_".len()) {
            assert!(ours.contains_key(w), "{}: {w} is not a documented knob", f.display());
        }
        // Reads: var("X"), var_os("X"), get("X") with an upper-case name.
        for call in ["var(\"", "var_os(\"", "get(\""] {
            for (at, _) in src.match_indices(call) {
                let rest = &src[at + call.len()..];
                let name = &rest[..rest.find('"').unwrap()];
                if name.len() > 3 && name.chars().all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()) {
                    reads += 1;
                    assert!(
                        ours.contains_key(name) || rccl.contains_key(name),
                        "{}: reads {name}, which docs/configuration.md does not list",
                        f.display()
                    );
                }
            }
        }
    }
    assert!(reads >= KNOBS.len(), "found only {reads} environment reads in host/: the scan is broken");
}

/// The build-time knob that fixes rust-gin's GIN type on both sides: its
/// documented default is the crate's default, and the row says how RCCL's
/// side is set (the apply script's --gin-type, the define in net_device.h).
#[test]
fn the_build_time_gin_type_knob_is_documented_with_the_crates_default() {
    use rccl_rust_gin::ffi::nccl::{gin_type, DEFAULT_GIN_TYPE};
    let rows = table(&doc(), "## Build-time knobs");
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["RUST_GIN_TYPE"], "the build-time knobs");
    let cells = &rows["RUST_GIN_TYPE"];
    assert_eq!(cells[0], DEFAULT_GIN_TYPE.to_string(), "documented default vs the crate's");
    assert_eq!(gin_type(None), DEFAULT_GIN_TYPE);
    for needle in ["--gin-type", "RUST_GIN_TYPE", "net_device.h", "NCCL_GIN_TYPE", "2 to 31"] {
        assert!(cells[1].contains(needle), "RUST_GIN_TYPE's row does not mention {needle}");
    }
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/apply-rccl-patches.sh")).unwrap();
    assert!(script.contains(&format!("DEFAULT_GIN_TYPE={DEFAULT_GIN_TYPE}")), "the apply script's default");
}
