// cast_transpose.cu — TransformerEngine's cast+transpose: one read of x gives q = quantize(x),
// its transpose qT (the K-major copy Hopper's FP8 GEMMs want: they take only the TN layout)
// and amax(x).
//
// IR op: cast_transpose with perm swapping the last two dims (x viewed as [batch, rows, cols]).
//
// One block of 256 threads handles a 64×64 tile at a time (grid-stride over tiles). Full
// tiles with rows and cols multiples of 16 take the fast path: each thread loads 16
// consecutive elements of one row (four 16-byte loads for f32), writes 16 bytes of q, and
// parks the codes in shared memory; after a barrier each thread gathers 16 codes of one
// column and writes them as one 16-byte store of qT, four threads per 64-byte qT row segment.
// Shared rows are padded to 68 bytes to break most bank conflicts. Edge tiles go element by
// element.
#include "common.cuh"

#define TILE 64
#define SROW 68 // padded shared-memory row, bytes

template <int IN, int FMT, bool SAT>
__device__ __forceinline__ void cast_transpose_impl(const void* __restrict__ x, const float* __restrict__ scale,
                                                    u8* __restrict__ q, u8* __restrict__ qt,
                                                    float* __restrict__ amax, u64 batch, u64 rows, u64 cols) {
  __shared__ __align__(16) u8 tile[TILE * SROW];
  const float s = scale != nullptr ? *scale : 1.0f;
  const u64 tiles_r = (rows + TILE - 1) / TILE, tiles_c = (cols + TILE - 1) / TILE;
  const u64 ntiles = batch * tiles_r * tiles_c;
  const bool fast_dims = rows % 16 == 0 && cols % 16 == 0 && aligned16(x) && aligned16(q) && aligned16(qt);
  const int t = (int)threadIdx.x;
  u32 m = 0u;
  for (u64 tile_id = blockIdx.x; tile_id < ntiles; tile_id += gridDim.x) {
    const u64 b = tile_id / (tiles_r * tiles_c);
    const u64 rest = tile_id % (tiles_r * tiles_c);
    const u64 r0 = (rest / tiles_c) * TILE, c0 = (rest % tiles_c) * TILE;
    const u64 base = b * rows * cols; // same for q and x (elements), and for qt
    const bool full = fast_dims && r0 + TILE <= rows && c0 + TILE <= cols;
    if (full) {
      const int row = t / 4, chunk = (t % 4) * 16;
      const u64 src = base + (r0 + row) * cols + c0 + chunk;
      float v[16];
      load8<IN>(x, src, v);
      load8<IN>(x, src + 8, v + 8);
      u32 w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        m = max(m, abs_bits(v[j]));
        w[j / 4] |= fp8_quantize<FMT, SAT>(v[j], s) << (8 * (j % 4));
      }
      *reinterpret_cast<uint4*>(q + src) = make_uint4(w[0], w[1], w[2], w[3]);
      u32* srow = reinterpret_cast<u32*>(tile + row * SROW + chunk);
#pragma unroll
      for (int j = 0; j < 4; ++j) srow[j] = w[j];
      __syncthreads();
      const int col = t / 4, rchunk = (t % 4) * 16;
      u32 o[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int k = 0; k < 16; ++k) o[k / 4] |= (u32)tile[(rchunk + k) * SROW + col] << (8 * (k % 4));
      *reinterpret_cast<uint4*>(qt + base + (c0 + col) * rows + r0 + rchunk) = make_uint4(o[0], o[1], o[2], o[3]);
      __syncthreads();
    } else {
      for (int idx = t; idx < TILE * TILE; idx += blockDim.x) {
        const int row = idx / TILE, col = idx % TILE;
        if (r0 + row < rows && c0 + col < cols) {
          const u64 i = base + (r0 + row) * cols + c0 + col;
          const float v = load_elem<IN>(x, i);
          m = max(m, abs_bits(v));
          const u8 c = (u8)fp8_quantize<FMT, SAT>(v, s);
          q[i] = c;
          tile[row * SROW + col] = c;
        }
      }
      __syncthreads();
      for (int idx = t; idx < TILE * TILE; idx += blockDim.x) {
        const int col = idx / TILE, row = idx % TILE;
        if (r0 + row < rows && c0 + col < cols) qt[base + (c0 + col) * rows + r0 + row] = tile[row * SROW + col];
      }
      __syncthreads();
    }
  }
  block_amax_commit(m, amax);
}

// fp8c_cast_transpose_<in>_<fmt>_<sat|nosat>(x, scale or null, q, qt, amax or null, batch, rows, cols)
// Launch with 256 threads per block.
#define CT_KERNEL(IN_NAME, IN, FMT_NAME, FMT, SAT_NAME, SAT)                                            \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)                                              \
      fp8c_cast_transpose_##IN_NAME##_##FMT_NAME##_##SAT_NAME(const void* x, const float* scale, u8* q,   \
                                                               u8* qt, float* amax, u64 batch, u64 rows,  \
                                                               u64 cols) {                                \
    cast_transpose_impl<IN, FMT, SAT>(x, scale, q, qt, amax, batch, rows, cols);                         \
  }
#define CT_FOR_INPUT(IN_NAME, IN)                           \
  CT_KERNEL(IN_NAME, IN, e4m3, FMT_E4M3, sat, true)         \
  CT_KERNEL(IN_NAME, IN, e4m3, FMT_E4M3, nosat, false)      \
  CT_KERNEL(IN_NAME, IN, e5m2, FMT_E5M2, sat, true)         \
  CT_KERNEL(IN_NAME, IN, e5m2, FMT_E5M2, nosat, false)
CT_FOR_INPUT(f32, KIND_F32)
CT_FOR_INPUT(bf16, KIND_BF16)
CT_FOR_INPUT(f16, KIND_F16)
