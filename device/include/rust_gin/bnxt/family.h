// Broadcom bnxt_re (Thor2) as a NIC-family policy of the family-neutral
// producer and completion protocol (queue/send_queue.h): WQEs, doorbells
// and CQEs from bnxt/wire.h. docs/architecture.md, "NIC families", has the
// interface and what this first pass leaves out.
//
// - Static WQE mode: every WQE occupies 8 slots (128 bytes) whatever its
//   size, so one ticket is one WQE at a fixed stride and the doorbell index
//   is the WQE index (rdma-core rings jsqq->start_idx in that mode); the
//   epoch is the ring's wrap parity. The variable mode (3 slots per WQE,
//   WQEs straddling the ring's end) is not supported yet.
// - No doorbell record: the doorbell carries the index; WQEs are made
//   visible by a system-scope release before it.
// - The MSN search table Thor2 keeps right after the ring (rdma-core
//   verbs.c bnxt_re_fill_psns_for_msntbl: one le64 per WQE, index = the
//   WQE's, table size roundup_pow_of_two(WQEs) = the ring's): each WQE's
//   start and next PSN, a prefix sum over the WQEs in ticket order, so the
//   producer assigns them while it holds the publish turn
//   (SendQueue::note_psns, gin/lanes.h). Written when the descriptor names
//   the path MTU.
// - No NOP or DUMP: every batch's last WQE asks for a CQE (kFlushWqe false).
//
// Field quirks, each a named policy here (docs/nic-families.md, "Field
// quirks as policies"):
// - kDoorbellPerWqe: one doorbell per WQE unless the descriptor's
//   doorbell_group asks for one per published batch (SendQueue::ring);
//   reports conflict on batching (torchcomms#2714 vs mori#421).
// - kMaxWqeBytes: at most 16 MiB per WQE; the GIN operations split larger
//   puts and gets (gin/ops.h).
// - kFenceAtomics: at most one atomic outstanding per QP: every atomic WQE
//   carries the fence (UC_FENCE, what IBV_SEND_FENCE sets), so the NIC
//   starts it only once every earlier READ and atomic completed. No wait on
//   the GPU: the NIC holds the queue behind it.
// - PSNs per packet: the MSN table above (packets()).
#pragma once

#include "rust_gin/abi/nic_queue.h"
#include "rust_gin/bnxt/wire.h"
#include "rust_gin/core/error.h"
#include "rust_gin/queue/nic_family.h"
#include "rust_gin/queue/request.h"

namespace rust_gin {
namespace bnxt {

using queue::Request;

// Whether every atomic WQE is fenced: at most one atomic outstanding.
constexpr bool kFenceAtomics = true;

RG_INLINE uint8_t wr_flags(const Request& r, bool cq_update) {
  uint8_t f = cq_update ? static_cast<uint8_t>(WR_SIGNALED) : 0;
  const bool atomic = r.opcode == queue::OP_ATOMIC_FA || r.opcode == queue::OP_ATOMIC_CS;
  if ((r.flags & queue::REQ_FENCE) || (kFenceAtomics && atomic)) f |= WR_UC_FENCE;
  else if (r.flags & queue::REQ_SMALL_FENCE) f |= WR_RD_FENCE;
  if (r.flags & queue::REQ_SOLICITED) f |= WR_SE;
  return f;
}

// Whether the family can encode `r` (queue/request.h): no NOP or DUMP.
RG_INLINE bool request_valid(const Request& r) { return queue::request_valid_without_flush_wqe(r); }

// The three slots of the WQE for `r`, the bytes bnxt/wire.h's builders
// (wqe_rdma, wqe_write_inline8, wqe_atomic) make, computed slot by slot by
// selects and handed to `store(i, slot)` as soon as each exists (as mlx5's
// emit_wqe: one slot live at a time keeps the posting kernels' VGPRs low).
// Every WQE this library posts is 3 slots: header, rdma/atomic, one SGE or
// up to 8 inline bytes.
template <typename Store>
RG_INLINE void emit_wqe(const Request& r, bool cq_update, Store store) {
  const uint8_t op = r.opcode;
  const bool atomic = op == queue::OP_ATOMIC_FA || op == queue::OP_ATOMIC_CS;
  const bool inl = (r.flags & queue::REQ_INLINE) && op == queue::OP_RDMA_WRITE;
  const uint8_t bop = op == queue::OP_ATOMIC_FA       ? OP_ATOMIC_FA
                      : op == queue::OP_ATOMIC_CS     ? OP_ATOMIC_CS
                      : op == queue::OP_RDMA_READ     ? OP_RDMA_READ
                      : op == queue::OP_RDMA_WRITE_IMM ? OP_RDMA_WRITE_IMM
                                                      : OP_RDMA_WRITE;
  const uint8_t f = static_cast<uint8_t>(wr_flags(r, cq_update) | (inl ? WR_INLINE : 0));
  // key_immd: the rkey for atomics, WRITE_IMM's immediate in host order
  // (htole32(be32toh(imm_data))); lhdr: the remote address for atomics,
  // else the payload length.
  const uint32_t key = atomic ? r.rkey : op == queue::OP_RDMA_WRITE_IMM ? bswap32(r.imm) : 0u;
  store(0, slot_bsqe(bop, f, wqe_slots(1, 0, false), key, atomic ? r.raddr : uint64_t{r.length}));
  store(1, atomic ? slot_atomic(r.operand0, op == queue::OP_ATOMIC_CS ? r.operand1 : 0) : slot_rdma(r.raddr, r.rkey));
  store(2, inl ? slot_inline8(r.operand0, r.length) : slot_sge(r.laddr, r.lkey, atomic ? 8u : r.length));
}
static_assert(wqe_slots(1, 0, false) == 3 && wqe_slots(0, 8, true) == 3, "every WQE posted is 3 slots");

struct Family : queue::NicSqFamily<Family> {
  static constexpr uint32_t kWqeShift = SLOT_SHIFT + 3;  // 8 slots of 16 bytes
  static constexpr bool kPsnTable = true;
  static constexpr uint64_t kMaxWqeBytes = uint64_t{1} << 24;  // 16 MiB
  static constexpr bool kDoorbellPerWqe = true;

  // PSNs the WQE for `r` takes: its packets at the path MTU (a READ's
  // response packets; 1 for an empty message), as rdma-core counts them.
  RG_INLINE static uint32_t packets(const Desc* d, const Request& r) {
    return bnxt::packets(r.length, load_invariant(&d->path_mtu));
  }
  // The MSN entry of the WQE at ticket `index`: its ring index and PSN
  // range [start, next). Two 32-bit stores: the NIC reads the entry only
  // after the doorbell's release, and the ISA checks allow no plain 64-bit
  // store but a doorbell.
  RG_INLINE static void note_psn(const Desc* d, uint64_t index, uint64_t start, uint64_t next) {
    const uint32_t log = load_invariant(&d->log_wqe_cnt);
    const uint32_t slot = static_cast<uint32_t>(index) & mask(log);
    volatile uint32_t* e = reinterpret_cast<volatile uint32_t*>(load_invariant(&d->wqe_buf) +
                                                                (uint64_t{1} << (log + kWqeShift))) +
                           2 * slot;
    const uint64_t v = msn_entry(slot, static_cast<uint32_t>(next), static_cast<uint32_t>(start));
    e[0] = static_cast<uint32_t>(v);
    e[1] = static_cast<uint32_t>(v >> 32);
  }

  RG_INLINE static void write(const Slots& s, uint64_t index, const Request& r, bool cq_update) {
    Slot* dst = reinterpret_cast<Slot*>(s.buf + ((index & mask(s.log)) << kWqeShift));
    emit_wqe(r, cq_update, [dst](unsigned i, const Slot& s) { dst[i] = s; });
  }

  // The SQ doorbell for producer index pi (in WQEs).
  RG_INLINE static uint64_t sq_doorbell(const Desc* d, uint64_t pi) {
    const uint32_t log = load_invariant(&d->log_wqe_cnt);
    return db_value(static_cast<uint32_t>(pi) & mask(log), static_cast<uint32_t>(pi >> log) & 1u,
                    load_invariant(&d->qpn), QUE_TYPE_SQ);
  }

  // A requester CQE: the bcqe word (phase, type, status) decides; con_indx
  // says how far the SQ completed.
  struct Cqe {
    const uint8_t* p;
    uint32_t flg;
  };
  RG_INLINE static bool cqe_next(const Desc* d, CqRing log, uint64_t ci, Cqe* c) {
    c->p = reinterpret_cast<const uint8_t*>(load_invariant(&d->cq_buf)) + ((ci & mask(log)) * CQE_BYTES);
    c->flg = atomic_load(reinterpret_cast<const uint32_t*>(c->p + offsetof(bnxt::Cqe, hdr)), __ATOMIC_RELAXED,
                         Scope::system);
    const uint32_t want = (load_invariant(&d->cq_phase) ^ static_cast<uint32_t>(ci >> log)) & 1u;
    return cqe_phase(c->flg) == want;
  }
  // con_indx is the SQ consumer index after the completed WQE; taken modulo
  // the ring (whether the NIC masks it or not), a CQE completes 1..depth WQEs.
  RG_INLINE static uint64_t cqe_end(const Desc* d, const Cqe& c, uint64_t done) {
    const uint32_t con = atomic_load(reinterpret_cast<const uint32_t*>(c.p + offsetof(ReqCqe, con_indx)),
                                     __ATOMIC_RELAXED, Scope::system);
    const uint32_t m = mask(load_invariant(&d->log_wqe_cnt));
    const uint32_t n = (con - static_cast<uint32_t>(done)) & m;
    return done + (n ? n : m + 1);
  }
  RG_INLINE static bool cqe_failed(const Cqe& c) {
    return cqe_status(c.flg) != REQ_ST_OK || cqe_type(c.flg) == WC_TYPE_TERM;
  }
  RG_INLINE static ErrorInfo cqe_error(const Desc* d, const Cqe& c, uint64_t end) {
    ErrorInfo e = {};
    e.qpn = load_invariant(&d->qpn);
    e.wqe_index = static_cast<uint32_t>((end - 1) & 0xffff);
    e.syndrome = static_cast<uint8_t>(cqe_status(c.flg));  // bnxt_re_req_wc_status
    e.vendor_syndrome = static_cast<uint8_t>(cqe_type(c.flg));
    return e;
  }
  // The CQ doorbell: consumer head and its wrap parity, behind a release
  // like every doorbell (the ISA checks hold every 64-bit store to that).
  RG_INLINE static void cq_consumed(const Desc* d, uint64_t ci) {
    const uint32_t log = load_invariant(&d->log_cq_cnt);
    ring_cq(d, db_value(static_cast<uint32_t>(ci) & mask(log), static_cast<uint32_t>(ci >> log) & 1u,
                        load_invariant(&d->cqn), QUE_TYPE_CQ));
  }
};

}  // namespace bnxt
}  // namespace rust_gin
