//! gin-scale at small N (64 and 256 ranks): the counts it reports are what
//! createContext must have allocated for each connection scope and UAR
//! setting, the sampled peers' puts with signals arrived (the command fails
//! otherwise), the OOB stand-in saw the messages the real mesh would send, a
//! configuration over the queue-memory limit is refused, and DC rows say
//! they were not measured.

use std::collections::HashMap;
use std::process::Command;

type Row = HashMap<String, String>;

fn run(args: &[&str]) -> (i32, Vec<Row>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gin-scale"))
        .args(["--format", "csv", "--no-chart"])
        .args(args)
        .output()
        .expect("run gin-scale");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut lines = stdout.lines();
    let header: Vec<String> = lines.next().unwrap_or("").split(',').map(str::to_string).collect();
    let rows = lines.map(|l| header.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect();
    (out.status.code().unwrap_or(-1), rows, format!("{stdout}\n{stderr}"))
}

fn num(r: &Row, k: &str) -> u64 {
    r.get(k).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("column {k} of {r:?}"))
}
fn float(r: &Row, k: &str) -> f64 {
    r.get(k).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("column {k} of {r:?}"))
}

/// The ranks rank 0 connects to, counted here independently of gin-scale.
fn scope_size(scope: &str, n: u64) -> u64 {
    match scope {
        "full mesh" => n,
        // Ranks with the same index modulo the stride: 0, 8, 16, ...
        "rail-only /8" => n.div_ceil(8),
        // Itself and up to 32 ring neighbours on each side.
        "peer list 64" => (2 * 32 + 1).min(n - 1),
        s => panic!("scope {s}"),
    }
}

#[test]
fn counts_follow_scope_and_uar_sharing_and_sampled_traffic_arrives() {
    let (code, rows, all) = run(&["--ranks", "64,256", "--qps-per-uar", "16,4,1", "--sample", "3"]);
    assert_eq!(code, 0, "{all}");
    let rc: Vec<&Row> = rows.iter().filter(|r| r["transport"] == "rc").collect();
    assert_eq!(rc.len(), 2 * 3 * 3, "{all}");
    for r in &rc {
        let n = num(r, "ranks");
        let (scope, qpu) = (r["scope"].as_str(), num(r, "qps_per_uar"));
        assert_eq!(r["status"], "measured", "{r:?}");
        let peers = scope_size(scope, n);
        assert_eq!(num(r, "peers"), peers, "{scope} at {n}");
        // One RC queue pair and CQ per (context, peer), self included.
        assert_eq!(num(r, "qps"), peers, "{scope} at {n}: QPs");
        assert_eq!(num(r, "cqs"), peers, "{scope} at {n}: CQs");
        // UAR pages as the emulated NIC counted them: QPs shared qpu at a time.
        assert_eq!(num(r, "uar_pages"), peers.div_ceil(qpu), "{scope} at {n}, {qpu} QPs/UAR");
        // Every ring the NIC was given was allocated as queue memory (which
        // also holds the doorbell records), and grows with the QPs.
        let (queue, ring) = (float(r, "queue_mib"), float(r, "nic_ring_mib"));
        assert!(ring > 0.0 && queue >= ring, "{r:?}");
        assert!((queue / peers as f64 - 64.0 / 1024.0).abs() < 0.01, "512-deep SQ + CQ per QP is 64 KiB plus records: {r:?}");
        // The OOB stand-in: createContext's two collectives, one frame to and
        // from every other rank each; the QP exchange carries 12 bytes of
        // signal table, the signal mode's byte and a 4-byte QP number to and
        // from each connected peer, the status one byte.
        assert_eq!(num(r, "oob_collectives"), 2, "{r:?}");
        assert_eq!(num(r, "oob_sent_msgs"), 2 * (n - 1));
        assert_eq!(num(r, "oob_recv_msgs"), 2 * (n - 1));
        assert_eq!(num(r, "oob_sent_bytes"), (peers - 1) * (12 + 1 + 4) + (n - 1), "{r:?}");
        assert_eq!(num(r, "oob_recv_bytes"), (peers - 1) * (12 + 1 + 4) + (n - 1), "{r:?}");
        assert_eq!(num(r, "checked_puts"), 3, "a put+signal to each sampled peer: {r:?}");
        assert!(float(r, "descriptor_kib") > 0.0 && float(r, "host_kib") > 0.0, "{r:?}");
    }
    // The target, at this N: rail-only with shared UARs needs at most
    // a page per four QPs.
    for r in rc.iter().filter(|r| r["scope"].starts_with("rail-only") && r["qps_per_uar"] == "16") {
        assert!(4 * num(r, "uar_pages") <= num(r, "qps"), "{r:?}");
    }
    // Memory per rank grows with the scope, not with N, outside the full mesh.
    let at = |n: &str, s: &str| rc.iter().find(|r| r["ranks"] == n && r["scope"] == s && r["qps_per_uar"] == "16").unwrap();
    assert!(float(at("256", "peer list 64"), "queue_mib") < 1.1 * float(at("64", "peer list 64"), "queue_mib"));
    assert!(float(at("256", "full mesh"), "queue_mib") > 3.9 * float(at("64", "full mesh"), "queue_mib"));
    // DC: the same scopes with 4 DC initiators: the queue pairs, their
    // pages and rings do not grow with the ranks or the scope; the sampled
    // peers' put+signal arrive through the DCIs.
    let dc: Vec<&Row> = rows.iter().filter(|r| r["transport"] == "dc").collect();
    assert_eq!(dc.len(), 2 * 3 * 3);
    for r in &dc {
        assert_eq!(r["status"], "measured", "{r:?}");
        assert_eq!(num(r, "qps"), 4, "one DCI each of --dcis 4 (the DC target is not a QP): {r:?}");
        // The DCIs share UAR pages as QPs do: 4 on one page at 16 per page.
        let want_pages = match r["qps_per_uar"].as_str() { "1" => 4, _ => 1 };
        assert_eq!(num(r, "uar_pages"), want_pages, "{r:?}");
        assert_eq!(num(r, "checked_puts"), 3, "a put+signal to each sampled peer: {r:?}");
        assert_eq!(float(r, "queue_mib"), float(dc[0], "queue_mib"), "DC's rings do not grow with N or the scope: {r:?}");
    }
    let _ = &all;
}

#[test]
fn several_contexts_and_one_uar_page_for_all() {
    let (code, rows, all) =
        run(&["--ranks", "64", "--transport", "rc", "--scope", "rail,full", "--contexts", "3", "--qps-per-uar", "0"]);
    assert_eq!(code, 0, "{all}");
    for r in &rows {
        let peers = scope_size(&r["scope"], 64);
        assert_eq!(num(r, "qps"), 3 * peers, "{r:?}");
        assert_eq!(num(r, "uar_pages"), 1, "RCCL_RUST_GIN_QPS_PER_UAR=0: every QP on one page: {r:?}");
        assert_eq!(num(r, "oob_sent_bytes"), (peers - 1) * (12 + 1 + 3 * 4) + 63, "{r:?}");
        assert_eq!(num(r, "checked_puts"), 4 * 3, "every context of each sampled peer: {r:?}");
    }
}

#[test]
fn a_configuration_over_the_queue_memory_limit_is_refused_before_allocating() {
    let (code, rows, all) = run(&["--ranks", "256", "--transport", "rc", "--scope", "full,rail", "--qps-per-uar", "16", "--max-queue-mib", "4"]);
    assert_eq!(code, 0, "{all}");
    let full = rows.iter().find(|r| r["scope"] == "full mesh").unwrap();
    assert!(full["status"].starts_with("REFUSED: 256 QPs x 64 KiB of rings = 16 MiB > --max-queue-mib 4"), "{full:?}");
    assert_eq!(full["qps"], "-");
    let rail = rows.iter().find(|r| r["scope"] == "rail-only /8").unwrap();
    assert_eq!(rail["status"], "measured", "2 MiB fits: {rail:?}");
}
