/* How the device library's host build (tests, the RMA plugin's host-side
 * posting) reaches the NIC that owns a queue: the provider that created the
 * queue supplies these calls in its descriptor (rust_gin_mlx5_sq.host_doorbell).
 * Doorbells go by owner, never by address: nothing reads the target address
 * to find out who it belongs to. GPU code never reads this. C, for bindgen. */
#ifndef RUST_GIN_ABI_HOST_DOORBELL_H
#define RUST_GIN_ABI_HOST_DOORBELL_H

#include <stdint.h>

typedef struct rust_gin_host_doorbell {
  /* The 8-byte doorbell store of `value` (wire order) to `reg`, with the
   * provider's ordering (mlx5: fence, one 64-bit MMIO store, WC flush). */
  void (*ring)(const void* ctx, volatile uint64_t* reg, uint64_t value);
  /* Told after a doorbell-record word was stored (already in memory); NULL
   * when the NIC needs no more than the store (hardware). */
  void (*record)(const void* ctx, volatile uint32_t* dbr, uint32_t value);
  const void* ctx;
} rust_gin_host_doorbell;

#endif
