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

// ---------------------------------------------------------------- gather_elements, scatter_elements, scatter_nd
// ONNX GatherElements / ScatterElements: indices (i64 or i32) have data's rank; element e of
// indices addresses data at e's own coordinates with the axis coordinate replaced by its value
// (negative counts from the end). ScatterND: i64 tuples of k indices, each receiving a slice of
// `slice` elements. Scatters start from a copy of data (made by the runtime) and apply the
// updates in row-major order, as the CPU reference does: scatter_elements in one thread (two
// updates may address one element from anywhere), scatter_nd with each thread owning the same
// elements of every slice, so the updates of one element are applied in order either way.
// Reductions: 0 none (last update wins), 1 add, 2 mul, 3 max, 4 min (floats propagate NaN,
// integers wrap). An out-of-range index sets *err and is skipped (gathers write 0).
struct ElemGeom {
  u32 rank;
  u32 axis;
  u64 dims[8];    // data's dims
  u64 idims[8];   // indices' dims
  u64 strides[8]; // data's element strides
};

__device__ __forceinline__ bool elem_offset(const ElemGeom& g, u64 e, i64 v, u64* off) {
  const i64 d = (i64)g.dims[g.axis];
  if (v < 0) v += d;
  if (v < 0 || v >= d) return false;
  u64 rest = e, o = 0;
  for (int k = (int)g.rank - 1; k >= 0; --k) {
    const u64 c = rest % g.idims[k];
    rest /= g.idims[k];
    o += (k == (int)g.axis ? (u64)v : c) * g.strides[k];
  }
  *off = o;
  return true;
}

template <typename T>
__device__ __forceinline__ T scatter_combine(T a, T b, int red) {
  switch (red) {
    case 1: return (T)(a + b);
    case 2: return (T)(a * b);
    case 3: return a > b ? a : b;
    case 4: return a < b ? a : b;
    default: return b;
  }
}
template <>
__device__ __forceinline__ float scatter_combine<float>(float a, float b, int red) {
  switch (red) {
    case 1: return __fadd_rn(a, b);
    case 2: return __fmul_rn(a, b);
    case 3: return (fp8c_isnan(a) || fp8c_isnan(b)) ? fp8c_nan() : (a > b ? a : b);
    case 4: return (fp8c_isnan(a) || fp8c_isnan(b)) ? fp8c_nan() : (a < b ? a : b);
    default: return b;
  }
}
// Integer add / mul wrap: computed on the unsigned type.
template <>
__device__ __forceinline__ i64 scatter_combine<i64>(i64 a, i64 b, int red) {
  if (red == 1) return (i64)((u64)a + (u64)b);
  if (red == 2) return (i64)((u64)a * (u64)b);
  return red == 3 ? (a > b ? a : b) : red == 4 ? (a < b ? a : b) : b;
}
template <>
__device__ __forceinline__ int scatter_combine<int>(int a, int b, int red) {
  if (red == 1) return (int)((u32)a + (u32)b);
  if (red == 2) return (int)((u32)a * (u32)b);
  return red == 3 ? (a > b ? a : b) : red == 4 ? (a < b ? a : b) : b;
}

#define GATHER_ELEMENTS(BYTES, T, INAME, I)                                                            \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_gather_elements_##BYTES##_##INAME(     \
      const T* data, const I* idx, T* out, ElemGeom g, u64 n, int* err) {                               \
    for (u64 e = gtid(); e < n; e += gstride()) {                                                       \
      u64 off;                                                                                          \
      if (elem_offset(g, e, (i64)idx[e], &off)) {                                                       \
        out[e] = data[off];                                                                             \
      } else {                                                                                          \
        out[e] = (T)0;                                                                                  \
        *err = 1;                                                                                       \
      }                                                                                                 \
    }                                                                                                   \
  }
GATHER_ELEMENTS(1, u8, i64, i64)
GATHER_ELEMENTS(2, u16, i64, i64)
GATHER_ELEMENTS(4, u32, i64, i64)
GATHER_ELEMENTS(8, u64, i64, i64)
GATHER_ELEMENTS(1, u8, i32, int)
GATHER_ELEMENTS(2, u16, i32, int)
GATHER_ELEMENTS(4, u32, i32, int)
GATHER_ELEMENTS(8, u64, i32, int)

// fp8c_scatter_elements_<word>_<i64|i32>(y, idx, updates, geom, n, reduction, err): word is an
// element size (b1..b8, reduction none only) or a type (f32, i64, i32).
#define SCATTER_ELEMENTS(WORD, T, INAME, I)                                                             \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_scatter_elements_##WORD##_##INAME(      \
      T* y, const I* idx, const T* upd, ElemGeom g, u64 n, int red, int* err) {                         \
    if (gtid() != 0) return;                                                                            \
    for (u64 e = 0; e < n; ++e) {                                                                       \
      u64 off;                                                                                          \
      if (!elem_offset(g, e, (i64)idx[e], &off)) {                                                      \
        *err = 1;                                                                                       \
        continue;                                                                                       \
      }                                                                                                 \
      y[off] = scatter_combine<T>(y[off], upd[e], red);                                                 \
    }                                                                                                   \
  }
#define SCATTER_ELEMENTS_ALL(INAME, I)       \
  SCATTER_ELEMENTS(b1, u8, INAME, I)         \
  SCATTER_ELEMENTS(b2, u16, INAME, I)        \
  SCATTER_ELEMENTS(b4, u32, INAME, I)        \
  SCATTER_ELEMENTS(b8, u64, INAME, I)        \
  SCATTER_ELEMENTS(f32, float, INAME, I)     \
  SCATTER_ELEMENTS(i64, i64, INAME, I)       \
  SCATTER_ELEMENTS(i32, int, INAME, I)
SCATTER_ELEMENTS_ALL(i64, i64)
SCATTER_ELEMENTS_ALL(i32, int)

// fp8c_scatter_nd_<word>(y, idx, updates, geom, tuples, slice, reduction, err): geom.rank = k,
// geom.dims the indexed dims, geom.strides their strides in slices.
#define SCATTER_ND(WORD, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_scatter_nd_##WORD(                      \
      T* y, const i64* idx, const T* upd, ElemGeom g, u64 tuples, u64 slice, int red, int* err) {       \
    for (u64 t = 0; t < tuples; ++t) {                                                                  \
      u64 off = 0;                                                                                      \
      bool ok = true;                                                                                   \
      for (u32 c = 0; c < g.rank; ++c) {                                                                \
        i64 v = idx[t * g.rank + c];                                                                    \
        if (v < 0) v += (i64)g.dims[c];                                                                 \
        if (v < 0 || v >= (i64)g.dims[c]) ok = false;                                                   \
        else off += (u64)v * g.strides[c];                                                              \
      }                                                                                                 \
      if (!ok) {                                                                                        \
        if (gtid() == 0) *err = 1;                                                                      \
        continue;                                                                                       \
      }                                                                                                 \
      for (u64 s = gtid(); s < slice; s += gstride())                                                   \
        y[off * slice + s] = scatter_combine<T>(y[off * slice + s], upd[t * slice + s], red);          \
    }                                                                                                   \
  }
SCATTER_ND(b1, u8)
SCATTER_ND(b2, u16)
SCATTER_ND(b4, u32)
SCATTER_ND(b8, u64)
SCATTER_ND(f32, float)
SCATTER_ND(i64, i64)
SCATTER_ND(i32, int)
