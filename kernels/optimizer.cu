// optimizer.cu — optimizer steps on FP32 master weights, reading the learning rate and the
// step count from device memory so that a captured training step replays without the host.
//
// IR ops: sgd_update (PyTorch SGD with momentum, weight decay, Nesterov) and adamw_update
// (PyTorch AdamW). Each thread handles 4 consecutive elements per iteration with 16-byte
// loads and stores of every operand when the pointers are aligned.
#include "common.cuh"

// g = grad + wd·param; buf' = momentum·buf + g (buf' = g when momentum is 0);
// param' = param − lr·(nesterov ? g + momentum·buf' : buf').
__device__ __forceinline__ void sgd_one(float p, float g, float b, float lr, float momentum, float wd, bool nesterov,
                                        float& p_out, float& b_out) {
  const float gg = g + wd * p;
  const float nb = momentum == 0.0f ? gg : momentum * b + gg;
  const float step = nesterov ? gg + momentum * nb : nb;
  p_out = p - lr * step;
  b_out = nb;
}

extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_sgd_update_f32(const float* param, const float* grad, const float* buf, const float* lr_ptr,
                        float* param_out, float* buf_out, u64 n, float momentum, float weight_decay, int nesterov) {
  const float lr = *lr_ptr;
  const bool nv = nesterov != 0;
  u64 done = 0;
  if (aligned16(param) && aligned16(grad) && aligned16(buf) && aligned16(param_out) && aligned16(buf_out)) {
    const u64 npack = n / 4;
    for (u64 pk = gtid(); pk < npack; pk += gstride()) {
      const float4 p = reinterpret_cast<const float4*>(param)[pk];
      const float4 g = reinterpret_cast<const float4*>(grad)[pk];
      const float4 b = reinterpret_cast<const float4*>(buf)[pk];
      float4 po, bo;
      sgd_one(p.x, g.x, b.x, lr, momentum, weight_decay, nv, po.x, bo.x);
      sgd_one(p.y, g.y, b.y, lr, momentum, weight_decay, nv, po.y, bo.y);
      sgd_one(p.z, g.z, b.z, lr, momentum, weight_decay, nv, po.z, bo.z);
      sgd_one(p.w, g.w, b.w, lr, momentum, weight_decay, nv, po.w, bo.w);
      reinterpret_cast<float4*>(param_out)[pk] = po;
      reinterpret_cast<float4*>(buf_out)[pk] = bo;
    }
    done = npack * 4;
  }
  for (u64 i = done + gtid(); i < n; i += gstride())
    sgd_one(param[i], grad[i], buf[i], lr, momentum, weight_decay, nv, param_out[i], buf_out[i]);
}

// param −= lr·wd·param; m' = β1·m + (1−β1)·g; v' = β2·v + (1−β2)·g²;
// param −= lr · (m'/(1−β1^t)) / (√(v'/(1−β2^t)) + ε).
struct AdamW {
  float lr, beta1, beta2, eps, wd, bc1, bc2;
};

__device__ __forceinline__ void adamw_one(const AdamW& a, float p, float g, float m, float v, float& p_out,
                                          float& m_out, float& v_out) {
  const float pd = p - a.lr * a.wd * p;
  const float nm = a.beta1 * m + (1.0f - a.beta1) * g;
  const float nv = a.beta2 * v + (1.0f - a.beta2) * g * g;
  const float mhat = __fdiv_rn(nm, a.bc1);
  const float vhat = __fdiv_rn(nv, a.bc2);
  p_out = pd - __fdiv_rn(a.lr * mhat, __fsqrt_rn(vhat) + a.eps);
  m_out = nm;
  v_out = nv;
}

extern "C" __global__ void __launch_bounds__(FP8C_BLOCK)
    fp8c_adamw_update_f32(const float* param, const float* grad, const float* m, const float* v, const float* lr_ptr,
                          const float* t_ptr, float* param_out, float* m_out, float* v_out, u64 n, float beta1,
                          float beta2, float eps, float weight_decay) {
  AdamW a;
  a.lr = *lr_ptr;
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.wd = weight_decay;
  const float t = *t_ptr;
  a.bc1 = 1.0f - powf(beta1, t);
  a.bc2 = 1.0f - powf(beta2, t);
  u64 done = 0;
  if (aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v) && aligned16(param_out) &&
      aligned16(m_out) && aligned16(v_out)) {
    const u64 npack = n / 4;
    for (u64 pk = gtid(); pk < npack; pk += gstride()) {
      const float4 p = reinterpret_cast<const float4*>(param)[pk];
      const float4 g = reinterpret_cast<const float4*>(grad)[pk];
      const float4 mm = reinterpret_cast<const float4*>(m)[pk];
      const float4 vv = reinterpret_cast<const float4*>(v)[pk];
      float4 po, mo, vo;
      adamw_one(a, p.x, g.x, mm.x, vv.x, po.x, mo.x, vo.x);
      adamw_one(a, p.y, g.y, mm.y, vv.y, po.y, mo.y, vo.y);
      adamw_one(a, p.z, g.z, mm.z, vv.z, po.z, mo.z, vo.z);
      adamw_one(a, p.w, g.w, mm.w, vv.w, po.w, mo.w, vo.w);
      reinterpret_cast<float4*>(param_out)[pk] = po;
      reinterpret_cast<float4*>(m_out)[pk] = mo;
      reinterpret_cast<float4*>(v_out)[pk] = vo;
    }
    done = npack * 4;
  }
  for (u64 i = done + gtid(); i < n; i += gstride())
    adamw_one(a, param[i], grad[i], m[i], v[i], param_out[i], m_out[i], v_out[i]);
}
