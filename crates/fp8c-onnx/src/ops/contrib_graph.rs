//! The com.microsoft ops onnxruntime's own graph optimizer writes into the models it saves
//! (`SessionOptions.optimized_model_filepath`, the `*_optimized.onnx` files people publish):
//! FusedMatMul, FusedGemm and FusedConv (a GEMM or conv with its transposes, scale or
//! activation folded in), and DynamicQuantizeMatMul and MatMulIntegerToFloat (what it makes of
//! `quantize_dynamic`'s DynamicQuantizeLinear → MatMulInteger → Cast → Mul chains). Each is
//! decomposed back into the IR ops of the chain it replaced.
//!
//! The integer ones compute as onnxruntime does: A quantized as DynamicQuantizeLinear does
//! (uint8, asymmetric, over the whole tensor), the exact integer product, then
//! `f32(sum) · (a_scale · b_scale) + bias`.

use super::{NodeCx, integer, math, nn};
use crate::OnnxError;
use fp8c_ir::{DType, Op, Value};

/// The activation FusedGemm and FusedConv apply last, by name: `alpha`/`beta` are its
/// parameters (LeakyRelu's slope, HardSigmoid's alpha and beta, Clip's min and max).
fn activate(cx: &mut NodeCx<'_>, y: Value, name: &str, params: &[f32]) -> Result<Value, OnnxError> {
    let dtype = cx.ty(y).dtype;
    let p = |i: usize, default: f32| f64::from(params.get(i).copied().unwrap_or(default));
    match name {
        "Relu" => cx.add(Op::Relu, &[y]),
        "Tanh" => cx.add(Op::Tanh, &[y]),
        "Sigmoid" => cx.add(Op::Sigmoid, &[y]),
        "LeakyRelu" => cx.add(
            Op::LeakyRelu {
                alpha: p(0, 0.01) as f32,
            },
            &[y],
        ),
        "Clip" => {
            let lo = cx.scalar("activation_min", dtype, p(0, f32::MIN))?;
            let hi = cx.scalar("activation_max", dtype, p(1, f32::MAX))?;
            cx.add(Op::Clip, &[y, lo, hi])
        }
        "HardSigmoid" => nn::hard_sigmoid_of(cx, y, p(0, 0.2), p(1, 0.5), true),
        other => Err(cx.err(format!(
            "activation \"{other}\" is not supported (Relu, Tanh, Sigmoid, LeakyRelu, Clip, \
             HardSigmoid are)"
        ))),
    }
}

/// `x` with its last two axes swapped.
fn swap_last(cx: &mut NodeCx<'_>, name: &str, x: Value) -> Result<Value, OnnxError> {
    let r = cx.ty(x).rank();
    if r < 2 {
        return Err(cx.err(format!("{name} must have rank 2 or more, got {}", cx.ty(x))));
    }
    let mut perm: Vec<i64> = (0..r as i64).collect();
    perm.swap(r - 2, r - 1);
    cx.add_helper(&format!("{name}.t"), Op::Transpose { perm }, &[x])
}

/// FusedMatMul: A, B; `alpha · op(A) · op(B)` with `transA`/`transB` swapping the last two
/// axes. The batch transposes (`transBatchA`/`transBatchB`) are refused.
pub(super) fn fused_matmul(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    for a in ["transBatchA", "transBatchB"] {
        if cx.attr_bool(a, false)? {
            return Err(cx.err(format!("{a} = 1 is not supported")));
        }
    }
    let alpha = cx.attr_float("alpha", 1.0)?;
    let (mut a, mut b) = (cx.input(0)?, cx.input(1)?);
    if cx.attr_bool("transA", false)? {
        a = swap_last(cx, "A", a)?;
    }
    if cx.attr_bool("transB", false)? {
        b = swap_last(cx, "B", b)?;
    }
    if alpha == 1.0 {
        return Ok(vec![cx.add(Op::MatMul, &[a, b])?]);
    }
    let y = cx.add_helper("matmul", Op::MatMul, &[a, b])?;
    let s = cx.scalar("alpha", cx.ty(y).dtype, f64::from(alpha))?;
    Ok(vec![cx.add(Op::Mul, &[y, s])?])
}

/// FusedGemm: Gemm's inputs and attributes, then `activation` with `activation_alpha`,
/// `activation_beta`.
pub(super) fn fused_gemm(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let y = math::gemm_of(cx, false)?;
    let act = cx.attr_string("activation", "")?;
    let params: Vec<f32> = ["activation_alpha", "activation_beta"]
        .iter()
        .map_while(|a| cx.attr_float_opt(a).transpose())
        .collect::<Result<_, _>>()?;
    if act.is_empty() {
        return Ok(vec![cx.add(Op::Identity, &[y])?]);
    }
    Ok(vec![activate(cx, y, &act, &params)?])
}

/// FusedConv: X, W, B (optional), Z (optional, added before the activation); Conv's
/// attributes, `activation` and `activation_params`.
pub(super) fn fused_conv(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    let bias = cx.opt_input(2);
    let mut y = nn::conv_of(cx, x, w, bias)?;
    if let Some(z) = cx.opt_input(3) {
        y = cx.add_helper("sum", Op::Add, &[y, z])?;
    }
    let act = cx.attr_string("activation", "")?;
    if act.is_empty() {
        return Ok(vec![cx.add(Op::Identity, &[y])?]);
    }
    let params = cx.attr_floats("activation_params").unwrap_or_default();
    Ok(vec![activate(cx, y, &act, &params)?])
}

/// `f32(acc) · (a_scale · b_scale) + bias`, the node's output.
fn scaled(
    cx: &mut NodeCx<'_>,
    acc: Value,
    a_scale: Value,
    b_scale: Value,
    bias: Option<Value>,
) -> Result<Vec<Value>, OnnxError> {
    let f = Op::Cast {
        to: DType::F32,
        saturate: false,
    };
    let accf = cx.add_helper("acc.f32", f, &[acc])?;
    let m = cx.add_helper("scale", Op::Mul, &[a_scale, b_scale])?;
    let y = cx.add_step(bias.is_none(), "scaled", Op::Mul, &[accf, m])?;
    match bias {
        None => Ok(vec![y]),
        Some(b) => Ok(vec![cx.add(Op::Add, &[y, b])?]),
    }
}

/// MatMulIntegerToFloat: A, B (uint8 or int8), a_scale, b_scale (per tensor or per column),
/// a_zero_point, b_zero_point (optional), bias (optional).
pub(super) fn matmul_integer_to_float(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    let a_rows = usize::from(cx.ty(a).rank() >= 2);
    let a = integer::shifted(cx, "A", a, cx.opt_input(4), DType::I32, a_rows)?;
    let b = integer::shifted(cx, "B", b, cx.opt_input(5), DType::I32, 0)?;
    let acc = cx.add_helper("i32", Op::MatMul, &[a, b])?;
    let (sa, sb) = (cx.input(2)?, cx.input(3)?);
    scaled(cx, acc, sa, sb, cx.opt_input(6))
}

/// DynamicQuantizeMatMul: A (f32, quantized here as DynamicQuantizeLinear does), B (uint8 or
/// int8), b_scale, b_zero_point (optional), bias (optional).
pub(super) fn dynamic_quantize_matmul(cx: &mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError> {
    let a = cx.input(0)?;
    if cx.ty(a).dtype != DType::F32 {
        return Err(cx.err(format!("input A must be float32, got {}", cx.ty(a))));
    }
    let (q, a_scale, a_zp) = integer::dynamic_quantize_of(cx, a, false)?;
    let a_rows = usize::from(cx.ty(q).rank() >= 2);
    let qa = integer::shifted(cx, "A", q, Some(a_zp), DType::I32, a_rows)?;
    let b = cx.input(1)?;
    let qb = integer::shifted(cx, "B", b, cx.opt_input(3), DType::I32, 0)?;
    let acc = cx.add_helper("i32", Op::MatMul, &[qa, qb])?;
    let b_scale = cx.input(2)?;
    scaled(cx, acc, a_scale, b_scale, cx.opt_input(4))
}
