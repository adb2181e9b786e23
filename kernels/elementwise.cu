// elementwise.cu — every elementwise op and fused elementwise chain, with optional FP8 output.
//
// IR ops: the unary and binary elementwise ops, where, clip, gelu_grad, elementwise_quantize,
// and the epilogue of scaled_matmul_epilogue when cuBLASLt's own epilogues cannot express it.
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
__device__ __forceinline__ float ew_pow(float a, float b) { return powf(a, b); }
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

// ---------------------------------------------------------------- parameters

#define EW_MODE_FULL 0
#define EW_MODE_SCALAR 1
#define EW_MODE_ROW 2
#define EW_MODE_STRIDED 3
#define EW_MAX_IN 16

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
};

// The generated program: EW_NIN, EW_OUT_KIND, EW_Q_FMT (-1: no FP8 output), EW_Q_SAT,
// EW_HAS_STRIDED, ew_in_kind(k), ew_in_mode(k) and `float ew_program(const float* a)`.
#include "ew_expr.cuh"

__device__ __forceinline__ u64 ew_strided_offset(const EwParams& p, int k, u64 i) {
  u64 off = 0;
  for (int d = (int)p.rank - 1; d >= 0; --d) {
    const u64 dim = p.dims[d];
    off += (i % dim) * (u64)p.strides[k][d];
    i /= dim;
  }
  return off;
}

__device__ __forceinline__ float ew_load1(const EwParams& p, int k, u64 i) {
  const int mode = ew_in_mode(k);
  const u64 j = mode == EW_MODE_FULL     ? i
                : mode == EW_MODE_SCALAR ? 0
                : mode == EW_MODE_ROW    ? i % p.row_len[k]
                                         : ew_strided_offset(p, k, i);
  switch (ew_in_kind(k)) {
    case KIND_F32: return load_elem<KIND_F32>(p.in[k], j);
    case KIND_BF16: return load_elem<KIND_BF16>(p.in[k], j);
    case KIND_F16: return load_elem<KIND_F16>(p.in[k], j);
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
