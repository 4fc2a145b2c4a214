/* The GIN v14 plugin interface as RCCL declares it (plugin/gin/gin_v14.h,
 * plugin/net/net_v12.h, net_device.h), restated so that the smoke test drives
 * rust-gin's vtable with no RCCL on the machine. Only what the smoke test
 * calls is typed; the layouts are checked against the Rust side's
 * (host/ffi/gin.rs, host/ffi/nccl.rs) by the static_asserts below. */
#ifndef GIN_SMOKE_GIN_V14_H
#define GIN_SMOKE_GIN_V14_H

#include <stddef.h>
#include <stdint.h>

typedef int ncclResult_t; /* ncclSuccess = 0 */
#define GIN_SMOKE_NCCL_SUCCESS 0
#define GIN_SMOKE_NET_HANDLE_MAXSIZE 128
#define GIN_SMOKE_PTR_CUDA 0x2
/* RCCL numbers its log levels with ERROR = 1 inserted (host/ffi/nccl.rs). */
#define GIN_SMOKE_LOG_WARN 3
#define GIN_SMOKE_LOG_INFO 4

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

typedef struct {
  int ndevs;
  int devs[8];
} ncclNetVDeviceProps_v12_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  int netDeviceType;
  int netDeviceVersion;
  void* handle; /* rust-gin: a rust_gin_handle* in GPU-visible memory */
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;

typedef struct {
  bool supportsStrongSignals;
  bool supportsVASignals;
} ncclGinProperties_v14_t;

typedef struct {
  int nSignals;
  int nCounters;
  int nContexts;
  int queueDepth;
  int trafficClass;
  int backendVersion;
  int rankStride;
} ncclGinConfig_v14_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getGinProperties)(ncclGinProperties_v14_t* props);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*createContext)(void* collComm, ncclGinConfig_v14_t* config, void** ginCtx,
                                ncclNetDeviceHandle_v11_t** devHandle);
  ncclResult_t (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags, void** mhandle,
                           void** ginHandle);
  void* regMrSymDmaBuf; /* not used here */
  ncclResult_t (*deregMrSym)(void* collComm, void* mhandle);
  ncclResult_t (*destroyContext)(void* ginCtx);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*ginProgress)(void* ginCtx);
  ncclResult_t (*queryLastError)(void* ginCtx, bool* hasError);
  ncclResult_t (*finalize)(void* ctx);
} ncclGin_v14_t;

#ifdef __cplusplus
static_assert(sizeof(ncclNetProperties_v12_t) == 128 && offsetof(ncclNetProperties_v12_t, netDeviceType) == 56 &&
                  offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104,
              "ncclNetProperties_v12_t layout (host/ffi/nccl.rs)");
static_assert(sizeof(ncclNetDeviceHandle_v11_t) == 32 && offsetof(ncclNetDeviceHandle_v11_t, handle) == 8 &&
                  offsetof(ncclNetDeviceHandle_v11_t, needsProxyProgress) == 24,
              "ncclNetDeviceHandle_v11_t layout (host/ffi/nccl.rs)");
static_assert(sizeof(ncclGinConfig_v14_t) == 28, "ncclGinConfig_v14_t layout (host/ffi/gin.rs)");
static_assert(sizeof(ncclGin_v14_t) == 136 && offsetof(ncclGin_v14_t, createContext) == 56 &&
                  offsetof(ncclGin_v14_t, ginProgress) == 112 && offsetof(ncclGin_v14_t, finalize) == 128,
              "ncclGin_v14_t layout (host/ffi/gin.rs)");
extern "C" const ncclGin_v14_t ncclGinRustPlugin_v14; /* librccl_rust_gin.a */
#endif

#endif
