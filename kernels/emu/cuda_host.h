// cuda_host.h — compiles fp8c's CUDA kernels (kernels/*.cu) as host C++ for the emulated device
// of issue #15: the same source that NVRTC compiles for Hopper runs here with CUDA's execution
// model, so the backend's launches can be checked on a machine without a GPU.
//
// Execution model. A launch runs its blocks one after another on the calling OS thread; the
// threads of a block are fibers (ucontext) scheduled cooperatively: each runs until it
// reaches __syncthreads(), a warp-synchronous intrinsic, or its end. A block barrier opens
// when every thread of the block that has not exited waits at it; a warp exchange when every
// live lane of the warp waits at it (warps of 32 consecutive linear thread ids, as CUDA
// forms them). A barrier that can never open (a __syncthreads() some threads skip) is
// reported as a divergence error instead of hanging. __shared__ variables are thread-local
// static storage, one instance per declaration and OS thread, which is CUDA's per-block
// semantics because a thread runs one block at a time (and launches on other threads get
// their own). Atomics are plain read-modify-writes for the same reason.
//
// Arithmetic. Compiled with -ffp-contract=off (the runtime gives NVRTC --fmad=false), so a
// float `a * b + c` rounds twice as on the device; the _rn intrinsics are the IEEE operations
// of the host. Transcendentals (expf, erff, tanhf, ...) are glibc's, not CUDA's libdevice:
// they differ from both the GPU and the CPU reference in the last bits, which the backend
// tests' per-op tolerances allow for.
//
// Blind spots (written in ARCHITECTURE.md): memory-model races between blocks (blocks never
// overlap here), warp scheduling order, timing, register and shared-memory limits, and the
// bits of device math functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <ucontext.h>
#include <utility>
#include <vector>

// ---------------------------------------------------------------- CUDA spellings
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Per OS thread: a block's fibers share it; two launches on two threads (parallel tests)
// do not.
#define __shared__ static thread_local

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct uint3 {
  unsigned x, y, z;
};
struct float4 {
  float x, y, z, w;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
struct float2 {
  float x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }

// CUDA's overloaded min / max (floats as fminf / fmaxf: a NaN operand yields the other).
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }

namespace fp8c_emu {

enum State { RUNNING, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct Thread {
  ucontext_t ctx;
  uint3 idx;
  unsigned linear;
  State state;
  unsigned long long slot;  // this lane's value in a warp exchange
};

using Trampoline = void (*)(void** args);

struct Block {
  uint3 idx;
  dim3 dim, grid;
  std::vector<Thread> threads;
  ucontext_t scheduler;
  Thread* current = nullptr;
  Trampoline body = nullptr;
  void** args = nullptr;
};

inline thread_local Block* g_block = nullptr;
inline thread_local const char* g_error = nullptr;

inline Thread& me() { return *g_block->current; }
inline void park(State s) {
  Thread& t = me();
  t.state = s;
  swapcontext(&t.ctx, &g_block->scheduler);
}

// The live lanes of the calling thread's warp: [first, end) in linear ids.
inline void warp_range(unsigned& first, unsigned& end) {
  const unsigned n = g_block->threads.size();
  first = me().linear & ~31u;
  end = first + 32 < n ? first + 32 : n;
}

// Exchange: every lane of the warp publishes `v`, then all may read every lane's value.
// The second barrier keeps a later exchange from overwriting a slot before all have read it.
template <class F>
inline unsigned long long warp_exchange(unsigned long long v, F&& read) {
  me().slot = v;
  park(AT_WARP_BARRIER);
  unsigned long long r = read();
  park(AT_WARP_BARRIER);
  return r;
}

inline void thread_entry() {
  Block* b = g_block;
  b->body(b->args);
  b->current->state = DONE;
  // uc_link returns to the scheduler.
}

// Runs one block to completion; false (and g_error) on a barrier that cannot open.
inline bool run_block(Block& b) {
  const unsigned n = b.dim.x * b.dim.y * b.dim.z;
  // 64 KiB per fiber (the kernels keep a few small arrays on the stack), allocated once per
  // OS thread and reused by every block and launch.
  const size_t stack = 64 * 1024;
  static thread_local std::vector<char> stacks;
  if (stacks.size() < n * stack) stacks.resize(n * stack);
  b.threads.assign(n, Thread{});
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.linear = i;
    t.idx = {i % b.dim.x, (i / b.dim.x) % b.dim.y, i / (b.dim.x * b.dim.y)};
    t.state = RUNNING;
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = stacks.data() + i * stack;
    t.ctx.uc_stack.ss_size = stack;
    t.ctx.uc_link = &b.scheduler;
    makecontext(&t.ctx, thread_entry, 0);
  }
  for (;;) {
    bool ran = false;
    for (unsigned i = 0; i < n; ++i) {
      Thread& t = b.threads[i];
      if (t.state != RUNNING) continue;
      b.current = &t;
      swapcontext(&b.scheduler, &t.ctx);
      ran = true;
    }
    // Open the barriers whose members have all arrived.
    bool all_done = true, block_ready = true, any_block = false;
    for (auto& t : b.threads) {
      if (t.state != DONE) all_done = false;
      if (t.state == AT_BLOCK_BARRIER) any_block = true;
      if (t.state == RUNNING || t.state == AT_WARP_BARRIER) block_ready = false;
    }
    if (all_done) return true;
    bool opened = false;
    for (unsigned w = 0; w < n; w += 32) {
      const unsigned end = w + 32 < n ? w + 32 : n;
      bool ready = true, waiting = false;
      for (unsigned i = w; i < end; ++i) {
        State s = b.threads[i].state;
        if (s == AT_WARP_BARRIER) waiting = true;
        else if (s != DONE) ready = false;
      }
      if (waiting && ready) {
        for (unsigned i = w; i < end; ++i)
          if (b.threads[i].state == AT_WARP_BARRIER) b.threads[i].state = RUNNING;
        opened = true;
      }
    }
    if (!opened && any_block && block_ready) {
      for (auto& t : b.threads)
        if (t.state == AT_BLOCK_BARRIER) t.state = RUNNING;
      opened = true;
    }
    if (!opened && !ran) {
      g_error = "divergent barrier: some threads wait at __syncthreads() or a warp intrinsic that others never reach";
      return false;
    }
  }
}

}  // namespace fp8c_emu

// ---------------------------------------------------------------- built-in variables
#define threadIdx (fp8c_emu::me().idx)
#define blockIdx (fp8c_emu::g_block->idx)
#define blockDim (fp8c_emu::g_block->dim)
#define gridDim (fp8c_emu::g_block->grid)

inline void __syncthreads() { fp8c_emu::park(fp8c_emu::AT_BLOCK_BARRIER); }

// ---------------------------------------------------------------- warp intrinsics
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "64-bit lanes at most");
  unsigned long long bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  const unsigned src = fp8c_emu::me().linear ^ (unsigned)lane_mask;
  unsigned long long r = fp8c_emu::warp_exchange(bits, [&] {
    auto& th = fp8c_emu::g_block->threads;
    return src < th.size() ? th[src].slot : fp8c_emu::me().slot;
  });
  T out;
  std::memcpy(&out, &r, sizeof(T));
  return out;
}

inline bool __any_sync(unsigned, bool pred) {
  return fp8c_emu::warp_exchange(pred ? 1 : 0, [] {
    unsigned first, end;
    fp8c_emu::warp_range(first, end);
    for (unsigned i = first; i < end; ++i)
      if (fp8c_emu::g_block->threads[i].state != fp8c_emu::DONE && fp8c_emu::g_block->threads[i].slot) return 1ull;
    return 0ull;
  }) != 0;
}

inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return (unsigned)fp8c_emu::warp_exchange(v, [] {
    unsigned first, end;
    fp8c_emu::warp_range(first, end);
    unsigned long long m = 0;
    for (unsigned i = first; i < end; ++i)
      if (fp8c_emu::g_block->threads[i].state != fp8c_emu::DONE && fp8c_emu::g_block->threads[i].slot > m)
        m = fp8c_emu::g_block->threads[i].slot;
    return m;
  });
}

// ---------------------------------------------------------------- conversions and IEEE ops
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
inline double __longlong_as_double(long long u) { double x; std::memcpy(&x, &u, 8); return x; }
// Leading zero bits of a 32-bit value (32 for 0), as CUDA's __clz.
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
// The GPU's f32 arithmetic returns the canonical NaN 0x7fffffff whatever the operands' NaN
// signs and payloads (PTX; seen on an H100: -NaN * s came out positive), where the host keeps
// them: the emulated intrinsics do what the hardware does, so that kernels relying on the
// host's rule fail here first.
inline float fp8c_emu_canonical(float r) {
  if (r != r) { unsigned u = 0x7fffffffu; std::memcpy(&r, &u, 4); }
  return r;
}
inline float __fdiv_rn(float a, float b) { return fp8c_emu_canonical(a / b); }
inline float __fmul_rn(float a, float b) { return fp8c_emu_canonical(a * b); }
inline float __fadd_rn(float a, float b) { return fp8c_emu_canonical(a + b); }
inline float __fsqrt_rn(float a) { return fp8c_emu_canonical(std::sqrt(a)); }
// One rounding of a·b + c, as the device's fma.rn.f32.
inline float __fmaf_rn(float a, float b, float c) { return fp8c_emu_canonical(std::fma(a, b, c)); }
inline float __double2float_rn(double a) { return (float)a; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __ll2float_rn(long long a) { return (float)a; }
inline float __int2float_rn(int a) { return (float)a; }
inline double __ll2double_rn(long long a) { return (double)a; }
// Round toward zero: the nearest value, stepped one ulp toward zero when it is farther from
// zero than the exact one (long double holds every i64 and double exactly on x86-64).
inline float __double2float_rz(double a) {
  float f = (float)a;
  if (a == a && std::fabs((double)f) > std::fabs(a)) f = std::nextafter(f, 0.0f);
  return f;
}
inline float __ll2float_rz(long long a) {
  float f = (float)a;
  if (std::fabs((long double)f) > std::fabs((long double)a)) f = std::nextafter(f, 0.0f);
  return f;
}
// PTX's cvt.rzi: truncate toward zero, saturate to the destination range; NaN gives 0 for
// 32-bit results and the minimum, 0x8000000000000000, for 64-bit ones (seen on an H100).
inline long long __float2ll_rz(float a) {
  if (a != a) return (long long)0x8000000000000000ull;
  if (a >= 9.2233720368547758e18f) return 0x7fffffffffffffffll;
  if (a <= -9.2233720368547758e18f) return (long long)0x8000000000000000ull;
  return (long long)a;
}
inline int __float2int_rz(float a) {
  if (a != a) return 0;
  if (a >= 2147483648.0f) return 0x7fffffff;
  if (a <= -2147483648.0f) return (int)0x80000000u;
  return (int)a;
}
template <class T>
inline T __ldg(const T* p) { return *p; }

// ---------------------------------------------------------------- atomics (one block at a time)
inline float atomicAdd(float* p, float v) { float o = *p; *p = o + v; return o; }
inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }
inline int atomicMax(int* p, int v) { int o = *p; if (v > o) *p = v; return o; }

// ---------------------------------------------------------------- launching by name
namespace fp8c_emu {

// Calls F with its parameters read from CUDA's kernelParams layout (args[i] points at the
// i-th parameter's value).
template <class... P, size_t... I>
inline void call_with(void (*f)(P...), void** args, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<P>*>(args[I])...);
}
template <auto F>
struct Entry;
template <class... P, void (*F)(P...)>
struct Entry<F> {
  static void run(void** args) { call_with(F, args, std::index_sequence_for<P...>{}); }
};

struct Named {
  const char* name;
  Trampoline run;
};

// Runs `body` over the grid; 0 on success, else a message.
inline const char* launch(Trampoline body, dim3 grid, dim3 block, void** args) {
  Block b;
  b.dim = block;
  b.grid = grid;
  b.body = body;
  b.args = args;
  Block* saved = g_block;
  g_block = &b;
  g_error = nullptr;
  for (unsigned z = 0; z < grid.z && !g_error; ++z)
    for (unsigned y = 0; y < grid.y && !g_error; ++y)
      for (unsigned x = 0; x < grid.x && !g_error; ++x) {
        b.idx = {x, y, z};
        if (!run_block(b)) break;
      }
  g_block = saved;
  return g_error;
}

}  // namespace fp8c_emu

