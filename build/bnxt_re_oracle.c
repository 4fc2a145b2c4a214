/* Facts taken from the Linux uapi header <rdma/bnxt_re-abi.h> (installed by
 * linux-libc-dev) by a C compiler: sizes, field offsets and constants. The
 * bnxt_re wire-format tests compare the Rust (host/bnxt/wire.rs) and C++
 * (device/include/rust_gin/bnxt/wire.h) definitions against this table.
 * The uapi header holds the control-path ABI only (context, PD, CQ and QP
 * responses, the WQE modes); the data-path formats live in rdma-core's
 * provider, which is not installed, and are restated with citations in
 * tests/wire_oracle_bnxt.rs. Generated list; edit freely. */
#include <stddef.h>
#include <rdma/bnxt_re-abi.h>

struct rust_gin_oracle_fact {
  const char *name;
  unsigned long long value;
};

#define SIZE(t) {"sizeof(" #t ")", sizeof(struct t)}
#define OFF(t, f) {"offsetof(" #t "." #f ")", offsetof(struct t, f)}
#define CONST(c) {#c, (unsigned long long)(c)}

const struct rust_gin_oracle_fact rust_gin_bnxt_re_facts[] = {
    SIZE(bnxt_re_uctx_resp),
    SIZE(bnxt_re_pd_resp),
    SIZE(bnxt_re_cq_resp),
    SIZE(bnxt_re_qp_resp),
    OFF(bnxt_re_uctx_resp, comp_mask),
    OFF(bnxt_re_uctx_resp, chip_id0),
    OFF(bnxt_re_uctx_resp, mode),
    OFF(bnxt_re_pd_resp, dpi),
    OFF(bnxt_re_pd_resp, dbr),
    OFF(bnxt_re_cq_resp, cqid),
    OFF(bnxt_re_cq_resp, tail),
    OFF(bnxt_re_cq_resp, phase),
    OFF(bnxt_re_qp_resp, qpid),
    CONST(BNXT_RE_ABI_VERSION),
    CONST(BNXT_RE_CHIP_ID0_CHIP_NUM_SFT),
    CONST(BNXT_RE_CHIP_ID0_CHIP_REV_SFT),
    CONST(BNXT_RE_CHIP_ID0_CHIP_MET_SFT),
    CONST(BNXT_RE_UCNTX_CMASK_HAVE_MODE),
    CONST(BNXT_QPLIB_WQE_MODE_STATIC),
    CONST(BNXT_QPLIB_WQE_MODE_VARIABLE),
};
const size_t rust_gin_bnxt_re_facts_len = sizeof(rust_gin_bnxt_re_facts) / sizeof(rust_gin_bnxt_re_facts[0]);
