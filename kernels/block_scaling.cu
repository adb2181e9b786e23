// block_scaling.cu — fine-grained FP8 scaling (issue #16): per-tile current scaling of a
// [..., R, C] tensor (rowwise 1×C, DeepSeek's 1×128 and 128×128, MXFP8's 1×32 with E8M0
// scales, any rows × cols tile), its dequantize, and the exact block-scaled GEMM that the
// lowering runs where cuBLASLt has no block-scaled mode for the tiling (MXFP8 on Hopper, odd
// shapes).
//
// IR ops: block_quantize, block_dequantize, block_scaled_matmul. Semantics are the CPU
// reference's (`fp8c-eval/src/block.rs`), bit for bit:
//   tile (ti, tj) of matrix m covers rows [ti·tr, min((ti+1)·tr, R)) and cols likewise; its
//   scale comes from its amax (max |x|, NaN winning):
//     fp32: a = max(amax, epsilon) (a NaN amax stays NaN); s = fmt_max / a, or 1 unless
//           0 < a < inf; ±inf -> FLT_MAX            (fp8c-core compute_scale, margin 0)
//     pow2: fp32's s with its mantissa cleared
//     e8m0: s = 2^-(floor(log2 amax) - emax_elem), the exponent clamped to [-127, 127]; 1 for
//           an amax of 0 or non-finite              (OCP MX v1.0)
//   q = fp8_quantize(x, s) (the scaled quantize of quantize.cu); scale_inv = 1 / s.
//   block_scaled_matmul: per K block, the exact FP8 products summed in f32 in order, times A's
//   then B's scale_inv, the blocks summed in order, each step rounded to f32 (no FMA
//   contraction: __fadd_rn / __fmul_rn), then one rounding to D's type; where the sum times
//   A's scale_inv overflows, the product with both scale_invs is taken in double and rounded
//   once (the CPU's `promote`: a tile of huge values stays finite).
#include "common.cuh"

// SCALING_FP32 / POW2 / E8M0 and tile_scale (a tile's scale from its amax) are in common.cuh,
// shared with elementwise.cu's fused elementwise_block_quantize.

// One block per tile (grid-stride over tiles): the tile's amax, its scale, then its codes.
template <int IN, int FMT, bool SAT>
__device__ __forceinline__ void block_quantize_impl(const void* __restrict__ x, u8* __restrict__ q,
                                                    float* __restrict__ scale_inv, Tiling t, int scaling,
                                                    float epsilon) {
  __shared__ u32 part[32];
  __shared__ float tile_s;
  const float fmt_max = FMT == FMT_E4M3 ? 448.0f : 57344.0f;
  const int emax = FMT == FMT_E4M3 ? 8 : 15;
  const u64 per_mat = t.nr * t.nc, tiles = t.mats * per_mat;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (u64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const u64 m = tile / per_mat, rest = tile % per_mat;
    const u64 row0 = (rest / t.nc) * t.tr, col0 = (rest % t.nc) * t.tc;
    const u64 h = row0 < t.r ? min(t.tr, t.r - row0) : 0, w = col0 < t.c ? min(t.tc, t.c - col0) : 0;
    const u64 count = h * w, base = m * t.r * t.c;
    u32 bits = 0u;
    for (u64 e = threadIdx.x; e < count; e += blockDim.x) {
      const u64 i = row0 + e / w, j = col0 + e % w;
      bits = max(bits, abs_bits(load_elem<IN>(x, base + i * t.c + j)));
    }
    bits = warp_max_u32(bits);
    __syncthreads(); // part[] and tile_s may still be read for the previous tile
    if (lane == 0) part[warp] = bits;
    __syncthreads();
    if (warp == 0) {
      const int nwarps = (int)(blockDim.x >> 5);
      u32 b = lane < nwarps ? part[lane] : 0u;
      b = warp_max_u32(b);
      if (lane == 0) {
        const float s = tile_scale(__uint_as_float(b), scaling, epsilon, fmt_max, emax);
        tile_s = s;
        scale_inv[tile] = __fdiv_rn(1.0f, s);
      }
    }
    __syncthreads();
    const float s = tile_s;
    for (u64 e = threadIdx.x; e < count; e += blockDim.x) {
      const u64 at = base + (row0 + e / w) * t.c + col0 + e % w;
      q[at] = (u8)fp8_quantize<FMT, SAT>(load_elem<IN>(x, at), s);
    }
  }
}

// fp8c_block_quantize_<in>_<fmt>_<sat|nosat>(x, q, scale_inv, tiling, scaling, epsilon)
#define BLOCK_QUANTIZE_KERNEL(IN_NAME, IN, FMT_NAME, FMT, SAT_NAME, SAT)                                  \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                              \
      fp8c_block_quantize_##IN_NAME##_##FMT_NAME##_##SAT_NAME(const void* x, u8* q, float* scale_inv,     \
                                                               Tiling t, int scaling, float epsilon) {   \
    block_quantize_impl<IN, FMT, SAT>(x, q, scale_inv, t, scaling, epsilon);                            \
  }
#define BLOCK_QUANTIZE_FOR_INPUT(IN_NAME, IN)                               \
  BLOCK_QUANTIZE_KERNEL(IN_NAME, IN, e4m3, FMT_E4M3, sat, true)             \
  BLOCK_QUANTIZE_KERNEL(IN_NAME, IN, e4m3, FMT_E4M3, nosat, false)          \
  BLOCK_QUANTIZE_KERNEL(IN_NAME, IN, e5m2, FMT_E5M2, sat, true)             \
  BLOCK_QUANTIZE_KERNEL(IN_NAME, IN, e5m2, FMT_E5M2, nosat, false)
BLOCK_QUANTIZE_FOR_INPUT(f32, KIND_F32)
BLOCK_QUANTIZE_FOR_INPUT(bf16, KIND_BF16)
BLOCK_QUANTIZE_FOR_INPUT(f16, KIND_F16)

// fp8c_block_dequantize_<fmt>_<out>(q, scale_inv, y, tiling): y = decode(q) · scale_inv of
// its tile (a NaN keeps its sign, as on the CPU), rounded once to y's type.
#define BLOCK_DEQUANTIZE_KERNEL(FMT_NAME, FMT, OUT_NAME, OUT)                                             \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_block_dequantize_##FMT_NAME##_##OUT_NAME( \
      const u8* q, const float* scale_inv, void* y, Tiling t) {                                          \
    const u64 n = t.mats * t.r * t.c;                                                                    \
    for (u64 e = gtid(); e < n; e += gstride()) {                                                        \
      const u64 m = e / (t.r * t.c), rest = e % (t.r * t.c);                                            \
      const u64 tile = (m * t.nr + (rest / t.c) / t.tr) * t.nc + (rest % t.c) / t.tc;                   \
      store_elem<OUT>(y, e, fp8c_mul_keep_nan(fp8_decode<FMT>(q[e]), scale_inv[tile]));                  \
    }                                                                                                    \
  }
BLOCK_DEQUANTIZE_KERNEL(e4m3, FMT_E4M3, f32, KIND_F32)
BLOCK_DEQUANTIZE_KERNEL(e4m3, FMT_E4M3, bf16, KIND_BF16)
BLOCK_DEQUANTIZE_KERNEL(e4m3, FMT_E4M3, f16, KIND_F16)
BLOCK_DEQUANTIZE_KERNEL(e5m2, FMT_E5M2, f32, KIND_F32)
BLOCK_DEQUANTIZE_KERNEL(e5m2, FMT_E5M2, bf16, KIND_BF16)
BLOCK_DEQUANTIZE_KERNEL(e5m2, FMT_E5M2, f16, KIND_F16)

// The geometry of an exact block-scaled GEMM: qa [m, k] with scale_inv_a [ceil(m/a_tr), kblocks],
// qb [k, n] with scale_inv_b [kblocks, b_nc] (b_nc = ceil(n/b_tc)), K blocks of kt.
struct BlockGemm {
  u64 m, n, k, kt, kblocks, a_tr, b_tc, b_nc;
};

// One thread per output element (grid-stride; consecutive threads take consecutive columns, so
// B's rows are read coalesced). The fallback where cuBLASLt has no mode for the tiling: exact,
// in the CPU's order, not fast.
template <int FA, int FB, int OUT>
__device__ __forceinline__ void block_gemm_impl(const u8* __restrict__ a, const u8* __restrict__ b,
                                                const float* __restrict__ sa, const float* __restrict__ sb,
                                                void* __restrict__ d, BlockGemm g) {
  const u64 total = g.m * g.n;
  for (u64 idx = gtid(); idx < total; idx += gstride()) {
    const u64 row = idx / g.n, col = idx % g.n;
    float acc = 0.0f;
    for (u64 blk = 0; blk < g.kblocks; ++blk) {
      float p = 0.0f;
      const u64 end = min((blk + 1) * g.kt, g.k);
      for (u64 kk = blk * g.kt; kk < end; ++kk)
        p = __fadd_rn(p, __fmul_rn(fp8_decode<FA>(a[row * g.k + kk]), fp8_decode<FB>(b[kk * g.n + col])));
      const float s_a = sa[(row / g.a_tr) * g.kblocks + blk];
      const float s_b = sb[blk * g.b_nc + col / g.b_tc];
      const float t = __fmul_rn(p, s_a);
      const float scaled = fp8c_isinf(t) ? __double2float_rn(__dmul_rn(__dmul_rn((double)p, (double)s_a), (double)s_b))
                                    : __fmul_rn(t, s_b);
      acc = __fadd_rn(acc, scaled);
    }
    store_elem<OUT>(d, idx, acc);
  }
}

// fp8c_block_scaled_matmul_<fa>_<fb>_<out>(qa, qb, scale_inv_a, scale_inv_b, d, geometry)
#define BLOCK_GEMM_KERNEL(FA_NAME, FA, FB_NAME, FB, OUT_NAME, OUT)                                       \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                             \
      fp8c_block_scaled_matmul_##FA_NAME##_##FB_NAME##_##OUT_NAME(                                      \
          const u8* a, const u8* b, const float* sa, const float* sb, void* d, BlockGemm g) {           \
    block_gemm_impl<FA, FB, OUT>(a, b, sa, sb, d, g);                                                   \
  }
#define BLOCK_GEMM_FOR_FORMATS(FA_NAME, FA, FB_NAME, FB)            \
  BLOCK_GEMM_KERNEL(FA_NAME, FA, FB_NAME, FB, f32, KIND_F32)        \
  BLOCK_GEMM_KERNEL(FA_NAME, FA, FB_NAME, FB, bf16, KIND_BF16)      \
  BLOCK_GEMM_KERNEL(FA_NAME, FA, FB_NAME, FB, f16, KIND_F16)
BLOCK_GEMM_FOR_FORMATS(e4m3, FMT_E4M3, e4m3, FMT_E4M3)
BLOCK_GEMM_FOR_FORMATS(e4m3, FMT_E4M3, e5m2, FMT_E5M2)
BLOCK_GEMM_FOR_FORMATS(e5m2, FMT_E5M2, e4m3, FMT_E4M3)
BLOCK_GEMM_FOR_FORMATS(e5m2, FMT_E5M2, e5m2, FMT_E5M2)
