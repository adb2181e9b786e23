// reduce.cu — reductions over one contiguous run of axes, and the all-finite check.
//
// IR ops: reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod (their axes contiguous),
// global_average_pool, global_max_pool, all_finite. x is viewed as [outer, r, inner] and
// reduced over r. inner == 1 runs one block per output with block reductions; inner > 1 one
// thread per output, loads coalesced across inner.
//
// Sums and products accumulate in f64 (the CPU reference does too), max / min propagate NaN;
// each result is rounded once to x's kind. i64 and i32 reduce in integers (fp8c_reduce_int_*).
#include "common.cuh"

#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_MIN 3
#define RED_PROD 4

__device__ __forceinline__ double red_init(int op) {
  return op == RED_MAX ? -__longlong_as_double(0x7ff0000000000000ll)
         : op == RED_MIN ? __longlong_as_double(0x7ff0000000000000ll)
         : op == RED_PROD ? 1.0
                          : 0.0;
}

__device__ __forceinline__ double red_step(int op, double acc, double v) {
  const bool nan = v != v || acc != acc;
  switch (op) {
    case RED_MAX: return nan ? __longlong_as_double(0x7ff8000000000000ll) : (v > acc ? v : acc);
    case RED_MIN: return nan ? __longlong_as_double(0x7ff8000000000000ll) : (v < acc ? v : acc);
    case RED_PROD: return acc * v;
    default: return acc + v;
  }
}

__device__ __forceinline__ double warp_red(int op, double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = red_step(op == RED_MEAN ? RED_SUM : op, v, __shfl_xor_sync(FP8C_FULL_MASK, v, o));
  return v;
}

__device__ __forceinline__ double block_red(int op, double v) {
  __shared__ double part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_red(op, v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nwarps = (int)(blockDim.x >> 5);
  const double t = lane < nwarps ? part[lane] : red_init(op);
  return warp_red(op, t);
}

template <int IN>
__device__ __forceinline__ void reduce_impl(const void* __restrict__ x, void* __restrict__ y, u64 outer, u64 r,
                                            u64 inner, int op) {
  const int step = op == RED_MEAN ? RED_SUM : op;
  if (inner == 1) {
    for (u64 o = blockIdx.x; o < outer; o += gridDim.x) {
      double acc = red_init(op);
      for (u64 j = threadIdx.x; j < r; j += blockDim.x) acc = red_step(step, acc, (double)load_elem<IN>(x, o * r + j));
      acc = block_red(op, acc);
      if (op == RED_MEAN) acc /= (double)r;
      if (threadIdx.x == 0) store_elem<IN>(y, o, __double2float_rn(acc));
    }
    return;
  }
  for (u64 t = gtid(); t < outer * inner; t += gstride()) {
    const u64 o = t / inner, i = t % inner;
    double acc = red_init(op);
    for (u64 j = 0; j < r; ++j) acc = red_step(step, acc, (double)load_elem<IN>(x, (o * r + j) * inner + i));
    if (op == RED_MEAN) acc /= (double)r;
    store_elem<IN>(y, t, __double2float_rn(acc));
  }
}

// fp8c_reduce_<in>(x, y, outer, r, inner, op): 256 threads per block.
#define REDUCE(IN_NAME, IN)                                                                                  \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                   \
      fp8c_reduce_##IN_NAME(const void* x, void* y, u64 outer, u64 r, u64 inner, int op) {                  \
    reduce_impl<IN>(x, y, outer, r, inner, op);                                                             \
  }
REDUCE(f32, KIND_F32)
REDUCE(bf16, KIND_BF16)
REDUCE(f16, KIND_F16)

// fp8c_reduce_int_<t>(x, y, outer, r, inner, op): integer reductions as the CPU reference does
// them: wrapping i64 sums and products (an i32 result keeps the low 32 bits), a mean that
// divides the i64 sum truncating toward zero (0 over no elements). One thread per output.
template <typename T>
__device__ __forceinline__ void reduce_int_impl(const T* __restrict__ x, T* __restrict__ y, u64 outer, u64 r,
                                                u64 inner, int op) {
  const i64 lo = sizeof(T) == 8 ? (i64)0x8000000000000000ull : (i64)(-2147483647 - 1);
  const i64 hi = sizeof(T) == 8 ? (i64)0x7fffffffffffffffull : (i64)2147483647;
  for (u64 t = gtid(); t < outer * inner; t += gstride()) {
    const u64 o = t / inner, i = t % inner;
    u64 acc = op == RED_PROD ? 1ull : 0ull;
    i64 best = op == RED_MAX ? lo : hi;
    for (u64 j = 0; j < r; ++j) {
      const i64 v = (i64)x[(o * r + j) * inner + i];
      if (op == RED_MAX) best = v > best ? v : best;
      else if (op == RED_MIN) best = v < best ? v : best;
      else if (op == RED_PROD) acc *= (u64)v;
      else acc += (u64)v;
    }
    i64 out = (op == RED_MAX || op == RED_MIN) ? best : (i64)acc;
    if (op == RED_MEAN) out = r == 0 ? 0 : out / (i64)r;
    y[t] = (T)out;
  }
}

#define REDUCE_INT(NAME, T)                                                                                  \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                   \
      fp8c_reduce_int_##NAME(const T* x, T* y, u64 outer, u64 r, u64 inner, int op) {                       \
    reduce_int_impl<T>(x, y, outer, r, inner, op);                                                           \
  }
REDUCE_INT(i64, i64)
REDUCE_INT(i32, int)

// fp8c_all_finite_<in>(x, n, flag): clears the bool *flag (set to 1 by the runtime before the
// first input's launch) if any element is NaN or ±inf. Every writer stores the same 0.
template <int IN>
__device__ __forceinline__ void all_finite_impl(const void* __restrict__ x, u64 n, u8* __restrict__ flag) {
  bool ok = true;
  u64 done = 0;
  if (aligned16(x)) {
    const u64 npack = n / 8;
    for (u64 p = gtid(); p < npack; p += gstride()) {
      float v[8];
      load8<IN>(x, p * 8, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) ok = ok && fp8c_isfinite(v[j]);
    }
    done = npack * 8;
  }
  for (u64 i = done + gtid(); i < n; i += gstride()) ok = ok && fp8c_isfinite(load_elem<IN>(x, i));
  if (__any_sync(FP8C_FULL_MASK, !ok) && (threadIdx.x & 31) == 0) *flag = 0;
}

#define ALL_FINITE(IN_NAME, IN)                                                                             \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_all_finite_##IN_NAME(const void* x, u64 n,  \
                                                                                    u8* flag) {            \
    all_finite_impl<IN>(x, n, flag);                                                                        \
  }
ALL_FINITE(f32, KIND_F32)
ALL_FINITE(bf16, KIND_BF16)
ALL_FINITE(f16, KIND_F16)
