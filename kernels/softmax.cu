// softmax.cu — softmax and log_softmax along one axis, and their backward.
//
// IR ops: softmax, log_softmax, softmax_grad. x is viewed as [outer, d, inner] with d the
// softmax axis. inner == 1 (the last axis: attention scores, logits) runs one block per row
// with block reductions; inner > 1 runs one thread per (outer, inner) line, whose loads are
// coalesced across inner.
//
// Max-subtracted like the CPU reference; the max propagates NaN, the sum of exponentials
// accumulates in f64, each output is rounded once to x's kind.
#include "common.cuh"

template <int IN>
__device__ __forceinline__ void softmax_rows(const void* __restrict__ x, void* __restrict__ y, u64 rows, u64 d,
                                             bool as_log) {
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const u64 base = r * d;
    float mx = -__uint_as_float(0x7f800000u);
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) mx = nan_max(mx, load_elem<IN>(x, base + j));
    mx = block_nan_max(mx);
    double sum = 0.0;
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) sum += (double)expf(load_elem<IN>(x, base + j) - mx);
    sum = block_sum_f64(sum);
    const float lsum = (float)::log(sum);
    const float inv = (float)(1.0 / sum);
    for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
      const float v = load_elem<IN>(x, base + j) - mx;
      store_elem<IN>(y, base + j, as_log ? v - lsum : expf(v) * inv);
    }
  }
}

template <int IN>
__device__ __forceinline__ void softmax_lines(const void* __restrict__ x, void* __restrict__ y, u64 outer, u64 d,
                                              u64 inner, bool as_log) {
  for (u64 t = gtid(); t < outer * inner; t += gstride()) {
    const u64 o = t / inner, i = t % inner;
    const u64 base = o * d * inner + i;
    float mx = -__uint_as_float(0x7f800000u);
    for (u64 j = 0; j < d; ++j) mx = nan_max(mx, load_elem<IN>(x, base + j * inner));
    double sum = 0.0;
    for (u64 j = 0; j < d; ++j) sum += (double)expf(load_elem<IN>(x, base + j * inner) - mx);
    const float lsum = (float)::log(sum);
    const float inv = (float)(1.0 / sum);
    for (u64 j = 0; j < d; ++j) {
      const float v = load_elem<IN>(x, base + j * inner) - mx;
      store_elem<IN>(y, base + j * inner, as_log ? v - lsum : expf(v) * inv);
    }
  }
}

// fp8c_softmax_<in>(x, y, outer, d, inner, is_log): 256 threads per block; with inner == 1 one
// block per row, else a grid-stride over lines.
#define SOFTMAX(IN_NAME, IN)                                                                                \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                  \
      fp8c_softmax_##IN_NAME(const void* x, void* y, u64 outer, u64 d, u64 inner, int is_log) {               \
    if (inner == 1) softmax_rows<IN>(x, y, outer, d, is_log != 0);                                            \
    else softmax_lines<IN>(x, y, outer, d, inner, is_log != 0);                                               \
  }
SOFTMAX(f32, KIND_F32)
SOFTMAX(bf16, KIND_BF16)
SOFTMAX(f16, KIND_F16)

// ---------------------------------------------------------------- backward
// softmax:     dx = y · (dy − Σ dy·y)
// log_softmax: dx = dy − exp(y) · Σ dy
template <int IN>
__device__ __forceinline__ void softmax_grad_impl(const void* __restrict__ y, const void* __restrict__ dy,
                                                  void* __restrict__ dx, u64 outer, u64 d, u64 inner, bool as_log) {
  if (inner == 1) {
    for (u64 r = blockIdx.x; r < outer; r += gridDim.x) {
      const u64 base = r * d;
      double acc = 0.0;
      for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
        const double g = (double)load_elem<IN>(dy, base + j);
        acc += as_log ? g : g * (double)load_elem<IN>(y, base + j);
      }
      const double s = block_sum_f64(acc);
      for (u64 j = threadIdx.x; j < d; j += blockDim.x) {
        const double yv = (double)load_elem<IN>(y, base + j), g = (double)load_elem<IN>(dy, base + j);
        store_elem<IN>(dx, base + j, __double2float_rn(as_log ? g - (double)expf((float)yv) * s : yv * (g - s)));
      }
    }
    return;
  }
  for (u64 t = gtid(); t < outer * inner; t += gstride()) {
    const u64 o = t / inner, i = t % inner;
    const u64 base = o * d * inner + i;
    double s = 0.0;
    for (u64 j = 0; j < d; ++j) {
      const double g = (double)load_elem<IN>(dy, base + j * inner);
      s += as_log ? g : g * (double)load_elem<IN>(y, base + j * inner);
    }
    for (u64 j = 0; j < d; ++j) {
      const double yv = (double)load_elem<IN>(y, base + j * inner), g = (double)load_elem<IN>(dy, base + j * inner);
      store_elem<IN>(dx, base + j * inner, __double2float_rn(as_log ? g - (double)expf((float)yv) * s : yv * (g - s)));
    }
  }
}

#define SOFTMAX_GRAD(IN_NAME, IN)                                                                      \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_softmax_grad_##IN_NAME(                 \
      const void* y, const void* dy, void* dx, u64 outer, u64 d, u64 inner, int is_log) {                  \
    softmax_grad_impl<IN>(y, dy, dx, outer, d, inner, is_log != 0);                                        \
  }
SOFTMAX_GRAD(f32, KIND_F32)
SOFTMAX_GRAD(bf16, KIND_BF16)
SOFTMAX_GRAD(f16, KIND_F16)
