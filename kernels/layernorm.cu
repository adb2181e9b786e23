// layernorm.cu — LayerNorm forward (optionally emitting FP8: y, quantize(y), amax(y) from one
// launch), its backward, and RMSNorm forward.
//
// IR ops: layer_norm, layer_norm_quantize, layer_norm_block_quantize, layer_norm_grad, rms_norm. x is viewed as [rows, cols] with
// cols the product of the normalised dims; gamma and beta hold cols elements of x's kind.
//
// One block per row (grid-stride over rows). Statistics accumulate in f64 like the CPU
// reference (two passes: mean, then the biased variance), and y is computed in f64 and
// rounded once, so an f32 LayerNorm usually matches the CPU to the last bit. Rows with cols a
// multiple of 8 move 8 elements per thread with 16-byte accesses; the second and third passes
// re-read the row, from L2 for any row under a few MB.
#include "common.cuh"

template <int IN>
__device__ __forceinline__ double row_sum(const void* x, u64 base, u64 cols, bool vec, double shift, bool sq) {
  double acc = 0.0;
  if (vec) {
    for (u64 c = (u64)threadIdx.x * 8; c < cols; c += (u64)blockDim.x * 8) {
      float v[8];
      load8<IN>(x, base + c, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const double d = (double)v[j] - shift;
        acc += sq ? d * d : d;
      }
    }
  } else {
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
      const double d = (double)load_elem<IN>(x, base + c) - shift;
      acc += sq ? d * d : d;
    }
  }
  return block_sum_f64(acc);
}

// y = (x - mean) * inv * gamma + beta, rounded once to x's kind; q = quantize(y) and amax(y)
// when q / amax are non-null (the FP8 value is computed from the rounded y, as the unfused ops).
template <int IN>
__device__ __forceinline__ void layernorm_fwd_impl(const void* __restrict__ x, const void* __restrict__ gamma,
                                                   const void* __restrict__ beta, void* __restrict__ y,
                                                   u8* __restrict__ q, const float* __restrict__ scale,
                                                   float* __restrict__ amax, float2* __restrict__ stats, u64 rows,
                                                   u64 cols, float eps, int qfmt, int qsat) {
  const float s = scale != nullptr ? *scale : 1.0f;
  const bool vec = cols % 8 == 0 && aligned16(x) && aligned16(y) && aligned16(gamma) &&
                   (beta == nullptr || aligned16(beta)) && (q == nullptr || ((u64)q & 7ull) == 0ull);
  u32 m = 0u;
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const u64 base = r * cols;
    const double mean = row_sum<IN>(x, base, cols, vec, 0.0, false) / (double)cols;
    const double var = row_sum<IN>(x, base, cols, vec, mean, true) / (double)cols;
    const double inv = 1.0 / sqrt(var + (double)eps);
    if (stats != nullptr && threadIdx.x == 0) stats[r] = make_float2((float)mean, (float)inv);
    if (vec) {
      for (u64 c = (u64)threadIdx.x * 8; c < cols; c += (u64)blockDim.x * 8) {
        float v[8], g[8], b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        load8<IN>(x, base + c, v);
        load8<IN>(gamma, c, g);
        if (beta != nullptr) load8<IN>(beta, c, b);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __double2float_rn(((double)v[j] - mean) * inv * (double)g[j] + (double)b[j]);
        store8<IN>(y, base + c, v);
        if (q != nullptr) {
          u32 w[2] = {0u, 0u};
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const float yr = IN == KIND_F32 ? v[j] : load_elem<IN>(y, base + c + j); // the rounded y
            m = max(m, abs_bits(yr));
            w[j / 4] |= fp8_quantize_rt(qfmt, qsat != 0, yr, s) << (8 * (j % 4));
          }
          *reinterpret_cast<uint2*>(q + base + c) = make_uint2(w[0], w[1]);
        }
      }
    } else {
      for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
        const double b = beta != nullptr ? (double)load_elem<IN>(beta, c) : 0.0;
        const float v = __double2float_rn(((double)load_elem<IN>(x, base + c) - mean) * inv *
                                              (double)load_elem<IN>(gamma, c) + b);
        store_elem<IN>(y, base + c, v);
        if (q != nullptr) {
          const float yr = load_elem<IN>(y, base + c);
          m = max(m, abs_bits(yr));
          q[base + c] = (u8)fp8_quantize_rt(qfmt, qsat != 0, yr, s);
        }
      }
    }
  }
  block_amax_commit(m, amax);
}

// fp8c_layernorm_fwd_<in>(x, gamma, beta|null, y, q|null, scale|null, amax|null, stats|null,
//                         rows, cols, eps, qfmt, qsat): 256 threads per block.
#define LN_FWD(IN_NAME, IN)                                                                                 \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                  \
      fp8c_layernorm_fwd_##IN_NAME(const void* x, const void* gamma, const void* beta, void* y, u8* q,       \
                                   const float* scale, float* amax, float2* stats, u64 rows, u64 cols,        \
                                   float eps, int qfmt, int qsat) {                                          \
    layernorm_fwd_impl<IN>(x, gamma, beta, y, q, scale, amax, stats, rows, cols, eps, qfmt, qsat);           \
  }
LN_FWD(f32, KIND_F32)
LN_FWD(bf16, KIND_BF16)
LN_FWD(f16, KIND_F16)

// rms_norm (ONNX RMSNormalization): y = x * inv * gamma, inv = 1 / sqrt(mean(x²) + eps), the
// statistic in f64 and y computed in f64 and rounded once, as the CPU reference (the IR op has
// no bias).
template <int IN>
__device__ __forceinline__ void rmsnorm_fwd_impl(const void* __restrict__ x, const void* __restrict__ gamma,
                                                 void* __restrict__ y, u64 rows, u64 cols, float eps) {
  const bool vec = cols % 8 == 0 && aligned16(x) && aligned16(y) && aligned16(gamma);
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const u64 base = r * cols;
    const double inv = 1.0 / sqrt(row_sum<IN>(x, base, cols, vec, 0.0, true) / (double)cols + (double)eps);
    if (vec) {
      for (u64 c = (u64)threadIdx.x * 8; c < cols; c += (u64)blockDim.x * 8) {
        float v[8], g[8];
        load8<IN>(x, base + c, v);
        load8<IN>(gamma, c, g);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = __double2float_rn((double)v[j] * inv * (double)g[j]);
        store8<IN>(y, base + c, v);
      }
    } else {
      for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
        store_elem<IN>(y, base + c,
                       __double2float_rn((double)load_elem<IN>(x, base + c) * inv * (double)load_elem<IN>(gamma, c)));
      }
    }
  }
}

// fp8c_rmsnorm_fwd_<in>(x, gamma, y, rows, cols, eps): 256 threads per block.
#define RMS_FWD(IN_NAME, IN)                                                                                \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                  \
      fp8c_rmsnorm_fwd_##IN_NAME(const void* x, const void* gamma, void* y, u64 rows, u64 cols, float eps) { \
    rmsnorm_fwd_impl<IN>(x, gamma, y, rows, cols, eps);                                                      \
  }
RMS_FWD(f32, KIND_F32)
RMS_FWD(bf16, KIND_BF16)
RMS_FWD(f16, KIND_F16)

// layer_norm_block_quantize (f32, the last axis; issue #16): each block writes its rows of y as
// fp8c_layernorm_fwd_f32 does, then quantizes the one-row tiles (tc columns) of those same
// rows from the y it wrote (warps take a row's tiles in turn), with block_scaling.cu's rules
// (tile_scale): the unfused layer_norm + block_quantize bits. scale_inv is [rows, ceil(cols/tc)].
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_layernorm_fwd_tiles_f32(const void* x, const void* gamma, const void* beta, float* y, u8* q,
                                 float* scale_inv, u64 rows, u64 cols, float eps, u64 tc, int scaling,
                                 float epsilon, int qfmt, int qsat) {
  layernorm_fwd_impl<KIND_F32>(x, gamma, beta, y, nullptr, nullptr, nullptr, nullptr, rows, cols, eps, 0, 1);
  __syncthreads(); // this block's rows of y are written and visible to all its threads
  const float fmt_max = qfmt == FMT_E4M3 ? 448.0f : 57344.0f;
  const int emax = qfmt == FMT_E4M3 ? 8 : 15;
  const int lane = threadIdx.x & 31;
  const u64 warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, nc = (cols + tc - 1) / tc;
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    for (u64 t = warp; t < nc; t += nwarps) {
      const u64 col0 = t * tc, base = r * cols + col0;
      const u64 w = tc < cols - col0 ? tc : cols - col0;
      u32 bits = 0u;
      for (u64 e = lane; e < w; e += 32) bits = max(bits, abs_bits(y[base + e]));
      bits = warp_max_u32(bits);
      const float s = tile_scale(__uint_as_float(bits), scaling, epsilon, fmt_max, emax);
      if (lane == 0) scale_inv[r * nc + t] = __fdiv_rn(1.0f, s);
      for (u64 e = lane; e < w; e += 32) q[base + e] = (u8)fp8_quantize_rt(qfmt, qsat != 0, y[base + e], s);
    }
  }
}

// ---------------------------------------------------------------- backward
// dx = inv · (dŷ − mean(dŷ) − x̂ · mean(dŷ · x̂)) with x̂ = (x − mean) · inv and dŷ = dy · gamma.
// Also writes each row's (mean, inv) to `stats` for the parameter gradients.
template <int IN>
__device__ __forceinline__ void layernorm_bwd_dx_impl(const void* __restrict__ x, const void* __restrict__ gamma,
                                                      const void* __restrict__ dy, void* __restrict__ dx,
                                                      float2* __restrict__ stats, u64 rows, u64 cols, float eps) {
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const u64 base = r * cols;
    const double mean = row_sum<IN>(x, base, cols, false, 0.0, false) / (double)cols;
    const double var = row_sum<IN>(x, base, cols, false, mean, true) / (double)cols;
    const double inv = 1.0 / sqrt(var + (double)eps);
    double a = 0.0, b = 0.0;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
      const double xh = ((double)load_elem<IN>(x, base + c) - mean) * inv;
      const double g = (double)load_elem<IN>(dy, base + c) * (double)load_elem<IN>(gamma, c);
      a += g;
      b += g * xh;
    }
    const double mg = block_sum_f64(a) / (double)cols;
    const double mgx = block_sum_f64(b) / (double)cols;
    for (u64 c = threadIdx.x; c < cols; c += blockDim.x) {
      const double xh = ((double)load_elem<IN>(x, base + c) - mean) * inv;
      const double g = (double)load_elem<IN>(dy, base + c) * (double)load_elem<IN>(gamma, c);
      store_elem<IN>(dx, base + c, __double2float_rn(inv * (g - mg - xh * mgx)));
    }
    if (stats != nullptr && threadIdx.x == 0) stats[r] = make_float2((float)mean, (float)inv);
  }
}

// dgamma[c] = Σ_r dy·x̂, dbeta[c] = Σ_r dy: one thread per column, rows in order (deterministic).
template <int IN>
__device__ __forceinline__ void layernorm_bwd_params_impl(const void* __restrict__ x, const void* __restrict__ dy,
                                                          const float2* __restrict__ stats, void* __restrict__ dgamma,
                                                          void* __restrict__ dbeta, u64 rows, u64 cols) {
  for (u64 c = gtid(); c < cols; c += gstride()) {
    double dg = 0.0, db = 0.0;
    u64 i = c;
    for (u64 r = 0; r < rows; ++r, i += cols) {
      const float2 st = stats[r];
      const float xv = load_elem<IN>(x, i);
      const float dv = load_elem<IN>(dy, i);
      dg += (double)dv * (((double)xv - (double)st.x) * (double)st.y);
      db += (double)dv;
    }
    if (dgamma != nullptr) store_elem<IN>(dgamma, c, __double2float_rn(dg));
    if (dbeta != nullptr) store_elem<IN>(dbeta, c, __double2float_rn(db));
  }
}

#define LN_BWD(IN_NAME, IN)                                                                              \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                               \
      fp8c_layernorm_bwd_dx_##IN_NAME(const void* x, const void* gamma, const void* dy, void* dx,          \
                                      float2* stats, u64 rows, u64 cols, float eps) {                     \
    layernorm_bwd_dx_impl<IN>(x, gamma, dy, dx, stats, rows, cols, eps);                                 \
  }                                                                                                      \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                               \
      fp8c_layernorm_bwd_params_##IN_NAME(const void* x, const void* dy, const float2* stats,            \
                                          void* dgamma, void* dbeta, u64 rows, u64 cols) {                \
    layernorm_bwd_params_impl<IN>(x, dy, stats, dgamma, dbeta, rows, cols);                              \
  }
LN_BWD(f32, KIND_F32)
LN_BWD(bf16, KIND_BF16)
LN_BWD(f16, KIND_F16)
