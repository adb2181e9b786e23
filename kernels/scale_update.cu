// scale_update.cu — delayed-scaling bookkeeping on the device, so a training step never waits
// for the host: amax_history_update, compute_scale, and both for every FP8 tensor of a step
// in one launch (batched_scale_update).
//
// Semantics are fp8c-core's `scaling` module and the CPU evaluator's `fp8.rs`, exactly:
//   recorded = history with slot 0 := amax
//   amax'    = max(recorded) with NaN winning (history_max) | recorded[0] (history_most_recent)
//              | the scalar amax (current); then amax' := epsilon if amax' < epsilon
//   scale    = (fmt_max / amax') / 2^margin, or prev_scale unless 0 < amax' < inf;
//              ±inf -> FLT_MAX; with power_2 the mantissa is cleared
//   scale_inv = 1 / scale
//   next     = roll(recorded, -1) with slot 0 := 0 (TE's torch.roll + zero)
// `pow2_margin` is computed by the host exactly as the CPU does (2^margin in f64, rounded to
// f32). Divisions are __fdiv_rn: IEEE, as on the CPU, whatever the compile flags.
#include "common.cuh"

#define SOURCE_HISTORY_MAX 0
#define SOURCE_HISTORY_MOST_RECENT 1
#define SOURCE_CURRENT 2

struct ScaleParams {
  float fmt_max;
  float pow2_margin;
  float epsilon;
  int source;
  int power_2;
};

__device__ __forceinline__ float scale_from_amax(float amax, float prev, const ScaleParams& p) {
  if (amax < p.epsilon) amax = p.epsilon;
  float sf = __fdiv_rn(__fdiv_rn(p.fmt_max, amax), p.pow2_margin);
  if (!(amax > 0.0f && fp8c_isfinite(amax))) sf = prev;
  if (fp8c_isinf(sf)) sf = FP8C_FLT_MAX;
  if (p.power_2 != 0) sf = __uint_as_float(__float_as_uint(sf) & 0xff800000u);
  return sf;
}

// The warp's amax source for a recorded history (slot 0 already holding this step's amax,
// given separately as `slot0`). All 32 lanes must call it.
__device__ __forceinline__ float history_source(const float* __restrict__ history, float slot0, u64 len,
                                                int source) {
  if (source == SOURCE_HISTORY_MOST_RECENT) return slot0;
  const int lane = threadIdx.x & 31;
  float acc = -__uint_as_float(0x7f800000u);
  for (u64 i = lane; i < len; i += 32) acc = nan_max(acc, i == 0 ? slot0 : history[i]);
  return warp_nan_max(acc);
}

// next[i] for the roll of a recorded history whose slot 0 is `slot0`.
__device__ __forceinline__ float rolled(const float* __restrict__ history, float slot0, u64 len, u64 i) {
  if (i == 0) return 0.0f;
  if (i == len - 1) return slot0;
  return history[i + 1];
}

// amax_history_update(history, amax) -> (recorded, next). One block of any size.
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_amax_history_update(const float* history, const float* amax, float* recorded, float* next, u64 len) {
  const float a = *amax;
  for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
    const float r = i == 0 ? a : history[i];
    if (recorded != nullptr) recorded[i] = r;
    if (next != nullptr) next[i] = rolled(history, a, len, i);
  }
}

// compute_scale(source, prev_scale) -> (scale, scale_inv). `src` is the recorded history f32[len]
// or, for SOURCE_CURRENT, the amax f32[]. Launch one warp (32 threads).
extern "C" __global__ void __launch_bounds__(32)
    fp8c_compute_scale(const float* src, const float* prev_scale, float* scale, float* scale_inv, u64 len,
                       ScaleParams p) {
  const float amax = p.source == SOURCE_CURRENT ? *src : history_source(src, src[0], len, p.source);
  if (threadIdx.x == 0) {
    const float s = scale_from_amax(amax, *prev_scale, p);
    scale[0] = s;
    scale_inv[0] = __fdiv_rn(1.0f, s);
  }
}

// One FP8 tensor's delayed-scaling update (device-resident descriptor, filled at prepare time).
struct ScaleUpdateDesc {
  const float* history;    // f32[len], state before the step
  const float* amax;       // f32[], this step's amax
  const float* prev_scale; // f32[]
  float* next_history;     // f32[len]
  float* scale;            // f32[]
  float* scale_inv;        // f32[]
  u64 len;
};

// batched_scale_update: amax_history_update then compute_scale for `count` tensors, one warp
// each. Launch with 128 threads per block and ceil(count / 4) blocks.
extern "C" __global__ void __launch_bounds__(128)
    fp8c_batched_scale_update(const ScaleUpdateDesc* descs, u32 count, ScaleParams p) {
  const u32 w = (u32)((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
  const int lane = threadIdx.x & 31;
  if (w >= count) return; // whole warps leave together
  const ScaleUpdateDesc d = descs[w];
  const float a = *d.amax;
  const float src = history_source(d.history, a, d.len, p.source);
  for (u64 i = lane; i < d.len; i += 32) d.next_history[i] = rolled(d.history, a, d.len, i);
  if (lane == 0) {
    const float s = scale_from_amax(src, *d.prev_scale, p);
    d.scale[0] = s;
    d.scale_inv[0] = __fdiv_rn(1.0f, s);
  }
}
