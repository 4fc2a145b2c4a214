//! Where GPU-visible objects live (issue 10, part 8): docs/architecture.md's
//! "Memory placement" table is the statement, `Object::placement` the code;
//! they must agree both ways. Then every allocation createContext and
//! regMrSym make is recorded and checked: each names the object it holds,
//! with the size that object has, so an object allocated under the wrong
//! name (a signal table as a descriptor, say) shows up. One test per process:
//! the recorder sees every allocator of the process.

#[path = "support/gin_flow.rs"]
mod gin_flow;
#[path = "support/rccl_host.rs"]
mod rccl_host;

use rccl_host::*;
use rccl_rust_gin::abi::{rust_gin_context, rust_gin_error, rust_gin_handle, rust_gin_mlx5_sq_state, rust_gin_peer};
use rccl_rust_gin::abi::{rust_gin_window, rust_gin_window_peer};
use rccl_rust_gin::gpu::{recording, Allocation, Object, RingHome};
use std::collections::BTreeMap;
use std::ffi::c_void;

/// The docs table: object name (as `Object`'s Debug prints it) -> placement name.
fn documented() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md")).unwrap();
    let section = doc.split("### Memory placement").nth(1).expect("docs/architecture.md has a Memory placement section");
    let mut rows = BTreeMap::new();
    for line in section.lines().skip_while(|l| !l.starts_with("| object")).skip(2) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let unquote = |c: &str| c.trim_matches('`').to_string();
        let prev = rows.insert(unquote(cells[1]), unquote(cells[2]));
        assert!(prev.is_none(), "{} is listed twice", cells[1]);
    }
    assert!(rows.len() >= 10, "parsed only {} rows of the placement table", rows.len());
    rows
}

#[test]
fn placements_match_the_documented_table_and_every_allocation_names_its_object() {
    // 1. The table and the code, both ways.
    let doc = documented();
    for o in Object::ALL {
        let name = format!("{o:?}");
        let want = doc.get(&name).unwrap_or_else(|| panic!("{name} is not in the documented table"));
        assert_eq!(&format!("{:?}", o.placement()), want, "{name}: code and docs disagree");
    }
    for name in doc.keys() {
        assert!(Object::ALL.iter().any(|o| &format!("{o:?}") == name), "the docs list {name}, the code has no such object");
    }

    // 2. What createContext and regMrSym allocate, on two ranks.
    let p = in_process_plugin();
    // init runs its loopback self-test once per process (host/selftest.rs),
    // whose own host-memory queue is none of the objects placed here: let it
    // run before the recording starts.
    assert_eq!(p.init().0, OK, "init");
    let n = 2usize;
    let ex = Exchange::new(n);
    let cfg = default_config();
    let ((), seen) = recording(|| {
        std::thread::scope(|s| {
            for rank in 0..n {
                let ex = ex.clone();
                s.spawn(move || {
                    let mut r = p.open_rank(rank as i32, n as i32);
                    let all = ex.allgather(rank, r.handle);
                    assert_eq!(p.connect(&mut r, &all), OK);
                    let mut c = default_config();
                    let (res, gctx, _) = p.create_context(r.coll, &mut c);
                    assert_eq!(res, OK, "createContext");
                    let w = gin_flow::register(p, r.coll, 1 << 16);
                    ex.barrier();
                    // SAFETY: valid tokens, released in creation order's reverse.
                    unsafe { (p.v.dereg_mr_sym.unwrap())(r.coll, w.mh) };
                    p.call_ptr(p.v.destroy_context, gctx as *mut c_void);
                    p.call_ptr(p.v.close_coll, r.coll);
                    p.call_ptr(p.v.finalize, r.ctx);
                });
            }
        })
    });

    let of = |o: Object| -> Vec<&Allocation> { seen.iter().filter(|a| a.object == o).collect() };
    let lens = |o: Object| -> Vec<usize> { of(o).iter().map(|a| a.len).collect() };
    let each = |o: Object, count: usize, len: usize| {
        assert_eq!(lens(o), vec![len; count], "{o:?}: {count} allocation(s) of {len} bytes expected; all: {seen:?}");
    };
    let (nctx, nsig, ncnt) = (cfg.n_contexts as usize, cfg.n_signals as usize, cfg.n_counters as usize);
    let depth = (cfg.queue_depth as usize).next_power_of_two().max(64);
    let qps = n * nctx * n; // per rank: nContexts x nranks
    // Per rank (two ranks).
    each(Object::Handle, n, size_of::<rust_gin_handle>());
    each(Object::Contexts, n, nctx * size_of::<rust_gin_context>());
    each(Object::Peers, n, nctx * n * size_of::<rust_gin_peer>());
    each(Object::ErrorRecord, n, size_of::<rust_gin_error>());
    each(Object::Signals, n, nctx * nsig * 8);
    each(Object::SignalOffsets, n, nctx * nsig * 8);
    each(Object::Counters, n, nctx * ncnt * 8);
    each(Object::Sink, n, 64);
    each(Object::CounterLog, n, n * nctx * 4 * depth);
    each(Object::CountedPeers, n, nctx * n.div_ceil(64) * 8);
    each(Object::WindowDescriptor, n, size_of::<rust_gin_window>());
    // One rail: the peer table and the rail's local key.
    each(Object::WindowPeers, n, n * size_of::<rust_gin_window_peer>() + 4);
    // Per queue pair, with the default queue placement (host).
    each(Object::QueueState, qps, size_of::<rust_gin_mlx5_sq_state>());
    each(Object::SendRing(RingHome::Host), qps, 64 * depth);
    each(Object::CompletionRing(RingHome::Host), qps, 64 * depth);
    each(Object::DoorbellRecords(RingHome::Host), qps, 64);
    // The window's memory is the test's (RCCL's, in production).
    each(Object::WindowData, n, 1 << 16);
    // Nothing else, and each with the placement the docs give its object.
    let accounted = 13 * n + 4 * qps; // the 13 per-rank kinds above, 4 per queue pair
    assert_eq!(seen.len(), accounted, "unaccounted allocations: {seen:?}");
    for a in &seen {
        assert_eq!(format!("{:?}", a.placement), doc[&format!("{:?}", a.object)], "{a:?}");
    }
    println!("memory placement: {} allocations by createContext and regMrSym on {n} ranks, each as documented", seen.len());
}
