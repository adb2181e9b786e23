// gather.cu — gather along one axis (embedding lookups) and its gradient (scatter-add), and
// ONNX's GatherND (int64 index tuples, batch_dims).
//
// IR ops: gather, gather_grad. data is viewed as [outer, axis_len, inner], indices as a flat
// list of nidx (i64 or i32); out[o, j, i] = data[o, idx[j], i], a negative index counting from
// the end. A step cannot fail half-way on the device, so an index out of range writes 0 there
// and sets *err (the runtime reads the flag after the run and reports the node).
#include "common.cuh"

template <typename T, typename I>
__device__ __forceinline__ void gather_impl(const T* __restrict__ data, const I* __restrict__ idx, T* __restrict__ out,
                                            u64 outer, u64 axis_len, u64 inner, u64 nidx, int* __restrict__ err) {
  const u64 n = outer * nidx * inner;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 i = t % inner, j = (t / inner) % nidx, o = t / (inner * nidx);
    i64 k = (i64)idx[j];
    if (k < 0) k += (i64)axis_len;
    if (k < 0 || k >= (i64)axis_len) {
      out[t] = (T)0;
      *err = 1;
    } else {
      out[t] = data[(o * axis_len + (u64)k) * inner + i];
    }
  }
}

// fp8c_gather_<bytes>_<i64|i32>(data, idx, out, outer, axis_len, inner, nidx, err)
#define GATHER(BYTES, T, INAME, I)                                                                           \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                   \
      fp8c_gather_##BYTES##_##INAME(const T* data, const I* idx, T* out, u64 outer, u64 axis_len, u64 inner, \
                                    u64 nidx, int* err) {                                                    \
    gather_impl<T, I>(data, idx, out, outer, axis_len, inner, nidx, err);                                    \
  }
GATHER(1, u8, i64, i64)
GATHER(2, u16, i64, i64)
GATHER(4, u32, i64, i64)
GATHER(8, u64, i64, i64)
GATHER(1, u8, i32, int)
GATHER(2, u16, i32, int)
GATHER(4, u32, i32, int)
GATHER(8, u64, i32, int)

// gather_grad: dx (zeroed by the runtime first) [outer, size, inner] += dy [outer, nidx, inner]
// at the gathered rows. f32 atomics: repeated indices accumulate in an unspecified order, so
// the result matches the CPU within rounding, not bit for bit.
template <typename I>
__device__ __forceinline__ void gather_grad_impl(const float* __restrict__ dy, const I* __restrict__ idx,
                                                 float* __restrict__ dx, u64 outer, u64 size, u64 inner, u64 nidx,
                                                 int* __restrict__ err) {
  const u64 n = outer * nidx * inner;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 i = t % inner, j = (t / inner) % nidx, o = t / (inner * nidx);
    i64 k = (i64)idx[j];
    if (k < 0) k += (i64)size;
    if (k < 0 || k >= (i64)size) {
      *err = 1;
      continue;
    }
    atomicAdd(dx + (o * size + (u64)k) * inner + i, dy[t]);
  }
}

#define GATHER_GRAD(INAME, I)                                                                              \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                                 \
      fp8c_gather_grad_f32_##INAME(const float* dy, const I* idx, float* dx, u64 outer, u64 size, u64 inner, \
                                   u64 nidx, int* err) {                                                   \
    gather_grad_impl<I>(dy, idx, dx, outer, size, inner, nidx, err);                                       \
  }
GATHER_GRAD(i64, i64)
GATHER_GRAD(i32, int)

// ---------------------------------------------------------------- gather_nd
// ONNX GatherND: data [B.., D_b.., rest..] (B the batch_dims leading dims, D the k indexed
// dims), indices [B.., N.., k] of int64 tuples, out [B.., N.., rest..]. Per batch entry b and
// tuple j, out[b, j, i] = data[b·batch_stride + Σ_c idx[c]·stride[c] + i] over the `inner`
// elements of `rest`. A negative index counts from the end; an out-of-range one writes 0 and
// sets *err, as gather does.
struct GatherNdGeom {
  u64 k;             // indexed dims (1..8)
  u64 dims[8];       // their sizes
  u64 strides[8];    // their element strides inside one batch entry
};

template <typename T>
__device__ __forceinline__ void gather_nd_impl(const T* __restrict__ data, const i64* __restrict__ idx,
                                               T* __restrict__ out, u64 nbatch, u64 nidx, u64 inner,
                                               u64 batch_stride, GatherNdGeom g, int* __restrict__ err) {
  const u64 n = nbatch * nidx * inner;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 i = t % inner, j = (t / inner) % nidx, b = t / (inner * nidx);
    const i64* tuple = idx + (b * nidx + j) * g.k;
    u64 off = b * batch_stride + i;
    bool ok = true;
    for (u64 c = 0; c < g.k; ++c) {
      i64 v = tuple[c];
      if (v < 0) v += (i64)g.dims[c];
      if (v < 0 || v >= (i64)g.dims[c]) ok = false;
      else off += (u64)v * g.strides[c];
    }
    if (ok) {
      out[t] = data[off];
    } else {
      out[t] = (T)0;
      *err = 1;
    }
  }
}

// fp8c_gather_nd_<bytes>(data, idx, out, nbatch, nidx, inner, batch_stride, geom, err)
#define GATHER_ND(BYTES, T)                                                                           \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                            \
      fp8c_gather_nd_##BYTES(const T* data, const i64* idx, T* out, u64 nbatch, u64 nidx, u64 inner,  \
                             u64 batch_stride, GatherNdGeom g, int* err) {                            \
    gather_nd_impl<T>(data, idx, out, nbatch, nidx, inner, batch_stride, g, err);                     \
  }
GATHER_ND(1, u8)
GATHER_ND(2, u16)
GATHER_ND(4, u32)
GATHER_ND(8, u64)
