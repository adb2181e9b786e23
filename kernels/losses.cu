// losses.cu — softmax cross-entropy with integer labels, forward and backward.
//
// IR ops: softmax_cross_entropy (outputs: mean loss, log-probabilities), and
// softmax_cross_entropy_grad ((softmax − onehot(labels)) · dloss / N). Logits are viewed as
// [rows, classes]; labels hold `rows` i64 or i32 values.
//
// The forward pass writes each row's loss to a scratch vector, then `fp8c_mean_f32` sums it in
// row order in f64 (one block): deterministic, no float atomics. A label outside [0, classes)
// sets *err (reported by the runtime after the run, naming the node) and contributes NaN.
#include "common.cuh"

template <int IN, typename L>
__device__ __forceinline__ void xent_fwd_impl(const void* __restrict__ logits, const L* __restrict__ labels,
                                              void* __restrict__ logp, float* __restrict__ row_loss, u64 rows,
                                              u64 classes, int* __restrict__ err) {
  for (u64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const u64 base = r * classes;
    float mx = -__uint_as_float(0x7f800000u);
    for (u64 j = threadIdx.x; j < classes; j += blockDim.x) mx = nan_max(mx, load_elem<IN>(logits, base + j));
    mx = block_nan_max(mx);
    double sum = 0.0;
    for (u64 j = threadIdx.x; j < classes; j += blockDim.x) sum += (double)expf(load_elem<IN>(logits, base + j) - mx);
    sum = block_sum_f64(sum);
    const float lsum = (float)::log(sum);
    for (u64 j = threadIdx.x; j < classes; j += blockDim.x)
      store_elem<IN>(logp, base + j, load_elem<IN>(logits, base + j) - mx - lsum);
    if (threadIdx.x == 0) {
      const i64 lab = (i64)labels[r];
      if (lab < 0 || lab >= (i64)classes) {
        *err = 1;
        row_loss[r] = fp8c_nan();
      } else {
        row_loss[r] = -(load_elem<IN>(logits, base + (u64)lab) - mx - lsum);
      }
    }
  }
}

// fp8c_softmax_xent_<in>_<i64|i32>(logits, labels, logp, row_loss, rows, classes, err)
#define XENT_FWD(IN_NAME, IN, LNAME, L)                                                                   \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_softmax_xent_##IN_NAME##_##LNAME(          \
      const void* logits, const L* labels, void* logp, float* row_loss, u64 rows, u64 classes, int* err) { \
    xent_fwd_impl<IN, L>(logits, labels, logp, row_loss, rows, classes, err);                             \
  }
XENT_FWD(f32, KIND_F32, i64, i64)
XENT_FWD(bf16, KIND_BF16, i64, i64)
XENT_FWD(f32, KIND_F32, i32, int)
XENT_FWD(bf16, KIND_BF16, i32, int)

// *out (of kind OUT) = Σ v[i] / n, summed in f64 in index order by one block.
template <int OUT>
__device__ __forceinline__ void mean_impl(const float* __restrict__ v, u64 n, void* __restrict__ out) {
  if (blockIdx.x != 0) return;
  // Per-thread partial sums over a contiguous chunk, then the block sum in thread order: the
  // same order on every run.
  const u64 chunk = (n + blockDim.x - 1) / blockDim.x;
  double acc = 0.0;
  for (u64 i = threadIdx.x * chunk; i < n && i < (threadIdx.x + 1) * chunk; ++i) acc += (double)v[i];
  acc = block_sum_f64(acc);
  if (threadIdx.x == 0) store_elem<OUT>(out, 0, __double2float_rn(acc / (double)n));
}

#define MEAN(OUT_NAME, OUT)                                                                               \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_mean_##OUT_NAME(const float* v, u64 n,     \
                                                                              void* out) {               \
    mean_impl<OUT>(v, n, out);                                                                            \
  }
MEAN(f32, KIND_F32)
MEAN(bf16, KIND_BF16)

// dx = (exp(logp) − onehot(label)) · dloss / rows.
template <int IN, typename L>
__device__ __forceinline__ void xent_bwd_impl(const void* __restrict__ logp, const L* __restrict__ labels,
                                              const void* __restrict__ dloss, void* __restrict__ dx, u64 rows,
                                              u64 classes, int* __restrict__ err) {
  const float g = load_elem<IN>(dloss, 0) / (float)rows;
  const u64 n = rows * classes;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 r = t / classes, j = t % classes;
    const i64 lab = (i64)labels[r];
    if (j == 0 && (lab < 0 || lab >= (i64)classes)) *err = 1;
    const float p = expf(load_elem<IN>(logp, t));
    store_elem<IN>(dx, t, (p - ((i64)j == lab ? 1.0f : 0.0f)) * g);
  }
}

#define XENT_BWD(IN_NAME, IN, LNAME, L)                                                                   \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_softmax_xent_grad_##IN_NAME##_##LNAME(     \
      const void* logp, const L* labels, const void* dloss, void* dx, u64 rows, u64 classes, int* err) {    \
    xent_bwd_impl<IN, L>(logp, labels, dloss, dx, rows, classes, err);                                    \
  }
XENT_BWD(f32, KIND_F32, i64, i64)
XENT_BWD(bf16, KIND_BF16, i64, i64)
XENT_BWD(f32, KIND_F32, i32, int)
XENT_BWD(bf16, KIND_BF16, i32, int)
