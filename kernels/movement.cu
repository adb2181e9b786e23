// movement.cu — data movement without arithmetic: strided copies, fills and tiled transposes.
//
// IR ops: transpose (any perm), slice, expand, tile, concat (one copy per input into its slab
// of the output), pad (constant mode: fill, then copy into the interior), the copies behind
// reshape / squeeze / unsqueeze / flatten / identity when they are not plain memcpys, range
// and trilu.
//
// `fp8c_strided_copy_<bytes>` walks the iteration dims of a StridedView and moves one element
// per index: general but one element at a time. `fp8c_transpose2d_<bytes>` is the fast path
// for swapping the last two dims (attention's Kᵀ, weight transposes): 32×32 tiles through
// shared memory (rows padded by one element against bank conflicts), coalesced on both sides.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void strided_copy_impl(const T* __restrict__ src, T* __restrict__ dst,
                                                  const StridedView& v, u64 n) {
  for (u64 i = gtid(); i < n; i += gstride()) {
    u64 rest = i;
    i64 so = v.in_offset, d = v.out_offset;
    for (int k = (int)v.rank - 1; k >= 0; --k) {
      const u64 idx = rest % v.dims[k];
      rest /= v.dims[k];
      so += (i64)idx * v.in_strides[k];
      d += (i64)idx * v.out_strides[k];
    }
    dst[d] = src[so];
  }
}

// fp8c_strided_copy_<bytes>(src, dst, view, n): n = product of view.dims.
#define STRIDED_COPY(BYTES, T)                                                                          \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                              \
      fp8c_strided_copy_##BYTES(const T* src, T* dst, StridedView view, u64 n) {                        \
    strided_copy_impl<T>(src, dst, view, n);                                                            \
  }
STRIDED_COPY(1, u8)
STRIDED_COPY(2, u16)
STRIDED_COPY(4, u32)
STRIDED_COPY(8, u64)

// fp8c_fill_<bytes>(dst, value, n): every element := the low bytes of `value`.
#define FILL(BYTES, T)                                                                                  \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_fill_##BYTES(T* dst, u64 value, u64 n) { \
    const T v = (T)value;                                                                               \
    for (u64 i = gtid(); i < n; i += gstride()) dst[i] = v;                                             \
  }
FILL(1, u8)
FILL(2, u16)
FILL(4, u32)
FILL(8, u64)

#define TT 32

// dst[b][c][r] = src[b][r][c] for src [batch, rows, cols]. Block 32×8 threads; grid-stride over
// tiles.
template <typename T>
__device__ __forceinline__ void transpose2d_impl(const T* __restrict__ src, T* __restrict__ dst, u64 batch,
                                                 u64 rows, u64 cols) {
  __shared__ T tile[TT][TT + 1];
  const u64 tr = (rows + TT - 1) / TT, tc = (cols + TT - 1) / TT;
  const u64 ntiles = batch * tr * tc;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (u64 t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const u64 b = t / (tr * tc), rest = t % (tr * tc);
    const u64 r0 = (rest / tc) * TT, c0 = (rest % tc) * TT;
    const u64 base = b * rows * cols;
#pragma unroll
    for (int k = 0; k < TT; k += 8) {
      const u64 r = r0 + ty + k, c = c0 + tx;
      if (r < rows && c < cols) tile[ty + k][tx] = src[base + r * cols + c];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TT; k += 8) {
      const u64 c = c0 + ty + k, r = r0 + tx;
      if (r < rows && c < cols) dst[base + c * rows + r] = tile[tx][ty + k];
    }
    __syncthreads();
  }
}

#define TRANSPOSE2D(BYTES, T)                                                                            \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                               \
      fp8c_transpose2d_##BYTES(const T* src, T* dst, u64 batch, u64 rows, u64 cols) {                    \
    transpose2d_impl<T>(src, dst, batch, rows, cols);                                                    \
  }
TRANSPOSE2D(1, u8)
TRANSPOSE2D(2, u16)
TRANSPOSE2D(4, u32)
TRANSPOSE2D(8, u64)

// fp8c_range_<type>(start, delta, y, n): y[i] = start + i·delta, the CPU reference's formula
// (f32: i converted to f32, one product and one sum, each rounded; integers wrap).
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_range_f32(const float* start, const float* delta, float* y, u64 n) {
  const float s = *start, d = *delta;
  for (u64 i = gtid(); i < n; i += gstride()) y[i] = __fadd_rn(s, __fmul_rn((float)i, d));
}
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_range_i64(const i64* start, const i64* delta, i64* y, u64 n) {
  const u64 s = (u64)*start, d = (u64)*delta;
  for (u64 i = gtid(); i < n; i += gstride()) y[i] = (i64)(s + i * d);
}
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_range_i32(const int* start, const int* delta, int* y, u64 n) {
  const u64 s = (u64)(i64)*start, d = (u64)(i64)*delta;
  for (u64 i = gtid(); i < n; i += gstride()) y[i] = (int)(u32)(s + i * d);
}

// fp8c_trilu_<bytes>(x, y, k, rows, cols, upper, n): ONNX Trilu over the last two dims: keeps
// x where column − row ≥ k (upper) or ≤ k (lower), zero elsewhere; k is an i64 on the device
// (null: 0).
#define TRILU(BYTES, T)                                                                           \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                        \
      fp8c_trilu_##BYTES(const T* x, T* y, const i64* k, u64 rows, u64 cols, int upper, u64 n) { \
    const i64 kk = k ? *k : 0;                                                                    \
    for (u64 e = gtid(); e < n; e += gstride()) {                                                 \
      const i64 i = (i64)((e / cols) % rows), j = (i64)(e % cols);                                \
      const i64 d = j - i;                                                                        \
      const bool keep = upper ? d >= kk : d <= kk;                                                \
      y[e] = keep ? x[e] : (T)0;                                                                  \
    }                                                                                             \
  }
TRILU(1, u8)
TRILU(2, u16)
TRILU(4, u32)
TRILU(8, u64)

// Pad of any mode and sign: every output element reads its source element (constant mode
// outside the source: `value`). Source coordinate j = o − begin outside [0, d): edge clamps,
// wrap takes j mod d, reflect mirrors without repeating the edge (period 2(d − 1)), as the CPU
// reference computes them.
struct PadView {
  u32 rank;
  u32 mode; // 0 constant, 1 edge, 2 wrap, 3 reflect
  u64 out_dims[FP8C_MAX_DIMS];
  i64 in_dims[FP8C_MAX_DIMS];
  i64 begin[FP8C_MAX_DIMS];
  i64 in_strides[FP8C_MAX_DIMS];
  u64 value; // constant mode: the pad value's bytes
};

template <typename T>
__device__ __forceinline__ void pad_impl(const T* __restrict__ src, T* __restrict__ dst, const PadView& v,
                                         const T* __restrict__ value, u64 n) {
  const T fill_value = value ? *value : (T)v.value;
  for (u64 i = gtid(); i < n; i += gstride()) {
    u64 rest = i;
    i64 so = 0;
    bool fill = false;
    for (int k = (int)v.rank - 1; k >= 0; --k) {
      const i64 o = (i64)(rest % v.out_dims[k]);
      rest /= v.out_dims[k];
      const i64 d = v.in_dims[k];
      i64 j = o - v.begin[k];
      if (j < 0 || j >= d) {
        if (v.mode == 0) {
          fill = true;
          j = 0;
        } else if (v.mode == 1) {
          j = j < 0 ? 0 : d - 1;
        } else if (v.mode == 2) {
          j = ((j % d) + d) % d;
        } else if (d == 1) {
          j = 0;
        } else {
          const i64 p = 2 * (d - 1), m = ((j % p) + p) % p;
          j = m < d ? m : p - m;
        }
      }
      so += j * v.in_strides[k];
    }
    dst[i] = fill ? fill_value : src[so];
  }
}

// fp8c_pad_<bytes>(src, dst, view, value, n): n = product of view.out_dims; `value` (may be
// null: view.value) is a constant-mode pad value computed on the device.
#define PAD(BYTES, T)                                                                              \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                         \
      fp8c_pad_##BYTES(const T* src, T* dst, PadView view, const T* value, u64 n) {                \
    pad_impl<T>(src, dst, view, value, n);                                                         \
  }
PAD(1, u8)
PAD(2, u16)
PAD(4, u32)
PAD(8, u64)
