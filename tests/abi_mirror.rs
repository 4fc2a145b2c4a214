//! The C ABI mirrors against the facts of RCCL's headers at the pinned
//! revision (shared/reference/rccl-gin.md sections 1, 5 and 6; offsets
//! computed from the header definitions on x86-64). The structs also carry
//! compile-time assertions; this test states the facts with their sources in
//! one place and checks the Rust types against them.

use rccl_rust_gin::ffi::gin::{NcclGinConfig, NcclGinConfigV15, NcclGinProperties, NcclGinV14, NcclGinV15};
use rccl_rust_gin::ffi::nccl::*;
use rccl_rust_gin::ffi::rma::{
    NcclGinConfigV13, NcclRmaConfig, NcclRmaConfigV17, NcclRmaProperties, NcclRmaV13, NcclRmaV14, NcclRmaV15, NcclRmaV16,
    NcclRmaV17,
};
use std::mem::{offset_of, size_of};

#[test]
fn result_codes_logger_levels_and_constants() {
    // nccl.h.in (pinned): ncclSuccess .. ncclTimeout.
    let codes = [NCCL_SUCCESS, NCCL_UNHANDLED_CUDA_ERROR, NCCL_SYSTEM_ERROR, NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_REMOTE_ERROR, NCCL_IN_PROGRESS, NCCL_TIMEOUT];
    assert_eq!(codes, [0, 1, 2, 3, 4, 5, 6, 7, 8]);
    // RCCL's ncclDebugLogLevel inserts ERROR = 1 (unlike upstream NCCL).
    assert_eq!((level::ERROR, level::VERSION, level::WARN, level::INFO, level::ABORT, level::TRACE), (1, 2, 3, 4, 5, 6));
    // nccl_net.h (pinned).
    assert_eq!(NCCL_NET_HANDLE_MAXSIZE, 128);
    assert_eq!((NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF), (1, 2, 4));
    assert_eq!((NCCL_NET_SIGNAL_OP_INC, NCCL_NET_SIGNAL_OP_ADD), (1, 2));
    // net_device.h (pinned) and contracts.md: GIN_PROXY = 2, rust-gin = 8
    // (a build without RUST_GIN_TYPE, as this one).
    assert_eq!((NCCL_NET_DEVICE_GIN_PROXY, NCCL_NET_DEVICE_GIN_RUST), (2, 8));
    assert_eq!(option_env!("RUST_GIN_TYPE"), None, "this test expects the default build");
    // RUST_GIN_TYPE (what RCCL's build passes from RUST_GIN_TYPE) is
    // the number when given.
    assert_eq!((gin_type(None), gin_type(Some("9")), gin_type(Some("31"))), (DEFAULT_GIN_TYPE, 9, 31));
    for bad in ["", "1", "0", "32", "x", "123"] {
        assert!(std::panic::catch_unwind(|| gin_type(Some(bad))).is_err(), "RUST_GIN_TYPE={bad:?} accepted");
    }
}

#[test]
fn net_properties_v12_and_device_handle_v11() {
    assert_eq!(size_of::<NcclNetProperties>(), 128);
    let o = [
        offset_of!(NcclNetProperties, name),
        offset_of!(NcclNetProperties, pci_path),
        offset_of!(NcclNetProperties, guid),
        offset_of!(NcclNetProperties, ptr_support),
        offset_of!(NcclNetProperties, reg_is_global),
        offset_of!(NcclNetProperties, force_flush),
        offset_of!(NcclNetProperties, speed),
        offset_of!(NcclNetProperties, port),
        offset_of!(NcclNetProperties, latency),
        offset_of!(NcclNetProperties, max_comms),
        offset_of!(NcclNetProperties, max_recvs),
        offset_of!(NcclNetProperties, net_device_type),
        offset_of!(NcclNetProperties, net_device_version),
        offset_of!(NcclNetProperties, v_props),
        offset_of!(NcclNetProperties, max_p2p_bytes),
        offset_of!(NcclNetProperties, max_coll_bytes),
        offset_of!(NcclNetProperties, max_multi_request_size),
        offset_of!(NcclNetProperties, rail_id),
        offset_of!(NcclNetProperties, plane_id),
    ];
    assert_eq!(o, [0, 8, 16, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 104, 112, 120, 124, 126]);
    assert_eq!(size_of::<NcclNetDeviceHandle>(), 32);
    assert_eq!(
        [offset_of!(NcclNetDeviceHandle, net_device_type), offset_of!(NcclNetDeviceHandle, net_device_version), offset_of!(NcclNetDeviceHandle, handle), offset_of!(NcclNetDeviceHandle, size), offset_of!(NcclNetDeviceHandle, needs_proxy_progress)],
        [0, 4, 8, 16, 24]
    );
}

#[test]
fn gin_v14() {
    assert_eq!(size_of::<NcclGinProperties>(), 2);
    assert_eq!(size_of::<NcclGinConfig>(), 28);
    assert_eq!(
        [offset_of!(NcclGinConfig, n_signals), offset_of!(NcclGinConfig, n_counters), offset_of!(NcclGinConfig, n_contexts), offset_of!(NcclGinConfig, queue_depth), offset_of!(NcclGinConfig, traffic_class), offset_of!(NcclGinConfig, backend_version), offset_of!(NcclGinConfig, rank_stride)],
        [0, 4, 8, 12, 16, 20, 24]
    );
    // name, init, devices, getGinProperties, getProperties, listen, connect,
    // createContext, regMrSym, regMrSymDmaBuf, deregMrSym, destroyContext,
    // closeColl, closeListen, ginProgress, queryLastError, finalize.
    assert_eq!(size_of::<NcclGinV14>(), 17 * 8);
    assert_eq!(
        [offset_of!(NcclGinV14, name), offset_of!(NcclGinV14, init), offset_of!(NcclGinV14, devices), offset_of!(NcclGinV14, get_gin_properties), offset_of!(NcclGinV14, get_properties), offset_of!(NcclGinV14, listen), offset_of!(NcclGinV14, connect), offset_of!(NcclGinV14, create_context), offset_of!(NcclGinV14, reg_mr_sym), offset_of!(NcclGinV14, reg_mr_sym_dma_buf), offset_of!(NcclGinV14, dereg_mr_sym), offset_of!(NcclGinV14, destroy_context), offset_of!(NcclGinV14, close_coll), offset_of!(NcclGinV14, close_listen), offset_of!(NcclGinV14, gin_progress), offset_of!(NcclGinV14, query_last_error), offset_of!(NcclGinV14, finalize)],
        [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128]
    );
    // The exported symbol has every slot filled.
    let v = &rccl_rust_gin::gin::vtable::ncclGinRustPlugin_v14;
    assert!(v.init.is_some() && v.devices.is_some() && v.get_gin_properties.is_some() && v.get_properties.is_some());
    assert!(v.listen.is_some() && v.connect.is_some() && v.create_context.is_some() && v.reg_mr_sym.is_some());
    assert!(v.reg_mr_sym_dma_buf.is_some() && v.dereg_mr_sym.is_some() && v.destroy_context.is_some());
    assert!(v.close_coll.is_some() && v.close_listen.is_some() && v.gin_progress.is_some());
    assert!(v.query_last_error.is_some() && v.finalize.is_some() && !v.name.is_null());
}

/// The offsets of the named members of a struct, in the order named.
macro_rules! offsets {
    ($t:ty: $($f:ident),+ $(,)?) => { [$(offset_of!($t, $f)),+] };
}

#[test]
fn rma_v13_to_v16() {
    // rma_v13.h (= ncclGin_v13_t), rma_v14.h, rma_v15.h: name and 20 slots,
    // 168 bytes, every slot 8 bytes after the one before; slot 18 is
    // ginProgress in v13 and rmaProgress later.
    let every_8 = |n: usize| (0..n).map(|i| 8 * i).collect::<Vec<_>>();
    assert_eq!((size_of::<NcclRmaV13>(), size_of::<NcclRmaV14>(), size_of::<NcclRmaV15>()), (168, 168, 168));
    let v13 = offsets!(NcclRmaV13: name, init, devices, get_properties, listen, connect, create_context, reg_mr_sym,
        reg_mr_sym_dma_buf, dereg_mr_sym, destroy_context, close_coll, close_listen, iput, iput_signal, iget, iflush,
        test, gin_progress, query_last_error, finalize);
    assert_eq!(v13.to_vec(), every_8(21));
    let v14 = offsets!(NcclRmaV14: name, init, devices, get_properties, listen, connect, create_context, reg_mr_sym,
        reg_mr_sym_dma_buf, dereg_mr_sym, destroy_context, close_coll, close_listen, iput, iput_signal, iget, iflush,
        test, rma_progress, query_last_error, finalize);
    assert_eq!(v14.to_vec(), every_8(21));
    let v15 = offsets!(NcclRmaV15: name, init, devices, get_properties, listen, connect, create_context, reg_mr_sym,
        reg_mr_sym_dma_buf, dereg_mr_sym, destroy_context, close_coll, close_listen, iput, iput_signal, iget, iflush,
        test, rma_progress, query_last_error, finalize);
    assert_eq!(v15.to_vec(), every_8(21));
    // rma_v16.h: getRmaProperties inserted after devices, at 24; 176 bytes.
    assert_eq!(size_of::<NcclRmaV16>(), 176);
    let v16 = offsets!(NcclRmaV16: name, init, devices, get_rma_properties, get_properties, listen, connect,
        create_context, reg_mr_sym, reg_mr_sym_dma_buf, dereg_mr_sym, destroy_context, close_coll, close_listen, iput,
        iput_signal, iget, iflush, test, rma_progress, query_last_error, finalize);
    assert_eq!(v16.to_vec(), every_8(22));
    // gin_v13.h ncclGinConfig_v13_t and ncclRmaConfig_v14_t: C ints.
    assert_eq!(size_of::<NcclGinConfigV13>(), 20);
    assert_eq!(offsets!(NcclGinConfigV13: n_signals, n_counters, n_contexts, queue_depth, traffic_class), [0, 4, 8, 12, 16]);
    assert_eq!(size_of::<NcclRmaConfig>(), 12);
    assert_eq!(offsets!(NcclRmaConfig: n_contexts, traffic_class, rank_stride), [0, 4, 8]);
    assert_eq!(size_of::<NcclRmaProperties>(), 1);
}

/// A C struct laid out as the header declares it (x86-64, LP64): each member
/// at the next multiple of its alignment, the size rounded up to the largest
/// alignment. The members are (size, alignment) pairs read off the header;
/// returns (offsets, size). Computing the facts from the header's member
/// list, not copying offsets from our own structs, is what makes the
/// comparison below a check.
fn c_layout(members: &[(usize, usize)]) -> (Vec<usize>, usize) {
    let (mut at, mut align, mut offs) = (0usize, 1usize, Vec::new());
    for &(size, a) in members {
        at = at.div_ceil(a) * a;
        offs.push(at);
        at += size;
        align = align.max(a);
    }
    (offs, at.div_ceil(align) * align)
}

const INT: (usize, usize) = (4, 4);
const PTR: (usize, usize) = (8, 8);

#[test]
fn gin_v15() {
    // NVIDIA/nccl@7217a5810c5a3ba2ef3f6cef2833aab6a7a7fbf4 src/include/plugin/gin/gin_v15.h:
    // ncclGinConfig_v15_t { int nSignals, nCounters, nContexts, queueDepth,
    // trafficClass, backendVersion; int* peerArray; int peerArrayCount; }.
    let (offs, size) = c_layout(&[INT, INT, INT, INT, INT, INT, PTR, INT]);
    assert_eq!((offs.clone(), size), (vec![0, 4, 8, 12, 16, 20, 24, 32], 40), "the header's layout on LP64");
    assert_eq!(size_of::<NcclGinConfigV15>(), size);
    assert_eq!(
        offsets!(NcclGinConfigV15: n_signals, n_counters, n_contexts, queue_depth, traffic_class, backend_version,
            peer_array, peer_array_count).to_vec(),
        offs
    );
    // ncclGinProperties_v15_t is v14's two bools.
    assert_eq!(size_of::<NcclGinProperties>(), 2);
    // ncclGin_v15_t: the same 17 members as v14 (name and 16 function
    // pointers, in the header's order); only createContext's config differs.
    let (offs, size) = c_layout(&[PTR; 17]);
    assert_eq!(size_of::<NcclGinV15>(), size);
    let v15 = offsets!(NcclGinV15: name, init, devices, get_gin_properties, get_properties, listen, connect,
        create_context, reg_mr_sym, reg_mr_sym_dma_buf, dereg_mr_sym, destroy_context, close_coll, close_listen,
        gin_progress, query_last_error, finalize);
    assert_eq!(v15.to_vec(), offs);
    let v = &rccl_rust_gin::gin::vtable::ncclGinRustPlugin_v15;
    assert!(v.init.is_some() && v.devices.is_some() && v.get_gin_properties.is_some() && v.get_properties.is_some());
    assert!(v.listen.is_some() && v.connect.is_some() && v.create_context.is_some() && v.reg_mr_sym.is_some());
    assert!(v.reg_mr_sym_dma_buf.is_some() && v.dereg_mr_sym.is_some() && v.destroy_context.is_some());
    assert!(v.close_coll.is_some() && v.close_listen.is_some() && v.gin_progress.is_some());
    assert!(v.query_last_error.is_some() && v.finalize.is_some() && !v.name.is_null());
}

#[test]
fn rma_v17() {
    // NVIDIA/nccl@c6fbb1d7c3ad95a46b5dd249398ca1945087c7aa src/include/plugin/rma/rma_v17.h:
    // ncclRmaConfig_v17_t { int nContexts; int trafficClass; int* peerArray; int peerArrayCount; }.
    let (offs, size) = c_layout(&[INT, INT, PTR, INT]);
    assert_eq!((offs.clone(), size), (vec![0, 4, 8, 16], 24), "the header's layout on LP64");
    assert_eq!(size_of::<NcclRmaConfigV17>(), size);
    assert_eq!(offsets!(NcclRmaConfigV17: n_contexts, traffic_class, peer_array, peer_array_count).to_vec(), offs);
    // ncclRma_v17_t: name and 21 function pointers, v16's order
    // (getRmaProperties after devices); connect gains abortFlag, which
    // changes a signature, not a slot.
    let (offs, size) = c_layout(&[PTR; 22]);
    assert_eq!(size_of::<NcclRmaV17>(), size);
    let v17 = offsets!(NcclRmaV17: name, init, devices, get_rma_properties, get_properties, listen, connect,
        create_context, reg_mr_sym, reg_mr_sym_dma_buf, dereg_mr_sym, destroy_context, close_coll, close_listen, iput,
        iput_signal, iget, iflush, test, rma_progress, query_last_error, finalize);
    assert_eq!(v17.to_vec(), offs);
    // The same slots as v16, so a v16 caller and a v17 caller agree on
    // every offset but the meaning of connect's and createContext's.
    assert_eq!(size_of::<NcclRmaV16>(), size_of::<NcclRmaV17>());
    assert_eq!(offset_of!(NcclRmaV16, create_context), offset_of!(NcclRmaV17, create_context));
    let v = &rccl_rust_gin::rma::ncclRmaPlugin_v17;
    assert!(v.connect.is_some() && v.create_context.is_some() && v.get_rma_properties.is_some());
    assert!(v.iput.is_some() && v.iput_signal.is_some() && v.iget.is_some() && v.rma_progress.is_some());
    assert!(v.finalize.is_some() && !v.name.is_null());
    // The v17 connect is not the v13-v16 one (it watches abortFlag).
    let v16 = &rccl_rust_gin::rma::ncclRmaPlugin_v16;
    assert_ne!(v.connect.map(|f| f as usize), v16.connect.map(|f| f as usize));
}
