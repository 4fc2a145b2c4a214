/* rust-gin device ABI: the extern "C" device functions that RCCL's device
 * dispatch (the ncclGinApi_*<NCCL_NET_DEVICE_GIN_RUST> specialisations in the
 * patch series) calls. This header is the only contract between the patch and
 * the device library; tests/patch_series.rs checks the patch's declarations
 * against it.
 *
 * Every function exists in the GPU build and, compiled for x86-64, in the
 * host crate, so tests on a CPU call exactly what a kernel calls.
 *
 * Conventions
 * - `handle` is the device handle the host returned from createContext
 *   (ncclNetDeviceHandle.handle); `context` is RCCL's contextId within it.
 * - Windows are the ginHandle values the host returned from regMrSym.
 * - Functions return RUST_GIN_OK or an error code (abi/error.h). The first
 *   error also lands in the context's sticky error record, which the host's
 *   queryLastError reports; a failed operation never hangs and never traps.
 * - Every wait is bounded: by `timeout_cycles` when non-zero (RCCL's clock64
 *   cycles), always by the context's own timeout (RCCL_RUST_GIN_TIMEOUT_MS),
 *   and it returns early when `*abort_flag` becomes non-zero.
 * - Many lanes may call the same function at once: the lanes of a wave that
 *   post to the same queue share one ticket per request step (the data,
 *   then its signal) and one doorbell.
 */
#ifndef RUST_GIN_DEVICE_H
#define RUST_GIN_DEVICE_H

#include <stdint.h>

#include "rust_gin/abi/error.h"
#include "rust_gin/abi/gin.h"
#include "rust_gin/port/port.h"

/* Put `bytes` from src_window+src_off to peer's dst_window+dst_off, then the
 * optional signal (seen at the peer only after the data). With has_counter,
 * local counter `counter_id` advances once the put has completed locally;
 * the call returns after posting, and whoever polls the queue (a counter read
 * or wait, a flush) credits the counter. bytes may be 0 (signal only, as
 * RCCL's VA signals). */
RG_EXTERN_C RG_DEV int rust_gin_put(const void* handle, uint32_t context, uint32_t peer, const void* dst_window,
                                    uint64_t dst_off, const void* src_window, uint64_t src_off, uint64_t bytes,
                                    rust_gin_signal signal, uint32_t has_counter, uint32_t counter_id, uint32_t flags);

/* rust_gin_put on a queue the calling wave owns (RCCL: an ncclGin of
 * NCCL_GIN_RESOURCE_SHARING_THREAD, GDAKI's EXCLUSIVE): posted with no ticket
 * and no publish turn (docs/architecture.md, "Exclusive queues"). A queue
 * another producer is posting to refuses it, and so does a DC context (a DCI
 * serves several peers): RUST_GIN_ARG_NOT_EXCLUSIVE. A separate entry, not
 * a flag, so that the shared entry carries none of its code. */
RG_EXTERN_C RG_DEV int rust_gin_put_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                              const void* dst_window, uint64_t dst_off, const void* src_window,
                                              uint64_t src_off, uint64_t bytes, rust_gin_signal signal,
                                              uint32_t has_counter, uint32_t counter_id, uint32_t flags);

/* Put a value of `size` bytes (1, 2, 4 or 8), carried inline in the WQE. */
RG_EXTERN_C RG_DEV int rust_gin_put_value(const void* handle, uint32_t context, uint32_t peer,
                                          const void* dst_window, uint64_t dst_off, uint64_t value, uint32_t size,
                                          rust_gin_signal signal, uint32_t flags);

/* A signal alone. */
RG_EXTERN_C RG_DEV int rust_gin_signal_peer(const void* handle, uint32_t context, uint32_t peer,
                                            rust_gin_signal signal, uint32_t flags);

/* Read `bytes` from peer's remote_window+remote_off into local_window+local_off.
 * The data is in place after a later flush, or wait on a flush_async request. */
RG_EXTERN_C RG_DEV int rust_gin_get(const void* handle, uint32_t context, uint32_t peer, const void* remote_window,
                                    uint64_t remote_off, const void* local_window, uint64_t local_off,
                                    uint64_t bytes, uint32_t flags);

/* rust_gin_put_value, rust_gin_signal_peer and rust_gin_get on a queue the
 * calling wave owns, as rust_gin_put_exclusive. */
RG_EXTERN_C RG_DEV int rust_gin_put_value_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                                    const void* dst_window, uint64_t dst_off, uint64_t value,
                                                    uint32_t size, rust_gin_signal signal, uint32_t flags);
RG_EXTERN_C RG_DEV int rust_gin_signal_peer_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                                      rust_gin_signal signal, uint32_t flags);
RG_EXTERN_C RG_DEV int rust_gin_get_exclusive(const void* handle, uint32_t context, uint32_t peer,
                                              const void* remote_window, uint64_t remote_off,
                                              const void* local_window, uint64_t local_off, uint64_t bytes,
                                              uint32_t flags);

/* Waits until every operation posted to the peers coop_rank, coop_rank +
 * coop_size, ... has completed: the calling thread's share of a cooperative
 * flush over all peers (RCCL's Flush passes coop.thread_rank(), coop.size()). */
RG_EXTERN_C RG_DEV int rust_gin_flush(const void* handle, uint32_t context, uint32_t coop_rank, uint32_t coop_size,
                                      const uint32_t* abort_flag, uint64_t timeout_cycles);

/* Starts a flush of one peer: records what must complete, without waiting. */
RG_EXTERN_C RG_DEV int rust_gin_flush_async(const void* handle, uint32_t context, uint32_t peer,
                                            rust_gin_request* out);

/* Waits for a flush_async request. */
RG_EXTERN_C RG_DEV int rust_gin_wait(const void* handle, rust_gin_request request, const uint32_t* abort_flag,
                                     uint64_t timeout_cycles);

/* Signals: the local 64-bit word of an indexed signal and the offset to
 * subtract from it (reset moves the offset instead of racing in-flight remote
 * atomics with a store). In write mode the word is folded from the senders'
 * slots when it is asked for, read, waited on or refreshed. */
RG_EXTERN_C RG_DEV uint64_t* rust_gin_signal_ptr(const void* handle, uint32_t context, uint32_t id,
                                                 uint64_t* offset);
/* Brings up to date the word a wait of RCCL's generic code polls, the one
 * rust_gin_signal_ptr or rust_gin_counter_ptr returned (`what`:
 * RUST_GIN_PROGRESS_SIGNAL or _COUNTER). RCCL's signal and counter waits
 * call it before every load of that word (patch 0004, ncclGinApi_Progress):
 * a signal in a context whose signals are slot writes is folded from the
 * senders' slots; a counter advances once the queues with counted puts are
 * polled (the NIC writes CQEs, not counters). Cheap and non-blocking: RCCL's
 * loop reads the abort flag between calls. A failed queue is recorded in
 * the error record (queryLastError). */
RG_EXTERN_C RG_DEV void rust_gin_progress(const void* handle, uint32_t context, uint32_t what, uint32_t id);
RG_EXTERN_C RG_DEV uint64_t rust_gin_signal_read(const void* handle, uint32_t context, uint32_t id);
RG_EXTERN_C RG_DEV int rust_gin_signal_wait(const void* handle, uint32_t context, uint32_t id, uint64_t least,
                                            const uint32_t* abort_flag, uint64_t timeout_cycles);
RG_EXTERN_C RG_DEV void rust_gin_signal_reset(const void* handle, uint32_t context, uint32_t id);
/* Resets a VA signal: the local 64-bit word at window+offset. */
RG_EXTERN_C RG_DEV void rust_gin_va_signal_reset(const void* window, uint64_t offset);

/* Counters: local, incremented once a put that names them completed locally.
 * Reads, waits and counter_ptr poll the queues of counted puts, so they
 * advance without any lane having waited for the put; the word counter_ptr
 * returned is current as of the call, and rust_gin_progress brings it up to
 * date again (RCCL's waitCounter polls it). */
RG_EXTERN_C RG_DEV uint64_t* rust_gin_counter_ptr(const void* handle, uint32_t context, uint32_t id);
RG_EXTERN_C RG_DEV uint64_t rust_gin_counter_read(const void* handle, uint32_t context, uint32_t id);
RG_EXTERN_C RG_DEV int rust_gin_counter_wait(const void* handle, uint32_t context, uint32_t id, uint64_t least,
                                             const uint32_t* abort_flag, uint64_t timeout_cycles);
RG_EXTERN_C RG_DEV void rust_gin_counter_reset(const void* handle, uint32_t context, uint32_t id);

/* Whether a signal's arrival implies every earlier put to that peer from the
 * same context has landed: true (one RC queue pair per peer and context
 * executes in order). */
RG_EXTERN_C RG_DEV int rust_gin_supports_strong_signal(const void* handle);

#endif
