// attention.cu — fused scaled dot-product attention (FlashAttention-2), forward and backward.
//
// IR ops: attention, attention_grad (semantics in crates/fp8c-ir/src/attention.rs). q is
// [B, H, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], o and do [B, H, Tq, Dv], lse [B, H, Tq]
// f32, all contiguous; query head h reads KV head h / (H / Hkv) in place (no repeat). The
// optional additive mask (q's kind) is read through four element strides over [B, H, Tq, Tk]
// (0 along broadcast axes); a null pointer means none. Key j is visible to query i unless
// causal and j > i + Tk - Tq.
//
// No kernel holds a score matrix: a block owns one tile of B queries (forward, dq) or keys
// (dk / dv) and walks the other side tile by tile through shared memory, with f32
// accumulation in registers. Tile sizes follow the head-size bucket DM (64, 128, 256: the
// larger of D and Dv rounded up), so that every kernel's static shared memory stays under
// 48 KiB. Key tiles wholly above the causal diagonal are never visited.
//
//   forward   (fp8c_attention_fwd_<t>_d<DM>): one block per (b, h, query tile). Per key tile:
//             S = scale·Q·Kᵀ + mask, the online softmax (running max m, sum l, the output
//             rescaled by e^(m_old − m)), O += P·V; at the end o = O / l, lse = m + ln l
//             (a row with every key hidden gives o = 0, lse = −∞).
//   backward  P is recomputed from q, k and lse (e^(S − lse)), D = Σ dO∘O comes from a
//             pre-pass (fp8c_attention_bwd_dot_<t>, one warp per row, f64 sum), and
//             dS = P ∘ (dO·Vᵀ − D)·scale. dq (fp8c_attention_bwd_dq_<t>_d<DM>: one block per
//             query tile, over key tiles) and dk / dv (fp8c_attention_bwd_dkdv_<t>_d<DM>: one
//             block per (b, KV head, key tile), over the group's query heads and the query
//             tiles that see it) are separate kernels, so every output element is summed by
//             one thread in a fixed order: no atomics, results independent of scheduling.
//
// Launch: 128 threads per block (ATT_THREADS), grid = the tile count; the dot pre-pass 256
// threads per block, grid-stride over rows. The tile kernels declare a minimum of one block
// per SM in __launch_bounds__: without it ptxas caps their registers low enough to spill. Products use fused multiply-adds (__fmaf_rn);
// exp / log are CUDA's expf and log.
#include "common.cuh"

#define ATT_THREADS 128
#define ATT_NEG_INF (-__uint_as_float(0x7f800000u))

// Per head-size bucket: the tile size B (queries and keys) and each thread's share of a
// B×B score tile (S_TM rows × S_TN columns) and of a B×DM output tile (O_TM × O_TN).
template <int DM>
struct AttCfg;
template <>
struct AttCfg<64> {
  static constexpr int B = 32, S_TM = 2, S_TN = 4, O_TM = 2, O_TN = 8;
};
template <>
struct AttCfg<128> {
  static constexpr int B = 16, S_TM = 1, S_TN = 2, O_TM = 2, O_TN = 8;
};
template <>
struct AttCfg<256> {
  static constexpr int B = 8, S_TM = 1, S_TN = 1, O_TM = 1, O_TN = 16;
};

// A register tile of an M×N product owned by the block: thread t holds rows t / CG + RG·i
// and columns t % CG + CG·k (i < TM, k < TN); threads past RG·CG hold nothing.
template <int M, int N, int TM, int TN>
struct AttTile {
  static constexpr int RG = M / TM, CG = N / TN;
  static_assert(RG * TM == M && CG * TN == N && RG * CG <= ATT_THREADS, "tile mapping");
  float acc[TM][TN];
  int r0, c0;
  bool on;
  __device__ __forceinline__ AttTile() {
    r0 = (int)threadIdx.x / CG;
    c0 = (int)threadIdx.x % CG;
    on = (int)threadIdx.x < RG * CG;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int k = 0; k < TN; ++k) acc[i][k] = 0.0f;
  }
  __device__ __forceinline__ int row(int i) const { return r0 + RG * i; }
  __device__ __forceinline__ int col(int k) const { return c0 + CG * k; }
  // acc[r][c] += Σ_{kk < kdim} a(r, kk) · b(kk, c)
  template <class A, class Bf>
  __device__ __forceinline__ void mac(int kdim, A a, Bf b) {
    if (!on) return;
    for (int kk = 0; kk < kdim; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = a(row(i), kk);
#pragma unroll
      for (int k = 0; k < TN; ++k) bv[k] = b(kk, col(k));
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int k = 0; k < TN; ++k) acc[i][k] = __fmaf_rn(av[i], bv[k], acc[i][k]);
    }
  }
};

// The geometry of one launch (the kernel parameters, gathered).
struct AttGeom {
  u32 heads, kv_heads, tq, tk, d, dv;
  u64 ms0, ms1, ms2, ms3;
  float scale;
  bool causal;
  const void* mask;
  // The end of the keys query i sees (FlashAttention's bottom-right causal alignment).
  __device__ __forceinline__ u32 visible_end(u32 i) const {
    if (!causal) return tk;
    const i64 e = (i64)i + 1 + (i64)tk - (i64)tq;
    return e <= 0 ? 0u : (e >= (i64)tk ? tk : (u32)e);
  }
  template <int KIND>
  __device__ __forceinline__ float mask_at(u64 b, u64 h, u64 i, u64 j) const {
    return load_elem<KIND>(mask, b * ms0 + h * ms1 + i * ms2 + j * ms3);
  }
};

// rows × cols elements of a row-major source from element `base` into a B×DM shared tile
// (row stride DM + 1), zero-filled past them.
template <int KIND, int DM>
__device__ __forceinline__ void att_load(float* dst, const void* src, u64 base, int rows, u32 cols) {
  constexpr int B = AttCfg<DM>::B;
  for (int idx = (int)threadIdx.x; idx < B * DM; idx += ATT_THREADS) {
    const int r = idx / DM, c = idx % DM;
    dst[r * (DM + 1) + c] = (r < rows && (u32)c < cols) ? load_elem<KIND>(src, base + (u64)r * cols + c) : 0.0f;
  }
}

// Score (r, c) of a tile (query i0 + r, key j0 + c) with the dot product `dot`: scaled, masked,
// −∞ where hidden or past the tile's rows / keys.
template <int KIND>
__device__ __forceinline__ float att_score(const AttGeom& g, float dot, u64 b, u32 h, u32 i0, int r, int rows,
                                           u32 j0, int c, int keys) {
  if (r >= rows || c >= keys || j0 + (u32)c >= g.visible_end(i0 + (u32)r)) return ATT_NEG_INF;
  float x = dot * g.scale;
  if (g.mask) x = x + g.mask_at<KIND>(b, h, i0 + (u32)r, j0 + (u32)c);
  return x;
}

// ---------------------------------------------------------------- forward

template <int KIND, int DM>
__device__ __forceinline__ void att_fwd(const void* q, const void* k, const void* v, void* o, float* lse, u32 batch,
                                        const AttGeom g) {
  typedef AttCfg<DM> C;
  constexpr int B = C::B, LD = DM + 1, SLD = B + 1;
  // Threads per score row in the softmax pass, and the columns each takes.
  constexpr int TPR = (ATT_THREADS / B < B) ? ATT_THREADS / B : B;
  constexpr int CPT = B / TPR;
  __shared__ float Qs[B * LD];
  __shared__ float KVs[B * LD];  // K, then V, of the current key tile
  __shared__ float Ss[B * SLD];  // scores, then probabilities
  __shared__ float alpha_s[B], m_s[B], l_s[B];
  const u32 tiles = (g.tq + B - 1) / B;
  const u64 bh = blockIdx.x / tiles;
  const u32 i0 = (blockIdx.x % tiles) * B;
  const u32 h = (u32)(bh % g.heads);
  const u64 b = bh / g.heads;
  if (b >= batch) return;
  const u64 kv0 = (b * g.kv_heads + h / (g.heads / g.kv_heads)) * g.tk;  // row of key 0
  const int rows = (int)min((u32)B, g.tq - i0);
  att_load<KIND, DM>(Qs, q, (bh * g.tq + i0) * g.d, rows, g.d);
  const u32 end = g.visible_end(i0 + (u32)rows - 1);
  const int prow = (int)threadIdx.x / TPR, psub = (int)threadIdx.x % TPR;
  const bool pon = (int)threadIdx.x < B * TPR;
  float m_run = ATT_NEG_INF, l_run = 0.0f;
  AttTile<B, DM, C::O_TM, C::O_TN> out;
  for (u32 j0 = 0; j0 < end; j0 += B) {
    const int keys = (int)min((u32)B, end - j0);
    __syncthreads();  // the previous tile's P·V is done with Ss and KVs
    att_load<KIND, DM>(KVs, k, (kv0 + j0) * g.d, keys, g.d);
    __syncthreads();
    {
      AttTile<B, B, C::S_TM, C::S_TN> s;
      s.mac((int)g.d, [&](int r, int kk) { return Qs[r * LD + kk]; }, [&](int kk, int c) { return KVs[c * LD + kk]; });
      if (s.on) {
#pragma unroll
        for (int i = 0; i < C::S_TM; ++i)
#pragma unroll
          for (int c = 0; c < C::S_TN; ++c)
            Ss[s.row(i) * SLD + s.col(c)] = att_score<KIND>(g, s.acc[i][c], b, h, i0, s.row(i), rows, j0, s.col(c), keys);
      }
    }
    __syncthreads();
    att_load<KIND, DM>(KVs, v, (kv0 + j0) * g.dv, keys, g.dv);
    if (pon) {
      float x[CPT];
      float mx = ATT_NEG_INF;
#pragma unroll
      for (int c = 0; c < CPT; ++c) {
        x[c] = Ss[prow * SLD + psub + TPR * c];
        mx = nan_max(mx, x[c]);
      }
#pragma unroll
      for (int w = TPR / 2; w > 0; w >>= 1) mx = nan_max(mx, __shfl_xor_sync(FP8C_FULL_MASK, mx, w));
      const float m_new = (fp8c_isnan(mx) || fp8c_isnan(m_run)) ? fp8c_nan() : (mx > m_run ? mx : m_run);
      float alpha = 1.0f, sum = 0.0f;
      if (m_new == ATT_NEG_INF) {
        // No key of this row is visible yet: nothing to add.
#pragma unroll
        for (int c = 0; c < CPT; ++c) Ss[prow * SLD + psub + TPR * c] = 0.0f;
      } else {
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
          const float p = expf(x[c] - m_new);
          Ss[prow * SLD + psub + TPR * c] = p;
          sum += p;
        }
        alpha = expf(m_run - m_new);
      }
      // Outside the branch: rows of one warp may take different sides of it.
#pragma unroll
      for (int w = TPR / 2; w > 0; w >>= 1) sum += __shfl_xor_sync(FP8C_FULL_MASK, sum, w);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (psub == 0) alpha_s[prow] = alpha;
    }
    __syncthreads();
    if (out.on) {
#pragma unroll
      for (int i = 0; i < C::O_TM; ++i) {
        const float a = alpha_s[out.row(i)];
#pragma unroll
        for (int c = 0; c < C::O_TN; ++c) out.acc[i][c] *= a;
      }
    }
    out.mac(keys, [&](int r, int kk) { return Ss[r * SLD + kk]; }, [&](int kk, int c) { return KVs[kk * LD + c]; });
  }
  if (pon && psub == 0) {
    m_s[prow] = m_run;
    l_s[prow] = l_run;
  }
  __syncthreads();
  if (out.on) {
#pragma unroll
    for (int i = 0; i < C::O_TM; ++i) {
      const int r = out.row(i);
      if (r >= rows) continue;
      const float l = l_s[r];
      const bool none = l == 0.0f && !fp8c_isnan(m_s[r]);
#pragma unroll
      for (int c = 0; c < C::O_TN; ++c) {
        if ((u32)out.col(c) >= g.dv) continue;
        store_elem<KIND>(o, (bh * g.tq + i0 + (u32)r) * g.dv + (u32)out.col(c), none ? 0.0f : out.acc[i][c] / l);
      }
    }
  }
  if (pon && psub == 0 && prow < rows) {
    const float l = l_s[prow], m = m_s[prow];
    lse[bh * g.tq + i0 + (u32)prow] =
        (l == 0.0f && !fp8c_isnan(m)) ? ATT_NEG_INF : __double2float_rn((double)m + log((double)l));
  }
}

// ---------------------------------------------------------------- backward

// D = Σ_c dO[r, c]·O[r, c] per row, one warp per row, summed in f64.
template <int KIND>
__device__ __forceinline__ void att_dot(const void* o, const void* d_o, float* delta, u64 rows, u32 dv) {
  const u32 lane = threadIdx.x & 31u;
  const u64 warps = (u64)gridDim.x * (blockDim.x / 32);
  for (u64 r = (u64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    double s = 0.0;
    for (u32 c = lane; c < dv; c += 32)
      s += (double)load_elem<KIND>(o, r * dv + c) * (double)load_elem<KIND>(d_o, r * dv + c);
    s = warp_sum_f64(s);
    if (lane == 0) delta[r] = __double2float_rn(s);
  }
}

// The probabilities and dS of one (query tile, key tile) pair, written to Ps (when given)
// and dSs: P = e^(S − lse) (0 where hidden or the row has no visible key), dS = P ∘ (dP − D)·scale.
template <int KIND, int DM>
__device__ __forceinline__ void att_probs(const AttGeom& g, const float* Qs, const float* dOs, const float* Ks,
                                          const float* Vs, const float* lse_s, const float* del_s, float* Ps,
                                          float* dSs, u64 b, u32 h, u32 i0, int rows, u32 j0, int keys) {
  typedef AttCfg<DM> C;
  constexpr int B = C::B, LD = DM + 1, SLD = B + 1;
  AttTile<B, B, C::S_TM, C::S_TN> s, dp;
  s.mac((int)g.d, [&](int r, int kk) { return Qs[r * LD + kk]; }, [&](int kk, int c) { return Ks[c * LD + kk]; });
  dp.mac((int)g.dv, [&](int r, int kk) { return dOs[r * LD + kk]; }, [&](int kk, int c) { return Vs[c * LD + kk]; });
  if (!s.on) return;
#pragma unroll
  for (int i = 0; i < C::S_TM; ++i) {
    const int r = s.row(i);
    const float l = lse_s[r], dd = del_s[r];
#pragma unroll
    for (int c = 0; c < C::S_TN; ++c) {
      const int cc = s.col(c);
      float p = 0.0f, ds = 0.0f;
      if (r < rows && cc < keys) {
        if (l != ATT_NEG_INF) p = expf(att_score<KIND>(g, s.acc[i][c], b, h, i0, r, rows, j0, cc, keys) - l);
        ds = p * (dp.acc[i][c] - dd) * g.scale;
      }
      if (Ps) Ps[r * SLD + cc] = p;
      dSs[r * SLD + cc] = ds;
    }
  }
}

// lse and D of rows i0.. of head bh into shared memory (−∞ and 0 past the rows).
template <int B>
__device__ __forceinline__ void att_load_rows(float* lse_s, float* del_s, const float* lse, const float* delta,
                                              u64 row0, int rows) {
  for (int r = (int)threadIdx.x; r < B; r += ATT_THREADS) {
    lse_s[r] = r < rows ? lse[row0 + r] : ATT_NEG_INF;
    del_s[r] = r < rows ? delta[row0 + r] : 0.0f;
  }
}

template <int KIND, int DM>
__device__ __forceinline__ void att_bwd_dq(const void* q, const void* k, const void* v, const void* d_o,
                                           const float* lse, const float* delta, void* dq, u32 batch, const AttGeom g) {
  typedef AttCfg<DM> C;
  constexpr int B = C::B, LD = DM + 1, SLD = B + 1;
  __shared__ float Qs[B * LD], dOs[B * LD], Ks[B * LD], Vs[B * LD];
  __shared__ float dSs[B * SLD];
  __shared__ float lse_s[B], del_s[B];
  const u32 tiles = (g.tq + B - 1) / B;
  const u64 bh = blockIdx.x / tiles;
  const u32 i0 = (blockIdx.x % tiles) * B;
  const u32 h = (u32)(bh % g.heads);
  const u64 b = bh / g.heads;
  if (b >= batch) return;
  const u64 kv0 = (b * g.kv_heads + h / (g.heads / g.kv_heads)) * g.tk;
  const int rows = (int)min((u32)B, g.tq - i0);
  att_load<KIND, DM>(Qs, q, (bh * g.tq + i0) * g.d, rows, g.d);
  att_load<KIND, DM>(dOs, d_o, (bh * g.tq + i0) * g.dv, rows, g.dv);
  att_load_rows<B>(lse_s, del_s, lse, delta, bh * g.tq + i0, rows);
  const u32 end = g.visible_end(i0 + (u32)rows - 1);
  AttTile<B, DM, C::O_TM, C::O_TN> acc;
  for (u32 j0 = 0; j0 < end; j0 += B) {
    const int keys = (int)min((u32)B, end - j0);
    __syncthreads();
    att_load<KIND, DM>(Ks, k, (kv0 + j0) * g.d, keys, g.d);
    att_load<KIND, DM>(Vs, v, (kv0 + j0) * g.dv, keys, g.dv);
    __syncthreads();
    att_probs<KIND, DM>(g, Qs, dOs, Ks, Vs, lse_s, del_s, nullptr, dSs, b, h, i0, rows, j0, keys);
    __syncthreads();
    // dQ += dS·K
    acc.mac(keys, [&](int r, int kk) { return dSs[r * SLD + kk]; }, [&](int kk, int c) { return Ks[kk * LD + c]; });
  }
  if (!acc.on) return;
#pragma unroll
  for (int i = 0; i < C::O_TM; ++i) {
    if (acc.row(i) >= rows) continue;
#pragma unroll
    for (int c = 0; c < C::O_TN; ++c)
      if ((u32)acc.col(c) < g.d)
        store_elem<KIND>(dq, (bh * g.tq + i0 + (u32)acc.row(i)) * g.d + (u32)acc.col(c), acc.acc[i][c]);
  }
}

template <int KIND, int DM>
__device__ __forceinline__ void att_bwd_dkdv(const void* q, const void* k, const void* v, const void* d_o,
                                             const float* lse, const float* delta, void* dk, void* dv, u32 batch,
                                             const AttGeom g) {
  typedef AttCfg<DM> C;
  constexpr int B = C::B, LD = DM + 1, SLD = B + 1;
  __shared__ float Qs[B * LD], dOs[B * LD], Ks[B * LD], Vs[B * LD];
  __shared__ float Ps[B * SLD], dSs[B * SLD];
  __shared__ float lse_s[B], del_s[B];
  const u32 tiles = (g.tk + B - 1) / B;
  const u64 bg = blockIdx.x / tiles;  // b · Hkv + KV head
  const u32 j0 = (blockIdx.x % tiles) * B;
  const u32 kvh = (u32)(bg % g.kv_heads);
  const u64 b = bg / g.kv_heads;
  if (b >= batch) return;
  const int keys = (int)min((u32)B, g.tk - j0);
  att_load<KIND, DM>(Ks, k, (bg * g.tk + j0) * g.d, keys, g.d);
  att_load<KIND, DM>(Vs, v, (bg * g.tk + j0) * g.dv, keys, g.dv);
  // The first query that sees key j0: visible_end(i) > j0.
  const i64 first_i = g.causal ? (i64)j0 + (i64)g.tq - (i64)g.tk : 0;
  const u32 first = first_i <= 0 ? 0u : (u32)first_i;
  const u32 group = g.heads / g.kv_heads;
  AttTile<B, DM, C::O_TM, C::O_TN> dk_acc, dv_acc;
  for (u32 hg = 0; hg < group; ++hg) {
    const u32 h = kvh * group + hg;
    const u64 bh = b * g.heads + h;
    for (u32 i0 = first / B * B; i0 < g.tq; i0 += B) {
      const int rows = (int)min((u32)B, g.tq - i0);
      __syncthreads();
      att_load<KIND, DM>(Qs, q, (bh * g.tq + i0) * g.d, rows, g.d);
      att_load<KIND, DM>(dOs, d_o, (bh * g.tq + i0) * g.dv, rows, g.dv);
      att_load_rows<B>(lse_s, del_s, lse, delta, bh * g.tq + i0, rows);
      __syncthreads();
      att_probs<KIND, DM>(g, Qs, dOs, Ks, Vs, lse_s, del_s, Ps, dSs, b, h, i0, rows, j0, keys);
      __syncthreads();
      // dV += Pᵀ·dO, dK += dSᵀ·Q (rows of the accumulators are keys).
      dv_acc.mac(rows, [&](int r, int kk) { return Ps[kk * SLD + r]; }, [&](int kk, int c) { return dOs[kk * LD + c]; });
      dk_acc.mac(rows, [&](int r, int kk) { return dSs[kk * SLD + r]; }, [&](int kk, int c) { return Qs[kk * LD + c]; });
    }
  }
  if (!dk_acc.on) return;
#pragma unroll
  for (int i = 0; i < C::O_TM; ++i) {
    const int r = dk_acc.row(i);
    if (r >= keys) continue;
#pragma unroll
    for (int c = 0; c < C::O_TN; ++c) {
      const u32 col = (u32)dk_acc.col(c);
      if (col < g.d) store_elem<KIND>(dk, (bg * g.tk + j0 + (u32)r) * g.d + col, dk_acc.acc[i][c]);
      if (col < g.dv) store_elem<KIND>(dv, (bg * g.tk + j0 + (u32)r) * g.dv + col, dv_acc.acc[i][c]);
    }
  }
}

// ---------------------------------------------------------------- entry points
// Common parameters, in this order: batch, heads, kv_heads, tq, tk, d, dv (u32), the mask and
// its four element strides (u64), scale (f32), causal (int).

#define ATT_GEOM                                                                                    \
  AttGeom g;                                                                                        \
  g.heads = heads;                                                                                  \
  g.kv_heads = kv_heads;                                                                            \
  g.tq = tq;                                                                                        \
  g.tk = tk;                                                                                        \
  g.d = d;                                                                                          \
  g.dv = dv;                                                                                        \
  g.mask = mask;                                                                                    \
  g.ms0 = ms0;                                                                                      \
  g.ms1 = ms1;                                                                                      \
  g.ms2 = ms2;                                                                                      \
  g.ms3 = ms3;                                                                                      \
  g.scale = scale;                                                                                  \
  g.causal = causal != 0;

#define ATT_PARAMS                                                                                  \
  u32 batch, u32 heads, u32 kv_heads, u32 tq, u32 tk, u32 d, u32 dv, const void* mask, u64 ms0, u64 ms1, \
      u64 ms2, u64 ms3, float scale, int causal

// fp8c_attention_fwd_<t>_d<DM>(q, k, v, o, lse, ATT_PARAMS): grid B·H·⌈Tq / tile⌉.
// fp8c_attention_bwd_dq_<t>_d<DM>(q, k, v, do, lse, delta, dq, ATT_PARAMS): the same grid.
// fp8c_attention_bwd_dkdv_<t>_d<DM>(q, k, v, do, lse, delta, dk, dv, ATT_PARAMS): grid
// B·Hkv·⌈Tk / tile⌉.
#define ATTENTION(T_NAME, KIND, DM)                                                                 \
  extern "C" __global__ void __launch_bounds__(ATT_THREADS, 1) fp8c_attention_fwd_##T_NAME##_d##DM(    \
      const void* q, const void* k, const void* v, void* o, float* lse, ATT_PARAMS) {              \
    ATT_GEOM att_fwd<KIND, DM>(q, k, v, o, lse, batch, g);                                          \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(ATT_THREADS, 1) fp8c_attention_bwd_dq_##T_NAME##_d##DM( \
      const void* q, const void* k, const void* v, const void* d_o, const float* lse, const float* delta, \
      void* dq, ATT_PARAMS) {                                                                       \
    ATT_GEOM att_bwd_dq<KIND, DM>(q, k, v, d_o, lse, delta, dq, batch, g);                          \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(ATT_THREADS, 1) fp8c_attention_bwd_dkdv_##T_NAME##_d##DM( \
      const void* q, const void* k, const void* v, const void* d_o, const float* lse, const float* delta, \
      void* dk, void* dv_out, ATT_PARAMS) {                                                         \
    ATT_GEOM att_bwd_dkdv<KIND, DM>(q, k, v, d_o, lse, delta, dk, dv_out, batch, g);                \
  }

// fp8c_attention_bwd_dot_<t>(o, do, delta, rows, dv): delta[r] = Σ o[r]·do[r] (f32).
#define ATTENTION_DOT(T_NAME, KIND)                                                                 \
  extern "C" __global__ void __launch_bounds__(FP8C_BLOCK) fp8c_attention_bwd_dot_##T_NAME(         \
      const void* o, const void* d_o, float* delta, u64 rows, u32 dv) {                             \
    att_dot<KIND>(o, d_o, delta, rows, dv);                                                         \
  }

#define ATTENTION_ALL_DM(T_NAME, KIND)                                                              \
  ATTENTION(T_NAME, KIND, 64)                                                                       \
  ATTENTION(T_NAME, KIND, 128)                                                                      \
  ATTENTION(T_NAME, KIND, 256)                                                                      \
  ATTENTION_DOT(T_NAME, KIND)

ATTENTION_ALL_DM(f32, KIND_F32)
ATTENTION_ALL_DM(bf16, KIND_BF16)
ATTENTION_ALL_DM(f16, KIND_F16)
