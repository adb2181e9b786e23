// conv.cu — what convolutional models need around cuBLASLt: im2col for 2-D convolutions,
// pooling windows and inference batch norm.
//
// IR ops: conv (2-D, any group: im2col per image, then one strided-batched GEMM over the
// groups), max_pool and average_pool (2-D), global pools go to reduce.cu, batch_norm, and the
// training gradients: conv_grad_input (a GEMM into col, then col2im), conv_grad_weight
// (im2col, then GEMMs accumulating over the images) and the pool gradients.
//
// Geometry (pads, strides, dilations, output size) is resolved on the host from the static
// shapes; kernels take the begin pads and treat everything outside the image as padding.
#include "common.cuh"

struct Conv2d {
  u64 c, h, w;      // input channels, height, width (one image)
  u64 kh, kw;       // kernel
  u64 oh, ow;       // output spatial size
  i64 sh, sw;       // strides
  i64 ph, pw;       // begin pads
  i64 dh, dw;       // dilations
};

// col[(ci·kh + ky)·kw + kx][oy·ow + ox] = x[ci][oy·sh − ph + ky·dh][ox·sw − pw + kx·dw] (0 outside),
// for one image: x points at the image, col is [c·kh·kw, oh·ow] row-major. Grouped convs read
// col as [group][c/group·kh·kw][oh·ow], which is the same memory.
template <int K>
__device__ __forceinline__ void im2col_impl(const void* __restrict__ x, void* __restrict__ col, Conv2d g) {
  const u64 spatial = g.oh * g.ow;
  const u64 n = g.c * g.kh * g.kw * spatial;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 s = t % spatial, row = t / spatial;
    const u64 ox = s % g.ow, oy = s / g.ow;
    const u64 kx = row % g.kw, ky = (row / g.kw) % g.kh, ci = row / (g.kw * g.kh);
    const i64 iy = (i64)oy * g.sh - g.ph + (i64)ky * g.dh;
    const i64 ix = (i64)ox * g.sw - g.pw + (i64)kx * g.dw;
    float v = 0.0f;
    if (iy >= 0 && iy < (i64)g.h && ix >= 0 && ix < (i64)g.w) v = load_elem<K>(x, (ci * g.h + (u64)iy) * g.w + (u64)ix);
    store_elem<K>(col, t, v);
  }
}

#define IM2COL(NAME, K)                                                                                 \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_im2col_##NAME(const void* x, void* col,   \
                                                                             Conv2d g) {                 \
    im2col_impl<K>(x, col, g);                                                                          \
  }
IM2COL(f32, KIND_F32)
IM2COL(bf16, KIND_BF16)
IM2COL(f16, KIND_F16)

struct Pool2d {
  u64 planes;   // N·C
  u64 h, w;     // input spatial size
  u64 oh, ow;   // output spatial size
  u64 kh, kw;
  i64 sh, sw;
  i64 ph, pw;   // begin pads
  i64 ph_end, pw_end;
  i64 dh, dw;
  int count_include_pad;
};

// max_pool: NaN propagates (the CPU reference does); an all-padding window gives -inf.
// average_pool: the window's sum over in-image elements divided by the in-image count, or by
// the count inside the padded extent with count_include_pad (ONNX).
template <int K>
__device__ __forceinline__ void pool_impl(const void* __restrict__ x, void* __restrict__ y, Pool2d g, bool is_max) {
  const u64 n = g.planes * g.oh * g.ow;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 ox = t % g.ow, oy = (t / g.ow) % g.oh, pl = t / (g.ow * g.oh);
    float mx = -__uint_as_float(0x7f800000u);
    double sum = 0.0;
    u64 cnt = 0, cnt_pad = 0;
    for (u64 ky = 0; ky < g.kh; ++ky) {
      const i64 iy = (i64)oy * g.sh - g.ph + (i64)ky * g.dh;
      for (u64 kx = 0; kx < g.kw; ++kx) {
        const i64 ix = (i64)ox * g.sw - g.pw + (i64)kx * g.dw;
        const bool in_pad_extent = iy >= -g.ph && iy < (i64)g.h + g.ph_end && ix >= -g.pw && ix < (i64)g.w + g.pw_end;
        if (in_pad_extent) ++cnt_pad;
        if (iy < 0 || iy >= (i64)g.h || ix < 0 || ix >= (i64)g.w) continue;
        const float v = load_elem<K>(x, (pl * g.h + (u64)iy) * g.w + (u64)ix);
        mx = nan_max(mx, v);
        sum += (double)v;
        ++cnt;
      }
    }
    float out;
    if (is_max) out = mx;
    else {
      const u64 div = g.count_include_pad != 0 ? cnt_pad : cnt;
      out = div == 0 ? 0.0f : __double2float_rn(sum / (double)div);
    }
    store_elem<K>(y, t, out);
  }
}

#define POOL(NAME, K)                                                                                       \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_pool2d_##NAME(const void* x, void* y, Pool2d g, \
                                                                             int is_max) {                 \
    pool_impl<K>(x, y, g, is_max != 0);                                                                     \
  }
POOL(f32, KIND_F32)
POOL(bf16, KIND_BF16)
POOL(f16, KIND_F16)

// y = (x − mean[c]) / sqrt(var[c] + eps) · scale[c] + bias[c] in f64, rounded once; x is
// [N, C, inner].
template <int K>
__device__ __forceinline__ void batchnorm_impl(const void* __restrict__ x, const void* __restrict__ scale,
                                               const void* __restrict__ bias, const void* __restrict__ mean,
                                               const void* __restrict__ var, void* __restrict__ y, u64 c, u64 inner,
                                               u64 n, float eps) {
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 ch = (t / inner) % c;
    const double denom = sqrt((double)load_elem<K>(var, ch) + (double)eps);
    const double v = ((double)load_elem<K>(x, t) - (double)load_elem<K>(mean, ch)) / denom *
                         (double)load_elem<K>(scale, ch) + (double)load_elem<K>(bias, ch);
    store_elem<K>(y, t, __double2float_rn(v));
  }
}

#define BATCHNORM(NAME, K)                                                                                 \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_batchnorm_##NAME(                          \
      const void* x, const void* scale, const void* bias, const void* mean, const void* var, void* y, u64 c, \
      u64 inner, u64 n, float eps) {                                                                       \
    batchnorm_impl<K>(x, scale, bias, mean, var, y, c, inner, n, eps);                                     \
  }
BATCHNORM(f32, KIND_F32)
BATCHNORM(bf16, KIND_BF16)
BATCHNORM(f16, KIND_F16)

// ---------------------------------------------------------------- gradients (f32)
// col2im for conv_grad_input, one image: dx[ci][iy][ix] = Σ over the kernel taps t = (ky, kx),
// in ascending order, of col[ci·kh·kw + t][oy·ow + ox] for the output position whose tap t
// reads (iy, ix), if any: the CPU reference's order of additions (it scatters tap by tap), so
// the sums match it bit for bit given the same col.
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_col2im_f32(const float* col, float* dx, Conv2d g) {
  // 32-bit geometry (one image's sizes fit): 64-bit division and remainder cost registers.
  const int kh = (int)g.kh, kw = (int)g.kw, oh = (int)g.oh, ow = (int)g.ow, h = (int)g.h, w = (int)g.w;
  const int sh = (int)g.sh, sw = (int)g.sw, ph = (int)g.ph, pw = (int)g.pw, dh = (int)g.dh, dw = (int)g.dw;
  const u64 spatial = g.oh * g.ow, n = g.c * g.h * g.w;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const int ix = (int)(t % (u64)w), iy = (int)((t / (u64)w) % (u64)h);
    const u64 ci = t / ((u64)w * (u64)h);
    const float* base = col + ci * (u64)kh * (u64)kw * spatial;
    float acc = 0.0f;
    for (int ky = 0; ky < kh; ++ky) {
      const int ny = iy + ph - ky * dh; // = oy·sh
      if (ny < 0 || ny % sh != 0 || ny / sh >= oh) continue;
      const int oy = ny / sh;
      for (int kx = 0; kx < kw; ++kx) {
        const int nx = ix + pw - kx * dw;
        if (nx < 0 || nx % sw != 0 || nx / sw >= ow) continue;
        acc = __fadd_rn(acc, base[(u64)(ky * kw + kx) * spatial + (u64)(oy * ow + nx / sw)]);
      }
    }
    dx[t] = acc;
  }
}

// Pool gradients, gathered per input element: the output windows that read it, in ascending
// output order, each adding its dy (max: when this element is the window's winner, the last
// NaN else the first strict maximum, as the forward's CPU reference picks it; average: dy over
// the window's count), summed in double and rounded once, as the CPU reference does.
extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_pool2d_grad_f32(const float* x, const float* dy, float* dx, Pool2d g, int is_max) {
  const u64 n = g.planes * g.h * g.w;
  for (u64 t = gtid(); t < n; t += gstride()) {
    const u64 ix = t % g.w, iy = (t / g.w) % g.h, pl = t / (g.w * g.h);
    const float* src = x + pl * g.h * g.w;
    double acc = 0.0;
    for (u64 oy = 0; oy < g.oh; ++oy) {
      const i64 y0 = (i64)oy * g.sh - g.ph;
      if ((i64)iy < y0 || (i64)iy > y0 + (i64)(g.kh - 1) * g.dh || ((i64)iy - y0) % g.dh != 0) continue;
      for (u64 ox = 0; ox < g.ow; ++ox) {
        const i64 x0 = (i64)ox * g.sw - g.pw;
        if ((i64)ix < x0 || (i64)ix > x0 + (i64)(g.kw - 1) * g.dw || ((i64)ix - x0) % g.dw != 0) continue;
        const double d = (double)dy[(pl * g.oh + oy) * g.ow + ox];
        if (is_max) {
          i64 best = -1;
          float bv = 0.0f;
          for (u64 ky = 0; ky < g.kh; ++ky) {
            const i64 yy = y0 + (i64)ky * g.dh;
            for (u64 kx = 0; kx < g.kw; ++kx) {
              const i64 xx = x0 + (i64)kx * g.dw;
              if (yy < 0 || yy >= (i64)g.h || xx < 0 || xx >= (i64)g.w) continue;
              const float v = src[(u64)yy * g.w + (u64)xx];
              if (best < 0 || fp8c_isnan(v) || (!fp8c_isnan(bv) && v > bv)) {
                best = yy * (i64)g.w + xx;
                bv = v;
              }
            }
          }
          if (best == (i64)(iy * g.w + ix)) acc += d;
        } else {
          u64 cnt = 0;
          for (u64 ky = 0; ky < g.kh; ++ky) {
            const i64 yy = y0 + (i64)ky * g.dh;
            for (u64 kx = 0; kx < g.kw; ++kx) {
              const i64 xx = x0 + (i64)kx * g.dw;
              const bool in = yy >= 0 && yy < (i64)g.h && xx >= 0 && xx < (i64)g.w;
              const bool pad = yy >= -g.ph && yy < (i64)g.h + g.ph_end && xx >= -g.pw && xx < (i64)g.w + g.pw_end;
              if (in || (g.count_include_pad != 0 && pad)) ++cnt;
            }
          }
          acc += d / (double)cnt;
        }
      }
    }
    dx[t] = __double2float_rn(acc);
  }
}
