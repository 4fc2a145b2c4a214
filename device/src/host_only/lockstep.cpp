// The lockstep wave: runs the device library's wave code on the CPU as a
// 64-lane AMD wave runs it, so that the GPU path (ballot, readlane, leaders,
// divergent spin loops) executes in tests. Each lane is a fiber on the
// calling thread; a scheduler lets the lanes run from one sync point
// (port/wave.h) to the next and then decides, as the hardware's exec mask
// would, which lanes go on:
//   - a spin loop in progress runs alone: its lanes iterate together, a lane
//     that has left waits at the loop's end until all have left;
//   - else a group of lanes entering a spin loop starts it;
//   - else every active lane must stand at the same wave primitive, which
//     then executes over exactly those lanes (the exec mask);
//   - a divergent region (wave::Region) narrows the active lanes to those
//     inside it; lanes at its end wait until every lane of it is there.
// What the model does not cover is written in docs/architecture.md.
#include "rust_gin/abi/lockstep.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>

#include "rust_gin/port/wave.h"

#if !defined(__x86_64__)
#error "the lockstep wave's fibers are written for x86-64 (the host build's only target)"
#endif

// Switches stacks: saves the callee-saved registers on the current stack,
// stores its pointer to *save, and resumes the stack at `load` (System V
// x86-64: every other register is caller-saved across this call).
extern "C" void rust_gin_ls_switch(void** save, void* load);
extern "C" void rust_gin_ls_trampoline();
asm(R"(
  .text
  .p2align 4
  .globl rust_gin_ls_switch
  .hidden rust_gin_ls_switch
  .type rust_gin_ls_switch,@function
rust_gin_ls_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size rust_gin_ls_switch, .-rust_gin_ls_switch

  .p2align 4
  .globl rust_gin_ls_trampoline
  .hidden rust_gin_ls_trampoline
  .type rust_gin_ls_trampoline,@function
rust_gin_ls_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size rust_gin_ls_trampoline, .-rust_gin_ls_trampoline
)");

namespace {

constexpr size_t kStackBytes = 512 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr size_t kMsgMax = 4096;

enum class Req : uint8_t { run, ballot, readlane, barrier, region_begin, region_end, spin_enter, spin_report, done };

const char* req_name(Req r) {
  switch (r) {
    case Req::run: return "running";
    case Req::ballot: return "ballot";
    case Req::readlane: return "readlane";
    case Req::barrier: return "wave barrier";
    case Req::region_begin: return "region begin";
    case Req::region_end: return "region end";
    case Req::spin_enter: return "spin loop";
    case Req::spin_report: return "spin iteration";
    case Req::done: return "returned";
  }
  return "?";
}

struct Wave;

struct Lane {
  Wave* wave = nullptr;
  void* sp = nullptr;
  void* stack = nullptr;
  uint32_t id = 0;
  bool runnable = false;
  Req req = Req::run;
  const char* file = "";
  int line = 0;
  uint64_t value = 0;  // ballot predicate, readlane value, region condition, spin "left"
  uint32_t arg = 0;    // readlane source lane
  uint64_t result = 0;
};

struct Wave {
  void* sched_sp = nullptr;
  Lane lanes[64];
  uint64_t live = 0;
  uint64_t spin_group = 0;
  uint64_t cur_spin = 0;
  uint64_t frames[80];  // lanes of each open region; frames[0] is the wave
  int depth = 0;
  rust_gin_ls_lane_fn fn = nullptr;
  void* ctx = nullptr;
  rust_gin_ls_stats stats = {};
  char msg[kMsgMax] = {};
  size_t msg_len = 0;
};

thread_local Wave* t_wave = nullptr;
thread_local Lane* t_lane = nullptr;

inline uint64_t bit(uint32_t i) { return uint64_t{1} << i; }

void lane_main(Lane* l) {
  l->wave->fn(l->wave->ctx, l->id);
  l->req = Req::done;
  rust_gin_ls_switch(&l->sp, l->wave->sched_sp);
  __builtin_trap();  // a finished lane is never resumed
}

// Lane stacks a thread has used, kept for its next wave: a harness that runs
// many short waves (gin-perf's --ep-lanes posts each batch of a peer's tokens
// as one) would otherwise spend most of its time in mmap, munmap and the first
// touch of fresh stack pages (about 7 us per lane here).
struct StackCache {
  void* stacks[64];
  uint32_t n = 0;
  ~StackCache() {
    while (n) munmap(stacks[--n], kStackBytes);
  }
};
thread_local StackCache t_stacks;

void* take_stack() {
  if (t_stacks.n) return t_stacks.stacks[--t_stacks.n];
  void* mem = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return nullptr;
  mprotect(mem, kGuardBytes, PROT_NONE);  // overflow faults instead of corrupting a neighbour
  return mem;
}

void give_stack(void* mem) {
  if (t_stacks.n < 64)
    t_stacks.stacks[t_stacks.n++] = mem;
  else
    munmap(mem, kStackBytes);
}

bool make_fiber(Lane* l) {
  void* mem = take_stack();
  if (!mem) return false;
  l->stack = mem;
  // The first switch pops r15..rbp and returns into the trampoline with the
  // stack pointer at `top` (16-byte aligned), so that its call enters
  // lane_main(l) (r13, r12) with the alignment the ABI promises a callee.
  uint64_t* top = reinterpret_cast<uint64_t*>(static_cast<char*>(mem) + kStackBytes);
  uint64_t* sp = top - 7;
  sp[0] = 0;                                                    // r15
  sp[1] = 0;                                                    // r14
  sp[2] = reinterpret_cast<uint64_t>(&lane_main);               // r13
  sp[3] = reinterpret_cast<uint64_t>(l);                        // r12
  sp[4] = 0;                                                    // rbx
  sp[5] = 0;                                                    // rbp
  sp[6] = reinterpret_cast<uint64_t>(&rust_gin_ls_trampoline);  // return address
  l->sp = sp;
  return true;
}

void note(Wave* w, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void note(Wave* w, const char* fmt, ...) {
  ++w->stats.model_errors;
  if (w->msg_len + 2 >= kMsgMax) return;
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(w->msg + w->msg_len, kMsgMax - w->msg_len - 1, fmt, ap);
  va_end(ap);
  if (n > 0) w->msg_len = w->msg_len + static_cast<size_t>(n) < kMsgMax - 2 ? w->msg_len + n : kMsgMax - 2;
  w->msg[w->msg_len++] = '\n';
  w->msg[w->msg_len] = 0;
}

// A lane hands control back to the scheduler until it is resumed.
uint64_t block(Req r, const char* file, int line, uint64_t value, uint32_t arg = 0) {
  Lane* l = t_lane;
  l->req = r;
  l->file = file;
  l->line = line;
  l->value = value;
  l->arg = arg;
  rust_gin_ls_switch(&l->sp, l->wave->sched_sp);
  return l->result;
}

void resume(Wave* w, uint64_t lanes, uint64_t result) {
  for (uint64_t m = lanes; m; m &= m - 1) {
    Lane& l = w->lanes[__builtin_ctzll(m)];
    l.result = result;
    l.req = Req::run;
    l.runnable = true;
  }
}

bool same_site(const Lane& a, const Lane& b) { return a.req == b.req && a.line == b.line && !strcmp(a.file, b.file); }

uint64_t lanes_where(Wave* w, uint64_t among, Req r) {
  uint64_t out = 0;
  for (uint64_t m = among; m; m &= m - 1) {
    const uint32_t i = __builtin_ctzll(m);
    if (w->lanes[i].req == r) out |= bit(i);
  }
  return out;
}

uint64_t lanes_at(Wave* w, uint64_t among, const Lane& site) {
  uint64_t out = 0;
  for (uint64_t m = among; m; m &= m - 1) {
    const uint32_t i = __builtin_ctzll(m);
    if (same_site(w->lanes[i], site)) out |= bit(i);
  }
  return out;
}

// One iteration of the spin loop in progress.
void step_spin(Wave* w) {
  const uint64_t g = w->spin_group & w->live;
  const uint64_t reporting = lanes_where(w, g, Req::spin_report);
  if (reporting != g) {
    // A lane of the loop stopped somewhere else: its step used a wave
    // primitive or a spin of its own, which no wave can run inside a loop
    // that only some lanes are in. Let it go on alone.
    const Lane& l = w->lanes[__builtin_ctzll(g & ~reporting)];
    note(w, "lane %u: %s at %s:%d inside a spin step (loop at %s:%d)", l.id, req_name(l.req), l.file, l.line,
         w->lanes[__builtin_ctzll(g)].file, w->lanes[__builtin_ctzll(g)].line);
    w->spin_group &= ~(g & ~reporting);
    resume(w, g & ~reporting, 0);
    return;
  }
  uint64_t left = 0;
  for (uint64_t m = g; m; m &= m - 1) {
    const uint32_t i = __builtin_ctzll(m);
    if (w->lanes[i].value) left |= bit(i);
  }
  ++w->stats.spin_iterations;
  ++w->cur_spin;
  if (left == g) {
    if (w->cur_spin > w->stats.max_spin_iterations) w->stats.max_spin_iterations = w->cur_spin;
    w->spin_group = 0;
    resume(w, g, 1);
  } else {
    resume(w, g & ~left, 0);
    // What the loop waits for comes from another thread (a NIC, another
    // wave): let it run, as backoff() does for a plain host thread.
    sched_yield();
  }
}

void decide(Wave* w) {
  if (w->spin_group & w->live) return step_spin(w);
  w->spin_group = 0;
  const uint64_t top = w->frames[w->depth] & w->live;
  const uint64_t at_end = lanes_where(w, top, Req::region_end);
  const uint64_t active = top & ~at_end;
  if (!active) {
    // Every lane of the innermost region is at its end: reconverge.
    if (w->depth == 0) {
      note(w, "region end without a region (lanes %#llx)", static_cast<unsigned long long>(at_end));
      return resume(w, at_end, 0);
    }
    --w->depth;
    ++w->stats.steps;
    return resume(w, at_end, 0);
  }
  const uint64_t entering = lanes_where(w, active, Req::spin_enter);
  if (entering) {
    const uint64_t g = lanes_at(w, entering, w->lanes[__builtin_ctzll(entering)]);
    w->spin_group = g;
    w->cur_spin = 0;
    ++w->stats.spin_loops;
    return resume(w, g, 0);
  }
  const Lane& first = w->lanes[__builtin_ctzll(active)];
  const uint64_t g = lanes_at(w, active, first);
  if (g != active) {
    const Lane& other = w->lanes[__builtin_ctzll(active & ~g)];
    note(w, "divergent wave: lanes %#llx at %s (%s:%d) while lanes %#llx are at %s (%s:%d); mark the branch with "
         "wave::Region",
         static_cast<unsigned long long>(g), req_name(first.req), first.file, first.line,
         static_cast<unsigned long long>(active & ~g), req_name(other.req), other.file, other.line);
  }
  ++w->stats.steps;
  switch (first.req) {
    case Req::ballot: {
      uint64_t m = 0;
      for (uint64_t r = g; r; r &= r - 1) {
        const uint32_t i = __builtin_ctzll(r);
        if (w->lanes[i].value) m |= bit(i);
      }
      return resume(w, g, m);
    }
    case Req::readlane: {
      const uint32_t src = first.arg;
      for (uint64_t r = g; r; r &= r - 1) {
        const Lane& l = w->lanes[__builtin_ctzll(r)];
        if (l.arg != src) {
          note(w, "readlane at %s:%d: lane index not uniform (lane %u asks %u, lane %u asks %u)", first.file,
               first.line, first.id, src, l.id, l.arg);
          break;
        }
      }
      if (src >= 64 || !((g >> src) & 1)) {
        note(w, "readlane at %s:%d from lane %u, which is not active (exec %#llx): reads a stale register", first.file,
             first.line, src, static_cast<unsigned long long>(g));
        return resume(w, g, src < 64 ? w->lanes[src].value : 0);
      }
      return resume(w, g, w->lanes[src].value);
    }
    case Req::barrier:
      return resume(w, g, 0);
    case Req::region_begin: {
      if (w->depth + 1 >= static_cast<int>(sizeof w->frames / sizeof w->frames[0])) {
        note(w, "regions nested too deep at %s:%d", first.file, first.line);
        return resume(w, g, 0);
      }
      w->frames[++w->depth] = g;
      // Each lane learns its own condition.
      for (uint64_t r = g; r; r &= r - 1) {
        Lane& l = w->lanes[__builtin_ctzll(r)];
        l.result = l.value;
        l.req = Req::run;
        l.runnable = true;
      }
      return;
    }
    default:
      note(w, "lane %u: unexpected %s at %s:%d", first.id, req_name(first.req), first.file, first.line);
      return resume(w, g, 0);
  }
}

}  // namespace

extern "C" {

// Waves running now, on any thread: port/wave.h calls no hook while it is 0.
// Raised before a wave's first lane runs and lowered after its last returns,
// on the wave's own thread, so its lanes always see their own wave counted.
uint32_t rust_gin_ls_waves_running = 0;

int rust_gin_ls_lane(void) { return t_lane ? static_cast<int>(t_lane->id) : -1; }

uint64_t rust_gin_ls_ballot(int p, const char* file, int line) { return block(Req::ballot, file, line, p != 0); }

uint64_t rust_gin_ls_readlane(uint64_t v, uint32_t lane, const char* file, int line) {
  return block(Req::readlane, file, line, v, lane);
}

void rust_gin_ls_barrier(const char* file, int line) { block(Req::barrier, file, line, 0); }

int rust_gin_ls_region_begin(int cond, const char* file, int line) {
  return static_cast<int>(block(Req::region_begin, file, line, cond != 0));
}

void rust_gin_ls_region_end(const char* file, int line) { block(Req::region_end, file, line, 0); }

void rust_gin_ls_spin_enter(const char* file, int line) { block(Req::spin_enter, file, line, 0); }

int rust_gin_ls_spin_report(int left, const char* file, int line) {
  return static_cast<int>(block(Req::spin_report, file, line, left != 0));
}

uint64_t rust_gin_lockstep_run(uint64_t exec, rust_gin_ls_lane_fn fn, void* ctx, rust_gin_ls_stats* stats, char* msg,
                               size_t msg_cap) {
  if (t_wave) {
    if (msg && msg_cap) snprintf(msg, msg_cap, "rust_gin_lockstep_run called from inside a lane");
    return 1;
  }
  Wave* w = new Wave();
  w->fn = fn;
  w->ctx = ctx;
  w->frames[0] = exec;
  for (uint32_t i = 0; i < 64; ++i) {
    Lane& l = w->lanes[i];
    l.wave = w;
    l.id = i;
    if (!((exec >> i) & 1)) continue;
    if (!make_fiber(&l)) {
      note(w, "no memory for lane %u's stack", i);
      continue;
    }
    l.runnable = true;
    w->live |= bit(i);
  }
  t_wave = w;
  __atomic_fetch_add(&rust_gin_ls_waves_running, 1u, __ATOMIC_RELAXED);
  while (w->live) {
    for (uint32_t i = 0; i < 64; ++i) {
      Lane& l = w->lanes[i];
      if (!l.runnable) continue;
      l.runnable = false;
      t_lane = &l;
      rust_gin_ls_switch(&w->sched_sp, l.sp);
      t_lane = nullptr;
      if (l.req == Req::done) w->live &= ~bit(i);
    }
    if (w->live) decide(w);
  }
  __atomic_fetch_sub(&rust_gin_ls_waves_running, 1u, __ATOMIC_RELAXED);
  t_wave = nullptr;
  for (Lane& l : w->lanes) {
    if (l.stack) give_stack(l.stack);
  }
  if (stats) *stats = w->stats;
  if (msg && msg_cap) {
    const size_t n = w->msg_len < msg_cap - 1 ? w->msg_len : msg_cap - 1;
    memcpy(msg, w->msg, n);
    msg[n] = 0;
  }
  const uint64_t errors = w->stats.model_errors;
  delete w;
  return errors;
}

}  // extern "C"
