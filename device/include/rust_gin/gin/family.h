// The NIC family as a policy of the GIN operations (docs/architecture.md,
// "NIC families"): every operation is written once as a template over the
// family F (mlx5::Family, bnxt::Family, ionic::Family), which fixes the
// queue descriptor, the per-peer descriptor and the WQE, doorbell and CQE
// formats at compile time. An entry point reads its context's family once
// and runs that family's instance (with_family): one scalar branch per
// operation, none per request or WQE.
#pragma once

#include "rust_gin/abi/gin.h"
#include "rust_gin/bnxt/family.h"
#include "rust_gin/ionic/family.h"
#include "rust_gin/mlx5/family.h"
#include "rust_gin/port/wave.h"

namespace rust_gin {
namespace gin {

// Whether F is mlx5 (its own descriptor; the only family with DC and a flush WQE).
template <class F>
struct IsMlx5 {
  static constexpr bool value = false;
};
template <>
struct IsMlx5<mlx5::Family> {
  static constexpr bool value = true;
};

// No family: for waits that poll no queue (gin/ops.h wait_word).
struct NoFamily {};
template <class F>
struct IsNoFamily {
  static constexpr bool value = false;
};
template <>
struct IsNoFamily<NoFamily> {
  static constexpr bool value = true;
};

// The per-peer descriptor of an RC context of family F (abi/gin.h).
template <class F>
struct PeerOf {
  typedef rust_gin_nic_peer T;
};
template <>
struct PeerOf<mlx5::Family> {
  typedef rust_gin_peer T;
};

// The families this build of the device library serves, a mask of
// 1 << RUST_GIN_FAMILY_*: every family in the host build (the tests run them
// all); in the GPU builds the ones build.rs is asked for
// (RUST_GIN_NIC_FAMILIES, mlx5 by default), because each family's
// instance inlined into an entry point costs the kernels registers
// (docs/nic-families.md, "Choosing the families at build time").
#ifndef RUST_GIN_FAMILIES
#define RUST_GIN_FAMILIES ((1u << RUST_GIN_FAMILY_MLX5) | (1u << RUST_GIN_FAMILY_BNXT) | (1u << RUST_GIN_FAMILY_IONIC))
#endif
constexpr uint32_t kFamilies = RUST_GIN_FAMILIES;
static_assert(kFamilies != 0 && (kFamilies >> (RUST_GIN_FAMILY_IONIC + 1)) == 0, "RUST_GIN_FAMILIES: a mask of 1..7");
template <uint32_t Id>
constexpr bool built() {
  return ((kFamilies >> Id) & 1u) != 0;
}

// Runs op(F{}) for the family of the wave's contexts, read from its lowest
// active lane: a scalar switch, so only one family's code is live at a time
// (three bodies in sequence would keep every argument live across all three
// and cost the kernels registers). The lanes of one call must name contexts
// of one family (every context of a handle is, and RCCL's kernels call with
// one communicator's handle); a lane whose context is of another family, or
// of a family this build does not serve, gets refuse(wave's family) and runs
// nothing.
template <typename Op, typename Refuse>
RG_INLINE int with_family(uint32_t family, Op op, Refuse refuse) {
  // One family built (the GPU default): that family's code, with no test.
  // No context of another family exists: createContext refuses a NIC of a
  // family the GPU library was not built with (host/gin/context.rs), and a
  // check here would cost the flush kernel 4 VGPRs (the error records merge).
  if constexpr (kFamilies == (1u << RUST_GIN_FAMILY_MLX5)) {
    (void)family, (void)refuse;
    return op(mlx5::Family{});
  } else if constexpr (kFamilies == (1u << RUST_GIN_FAMILY_BNXT)) {
    (void)family, (void)refuse;
    return op(bnxt::Family{});
  } else if constexpr (kFamilies == (1u << RUST_GIN_FAMILY_IONIC)) {
    (void)family, (void)refuse;
    return op(ionic::Family{});
  }
  const uint32_t fam = wave::readlane32(family, static_cast<uint32_t>(__builtin_ctzll(wave::ballot(true))));
  wave::Region r(family == fam);
  if (!r) return refuse(fam);
  switch (assume_uniform(fam)) {
    case RUST_GIN_FAMILY_MLX5:
      if constexpr (built<RUST_GIN_FAMILY_MLX5>()) return op(mlx5::Family{});
      break;
    case RUST_GIN_FAMILY_BNXT:
      if constexpr (built<RUST_GIN_FAMILY_BNXT>()) return op(bnxt::Family{});
      break;
    case RUST_GIN_FAMILY_IONIC:
      if constexpr (built<RUST_GIN_FAMILY_IONIC>()) return op(ionic::Family{});
      break;
    default:  // not a family: a corrupt context
      break;
  }
  return refuse(fam);
}

}  // namespace gin
}  // namespace rust_gin
