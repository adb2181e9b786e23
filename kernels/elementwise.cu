// elementwise.cu — every elementwise op and fused elementwise chain, with optional FP8 output.
//
// IR ops: the unary and binary elementwise ops, where, clip, gelu_grad, elementwise_quantize,
// elementwise_block_quantize (per-tile FP8 of a 1×N tiling, issue #16), and the epilogue of scaled_matmul_epilogue when cuBLASLt's own epilogues cannot express it.
//
// The runtime generates `ew_expr.cuh` for each distinct program (crates/fp8c-runtime/src/cuda/
// codegen.rs): the program as straight-line calls of the `ew_*` functions below, the storage
// kind and access mode of each input, the output kind, and whether q = quantize(y) and amax(y)
// are produced too. The module is then cached by the hash of the whole source, so one compiled
// kernel serves every step with the same program and kinds whatever its shape.
//
// Access modes of an input (chosen per step from its shape against the output's):
//   FULL    same shape as the output, contiguous: element i
//   SCALAR  one element: element 0
//   ROW     the output's trailing dims (a bias): element i % row_len
//   STRIDED anything else numpy broadcasting allows: element Σ idx_d · stride_d (stride 0 on
//           broadcast dims)
// Without STRIDED inputs the kernel moves 8 elements per thread per iteration with 16-byte
// loads and stores (f32: two per operand), else one element at a time.
//
// All arithmetic is f32 (bf16 / f16 / bool inputs widen exactly); a chain keeps f32
// intermediates, and the result is rounded once to the output kind.
#include "common.cuh"

// ---------------------------------------------------------------- the op library

__device__ __forceinline__ float ew_identity(float x) { return x; }
__device__ __forceinline__ float ew_neg(float x) { return -x; }
__device__ __forceinline__ float ew_abs(float x) { return __uint_as_float(__float_as_uint(x) & 0x7fffffffu); }
__device__ __forceinline__ float ew_sqrt(float x) { return __fsqrt_rn(x); }
__device__ __forceinline__ float ew_reciprocal(float x) { return __fdiv_rn(1.0f, x); }
__device__ __forceinline__ float ew_exp(float x) { return expf(x); }
__device__ __forceinline__ float ew_log(float x) { return logf(x); }
__device__ __forceinline__ float ew_erf(float x) { return erff(x); }
__device__ __forceinline__ float ew_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float ew_sigmoid(float x) {
  if (x >= 0.0f) return __fdiv_rn(1.0f, 1.0f + expf(-x));
  const float e = expf(x);
  return __fdiv_rn(e, 1.0f + e);
}
__device__ __forceinline__ float ew_relu(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ float ew_floor(float x) { return floorf(x); }
// −1, 0 or 1; ±0 and NaN are returned as they are (fp8c-ir's Sign row).
__device__ __forceinline__ float ew_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }
__device__ __forceinline__ float ew_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ float ew_round(float x) { return rintf(x); }
__device__ __forceinline__ float ew_sin(float x) { return sinf(x); }
__device__ __forceinline__ float ew_cos(float x) { return cosf(x); }
// 0.5·x·(1 + erf(x·(1/√2))), as onnxruntime and the CPU reference.
__device__ __forceinline__ float ew_gelu_none(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
}
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
__device__ __forceinline__ float ew_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}
// Their derivatives times dy (gelu_grad), in f32.
__device__ __forceinline__ float ew_gelu_grad_none(float x, float dy) {
  const float d = 0.5f * (1.0f + erff(x * 0.70710678118654752440f)) + x * 0.39894228040143267794f * expf(-0.5f * x * x);
  return dy * d;
}
__device__ __forceinline__ float ew_gelu_grad_tanh(float x, float dy) {
  const float k = 0.79788456080286535588f;
  const float t = tanhf(k * (x + 0.044715f * x * x * x));
  const float d = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
  return dy * d;
}
__device__ __forceinline__ float ew_leaky_relu(float x, float alpha) { return x < 0.0f ? alpha * x : x; }
__device__ __forceinline__ float ew_not(float x) { return x == 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_is_nan(float x) { return fp8c_isnan(x) ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_is_inf(float x, bool neg, bool pos) {
  return fp8c_isinf(x) && ((x > 0.0f && pos) || (x < 0.0f && neg)) ? 1.0f : 0.0f;
}

__device__ __forceinline__ float ew_add(float a, float b) { return a + b; }
__device__ __forceinline__ float ew_sub(float a, float b) { return a - b; }
__device__ __forceinline__ float ew_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float ew_div(float a, float b) { return __fdiv_rn(a, b); }
// A square is a·a, correctly rounded (the CPU reference's pow_f32).
// A square is a·a and a cube (a·a)·a, as the CPU reference (and PyTorch and onnxruntime).
__device__ __forceinline__ float ew_pow(float a, float b) {
    return b == 2.0f ? a * a : b == 3.0f ? (a * a) * a : powf(a, b);
}
// NaN-propagating, as the CPU's fmax_nan / fmin_nan.
__device__ __forceinline__ float ew_max(float a, float b) { return fp8c_isnan(a) || a >= b ? a : b; }
__device__ __forceinline__ float ew_min(float a, float b) { return fp8c_isnan(a) || a <= b ? a : b; }
__device__ __forceinline__ float ew_fmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ float ew_equal(float a, float b) { return a == b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_less(float a, float b) { return a < b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_less_or_equal(float a, float b) { return a <= b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_greater(float a, float b) { return a > b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_greater_or_equal(float a, float b) { return a >= b ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_and(float a, float b) { return a != 0.0f && b != 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_or(float a, float b) { return a != 0.0f || b != 0.0f ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_xor(float a, float b) { return (a != 0.0f) != (b != 0.0f) ? 1.0f : 0.0f; }
__device__ __forceinline__ float ew_where(float c, float a, float b) { return c != 0.0f ? a : b; }
// ONNX Clip: min(max(x, lo), hi) with NaN bounds ignored.
__device__ __forceinline__ float ew_clip(float x, float lo, float hi) {
  float y = x;
  if (y < lo) y = lo;
  if (y > hi) y = hi;
  return y;
}

// ---------------------------------------------------------------- integer forms
// For integer programs (`EW_INT`): each op in the operands' own type T, wrapping as the CPU
// reference's `wrapping_*` (computed in 64-bit unsigned arithmetic, then truncated to T, which
// is the same modulo 2^width and never signed overflow); comparisons give T's 1 / 0. Only the
// ops with an integer form on the CPU reach here (codegen.rs `has_int_form`).
template <class T>
__device__ __forceinline__ T ew_wrap(u64 v) { return (T)v; }
template <class T> struct ew_signed { static constexpr bool value = true; };
template <> struct ew_signed<unsigned char> { static constexpr bool value = false; };
template <> struct ew_signed<unsigned short> { static constexpr bool value = false; };
template <> struct ew_signed<unsigned int> { static constexpr bool value = false; };
template <> struct ew_signed<unsigned long long> { static constexpr bool value = false; };
// Below zero (never for unsigned T; written so that no compiler sees a pointless comparison).
template <class T>
__device__ __forceinline__ bool ew_is_neg(T x) { return ew_signed<T>::value && (long long)x < 0ll; }
template <class T> __device__ __forceinline__ T ew_identity(T x) { return x; }
template <class T> __device__ __forceinline__ T ew_neg(T x) { return ew_wrap<T>(0ull - (u64)x); }
template <class T> __device__ __forceinline__ T ew_abs(T x) { return ew_is_neg(x) ? ew_neg(x) : x; }
template <class T> __device__ __forceinline__ T ew_relu(T x) { return ew_is_neg(x) ? (T)0 : x; }
template <class T> __device__ __forceinline__ T ew_add(T a, T b) { return ew_wrap<T>((u64)a + (u64)b); }
template <class T> __device__ __forceinline__ T ew_sub(T a, T b) { return ew_wrap<T>((u64)a - (u64)b); }
template <class T> __device__ __forceinline__ T ew_mul(T a, T b) { return ew_wrap<T>((u64)a * (u64)b); }
template <class T> __device__ __forceinline__ T ew_max(T a, T b) { return a >= b ? a : b; }
template <class T> __device__ __forceinline__ T ew_min(T a, T b) { return a <= b ? a : b; }
// Truncating division; MIN / -1 wraps to MIN (wrapping_div); a zero divisor gives 0 and sets bad.
template <class T>
__device__ __forceinline__ T ew_div_int(T a, T b, bool& bad) {
  if (b == (T)0) { bad = true; return (T)0; }
  if (ew_is_neg(b) && b == (T)-1) return ew_neg(a);
  return a / b;
}
// C's remainder (fmod=1, the dividend's sign); MIN % -1 is 0.
template <class T>
__device__ __forceinline__ T ew_fmod_int(T a, T b, bool& bad) {
  if (b == (T)0) { bad = true; return (T)0; }
  if (ew_is_neg(b) && b == (T)-1) return (T)0;
  return a % b;
}
// Python's remainder (fmod=0, the divisor's sign).
template <class T>
__device__ __forceinline__ T ew_mod_int(T a, T b, bool& bad) {
  const T r = ew_fmod_int(a, b, bad);
  return r != (T)0 && (ew_is_neg(r) != ew_is_neg(b)) ? ew_add(r, b) : r;
}
// a^e with wrapping multiplication; a negative exponent gives the truncated reciprocal (only
// 1 and -1 survive), as the CPU's pow_int.
template <class T>
__device__ __forceinline__ T ew_pow(T a, T e) {
  if (ew_is_neg(e)) {
    if (a == (T)1) return (T)1;
    if (ew_is_neg(a) && a == (T)-1) return ((u64)e & 1ull) ? a : (T)1;
    return (T)0;
  }
  u64 base = (u64)a, r = 1ull, k = (u64)e;
  while (k != 0ull) {
    if (k & 1ull) r *= base;
    base *= base;
    k >>= 1;
  }
  return ew_wrap<T>(r);
}
template <class T> __device__ __forceinline__ T ew_equal(T a, T b) { return a == b ? (T)1 : (T)0; }
template <class T> __device__ __forceinline__ T ew_less(T a, T b) { return a < b ? (T)1 : (T)0; }
template <class T> __device__ __forceinline__ T ew_less_or_equal(T a, T b) { return a <= b ? (T)1 : (T)0; }
template <class T> __device__ __forceinline__ T ew_greater(T a, T b) { return a > b ? (T)1 : (T)0; }
template <class T> __device__ __forceinline__ T ew_greater_or_equal(T a, T b) { return a >= b ? (T)1 : (T)0; }
template <class T> __device__ __forceinline__ T ew_where(T c, T a, T b) { return c != (T)0 ? a : b; }
template <class T>
__device__ __forceinline__ T ew_clip(T x, T lo, T hi) {
  T y = x;
  if (y < lo) y = lo;
  if (y > hi) y = hi;
  return y;
}

// ---------------------------------------------------------------- parameters

#define EW_MODE_FULL 0
#define EW_MODE_SCALAR 1
#define EW_MODE_ROW 2
#define EW_MODE_STRIDED 3
#define EW_MAX_IN 16
// Integer exponents of `pow` in float programs (read one at a time, converted to f32).
#define EW_KIND_I64 106
#define EW_KIND_I32 107

// Mirrored by `EwParams` in crates/fp8c-runtime/src/cuda/codegen.rs (#[repr(C)]).
struct EwParams {
  const void* in[EW_MAX_IN];
  u64 row_len[EW_MAX_IN];                  // ROW inputs: their element count
  i64 strides[EW_MAX_IN][FP8C_MAX_DIMS];   // STRIDED inputs: element strides per output dim
  u64 dims[FP8C_MAX_DIMS];                 // the output's dims (STRIDED inputs only)
  u32 rank;
  u32 pad_;
  void* y;            // the result (null: not written)
  u8* q;              // quantize(y) (null: not written)
  const float* scale; // the quantization scale
  float* amax;        // amax(y) (null: not computed)
  u64 n;              // output elements
  int* err;           // integer programs: set on a zero divisor (null: none)
};

// The generated program. Float programs (EW_INT 0): EW_NIN, EW_OUT_KIND, EW_Q_FMT (-1: no
// FP8 output), EW_Q_SAT, EW_HAS_STRIDED, ew_in_kind(k), ew_in_mode(k) and
// `float ew_program(const float* a)`. Integer programs (EW_INT 1): ew_int_t, EW_NIN,
// EW_OUT_BOOL, EW_HAS_STRIDED, ew_in_bool(k), ew_in_mode(k) and
// `ew_int_t ew_program(const ew_int_t* a, bool& bad)`.
#include "ew_expr.cuh"
#ifndef EW_TILES
#define EW_TILES 0
#endif

__device__ __forceinline__ u64 ew_strided_offset(const EwParams& p, int k, u64 i) {
  u64 off = 0;
  for (int d = (int)p.rank - 1; d >= 0; --d) {
    const u64 dim = p.dims[d];
    off += (i % dim) * (u64)p.strides[k][d];
    i /= dim;
  }
  return off;
}

// The element of input k that output element i reads, by the input's access mode.
__device__ __forceinline__ u64 ew_index(const EwParams& p, int k, u64 i) {
  const int mode = ew_in_mode(k);
  return mode == EW_MODE_FULL     ? i
         : mode == EW_MODE_SCALAR ? 0
         : mode == EW_MODE_ROW    ? i % p.row_len[k]
                                  : ew_strided_offset(p, k, i);
}

#if !EW_INT
__device__ __forceinline__ float ew_load1(const EwParams& p, int k, u64 i) {
  const u64 j = ew_index(p, k, i);
  switch (ew_in_kind(k)) {
    case KIND_F32: return load_elem<KIND_F32>(p.in[k], j);
    case KIND_BF16: return load_elem<KIND_BF16>(p.in[k], j);
    case KIND_F16: return load_elem<KIND_F16>(p.in[k], j);
    case EW_KIND_I64: return __ll2float_rn(static_cast<const i64*>(p.in[k])[j]);
    case EW_KIND_I32: return __int2float_rn(static_cast<const int*>(p.in[k])[j]);
    default: return load_elem<KIND_U8>(p.in[k], j);
  }
}

__device__ __forceinline__ void ew_load8(const EwParams& p, int k, u64 i, float v[8]) {
  const int mode = ew_in_mode(k);
  if (mode == EW_MODE_SCALAR) {
    const float s = ew_load1(p, k, 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = s;
    return;
  }
  const u64 j = mode == EW_MODE_ROW ? i % p.row_len[k] : i;
  switch (ew_in_kind(k)) {
    case KIND_F32: load8<KIND_F32>(p.in[k], j, v); break;
    case KIND_BF16: load8<KIND_BF16>(p.in[k], j, v); break;
    case KIND_F16: load8<KIND_F16>(p.in[k], j, v); break;
    default: load8<KIND_U8>(p.in[k], j, v); break;
  }
}

// Whether the 8-wide path may run: no STRIDED input, every vector operand 16-byte aligned, and
// every ROW length a multiple of 8 (so a pack never straddles a row end).
__device__ __forceinline__ bool ew_vector_ok(const EwParams& p) {
  if (EW_HAS_STRIDED) return false;
  if (p.y != nullptr && !aligned16(p.y)) return false;
  if (p.q != nullptr && ((u64)p.q & 7ull) != 0ull) return false;
#pragma unroll
  for (int k = 0; k < EW_NIN; ++k) {
    if (ew_in_mode(k) == EW_MODE_SCALAR) continue;
    if (ew_in_kind(k) == EW_KIND_I64 || ew_in_kind(k) == EW_KIND_I32) return false;
    if (!aligned16(p.in[k])) return false;
    if (ew_in_mode(k) == EW_MODE_ROW && p.row_len[k] % 8 != 0) return false;
  }
  return true;
}

extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_elementwise(EwParams p) {
  const float s = (EW_Q_FMT >= 0 && p.scale != nullptr) ? *p.scale : 1.0f;
  u32 m = 0u;
  u64 done = 0;
  if (ew_vector_ok(p)) {
    const u64 npack = p.n / 8;
    for (u64 pk = gtid(); pk < npack; pk += gstride()) {
      const u64 i = pk * 8;
      float a[EW_NIN][8];
#pragma unroll
      for (int k = 0; k < EW_NIN; ++k) ew_load8(p, k, i, a[k]);
      float y[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float args[EW_NIN];
#pragma unroll
        for (int k = 0; k < EW_NIN; ++k) args[k] = a[k][j];
        y[j] = ew_program(args);
      }
      if (p.y != nullptr) store8<EW_OUT_KIND>(p.y, i, y);
      if (EW_Q_FMT >= 0) {
        u32 w[2] = {0u, 0u};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          m = max(m, abs_bits(y[j]));
          const u32 c = EW_Q_FMT == FMT_E4M3 ? fp8_quantize<FMT_E4M3, EW_Q_SAT>(y[j], s)
                                             : fp8_quantize<FMT_E5M2, EW_Q_SAT>(y[j], s);
          w[j / 4] |= c << (8 * (j % 4));
        }
        if (p.q != nullptr) *reinterpret_cast<uint2*>(p.q + i) = make_uint2(w[0], w[1]);
      }
    }
    done = npack * 8;
  }
  for (u64 i = done + gtid(); i < p.n; i += gstride()) {
    float args[EW_NIN];
#pragma unroll
    for (int k = 0; k < EW_NIN; ++k) args[k] = ew_load1(p, k, i);
    const float y = ew_program(args);
    if (p.y != nullptr) store_elem<EW_OUT_KIND>(p.y, i, y);
    if (EW_Q_FMT >= 0) {
      m = max(m, abs_bits(y));
      const u32 c = EW_Q_FMT == FMT_E4M3 ? fp8_quantize<FMT_E4M3, EW_Q_SAT>(y, s)
                                         : fp8_quantize<FMT_E5M2, EW_Q_SAT>(y, s);
      if (p.q != nullptr) p.q[i] = (u8)c;
    }
  }
  if (EW_Q_FMT >= 0) block_amax_commit(m, p.amax);
}

// elementwise_block_quantize (issue #16): y = the program (f32), then block_quantize(y) with
// tiles of one row and `tc` columns of the last axis (length c): one warp per tile
// (grid-stride over tiles); each lane computes and writes its elements of y (p.y is always
// set) and takes their amax, the warp reduces it to the tile's scale by block_scaling.cu's
// rules (tile_scale), then each lane quantizes the very elements it wrote, read back (from L2)
// rather than computed again. scale_inv[tile] = 1 / scale, tiles numbered row-major as
// block_quantize's. Compiled only where the lowering asks for it (`EW_TILES` appended to the
// generated header): around a program with sinf/cosf's slow path it spills registers, and
// fusion never gives it one (no FP8 GEMM reads a rotary table).
#if EW_TILES
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_elementwise_block_quantize(EwParams p, u64 c, u64 tc, float* scale_inv, int scaling, float epsilon) {
#if EW_Q_FMT >= 0
  const float fmt_max = EW_Q_FMT == FMT_E4M3 ? 448.0f : 57344.0f;
  const int emax = EW_Q_FMT == FMT_E4M3 ? 8 : 15;
  const int lane = threadIdx.x & 31;
  // Few values live across the program (its calls clobber registers): the tile's element
  // range [start, end), the loop state, the amax; the grid geometry is re-read from params.
  const u64 nc = (c + tc - 1) / tc;
  float* const y = static_cast<float*>(p.y);
#pragma unroll 1
  for (u64 tile = (u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); tile < (p.n / c) * nc;
       tile += (u64)gridDim.x * (blockDim.x >> 5)) {
    const u64 col0 = (tile % nc) * tc;
    const u64 start = (tile / nc) * c + col0;
    const u64 end = start + (tc < c - col0 ? tc : c - col0);
    u32 bits = 0u;
#pragma unroll 1
    for (u64 i = start + lane; i < end; i += 32) {
      float args[EW_NIN];
#pragma unroll
      for (int k = 0; k < EW_NIN; ++k) args[k] = ew_load1(p, k, i);
      const float v = ew_program(args);
      y[i] = v;
      bits = max(bits, abs_bits(v));
    }
    bits = warp_max_u32(bits);
    const float s = tile_scale(__uint_as_float(bits), scaling, epsilon, fmt_max, emax);
    if (lane == 0) scale_inv[tile] = __fdiv_rn(1.0f, s);
#pragma unroll 1
    for (u64 i = start + lane; i < end; i += 32) {
      const float v = y[i];
      p.q[i] = (u8)(EW_Q_FMT == FMT_E4M3 ? fp8_quantize<FMT_E4M3, EW_Q_SAT>(v, s)
                                         : fp8_quantize<FMT_E5M2, EW_Q_SAT>(v, s));
    }
  }
#endif
}
#endif
#else
// One element per thread: integer programs are index and mask arithmetic, not bandwidth.
__device__ __forceinline__ ew_int_t ew_load_int(const EwParams& p, int k, u64 i) {
  const u64 j = ew_index(p, k, i);
  if (ew_in_bool(k)) return static_cast<const u8*>(p.in[k])[j] != 0 ? (ew_int_t)1 : (ew_int_t)0;
  return static_cast<const ew_int_t*>(p.in[k])[j];
}

extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_elementwise(EwParams p) {
  bool bad = false;
  for (u64 i = gtid(); i < p.n; i += gstride()) {
    ew_int_t args[EW_NIN];
#pragma unroll
    for (int k = 0; k < EW_NIN; ++k) args[k] = ew_load_int(p, k, i);
    const ew_int_t y = ew_program(args, bad);
    if (p.y == nullptr) continue;
    if (EW_OUT_BOOL) static_cast<u8*>(p.y)[i] = y != (ew_int_t)0 ? 1 : 0;
    else static_cast<ew_int_t*>(p.y)[i] = y;
  }
  if (bad && p.err != nullptr) *p.err = 1;
}
#endif
