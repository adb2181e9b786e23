// common.cuh — device helpers every kernel family shares: element kinds, bit-exact FP8 / bf16 /
// f16 conversions, 16-byte vector loads and stores, warp and block reductions, and the amax
// accumulator.
//
// Needs no CUDA header: NVRTC's built-in intrinsics only, so the kernels compile wherever
// NVRTC runs (the nvidia-cuda-nvrtc wheel ships no cuda_fp8.h / cuda_bf16.h).
//
// Bit-exactness contract: every conversion here is a line-by-line port of the CPU reference
// (fp8c-core's cast.rs `encode_bits`, its decode table, and the `half` crate's bf16 / f16
// conversions), so a quantize on the GPU gives the very bytes the CPU gives, NaN payloads
// included. The runtime compiles with --fmad=false --ftz=false --prec-div=true so that plain
// `a * b` is one correctly rounded IEEE multiply, as on the CPU.
#pragma once

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// ---------------------------------------------------------------- element kinds
// Storage kinds, shared with the Rust side (crates/fp8c-runtime/src/cuda/kinds.rs).
#define KIND_F32 0
#define KIND_BF16 1
#define KIND_F16 2
#define KIND_U8 3 // bool (0 / 1) and raw bytes
#define KIND_E4M3 4
#define KIND_E5M2 5

// FP8 format ids (template arguments).
#define FMT_E4M3 0
#define FMT_E5M2 1

#define FP8C_BLOCK 256
#define FP8C_FULL_MASK 0xffffffffu

__device__ __forceinline__ bool fp8c_isnan(float x) {
  return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u;
}
__device__ __forceinline__ bool fp8c_isfinite(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}
__device__ __forceinline__ bool fp8c_isinf(float x) {
  return (__float_as_uint(x) & 0x7fffffffu) == 0x7f800000u;
}
__device__ __forceinline__ float fp8c_nan() { return __uint_as_float(0x7fc00000u); }
#define FP8C_FLT_MAX 3.40282346638528859812e+38f

// ---------------------------------------------------------------- FP8 encode / decode

// Port of fp8c-core `encode_bits::<SAT>`: round to nearest even; `SAT` maps overflow and ±inf
// to ±max, otherwise to NaN (E4M3) / ±inf (E5M2); NaN gives the canonical S.1111.111 (E4M3) or
// S.11111.10 (E5M2) whatever its payload. Every path is computed and one selected, like the CPU.
template <int FMT, bool SAT>
__device__ __forceinline__ u32 fp8_encode(float x) {
  const u32 rebias = FMT == FMT_E4M3 ? (120u << 23) : (112u << 23);
  const u32 shift = FMT == FMT_E4M3 ? 20u : 21u;
  const u32 min_normal_bits = FMT == FMT_E4M3 ? 0x3c800000u : 0x38800000u;
  const u32 overflow_above_bits = FMT == FMT_E4M3 ? 0x43e80000u : 0x476fffffu;
  const float subnormal_magic = FMT == FMT_E4M3 ? 16384.0f : 128.0f;
  const u32 max_code = FMT == FMT_E4M3 ? 0x7eu : 0x7bu;
  const u32 overflow_code = FMT == FMT_E4M3 ? 0x7fu : 0x7cu;
  const u32 nan_code = FMT == FMT_E4M3 ? 0x7fu : 0x7eu;

  const u32 bits = __float_as_uint(x);
  const u32 sign = (bits >> 24) & 0x80u;
  const u32 abs = bits & 0x7fffffffu;
  const u32 lsb = (abs >> shift) & 1u;
  const u32 half_minus_one = (1u << (shift - 1u)) - 1u;
  const u32 normal = (abs - rebias + half_minus_one + lsb) >> shift; // wraps like the CPU
  // __fadd_rn: never contracted, round to nearest even (the CPU's f32 addition).
  const u32 subnormal =
      __float_as_uint(__fadd_rn(__uint_as_float(abs), subnormal_magic)) - __float_as_uint(subnormal_magic);
  u32 mag = abs < min_normal_bits ? subnormal : normal;
  if (abs > overflow_above_bits) mag = SAT ? max_code : overflow_code;
  if (abs > 0x7f800000u) mag = nan_code;
  return mag | sign;
}

// A product with the CPU's NaN rule (x86 SSE and AArch64 alike): a NaN operand comes out
// quieted with its sign and payload, the first operand's when both are NaN. The GPU's own
// arithmetic returns the canonical 0x7fffffff instead, which drops the sign of -NaN (seen on an
// H100: quantize(-NaN) gave 0x7f where the CPU gives 0xff, dequantize gave 0x7fffffff for
// 0xffc00000).
__device__ __forceinline__ float fp8c_mul_keep_nan(float a, float b) {
  if (fp8c_isnan(a)) return __uint_as_float(__float_as_uint(a) | 0x00400000u);
  if (fp8c_isnan(b)) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
  return __fmul_rn(a, b);
}

// fp8c-core `quantize`: encode(x * s), the product rounded first; saturation applies to finite
// values only: an infinite x gives NaN (E4M3) / ±inf (E5M2), so non-finite data never turns
// into finite codes. (Casts, fp8_encode alone, keep ONNX's table.)
template <int FMT, bool SAT>
__device__ __forceinline__ u32 fp8_quantize(float x, float s) {
  const u32 c = fp8_encode<FMT, SAT>(fp8c_mul_keep_nan(x, s));
  const u32 inf_code = ((__float_as_uint(x) >> 24) & 0x80u) | (FMT == FMT_E4M3 ? 0x7fu : 0x7cu);
  return fp8c_isinf(x) ? inf_code : c;
}

// Encode with the format and saturation chosen at run time (uniform across the grid).
__device__ __forceinline__ u32 fp8_encode_rt(int fmt, bool sat, float x) {
  if (fmt == FMT_E4M3) return sat ? fp8_encode<FMT_E4M3, true>(x) : fp8_encode<FMT_E4M3, false>(x);
  return sat ? fp8_encode<FMT_E5M2, true>(x) : fp8_encode<FMT_E5M2, false>(x);
}

// fp8_quantize with the format and saturation chosen at run time.
__device__ __forceinline__ u32 fp8_quantize_rt(int fmt, bool sat, float x, float s) {
  if (fmt == FMT_E4M3) return sat ? fp8_quantize<FMT_E4M3, true>(x, s) : fp8_quantize<FMT_E4M3, false>(x, s);
  return sat ? fp8_quantize<FMT_E5M2, true>(x, s) : fp8_quantize<FMT_E5M2, false>(x, s);
}

// Exact decode; every NaN code gives the sign-preserving quiet NaN 0x7fc00000 / 0xffc00000, as
// fp8c-core's decode table.
template <int FMT>
__device__ __forceinline__ float fp8_decode(u32 code) {
  const u32 sign = (code & 0x80u) << 24;
  if (FMT == FMT_E4M3) {
    const u32 e = (code >> 3) & 0xfu, m = code & 7u;
    if (e == 15u && m == 7u) return __uint_as_float(sign | 0x7fc00000u);
    if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 0.001953125f) | sign); // m * 2^-9
    return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
  } else {
    const u32 e = (code >> 2) & 0x1fu, m = code & 3u;
    if (e == 31u) return __uint_as_float(sign | (m == 0u ? 0x7f800000u : 0x7fc00000u));
    if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 1.52587890625e-05f) | sign); // m * 2^-16
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 21));
  }
}

// ---------------------------------------------------------------- bf16 / f16 (the `half` crate)

// half::bf16::from_f32: NaN keeps its upper payload with the quiet bit set; otherwise RNE.
__device__ __forceinline__ u16 f32_to_bf16(float v) {
  const u32 x = __float_as_uint(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);
  const u32 round_bit = 0x00008000u;
  if ((x & round_bit) != 0u && (x & (3u * round_bit - 1u)) != 0u) return (u16)((x >> 16) + 1u);
  return (u16)(x >> 16);
}

// half::bf16::to_f32: a NaN gets its quiet bit set.
__device__ __forceinline__ float bf16_to_f32(u32 h) {
  h &= 0xffffu;
  if ((h & 0x7fffu) > 0x7f80u) return __uint_as_float((h | 0x0040u) << 16);
  return __uint_as_float(h << 16);
}

// half's f32_to_f16_fallback, step for step (round to nearest even, overflow to ±inf).
__device__ __forceinline__ u16 f32_to_f16(float v) {
  const u32 x = __float_as_uint(v);
  const u32 sign = x & 0x80000000u;
  const u32 exp = x & 0x7f800000u;
  const u32 man = x & 0x007fffffu;
  if (exp == 0x7f800000u) {
    const u32 nan_bit = man == 0u ? 0u : 0x0200u;
    return (u16)((sign >> 16) | 0x7c00u | nan_bit | (man >> 13));
  }
  const u32 half_sign = sign >> 16;
  const int unbiased_exp = (int)(exp >> 23) - 127;
  const int half_exp = unbiased_exp + 15;
  if (half_exp >= 0x1f) return (u16)(half_sign | 0x7c00u);
  if (half_exp <= 0) {
    if (14 - half_exp > 24) return (u16)half_sign;
    const u32 m = man | 0x00800000u;
    u32 half_man = m >> (14 - half_exp);
    const u32 round_bit = 1u << (13 - half_exp);
    if ((m & round_bit) != 0u && (m & (3u * round_bit - 1u)) != 0u) half_man += 1u;
    return (u16)(half_sign | half_man);
  }
  const u32 he = (u32)half_exp << 10;
  const u32 hm = man >> 13;
  const u32 round_bit = 0x00001000u;
  if ((man & round_bit) != 0u && (man & (3u * round_bit - 1u)) != 0u) return (u16)((half_sign | he | hm) + 1u);
  return (u16)(half_sign | he | hm);
}

// half's f16_to_f32_fallback (exact; NaN gets its quiet bit set).
__device__ __forceinline__ float f16_to_f32(u32 h) {
  h &= 0xffffu;
  const u32 sign = (h & 0x8000u) << 16;
  const u32 e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31u) return __uint_as_float(sign | 0x7f800000u | (m == 0u ? 0u : (0x00400000u | (m << 13))));
  if (e == 0u) return __uint_as_float(__float_as_uint((float)m * 5.9604644775390625e-08f) | sign); // m * 2^-24
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// ---------------------------------------------------------------- scalar element access

template <int K>
__device__ __forceinline__ float load_elem(const void* p, u64 i) {
  if (K == KIND_F32) return static_cast<const float*>(p)[i];
  if (K == KIND_BF16) return bf16_to_f32(static_cast<const u16*>(p)[i]);
  if (K == KIND_F16) return f16_to_f32(static_cast<const u16*>(p)[i]);
  if (K == KIND_U8) return static_cast<const u8*>(p)[i] != 0 ? 1.0f : 0.0f;
  if (K == KIND_E4M3) return fp8_decode<FMT_E4M3>(static_cast<const u8*>(p)[i]);
  return fp8_decode<FMT_E5M2>(static_cast<const u8*>(p)[i]);
}

// Stores one value; u8 stores a bool (any non-zero, NaN included, is true), FP8 kinds saturate.
template <int K>
__device__ __forceinline__ void store_elem(void* p, u64 i, float v) {
  if (K == KIND_F32) static_cast<float*>(p)[i] = v;
  if (K == KIND_BF16) static_cast<u16*>(p)[i] = f32_to_bf16(v);
  if (K == KIND_F16) static_cast<u16*>(p)[i] = f32_to_f16(v);
  if (K == KIND_U8) static_cast<u8*>(p)[i] = v != 0.0f ? 1 : 0;
  if (K == KIND_E4M3) static_cast<u8*>(p)[i] = (u8)fp8_encode<FMT_E4M3, true>(v);
  if (K == KIND_E5M2) static_cast<u8*>(p)[i] = (u8)fp8_encode<FMT_E5M2, true>(v);
}

// ---------------------------------------------------------------- 16-byte vector access
// `loadN` / `storeN` move N consecutive elements starting at element i. Callers guarantee
// i % N == 0 and a 16-byte aligned base (every fp8c buffer is 256-byte aligned), so each
// access below is a full 16-byte (or, for short rows of bytes, 8-byte) transaction.

template <int K>
__device__ __forceinline__ void load8(const void* p, u64 i, float v[8]) {
  if (K == KIND_F32) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const float4 a = __ldg(q), b = __ldg(q + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else if (K == KIND_BF16 || K == KIND_F16) {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(static_cast<const u16*>(p) + i));
    const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = K == KIND_BF16 ? bf16_to_f32(w[j] & 0xffffu) : f16_to_f32(w[j] & 0xffffu);
      v[2 * j + 1] = K == KIND_BF16 ? bf16_to_f32(w[j] >> 16) : f16_to_f32(w[j] >> 16);
    }
  } else {
    const uint2 a = __ldg(reinterpret_cast<const uint2*>(static_cast<const u8*>(p) + i));
    const u32 w[2] = {a.x, a.y};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const u32 c = (w[j / 4] >> (8 * (j % 4))) & 0xffu;
      if (K == KIND_U8) v[j] = c != 0u ? 1.0f : 0.0f;
      if (K == KIND_E4M3) v[j] = fp8_decode<FMT_E4M3>(c);
      if (K == KIND_E5M2) v[j] = fp8_decode<FMT_E5M2>(c);
    }
  }
}

template <int K>
__device__ __forceinline__ void store8(void* p, u64 i, const float v[8]) {
  if (K == KIND_F32) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else if (K == KIND_BF16 || K == KIND_F16) {
    u32 w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u32 lo = K == KIND_BF16 ? f32_to_bf16(v[2 * j]) : f32_to_f16(v[2 * j]);
      const u32 hi = K == KIND_BF16 ? f32_to_bf16(v[2 * j + 1]) : f32_to_f16(v[2 * j + 1]);
      w[j] = lo | (hi << 16);
    }
    *reinterpret_cast<uint4*>(static_cast<u16*>(p) + i) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    u32 w[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      u32 c;
      if (K == KIND_U8) c = v[j] != 0.0f ? 1u : 0u;
      else if (K == KIND_E4M3) c = fp8_encode<FMT_E4M3, true>(v[j]);
      else c = fp8_encode<FMT_E5M2, true>(v[j]);
      w[j / 4] |= c << (8 * (j % 4));
    }
    *reinterpret_cast<uint2*>(static_cast<u8*>(p) + i) = make_uint2(w[0], w[1]);
  }
}

// ---------------------------------------------------------------- reductions

__device__ __forceinline__ u32 warp_max_u32(u32 v) { return __reduce_max_sync(FP8C_FULL_MASK, v); }

__device__ __forceinline__ float warp_sum_f32(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FP8C_FULL_MASK, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum_f64(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FP8C_FULL_MASK, v, o);
  return v;
}

// max with NaN winning (torch.max); used where values are not known to be non-negative.
__device__ __forceinline__ float nan_max(float a, float b) {
  if (fp8c_isnan(a) || fp8c_isnan(b)) return fp8c_nan();
  return b > a ? b : a;
}
__device__ __forceinline__ float nan_min(float a, float b) {
  if (fp8c_isnan(a) || fp8c_isnan(b)) return fp8c_nan();
  return b < a ? b : a;
}

__device__ __forceinline__ float warp_nan_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(FP8C_FULL_MASK, v, o));
  return v;
}

// Block-wide sum for blockDim.x a multiple of 32 (at most 1024); every thread gets the result.
__device__ __forceinline__ double block_sum_f64(double v) {
  __shared__ double part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum_f64(v);
  __syncthreads(); // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nwarps = (int)(blockDim.x >> 5);
  double t = lane < nwarps ? part[lane] : 0.0;
  return warp_sum_f64(t);
}

__device__ __forceinline__ float block_nan_max(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_nan_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nwarps = (int)(blockDim.x >> 5);
  float t = lane < nwarps ? part[lane] : -__uint_as_float(0x7f800000u);
  return warp_nan_max(t);
}

// ---------------------------------------------------------------- amax
// |x| bit patterns order like the values for non-negative floats and every NaN pattern is
// above +inf's, so an unsigned max over (bits & 0x7fffffff) is max |x| with NaN winning: the
// CPU's `amax_f32` exactly. The accumulator (a u32 holding f32 bits) starts at 0 (memset by
// the runtime before the launch); NaN is canonicalised to 0x7fc00000 before the atomic, so the
// result is f32::NAN bit for bit, as on the CPU.

__device__ __forceinline__ u32 abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// ---------------------------------------------------------------- per-tile scales (issue #16)
// block_scaling.cu's header states the rules; elementwise.cu's fused kernel uses them too.
#define SCALING_FP32 0
#define SCALING_POW2 1
#define SCALING_E8M0 2

// The tiling of a [mats, r, c] tensor into tr × tc tiles, nr × nc of them per matrix.
struct Tiling {
  u64 mats, r, c, tr, tc, nr, nc;
};

// The scale of a tile from its amax (block_scaling.cu's header comment).
__device__ __forceinline__ float tile_scale(float amax, int scaling, float epsilon, float fmt_max, int emax) {
  if (scaling == SCALING_E8M0) {
    if (!(fp8c_isfinite(amax) && amax > 0.0f)) return 1.0f;
    const u32 bits = __float_as_uint(amax);
    const int exp = (int)(bits >> 23);
    // floor(log2 amax): the exponent, or for a subnormal its top mantissa bit's place.
    const int floor_log2 = exp == 0 ? (31 - __clz((int)(bits & 0x7fffffu))) - 149 : exp - 127;
    int shared = floor_log2 - emax;
    shared = shared < -127 ? -127 : (shared > 127 ? 127 : shared);
    const int e = -shared; // 2^e, e in [-127, 127]: 2^-127 is the one subnormal
    return e >= -126 ? __uint_as_float((u32)(e + 127) << 23) : __uint_as_float(0x00400000u);
  }
  const float a = amax < epsilon ? epsilon : amax;
  float s = __fdiv_rn(fmt_max, a);
  if (!(a > 0.0f && fp8c_isfinite(a))) s = 1.0f;
  if (fp8c_isinf(s)) s = FP8C_FLT_MAX;
  if (scaling == SCALING_POW2) s = __uint_as_float(__float_as_uint(s) & 0xff800000u);
  return s;
}


// Reduces each thread's `m` over the block and max-accumulates it into *amax (if non-null).
__device__ __forceinline__ void block_amax_commit(u32 m, float* amax) {
  __shared__ u32 part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  m = warp_max_u32(m);
  if (lane == 0) part[warp] = m;
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (int)(blockDim.x >> 5);
    u32 t = lane < nwarps ? part[lane] : 0u;
    t = warp_max_u32(t);
    if (lane == 0 && amax != nullptr && t != 0u) {
      if (t > 0x7f800000u) t = 0x7fc00000u;
      atomicMax(reinterpret_cast<u32*>(amax), t);
    }
  }
}

// ---------------------------------------------------------------- indexing

// Grid-stride loop over [0, n): `for (u64 i = gtid(); i < n; i += gstride())`.
__device__ __forceinline__ u64 gtid() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 gstride() { return (u64)gridDim.x * blockDim.x; }

__device__ __forceinline__ bool aligned16(const void* p) { return ((u64)p & 15ull) == 0ull; }

// Up to this many dims in strided index arithmetic (movement, broadcasting).
#define FP8C_MAX_DIMS 8

// Dims and element strides of a strided view, passed to kernels by value.
struct StridedView {
  u32 rank;
  u32 pad_;
  u64 dims[FP8C_MAX_DIMS];       // iteration dims (outermost first)
  i64 in_strides[FP8C_MAX_DIMS]; // source element strides per iteration dim
  i64 out_strides[FP8C_MAX_DIMS];
  i64 in_offset;  // source element offset of index 0
  i64 out_offset; // destination element offset of index 0
};
