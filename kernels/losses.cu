// losses.cu — softmax cross-entropy with integer labels, forward and backward.
//
// IR ops: softmax_cross_entropy (outputs: mean loss, log-probabilities), and
// softmax_cross_entropy_grad ((softmax − onehot(labels)) · dloss / N). Logits are viewed as
// [rows, classes]; labels hold `rows` i64 or i32 values. A label equal to FP8C_IGNORE_INDEX
// (-100, PyTorch's ignore_index default; fp8c_ir::IGNORE_INDEX) does not count: N is the
// number of the other rows, an ignored row has loss weight 0 and gradient 0.
//
// The forward pass writes each row's loss and weight (1, or 0 when ignored) to scratch
// vectors, then `fp8c_masked_mean_f32` sums both in row order in f64 (one block):
// deterministic, no float atomics. The backward pass first counts the rows that count
// (`fp8c_xent_count_*`, one block). A label outside [0, classes) that is not ignored sets *err
// (reported by the runtime after the run, naming the node) and contributes NaN.
#include "common.cuh"

#define FP8C_IGNORE_INDEX (-100)

template <int IN, typename L>
__device__ __forceinline__ void xent_fwd_impl(const void* __restrict__ logits, const L* __restrict__ labels,
                                              void* __restrict__ logp, float* __restrict__ row_loss,
                                              float* __restrict__ row_weight, u64 rows, u64 classes,
                                              int* __restrict__ err) {
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
      row_weight[r] = lab == FP8C_IGNORE_INDEX ? 0.0f : 1.0f;
      if (lab == FP8C_IGNORE_INDEX) {
        row_loss[r] = 0.0f;
      } else if (lab < 0 || lab >= (i64)classes) {
        *err = 1;
        row_loss[r] = fp8c_nan();
      } else {
        row_loss[r] = -(load_elem<IN>(logits, base + (u64)lab) - mx - lsum);
      }
    }
  }
}

// fp8c_softmax_xent_<in>_<i64|i32>(logits, labels, logp, row_loss, row_weight, rows, classes, err)
#define XENT_FWD(IN_NAME, IN, LNAME, L)                                                                   \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_softmax_xent_##IN_NAME##_##LNAME(          \
      const void* logits, const L* labels, void* logp, float* row_loss, float* row_weight, u64 rows,       \
      u64 classes, int* err) {                                                                            \
    xent_fwd_impl<IN, L>(logits, labels, logp, row_loss, row_weight, rows, classes, err);                 \
  }
XENT_FWD(f32, KIND_F32, i64, i64)
XENT_FWD(bf16, KIND_BF16, i64, i64)
XENT_FWD(f32, KIND_F32, i32, int)
XENT_FWD(bf16, KIND_BF16, i32, int)

// *out (of kind OUT) = Σ v[i] / Σ w[i], both summed in f64 in index order by one block (NaN
// when every weight is 0, as PyTorch's mean over no counted label).
template <int OUT>
__device__ __forceinline__ void masked_mean_impl(const float* __restrict__ v, const float* __restrict__ w, u64 n,
                                                 void* __restrict__ out) {
  if (blockIdx.x != 0) return;
  // Per-thread partial sums over a contiguous chunk, then the block sum in thread order: the
  // same order on every run.
  const u64 chunk = (n + blockDim.x - 1) / blockDim.x;
  double acc = 0.0, wacc = 0.0;
  for (u64 i = threadIdx.x * chunk; i < n && i < (threadIdx.x + 1) * chunk; ++i) {
    acc += (double)v[i];
    wacc += (double)w[i];
  }
  acc = block_sum_f64(acc);
  wacc = block_sum_f64(wacc);
  if (threadIdx.x == 0) store_elem<OUT>(out, 0, __double2float_rn(acc / wacc));
}

#define MEAN(OUT_NAME, OUT)                                                                               \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_masked_mean_##OUT_NAME(                   \
      const float* v, const float* w, u64 n, void* out) {                                                 \
    masked_mean_impl<OUT>(v, w, n, out);                                                                  \
  }
MEAN(f32, KIND_F32)
MEAN(bf16, KIND_BF16)

// *count = the number of labels that are not FP8C_IGNORE_INDEX (as f32), one block.
template <typename L>
__device__ __forceinline__ void xent_count_impl(const L* __restrict__ labels, u64 rows, float* __restrict__ count) {
  if (blockIdx.x != 0) return;
  double c = 0.0;
  for (u64 r = threadIdx.x; r < rows; r += blockDim.x) c += (i64)labels[r] == FP8C_IGNORE_INDEX ? 0.0 : 1.0;
  c = block_sum_f64(c);
  if (threadIdx.x == 0) *count = (float)c;
}

#define XENT_COUNT(LNAME, L)                                                                              \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_xent_count_##LNAME(const L* labels,        \
                                                                                 u64 rows, float* count) { \
    xent_count_impl<L>(labels, rows, count);                                                              \
  }
XENT_COUNT(i64, i64)
XENT_COUNT(i32, int)

// dx = (exp(logp) − onehot(label)) · dloss / count (count: the labels that count, from
// fp8c_xent_count_*); 0 on an ignored row.
template <int IN, typename L>
__device__ __forceinline__ void xent_bwd_impl(const void* __restrict__ logp, const L* __restrict__ labels,
                                              const void* __restrict__ dloss, const float* __restrict__ count,
                                              void* __restrict__ dx, u64 rows, u64 classes,
                                              int* __restrict__ err) {
  const float g = load_elem<IN>(dloss, 0) / *count;
  const u64 n = rows * classes;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 r = t / classes, j = t % classes;
    const i64 lab = (i64)labels[r];
    if (lab == FP8C_IGNORE_INDEX) {
      store_elem<IN>(dx, t, 0.0f);
      continue;
    }
    if (j == 0 && (lab < 0 || lab >= (i64)classes)) *err = 1;
    const float p = expf(load_elem<IN>(logp, t));
    store_elem<IN>(dx, t, (p - ((i64)j == lab ? 1.0f : 0.0f)) * g);
  }
}

#define XENT_BWD(IN_NAME, IN, LNAME, L)                                                                   \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_softmax_xent_grad_##IN_NAME##_##LNAME(     \
      const void* logp, const L* labels, const void* dloss, const float* count, void* dx, u64 rows,        \
      u64 classes, int* err) {                                                                            \
    xent_bwd_impl<IN, L>(logp, labels, dloss, count, dx, rows, classes, err);                             \
  }
XENT_BWD(f32, KIND_F32, i64, i64)
XENT_BWD(bf16, KIND_BF16, i64, i64)
XENT_BWD(f32, KIND_F32, i32, int)
XENT_BWD(bf16, KIND_BF16, i32, int)
