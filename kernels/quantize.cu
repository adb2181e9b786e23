// quantize.cu — the memory-bound FP8 casts: quantize (+amax), dequantize, amax alone, and
// plain casts between f32 / bf16 / f16 / bool and to and from i64 / i32.
//
// IR ops: quantize, quantize_amax, dequantize, amax, cast (a cast to FP8 is a quantize with no
// scale, i.e. scale 1).
//
// Shape of every kernel: a grid-stride loop over packs of 16 elements per thread (f32 input:
// four 16-byte loads in flight before the first use; bf16 / f16: two; FP8 output: one 16-byte
// store), then a scalar tail, then one block reduction and one atomicMax for the amax.
// Bit-exact with fp8c-core: q = encode(x * scale) with the product rounded to f32 first.
#include "common.cuh"

#define PACK 16

template <int IN, int FMT, bool SAT>
__device__ __forceinline__ void quantize_impl(const void* __restrict__ x, const float* __restrict__ scale,
                                              u8* __restrict__ q, float* __restrict__ amax, u64 n) {
  const float s = scale != nullptr ? *scale : 1.0f;
  // A scaled quantize keeps infinite inputs non-finite (fp8_quantize); a cast (no scale) keeps
  // ONNX's Cast table.
  const bool scaled = scale != nullptr;
  u32 m = 0u;
  u64 done = 0;
  if (aligned16(x) && aligned16(q)) {
    const u64 npack = n / PACK;
    for (u64 p = gtid(); p < npack; p += gstride()) {
      float v[PACK];
      load8<IN>(x, p * PACK, v);
      load8<IN>(x, p * PACK + 8, v + 8);
      u32 w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int j = 0; j < PACK; ++j) {
        m = max(m, abs_bits(v[j]));
        w[j / 4] |= (scaled ? fp8_quantize<FMT, SAT>(v[j], s) : fp8_encode<FMT, SAT>(v[j])) << (8 * (j % 4));
      }
      *reinterpret_cast<uint4*>(q + p * PACK) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    done = npack * PACK;
  }
  for (u64 i = done + gtid(); i < n; i += gstride()) {
    const float v = load_elem<IN>(x, i);
    m = max(m, abs_bits(v));
    q[i] = (u8)(scaled ? fp8_quantize<FMT, SAT>(v, s) : fp8_encode<FMT, SAT>(v));
  }
  block_amax_commit(m, amax);
}

// fp8c_quantize_<in>_<fmt>_<sat|nosat>(x, scale or null (= 1), q, amax or null, n)
#define QUANTIZE_KERNEL(IN_NAME, IN, FMT_NAME, FMT, SAT_NAME, SAT)                                      \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                              \
      fp8c_quantize_##IN_NAME##_##FMT_NAME##_##SAT_NAME(const void* x, const float* scale, u8* q,         \
                                                         float* amax, u64 n) {                          \
    quantize_impl<IN, FMT, SAT>(x, scale, q, amax, n);                                                  \
  }
#define QUANTIZE_FOR_INPUT(IN_NAME, IN)                                 \
  QUANTIZE_KERNEL(IN_NAME, IN, e4m3, FMT_E4M3, sat, true)               \
  QUANTIZE_KERNEL(IN_NAME, IN, e4m3, FMT_E4M3, nosat, false)            \
  QUANTIZE_KERNEL(IN_NAME, IN, e5m2, FMT_E5M2, sat, true)               \
  QUANTIZE_KERNEL(IN_NAME, IN, e5m2, FMT_E5M2, nosat, false)
QUANTIZE_FOR_INPUT(f32, KIND_F32)
QUANTIZE_FOR_INPUT(bf16, KIND_BF16)
QUANTIZE_FOR_INPUT(f16, KIND_F16)

// ---------------------------------------------------------------- dequantize
// y = to(decode(q) * scale_inv), the product in f32 then rounded once to the output type.

template <int FMT_KIND, int OUT>
__device__ __forceinline__ void dequantize_impl(const u8* __restrict__ q, const float* __restrict__ scale_inv,
                                                void* __restrict__ y, u64 n) {
  const float s = scale_inv != nullptr ? *scale_inv : 1.0f;
  u64 done = 0;
  if (aligned16(q) && aligned16(y)) {
    const u64 npack = n / PACK;
    for (u64 p = gtid(); p < npack; p += gstride()) {
      float v[PACK];
      load8<FMT_KIND>(q, p * PACK, v);
      load8<FMT_KIND>(q, p * PACK + 8, v + 8);
#pragma unroll
      for (int j = 0; j < PACK; ++j) v[j] = fp8c_mul_keep_nan(v[j], s);
      store8<OUT>(y, p * PACK, v);
      store8<OUT>(y, p * PACK + 8, v + 8);
    }
    done = npack * PACK;
  }
  for (u64 i = done + gtid(); i < n; i += gstride())
    store_elem<OUT>(y, i, fp8c_mul_keep_nan(load_elem<FMT_KIND>(q, i), s));
}

#define DEQUANTIZE_KERNEL(FMT_NAME, FMT_KIND, OUT_NAME, OUT)                                                 \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                   \
      fp8c_dequantize_##FMT_NAME##_##OUT_NAME(const u8* q, const float* scale_inv, void* y, u64 n) {        \
    dequantize_impl<FMT_KIND, OUT>(q, scale_inv, y, n);                                                      \
  }
DEQUANTIZE_KERNEL(e4m3, KIND_E4M3, f32, KIND_F32)
DEQUANTIZE_KERNEL(e4m3, KIND_E4M3, bf16, KIND_BF16)
DEQUANTIZE_KERNEL(e4m3, KIND_E4M3, f16, KIND_F16)
DEQUANTIZE_KERNEL(e5m2, KIND_E5M2, f32, KIND_F32)
DEQUANTIZE_KERNEL(e5m2, KIND_E5M2, bf16, KIND_BF16)
DEQUANTIZE_KERNEL(e5m2, KIND_E5M2, f16, KIND_F16)

// ---------------------------------------------------------------- amax alone

template <int IN>
__device__ __forceinline__ void amax_impl(const void* __restrict__ x, float* __restrict__ amax, u64 n) {
  u32 m = 0u;
  u64 done = 0;
  if (aligned16(x)) {
    const u64 npack = n / PACK;
    for (u64 p = gtid(); p < npack; p += gstride()) {
      float v[PACK];
      load8<IN>(x, p * PACK, v);
      load8<IN>(x, p * PACK + 8, v + 8);
#pragma unroll
      for (int j = 0; j < PACK; ++j) m = max(m, abs_bits(v[j]));
    }
    done = npack * PACK;
  }
  for (u64 i = done + gtid(); i < n; i += gstride()) m = max(m, abs_bits(load_elem<IN>(x, i)));
  block_amax_commit(m, amax);
}

#define AMAX_KERNEL(IN_NAME, IN)                                                                         \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_amax_##IN_NAME(const void* x, float* amax, \
                                                                                u64 n) {                  \
    amax_impl<IN>(x, amax, n);                                                                           \
  }
AMAX_KERNEL(f32, KIND_F32)
AMAX_KERNEL(bf16, KIND_BF16)
AMAX_KERNEL(f16, KIND_F16)
AMAX_KERNEL(e4m3, KIND_E4M3)
AMAX_KERNEL(e5m2, KIND_E5M2)

// ---------------------------------------------------------------- casts without FP8
// Through f32 (exact for bf16 / f16 / bool), rounded once to the output type, as the CPU.

template <int IN, int OUT>
__device__ __forceinline__ void cast_impl(const void* __restrict__ x, void* __restrict__ y, u64 n) {
  u64 done = 0;
  if (aligned16(x) && aligned16(y)) {
    const u64 npack = n / 8;
    for (u64 p = gtid(); p < npack; p += gstride()) {
      float v[8];
      load8<IN>(x, p * 8, v);
      store8<OUT>(y, p * 8, v);
    }
    done = npack * 8;
  }
  for (u64 i = done + gtid(); i < n; i += gstride()) store_elem<OUT>(y, i, load_elem<IN>(x, i));
}

#define CAST_KERNEL(IN_NAME, IN, OUT_NAME, OUT)                                                           \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_cast_##IN_NAME##_##OUT_NAME(const void* x,  \
                                                                                          void* y, u64 n) { \
    cast_impl<IN, OUT>(x, y, n);                                                                          \
  }
CAST_KERNEL(f32, KIND_F32, bf16, KIND_BF16)
CAST_KERNEL(f32, KIND_F32, f16, KIND_F16)
CAST_KERNEL(f32, KIND_F32, bool, KIND_U8)
CAST_KERNEL(bf16, KIND_BF16, f32, KIND_F32)
CAST_KERNEL(bf16, KIND_BF16, f16, KIND_F16)
CAST_KERNEL(bf16, KIND_BF16, bool, KIND_U8)
CAST_KERNEL(f16, KIND_F16, f32, KIND_F32)
CAST_KERNEL(f16, KIND_F16, bf16, KIND_BF16)
CAST_KERNEL(f16, KIND_F16, bool, KIND_U8)
CAST_KERNEL(bool, KIND_U8, f32, KIND_F32)
CAST_KERNEL(bool, KIND_U8, bf16, KIND_BF16)
CAST_KERNEL(bool, KIND_U8, f16, KIND_F16)

// ---------------------------------------------------------------- casts with integers
// One element per thread (these casts are rare: masks, index arithmetic). Integer to float
// rounds to nearest even once (Rust's `as`; bf16 / f16 targets go through f32, exact below
// 2^24); float to integer truncates toward zero, saturates and maps NaN to 0 (Rust's `as`;
// PTX's cvt.rzi saturates too, but its 64-bit form maps NaN to the minimum); bool is 0 / 1.

#define KIND_I64 6
#define KIND_I32 7

template <int IN, int OUT>
__device__ __forceinline__ void cast_int_impl(const void* __restrict__ x, void* __restrict__ y, u64 n) {
  for (u64 i = gtid(); i < n; i += gstride()) {
    if (IN == KIND_I64 || IN == KIND_I32) {
      const i64 v = IN == KIND_I64 ? static_cast<const i64*>(x)[i] : (i64) static_cast<const int*>(x)[i];
      if (OUT == KIND_U8) static_cast<u8*>(y)[i] = v != 0 ? 1 : 0;
      else if (OUT == KIND_I64) static_cast<i64*>(y)[i] = v;
      else if (OUT == KIND_I32) static_cast<int*>(y)[i] = (int)v; // wraps, as Rust's `as`
      else store_elem<OUT>(y, i, __ll2float_rn(v));
    } else {
      // NaN to 0 explicitly: __float2ll_rz gives 0x8000000000000000 for NaN (seen on an H100).
      const float v = load_elem<IN>(x, i);
      if (OUT == KIND_I64) static_cast<i64*>(y)[i] = fp8c_isnan(v) ? 0 : __float2ll_rz(v);
      else static_cast<int*>(y)[i] = fp8c_isnan(v) ? 0 : __float2int_rz(v);
    }
  }
}

#define CAST_INT_KERNEL(IN_NAME, IN, OUT_NAME, OUT)                                                        \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_cast_##IN_NAME##_##OUT_NAME(const void* x,   \
                                                                                          void* y, u64 n) { \
    cast_int_impl<IN, OUT>(x, y, n);                                                                       \
  }
CAST_INT_KERNEL(i64, KIND_I64, f32, KIND_F32)
CAST_INT_KERNEL(i64, KIND_I64, bf16, KIND_BF16)
CAST_INT_KERNEL(i64, KIND_I64, f16, KIND_F16)
CAST_INT_KERNEL(i64, KIND_I64, bool, KIND_U8)
CAST_INT_KERNEL(i64, KIND_I64, i32, KIND_I32)
CAST_INT_KERNEL(i32, KIND_I32, f32, KIND_F32)
CAST_INT_KERNEL(i32, KIND_I32, bf16, KIND_BF16)
CAST_INT_KERNEL(i32, KIND_I32, f16, KIND_F16)
CAST_INT_KERNEL(i32, KIND_I32, bool, KIND_U8)
CAST_INT_KERNEL(i32, KIND_I32, i64, KIND_I64)
CAST_INT_KERNEL(f32, KIND_F32, i64, KIND_I64)
CAST_INT_KERNEL(f32, KIND_F32, i32, KIND_I32)
CAST_INT_KERNEL(bf16, KIND_BF16, i64, KIND_I64)
CAST_INT_KERNEL(bf16, KIND_BF16, i32, KIND_I32)
CAST_INT_KERNEL(f16, KIND_F16, i64, KIND_I64)
CAST_INT_KERNEL(f16, KIND_F16, i32, KIND_I32)
CAST_INT_KERNEL(bool, KIND_U8, i64, KIND_I64)
CAST_INT_KERNEL(bool, KIND_U8, i32, KIND_I32)

// ---------------------------------------------------------------- casts with f64 and 8/16-bit integers
// The CPU reference's rules (fp8c-eval `cast.rs`): float → int truncates toward zero,
// saturates and maps NaN to 0; int → int wraps; → f16/bf16 rounds once from the exact value
// (f64 and i64 sources through a round-to-odd f32, which keeps that single rounding exact);
// → f32 / f64 round to nearest even; → bool is x != 0 (NaN is true). Every source value is
// read exactly as a double (floats) or an i64 (integers and bool).
#define KIND_F64 8
#define KIND_I8 9
#define KIND_UN8 10 // u8 as a number (KIND_U8 is bool)
#define KIND_I16 11
#define KIND_U16 12

template <int K>
__device__ __forceinline__ constexpr bool kind_is_int() {
  return K == KIND_I64 || K == KIND_I32 || K == KIND_I8 || K == KIND_UN8 || K == KIND_I16 || K == KIND_U16 ||
         K == KIND_U8;
}

template <int K>
__device__ __forceinline__ i64 load_int(const void* p, u64 i) {
  if (K == KIND_I64) return static_cast<const i64*>(p)[i];
  if (K == KIND_I32) return static_cast<const int*>(p)[i];
  if (K == KIND_I8) return static_cast<const signed char*>(p)[i];
  if (K == KIND_UN8) return static_cast<const u8*>(p)[i];
  if (K == KIND_I16) return static_cast<const short*>(p)[i];
  if (K == KIND_U16) return static_cast<const u16*>(p)[i];
  return static_cast<const u8*>(p)[i] != 0 ? 1 : 0; // bool
}

template <int K>
__device__ __forceinline__ double load_float(const void* p, u64 i) {
  if (K == KIND_F64) return static_cast<const double*>(p)[i];
  return (double)load_elem<K>(p, i);
}

// A float with one rounding to f16 / bf16 still to come: the value rounded to odd in f32.
__device__ __forceinline__ float odd_f32_of_double(double d) {
  float f = __double2float_rz(d);
  if (d == d && (double)f != d) f = __uint_as_float(__float_as_uint(f) | 1u);
  return d == d ? f : fp8c_nan();
}
__device__ __forceinline__ float odd_f32_of_i64(i64 v) {
  float f = __ll2float_rz(v);
  if (__float2ll_rz(f) != v) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}

template <int K>
__device__ __forceinline__ void store_int(void* p, u64 i, i64 v) {
  if (K == KIND_I64) static_cast<i64*>(p)[i] = v;
  if (K == KIND_I32) static_cast<int*>(p)[i] = (int)(u32)(u64)v;
  if (K == KIND_I8) static_cast<signed char*>(p)[i] = (signed char)(u8)(u64)v;
  if (K == KIND_UN8) static_cast<u8*>(p)[i] = (u8)(u64)v;
  if (K == KIND_I16) static_cast<short*>(p)[i] = (short)(u16)(u64)v;
  if (K == KIND_U16) static_cast<u16*>(p)[i] = (u16)(u64)v;
  if (K == KIND_U8) static_cast<u8*>(p)[i] = v != 0 ? 1 : 0;
}

// float → integer: NaN 0, truncation toward zero, saturation to the target's range.
template <int K>
__device__ __forceinline__ i64 saturate_double(double d) {
  const double lo = K == KIND_I64 ? -9223372036854775808.0 : K == KIND_I32 ? -2147483648.0
                  : K == KIND_I8 ? -128.0 : K == KIND_I16 ? -32768.0 : 0.0;
  const double hi = K == KIND_I64 ? 9223372036854775807.0 : K == KIND_I32 ? 2147483647.0
                  : K == KIND_I8 ? 127.0 : K == KIND_UN8 ? 255.0 : K == KIND_I16 ? 32767.0 : 65535.0;
  if (d != d) return 0;
  if (d <= lo) return K == KIND_I64 ? (i64)0x8000000000000000ull : (i64)lo;
  if (d >= hi) return K == KIND_I64 ? (i64)0x7fffffffffffffffll : (i64)hi;
  return (i64)d; // truncates toward zero
}

template <int IN, int OUT>
__device__ __forceinline__ void cast_wide_impl(const void* __restrict__ x, void* __restrict__ y, u64 n) {
  for (u64 i = gtid(); i < n; i += gstride()) {
    if (kind_is_int<IN>()) {
      const i64 v = load_int<IN>(x, i);
      if (kind_is_int<OUT>()) store_int<OUT>(y, i, v);
      else if (OUT == KIND_F64) static_cast<double*>(y)[i] = __ll2double_rn(v);
      else if (OUT == KIND_F32) static_cast<float*>(y)[i] = __ll2float_rn(v);
      else store_elem<OUT>(y, i, odd_f32_of_i64(v));
    } else {
      const double d = load_float<IN>(x, i);
      if (OUT == KIND_U8) static_cast<u8*>(y)[i] = d != 0.0 ? 1 : 0; // NaN is true
      else if (kind_is_int<OUT>()) store_int<OUT>(y, i, saturate_double<OUT>(d));
      else if (OUT == KIND_F64) static_cast<double*>(y)[i] = d;
      else if (OUT == KIND_F32) static_cast<float*>(y)[i] = __double2float_rn(d);
      else store_elem<OUT>(y, i, odd_f32_of_double(d));
    }
  }
}

#define CAST_WIDE(IN_NAME, IN, OUT_NAME, OUT)                                                             \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_cast_##IN_NAME##_##OUT_NAME(const void* x,  \
                                                                                          void* y, u64 n) { \
    cast_wide_impl<IN, OUT>(x, y, n);                                                                     \
  }
// Every pair with f64, i8, u8, i16 or u16 on one side (the others have kernels above).
#define CAST_WIDE_FROM(IN_NAME, IN)               \
  CAST_WIDE(IN_NAME, IN, f32, KIND_F32)           \
  CAST_WIDE(IN_NAME, IN, bf16, KIND_BF16)         \
  CAST_WIDE(IN_NAME, IN, f16, KIND_F16)           \
  CAST_WIDE(IN_NAME, IN, bool, KIND_U8)           \
  CAST_WIDE(IN_NAME, IN, i64, KIND_I64)           \
  CAST_WIDE(IN_NAME, IN, i32, KIND_I32)
#define CAST_WIDE_TO(OUT_NAME, OUT)               \
  CAST_WIDE(f32, KIND_F32, OUT_NAME, OUT)         \
  CAST_WIDE(bf16, KIND_BF16, OUT_NAME, OUT)       \
  CAST_WIDE(f16, KIND_F16, OUT_NAME, OUT)         \
  CAST_WIDE(bool, KIND_U8, OUT_NAME, OUT)         \
  CAST_WIDE(i64, KIND_I64, OUT_NAME, OUT)         \
  CAST_WIDE(i32, KIND_I32, OUT_NAME, OUT)
CAST_WIDE_FROM(f64, KIND_F64)
CAST_WIDE_FROM(i8, KIND_I8)
CAST_WIDE_FROM(u8, KIND_UN8)
CAST_WIDE_FROM(i16, KIND_I16)
CAST_WIDE_FROM(u16, KIND_U16)
CAST_WIDE_TO(f64, KIND_F64)
CAST_WIDE_TO(i8, KIND_I8)
CAST_WIDE_TO(u8, KIND_UN8)
CAST_WIDE_TO(i16, KIND_I16)
CAST_WIDE_TO(u16, KIND_U16)
// Among the five themselves.
#define CAST_WIDE_AMONG(IN_NAME, IN)                                                             \
  CAST_WIDE(IN_NAME, IN, f64, KIND_F64) CAST_WIDE(IN_NAME, IN, i8, KIND_I8)                    \
  CAST_WIDE(IN_NAME, IN, u8, KIND_UN8) CAST_WIDE(IN_NAME, IN, i16, KIND_I16)                   \
  CAST_WIDE(IN_NAME, IN, u16, KIND_U16)
CAST_WIDE_AMONG(f64, KIND_F64)
CAST_WIDE_AMONG(i8, KIND_I8)
CAST_WIDE_AMONG(u8, KIND_UN8)
CAST_WIDE_AMONG(i16, KIND_I16)
CAST_WIDE_AMONG(u16, KIND_U16)

// ---------------------------------------------------------------- ONNX QuantizeLinear / DequantizeLinear
//
// f32 x and f32 scales, per tensor, per axis or blocked along one axis, as the CPU reference
// computes them. Element i sits at (outer o, axis a, inner r) around the quantization axis
// (axis_len A, inner R; per tensor: A = R = 1); its scale (and zero point) is number a (per
// axis, block 0) or ((o·ceil(A/block) + a/block)·R + r) (blocked), or 0 when A = 1.
__device__ __forceinline__ u64 qdq_channel(u64 i, u64 axis_len, u64 inner, u64 block) {
  if (axis_len == 1 && inner == 1) return 0;
  const u64 a = (i / inner) % axis_len;
  if (block == 0) return a;
  const u64 o = i / (inner * axis_len), r = i % inner, nb = (axis_len + block - 1) / block;
  return (o * nb + a / block) * inner + r;
}

// Integer outputs: q = clamp(rint(f32(x / s)) + zp, LO, HI), NaN → LO.
template <typename T, int LO, int HI>
__device__ __forceinline__ void quantize_linear_int(const float* __restrict__ x, const float* __restrict__ s,
                                                    const T* __restrict__ zp, T* __restrict__ y, u64 n,
                                                    u64 axis_len, u64 inner, u64 block) {
  for (u64 i = gtid(); i < n; i += gstride()) {
    const u64 c = qdq_channel(i, axis_len, inner, block);
    const float z = zp ? (float)zp[c] : 0.0f;
    const float r = __fadd_rn(rintf(__fdiv_rn(x[i], s[c])), z);
    y[i] = fp8c_isnan(r) ? (T)LO : (T)(r < (float)LO ? (float)LO : (r > (float)HI ? (float)HI : r));
  }
}

#define QLINEAR_INT(NAME, T, LO, HI)                                                                  \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                             \
      fp8c_quantize_linear_##NAME(const float* x, const float* s, const T* zp, T* y, u64 n, u64 axis_len, \
                                  u64 inner, u64 block, int saturate) {                               \
    (void)saturate;                                                                                    \
    quantize_linear_int<T, LO, HI>(x, s, zp, y, n, axis_len, inner, block);                          \
  }
QLINEAR_INT(i8, signed char, -128, 127)
QLINEAR_INT(u8, u8, 0, 255)
QLINEAR_INT(i16, short, -32768, 32767)
QLINEAR_INT(u16, u16, 0, 65535)

// FP8 outputs: the Cast table's encode of f32(x / s) (the zero point, if any, is 0).
#define QLINEAR_FP8(NAME, FMT)                                                                        \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                             \
      fp8c_quantize_linear_##NAME(const float* x, const float* s, const u8* zp, u8* y, u64 n,          \
                                  u64 axis_len, u64 inner, u64 block, int saturate) {                 \
    (void)zp;                                                                                          \
    for (u64 i = gtid(); i < n; i += gstride()) {                                                      \
      const float q = __fdiv_rn(x[i], s[qdq_channel(i, axis_len, inner, block)]);                     \
      y[i] = (u8)fp8_encode_rt(FMT, saturate != 0, q);                                                 \
    }                                                                                                  \
  }
QLINEAR_FP8(e4m3, FMT_E4M3)
QLINEAR_FP8(e5m2, FMT_E5M2)

// y = f32((x − zp) · s), computed in double as the CPU reference does (exact for i32 x).
#define DQLINEAR_INT(NAME, T)                                                                         \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                             \
      fp8c_dequantize_linear_##NAME(const T* x, const float* s, const T* zp, float* y, u64 n,         \
                                    u64 axis_len, u64 inner, u64 block) {                             \
    for (u64 i = gtid(); i < n; i += gstride()) {                                                      \
      const u64 c = qdq_channel(i, axis_len, inner, block);                                            \
      const double z = zp ? (double)zp[c] : 0.0;                                                       \
      y[i] = __double2float_rn(((double)x[i] - z) * (double)s[c]);                                     \
    }                                                                                                  \
  }
DQLINEAR_INT(i8, signed char)
DQLINEAR_INT(u8, u8)
DQLINEAR_INT(i16, short)
DQLINEAR_INT(u16, u16)
DQLINEAR_INT(i32, int)

#define DQLINEAR_FP8(NAME, FMT)                                                                       \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                             \
      fp8c_dequantize_linear_##NAME(const u8* x, const float* s, const u8* zp, float* y, u64 n,       \
                                    u64 axis_len, u64 inner, u64 block) {                             \
    (void)zp;                                                                                          \
    for (u64 i = gtid(); i < n; i += gstride()) {                                                      \
      const double v = (double)fp8_decode<FMT>(x[i]);                                                  \
      y[i] = __double2float_rn(v * (double)s[qdq_channel(i, axis_len, inner, block)]);                \
    }                                                                                                  \
  }
DQLINEAR_FP8(e4m3, FMT_E4M3)
DQLINEAR_FP8(e5m2, FMT_E5M2)
