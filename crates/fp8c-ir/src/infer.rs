//! Output-type inference: one rule per op. The builder, the verifier, the importer and
//! canonicalize all use [`infer`]; it never panics, whatever the inputs.
//!
//! Conventions:
//! - Semantics are ONNX's (opsets 13–21) unless the op's doc in `op.rs` says otherwise. The
//!   importer fills in optional ONNX inputs, so arities are fixed, except for one trailing
//!   optional input (gemm's C, conv's and layer_norm's bias, the Q/DQ zero point).
//! - Messages name the input by position and ONNX role and say what was expected and what
//!   was found: `input 1 (B) has shape f32[256,10], its first dim (256) must equal input 0's
//!   last dim (128)`. The caller adds the node's name.
//! - Broadcasting is numpy's: a `1` stretches. With symbols: `batch` vs `1` → `batch`;
//!   `batch` vs `batch` → `batch`; `batch` or `?` vs a known `n ≠ 1` → `n` (a valid model is
//!   assumed, as ONNX does); two different symbols → `?`; `?` vs anything else → `?`.
//! - Dims that must be equal (matmul's K, concat's other axes, a bias and its channels):
//!   known sizes must agree; otherwise the more specific dim is kept (known, then symbol).
//! - Shapes that depend on the *value* of an input (reshape, expand, slice, tile, pad, range,
//!   constant_of_shape) are computed when that input is a constant; otherwise the rank is
//!   still exact and the sizes that cannot be known are `?`.
//! - Shape-like inputs (reshape's shape, slice's starts/ends/axes/steps, pads, repeats, ...)
//!   must be 1-D i64 or i32.
//! - Arithmetic ops take "math" floats only (FP8 is a storage type: it flows through data
//!   movement ops, `cast`, `amax`, `dequantize`, `scaled_matmul`).
//! - Never panics: indexing is checked, sizes use checked arithmetic, sizes computed from
//!   values are limited to [`MAX_ELEMENTS`](crate::MAX_ELEMENTS) elements, and ranks built
//!   from a shape tensor's length to [`MAX_RANK`].

use crate::op::{AmaxSource, AutoPad};
use crate::window::conv_out_dim;
use crate::{DType, Dim, MAX_ELEMENTS, Op, Shape, Tensor, TensorType};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Largest rank inference builds from the length of a shape tensor.
pub const MAX_RANK: usize = 64;

/// What inference knows about one input: its type and, if it is a constant, its value.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    /// The input's type.
    pub ty: &'a TensorType,
    /// Its value, when produced by a `constant` node.
    pub value: Option<&'a Tensor>,
}

impl<'a> InferInput<'a> {
    /// An input of type `ty` whose value is not known.
    pub fn new(ty: &'a TensorType) -> Self {
        InferInput { ty, value: None }
    }
}

type Res<T> = Result<T, String>;

/// The output types of `op` applied to `inputs`, or a message saying what is wrong
/// (the caller adds the node's name).
pub fn infer(op: &Op, inputs: &[InferInput<'_>]) -> Result<Vec<TensorType>, String> {
    use DType::Bool;
    let one = |t: TensorType| vec![t];
    Ok(match op {
        Op::Input { .. } | Op::Param { .. } | Op::State { .. } => {
            return Err("interface ops have declared types; there is nothing to infer".into());
        }
        Op::Constant { value } => {
            args(inputs, [])?;
            one(value.ty())
        }

        // ---- elementwise unary
        Op::Identity => one(unary(inputs, |_| true, ANY, None)?),
        Op::Neg | Op::Relu => one(unary(inputs, is_signed, SIGNED, None)?),
        Op::Abs | Op::Erf => one(unary(inputs, is_numeric, NUMERIC, None)?),
        Op::Sqrt
        | Op::Reciprocal
        | Op::Exp
        | Op::Log
        | Op::Tanh
        | Op::Sigmoid
        | Op::Floor
        | Op::Ceil
        | Op::Sin
        | Op::Cos
        | Op::Gelu { .. }
        | Op::LeakyRelu { .. } => one(unary(inputs, is_math_float, MATH_FLOAT, None)?),
        Op::Not => one(unary(inputs, |d| d == Bool, "bool", None)?),
        Op::IsNaN | Op::IsInf { .. } => one(unary(inputs, is_math_float, MATH_FLOAT, Some(Bool))?),

        // ---- elementwise binary
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Max | Op::Min => {
            one(binary(inputs, is_numeric, NUMERIC, None)?)
        }
        Op::Mod { fmod } => one(modulo(inputs, *fmod)?),
        Op::Pow => one(pow(inputs)?),
        Op::Equal => one(binary(
            inputs,
            |d| is_numeric(d) || d == Bool,
            "a numeric type or bool",
            Some(Bool),
        )?),
        Op::Less | Op::LessOrEqual | Op::Greater | Op::GreaterOrEqual => {
            one(binary(inputs, is_numeric, NUMERIC, Some(Bool))?)
        }
        Op::And | Op::Or | Op::Xor => one(binary(inputs, |d| d == Bool, "bool", None)?),
        Op::Where => one(where_(inputs)?),
        Op::Clip => one(clip(inputs)?),
        Op::Cast { to, .. } => {
            let [x] = args(inputs, ["input"])?;
            one(TensorType::new(*to, x.ty.shape.clone()))
        }

        // ---- linear algebra
        Op::MatMul => one(matmul(inputs)?),
        Op::Gemm {
            trans_a, trans_b, ..
        } => one(gemm(inputs, *trans_a, *trans_b)?),
        Op::Conv {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
        } => {
            let win = WindowAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: false,
            };
            one(conv(inputs, &win, *group)?)
        }

        // ---- pooling and normalisation
        Op::MaxPool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        } => {
            let win = WindowAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            let ok = |d: DType| is_math_float(d) || matches!(d, DType::I8 | DType::U8);
            one(pool(inputs, &win, ok, "a float type (not FP8), i8 or u8")?)
        }
        Op::AveragePool {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
            ..
        } => {
            let win = WindowAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            one(pool(inputs, &win, is_math_float, MATH_FLOAT)?)
        }
        Op::GlobalAveragePool | Op::GlobalMaxPool => one(global_pool(inputs)?),
        Op::BatchNormalization { .. } => one(batch_norm(inputs)?),
        Op::LayerNormalization { axis, .. } => one(layer_norm(inputs, *axis)?),
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            let [x] = args(inputs, ["input"])?;
            x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            axis_of(&x, *axis, "axis")?;
            one(x.ty.clone())
        }

        // ---- reductions
        Op::ReduceMean { axes, keepdims }
        | Op::ReduceSum { axes, keepdims }
        | Op::ReduceMax { axes, keepdims }
        | Op::ReduceMin { axes, keepdims }
        | Op::ReduceProd { axes, keepdims } => one(reduce(inputs, axes.as_deref(), *keepdims)?),

        // ---- shape and data movement
        Op::Shape { start, end } => one(shape_op(inputs, *start, *end)?),
        Op::Reshape { allowzero } => one(reshape(inputs, *allowzero)?),
        Op::Transpose { perm } => one(transpose(inputs, perm)?),
        Op::Unsqueeze { axes } => one(unsqueeze(inputs, axes)?),
        Op::Squeeze { axes } => one(squeeze(inputs, axes.as_deref())?),
        Op::Flatten { axis } => one(flatten(inputs, *axis)?),
        Op::Concat { axis } => one(concat(inputs, *axis)?),
        Op::Split { axis, split } => split_op(inputs, *axis, split)?,
        Op::Slice => one(slice(inputs)?),
        Op::Gather { axis } => one(gather(inputs, *axis)?),
        Op::Expand => one(expand(inputs)?),
        Op::ConstantOfShape { value } => one(constant_of_shape(inputs, value)?),
        Op::Range => one(range(inputs)?),
        Op::Pad { .. } => one(pad(inputs)?),
        Op::Tile => one(tile(inputs)?),

        // ---- ONNX quantization
        Op::QuantizeLinear { axis, to, .. } => one(quantize_linear(inputs, *axis, *to)?),
        Op::DequantizeLinear { axis } => one(dequantize_linear(inputs, *axis)?),

        // ---- fp8c's FP8 ops
        Op::Amax => {
            let [x] = args(inputs, ["x"])?;
            x.expect(x.dtype().is_float(), "a float type")?;
            one(TensorType::scalar(DType::F32))
        }
        Op::ComputeScale {
            fmt,
            margin,
            source,
            epsilon,
            ..
        } => compute_scale(inputs, *fmt, *margin, *source, *epsilon)?,
        Op::AmaxHistoryUpdate => {
            let [history, amax] = args(inputs, ["history", "amax"])?;
            history.expect_f32_rank(1)?;
            amax.expect_f32_rank(0)?;
            // `recorded` (slot 0 = this amax) and `next` (rolled), both like the history.
            vec![history.ty.clone(), history.ty.clone()]
        }
        Op::Quantize { to, .. } => {
            let [x, scale] = args(inputs, ["x", "scale"])?;
            expect_attr(to.is_fp8(), "to", to, "an FP8 type (f8e4m3 or f8e5m2)")?;
            x.expect(
                is_math_float(x.dtype()),
                "a float type (not FP8: it is already quantized)",
            )?;
            scale.expect_f32_rank(0)?;
            one(TensorType::new(*to, x.ty.shape.clone()))
        }
        Op::Dequantize { to } => {
            let [q, scale_inv] = args(inputs, ["q", "scale_inv"])?;
            expect_attr(is_math_float(*to), "to", to, "a float type other than FP8")?;
            q.expect(q.dtype().is_fp8(), "an FP8 type")?;
            scale_inv.expect_f32_rank(0)?;
            one(TensorType::new(*to, q.ty.shape.clone()))
        }
        Op::ScaledMatMul { out } => {
            let [a, b, sa, sb] = args(inputs, ["qa", "qb", "scale_inv_a", "scale_inv_b"])?;
            expect_attr(
                is_math_float(*out),
                "out",
                out,
                "a float type other than FP8",
            )?;
            a.expect(a.dtype().is_fp8(), "an FP8 type")?;
            b.expect(b.dtype().is_fp8(), "an FP8 type")?;
            sa.expect_f32_rank(0)?;
            sb.expect_f32_rank(0)?;
            one(TensorType::new(*out, matmul_shape(&a, &b)?))
        }

        // ---- training ops (autodiff)
        Op::GatherGrad { .. }
        | Op::LayerNormGrad { .. }
        | Op::SoftmaxGrad { .. }
        | Op::GeluGrad { .. }
        | Op::ConvGradInput { .. }
        | Op::ConvGradWeight { .. }
        | Op::MaxPoolGrad { .. }
        | Op::AveragePoolGrad { .. }
        | Op::SoftmaxCrossEntropy
        | Op::SoftmaxCrossEntropyGrad
        | Op::AllFinite
        | Op::SgdUpdate { .. }
        | Op::AdamwUpdate { .. } => training(op, inputs)?,

        // ---- fused ops (fusion pass): the types of the unfused ops they compute
        Op::QuantizeAmax { to, saturate } => {
            let [x, _scale] = args(inputs, ["x", "scale"])?;
            let q = quantize_of(inputs, *to, *saturate)?;
            vec![q, amax_of(x.ty)?]
        }
        Op::CastTranspose { perm, to, saturate } => {
            let [x, _scale] = args(inputs, ["x", "scale"])?;
            let q = quantize_of(inputs, *to, *saturate)?;
            let t = single(infer(
                &Op::Transpose { perm: perm.clone() },
                &[InferInput::new(&q)],
            )?)?;
            vec![q, t, amax_of(x.ty)?]
        }
        Op::LayerNormQuantize {
            axis,
            epsilon: _,
            to,
            saturate,
        } => {
            if !(3..=4).contains(&inputs.len()) {
                return Err(arity_msg(&["x", "scale", "gamma", "beta"], 3, inputs.len()));
            }
            let mut ln_in = vec![inputs[0]];
            ln_in.extend_from_slice(&inputs[2..]);
            let y = layer_norm(&ln_in, *axis)?;
            quantized_outputs(y, inputs[1], *to, *saturate)?
        }
        Op::ElementwiseQuantize { expr, to, saturate } => {
            let n = expr.num_inputs();
            if inputs.len() != n + 1 {
                return Err(format!(
                    "expects {} inputs (the program's {n} and the scale), got {}",
                    n + 1,
                    inputs.len()
                ));
            }
            let y = ew_expr(expr, &inputs[..n])?;
            quantized_outputs(y, inputs[n], *to, *saturate)?
        }
        Op::ScaledMatMulEpilogue {
            out,
            expr,
            to,
            saturate,
        } => {
            let extras = expr.num_inputs() - 1;
            let want = 4 + extras + usize::from(to.is_some());
            if inputs.len() != want {
                return Err(format!(
                    "expects {want} inputs (qa, qb, scale_inv_a, scale_inv_b, {extras} epilogue input(s){}), got {}",
                    if to.is_some() { ", d_scale" } else { "" },
                    inputs.len()
                ));
            }
            let acc = single(infer(&Op::ScaledMatMul { out: *out }, &inputs[..4])?)?;
            let mut ew_in = vec![InferInput::new(&acc)];
            ew_in.extend_from_slice(&inputs[4..4 + extras]);
            let d = ew_expr(expr, &ew_in)?;
            if d != acc {
                return Err(format!(
                    "the epilogue gives {d}, expected the product's type {acc} (an epilogue \
                     computes one value per output element)"
                ));
            }
            match to {
                Some(to) => quantized_outputs(d, inputs[4 + extras], *to, *saturate)?,
                None => vec![d],
            }
        }
        Op::BatchedScaleUpdate {
            fmt,
            margin,
            source,
            epsilon,
            power_2,
        } => {
            if inputs.is_empty() || !inputs.len().is_multiple_of(3) {
                return Err(format!(
                    "expects (history, amax, scale) for each tensor, a multiple of 3 inputs, got {}",
                    inputs.len()
                ));
            }
            if *source == AmaxSource::Current {
                return Err("attribute source=current has no history to update".into());
            }
            let cs = Op::ComputeScale {
                fmt: *fmt,
                margin: *margin,
                source: *source,
                epsilon: *epsilon,
                power_2: *power_2,
            };
            let mut outs = Vec::with_capacity(inputs.len());
            for (i, t) in inputs.chunks(3).enumerate() {
                let at = |e: String| format!("tensor {i} (inputs {}..{}): {e}", 3 * i, 3 * i + 2);
                let hist = infer(&Op::AmaxHistoryUpdate, &t[..2]).map_err(at)?;
                let scale = infer(&cs, &[InferInput::new(&hist[0]), t[2]]).map_err(at)?;
                outs.push(hist[1].clone());
                outs.extend(scale);
            }
            outs
        }
    })
}

// ------------------------------------------------------------------ fused ops

/// The one output of an op that has one.
fn single(mut outs: Vec<TensorType>) -> Res<TensorType> {
    match outs.len() {
        1 => Ok(outs.remove(0)),
        n => Err(format!("expected one output, the op gives {n}")),
    }
}

/// `quantize { to, saturate }` of `inputs` (x, scale).
fn quantize_of(inputs: &[InferInput<'_>], to: DType, saturate: bool) -> Res<TensorType> {
    single(infer(&Op::Quantize { to, saturate }, inputs)?)
}

fn amax_of(x: &TensorType) -> Res<TensorType> {
    single(infer(&Op::Amax, &[InferInput::new(x)])?)
}

/// `(y, quantize(y, scale), amax(y))`.
fn quantized_outputs(
    y: TensorType,
    scale: InferInput<'_>,
    to: DType,
    saturate: bool,
) -> Res<Vec<TensorType>> {
    let q = quantize_of(&[InferInput::new(&y), scale], to, saturate)?;
    let a = amax_of(&y)?;
    Ok(vec![y, q, a])
}

/// The result type of an elementwise program on `inputs` (each instruction inferred as the op).
pub fn ew_expr(expr: &crate::EwExpr, inputs: &[InferInput<'_>]) -> Res<TensorType> {
    use crate::EwArg;
    if expr.num_inputs() > inputs.len() {
        return Err(format!(
            "the program reads {} inputs, {} given",
            expr.num_inputs(),
            inputs.len()
        ));
    }
    let mut temps: Vec<TensorType> = Vec::with_capacity(expr.insts().len());
    for (i, inst) in expr.insts().iter().enumerate() {
        let ins: Vec<InferInput<'_>> = inst
            .args
            .iter()
            .map(|a| match a {
                EwArg::Input(k) => inputs[*k as usize],
                EwArg::Temp(t) => InferInput::new(&temps[*t as usize]),
            })
            .collect();
        let t = infer(&inst.op, &ins)
            .and_then(single)
            .map_err(|e| format!("program instruction {i} ({}): {e}", inst.op.name()))?;
        temps.push(t);
    }
    Ok(match temps.pop() {
        Some(t) => t,
        None => inputs
            .first()
            .map(|x| x.ty.clone())
            .ok_or("an empty program needs an input")?,
    })
}

/// numpy broadcasting of two shapes; on failure, the two dims (aligned from the right) that
/// disagree.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Result<Shape, (Dim, Dim)> {
    let rank = a.len().max(b.len());
    let one = Dim::Known(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        // Position i from the left of the output is position (rank - i) from the right.
        let from_right = rank - i;
        let da = a
            .len()
            .checked_sub(from_right)
            .and_then(|j| a.get(j))
            .unwrap_or(&one);
        let db = b
            .len()
            .checked_sub(from_right)
            .and_then(|j| b.get(j))
            .unwrap_or(&one);
        out.push(broadcast_dim(da, db).ok_or_else(|| (da.clone(), db.clone()))?);
    }
    Ok(out)
}

/// numpy broadcasting of two dims; None if they are known, different and neither is 1.
fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    use Dim::{Known, Sym, Unknown};
    Some(match (a, b) {
        (Known(1), d) | (d, Known(1)) => d.clone(),
        (Known(x), Known(y)) if x != y => return None,
        (Known(n), _) | (_, Known(n)) => Known(*n),
        (Sym(x), Sym(y)) if x == y => Sym(x.clone()),
        _ => Unknown,
    })
}

/// Two dims that must be equal: the more specific one (known, then symbol, then `?`), or
/// None when they are different known sizes. Two different symbols keep the first.
fn unify(a: &Dim, b: &Dim) -> Option<Dim> {
    use Dim::{Known, Sym, Unknown};
    match (a, b) {
        (Known(x), Known(y)) => (x == y).then_some(Known(*x)),
        (Known(x), _) | (_, Known(x)) => Some(Known(*x)),
        (Sym(x), _) | (_, Sym(x)) => Some(Sym(x.clone())),
        (Unknown, Unknown) => Some(Unknown),
    }
}

/// The sum of two dims (concat's axis).
fn add_dims(a: &Dim, b: &Dim) -> Res<Dim> {
    Ok(match (a, b) {
        (Dim::Known(x), Dim::Known(y)) => {
            Dim::Known(x.checked_add(*y).ok_or("concatenated size overflows u64")?)
        }
        (Dim::Known(0), d) | (d, Dim::Known(0)) => d.clone(),
        _ => Dim::Unknown,
    })
}

/// A product of dims: a known factor, symbols with their multiplicity, and whether a `?`
/// took part. Reshape's `-1` is the quotient of two of these.
#[derive(Debug)]
struct DimProduct {
    known: u64,
    syms: BTreeMap<String, u32>,
    unknown: bool,
}

impl DimProduct {
    fn of<'d>(dims: impl IntoIterator<Item = &'d Dim>) -> Res<Self> {
        let mut p = DimProduct {
            known: 1,
            syms: BTreeMap::new(),
            unknown: false,
        };
        let (mut zero, mut overflow) = (false, false);
        for d in dims {
            match d {
                Dim::Known(0) => zero = true,
                Dim::Known(n) => match p.known.checked_mul(*n) {
                    Some(k) => p.known = k,
                    None => overflow = true,
                },
                Dim::Sym(s) => *p.syms.entry(s.clone()).or_insert(0) += 1,
                Dim::Unknown => p.unknown = true,
            }
        }
        if zero {
            // Anything times 0 is 0, whatever the symbols stand for.
            return Ok(DimProduct {
                known: 0,
                syms: BTreeMap::new(),
                unknown: false,
            });
        }
        if overflow {
            return Err("the element count overflows u64".into());
        }
        Ok(p)
    }

    fn is_known(&self) -> bool {
        !self.unknown && self.syms.is_empty()
    }

    /// The product as one dim: known, a single symbol, or `?`.
    fn to_dim(&self) -> Dim {
        if self.known == 0 {
            return Dim::Known(0);
        }
        if self.unknown {
            return Dim::Unknown;
        }
        match single_sym(&self.syms) {
            _ if self.syms.is_empty() => Dim::Known(self.known),
            Some(s) if self.known == 1 => Dim::Sym(s),
            _ => Dim::Unknown,
        }
    }

    /// `self / other` as one dim (reshape's `-1`). Errors only when both are fully known and
    /// do not divide; symbols of `other` cancel the same symbols of `self`.
    fn quotient(&self, other: &DimProduct) -> Result<Dim, String> {
        if other.known == 0 {
            return Err("-1 cannot be inferred when the other target dims hold 0 elements".into());
        }
        if self.unknown || other.unknown {
            return Ok(Dim::Unknown);
        }
        let mut rest = self.syms.clone();
        for (s, &c) in &other.syms {
            match rest.get_mut(s) {
                Some(have) if *have >= c => *have -= c,
                _ => return Ok(Dim::Unknown),
            }
        }
        rest.retain(|_, c| *c > 0);
        if !self.known.is_multiple_of(other.known) {
            if rest.is_empty() {
                return Err(format!(
                    "{} elements cannot be split into a multiple of {}",
                    self.known, other.known
                ));
            }
            return Ok(Dim::Unknown);
        }
        let q = self.known / other.known;
        Ok(match single_sym(&rest) {
            _ if rest.is_empty() => Dim::Known(q),
            Some(s) if q == 1 => Dim::Sym(s),
            _ => Dim::Unknown,
        })
    }
}

/// The one symbol of a multiset holding exactly one symbol once.
fn single_sym(syms: &BTreeMap<String, u32>) -> Option<String> {
    match syms.iter().next() {
        Some((s, 1)) if syms.len() == 1 => Some(s.clone()),
        _ => None,
    }
}

// ------------------------------------------------------------------ inputs and checks

/// One input with its position and ONNX role, for messages (`input 1 (B)`).
#[derive(Clone, Copy)]
struct Arg<'a> {
    index: usize,
    role: &'static str,
    ty: &'a TensorType,
    value: Option<&'a Tensor>,
}

impl fmt::Display for Arg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.role.is_empty() {
            write!(f, "input {}", self.index)
        } else {
            write!(f, "input {} ({})", self.index, self.role)
        }
    }
}

impl<'a> Arg<'a> {
    fn new(index: usize, role: &'static str, input: &InferInput<'a>) -> Self {
        Arg {
            index,
            role,
            ty: input.ty,
            value: input.value,
        }
    }

    fn dtype(&self) -> DType {
        self.ty.dtype
    }

    fn rank(&self) -> usize {
        self.ty.rank()
    }

    fn shape(&self) -> &'a [Dim] {
        &self.ty.shape
    }

    /// `input 1 (B) has shape f32[3,4], {msg}`.
    fn shape_err(&self, msg: impl fmt::Display) -> String {
        format!("{self} has shape {}, {msg}", self.ty)
    }

    /// Errors with `{self} has type T, expected {expected}` unless `ok`.
    fn expect(&self, ok: bool, expected: &str) -> Res<()> {
        if ok {
            Ok(())
        } else {
            Err(format!("{self} has type {}, expected {expected}", self.ty))
        }
    }

    fn expect_rank(&self, rank: usize) -> Res<()> {
        if self.rank() == rank {
            return Ok(());
        }
        let what = if rank == 0 {
            "a scalar (rank 0)".to_string()
        } else {
            format!("rank {rank}")
        };
        Err(self.shape_err(format!("expected {what}")))
    }

    fn expect_min_rank(&self, rank: usize, why: &str) -> Res<()> {
        if self.rank() >= rank {
            Ok(())
        } else {
            Err(self.shape_err(format!("expected rank ≥ {rank} ({why})")))
        }
    }

    /// f32 of the given rank (the FP8 ops' scales and histories).
    fn expect_f32_rank(&self, rank: usize) -> Res<()> {
        self.expect(self.dtype() == DType::F32, &format!("f32 of rank {rank}"))?;
        self.expect_rank(rank)
    }

    /// The same dtype as `first`.
    fn expect_same_dtype(&self, first: &Arg<'_>) -> Res<()> {
        self.expect(
            self.dtype() == first.dtype(),
            &format!("{} like {first}", first.dtype()),
        )
    }

    /// A scalar, or a 1-D tensor of one element (ONNX "scalar" inputs are often the latter).
    fn expect_scalar_like(&self) -> Res<()> {
        match self.shape() {
            [] | [Dim::Known(1)] => Ok(()),
            _ => Err(self.shape_err("expected a scalar")),
        }
    }
}

/// Exactly `N` inputs, with their roles.
fn args<'a, const N: usize>(
    inputs: &[InferInput<'a>],
    roles: [&'static str; N],
) -> Res<[Arg<'a>; N]> {
    let found: &[InferInput<'a>; N] = inputs
        .try_into()
        .map_err(|_| arity_msg(&roles, N, inputs.len()))?;
    let mut i = 0;
    Ok(found.each_ref().map(|input| {
        let arg = Arg::new(i, roles.get(i).copied().unwrap_or(""), input);
        i += 1;
        arg
    }))
}

/// `N` inputs and one optional trailing input.
fn args_opt<'a, const N: usize>(
    inputs: &[InferInput<'a>],
    roles: [&'static str; N],
    optional: &'static str,
) -> Res<([Arg<'a>; N], Option<Arg<'a>>)> {
    let (required, rest) = inputs.split_at_checked(N).unwrap_or((inputs, &[]));
    let mut all: Vec<&'static str> = roles.to_vec();
    all.push(optional);
    let msg = || arity_msg(&all, N, inputs.len());
    if required.len() != N || rest.len() > 1 {
        return Err(msg());
    }
    let req = args(required, roles).map_err(|_| msg())?;
    Ok((req, rest.first().map(|x| Arg::new(N, optional, x))))
}

/// Every input of a variadic op (at least one).
fn variadic<'a>(inputs: &[InferInput<'a>]) -> Res<Vec<Arg<'a>>> {
    if inputs.is_empty() {
        return Err("expects at least 1 input, got 0".into());
    }
    Ok(inputs
        .iter()
        .enumerate()
        .map(|(i, x)| Arg::new(i, "", x))
        .collect())
}

fn arity_msg(roles: &[&str], required: usize, got: usize) -> String {
    let count = if roles.len() == required {
        format!("{required} input{}", if required == 1 { "" } else { "s" })
    } else {
        format!("{required} or {} inputs", roles.len())
    };
    if roles.is_empty() {
        format!("expects no inputs, got {got}")
    } else {
        format!("expects {count} ({}), got {got}", roles.join(", "))
    }
}

fn expect_attr(ok: bool, name: &str, got: impl fmt::Display, expected: &str) -> Res<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("attribute {name}={got}, expected {expected}"))
    }
}

const ANY: &str = "any type";
const NUMERIC: &str = "a numeric type (float other than FP8, or integer)";
const SIGNED: &str = "a float (not FP8) or signed integer type";
const MATH_FLOAT: &str = "a float type other than FP8";

/// Floats that arithmetic accepts: FP8 is storage only.
fn is_math_float(d: DType) -> bool {
    d.is_float() && !d.is_fp8()
}

fn is_numeric(d: DType) -> bool {
    is_math_float(d) || d.is_int()
}

fn is_signed(d: DType) -> bool {
    is_math_float(d) || matches!(d, DType::I64 | DType::I32 | DType::I16 | DType::I8)
}

fn is_index(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32)
}

/// `axis` normalised against `x`'s rank (`[-r, r)`).
fn axis_of(x: &Arg<'_>, axis: i64, name: &str) -> Res<usize> {
    norm_axis(axis, x.rank()).ok_or_else(|| {
        x.shape_err(format!(
            "{name}={axis} is out of range {}",
            axis_range(x.rank())
        ))
    })
}

/// `axis` in `[-rank, rank)` as an index.
fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    if (0..r).contains(&a) {
        usize::try_from(a).ok()
    } else {
        None
    }
}

fn axis_range(rank: usize) -> String {
    if rank == 0 {
        "(a scalar has no axes)".into()
    } else {
        format!("[-{rank}, {}]", rank - 1)
    }
}

/// Normalised, duplicate-free axes.
fn axes_of(x: &Arg<'_>, axes: &[i64], name: &str) -> Res<Vec<usize>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let ax = axis_of(x, a, name)?;
        if !seen.insert(ax) {
            return Err(x.shape_err(format!("{name} {} names axis {ax} twice", fmt_list(axes))));
        }
        out.push(ax);
    }
    Ok(out)
}

fn fmt_list(v: &[i64]) -> String {
    let items: Vec<String> = v.iter().map(i64::to_string).collect();
    format!("[{}]", items.join(","))
}

fn fmt_shape(s: &[Dim]) -> String {
    let items: Vec<String> = s.iter().map(Dim::to_string).collect();
    format!("[{}]", items.join(","))
}

/// A 1-D integer input holding sizes, indices or axes: its length when static and its
/// values when constant.
struct IntList {
    len: Option<usize>,
    values: Option<Vec<i64>>,
}

fn int_list(a: &Arg<'_>) -> Res<IntList> {
    a.expect(is_index(a.dtype()), "i64 or i32 (a 1-D list)")?;
    let [n] = a.shape() else {
        return Err(a.shape_err("expected a 1-D list"));
    };
    let static_len = match n {
        Dim::Known(n) => {
            Some(usize::try_from(*n).map_err(|_| a.shape_err("its length is absurd"))?)
        }
        _ => None,
    };
    let values = match a.value {
        Some(t) => Some(t.to_i64_vec().map_err(|e| format!("{a}: {e}"))?),
        None => None,
    };
    if let (Some(n), Some(v)) = (static_len, &values)
        && n != v.len()
    {
        return Err(a.shape_err(format!("but its constant value has {} entries", v.len())));
    }
    Ok(IntList {
        len: values.as_ref().map(Vec::len).or(static_len),
        values,
    })
}

/// `n` unknown dims, for a shape tensor whose length is known but not its values.
fn unknown_dims(n: usize, from: &Arg<'_>) -> Res<Shape> {
    if n > MAX_RANK {
        return Err(from.shape_err(format!("a rank of {n} exceeds the maximum ({MAX_RANK})")));
    }
    Ok(vec![Dim::Unknown; n])
}

/// Sizes from a constant shape tensor: each must be ≥ 0.
fn sizes_from(values: &[i64], from: &Arg<'_>) -> Res<Shape> {
    if values.len() > MAX_RANK {
        return Err(from.shape_err(format!(
            "a rank of {} exceeds the maximum ({MAX_RANK})",
            values.len()
        )));
    }
    values
        .iter()
        .map(|&v| {
            u64::try_from(v)
                .map(Dim::Known)
                .map_err(|_| format!("{from} is {}, sizes must be ≥ 0", fmt_list(values)))
        })
        .collect()
}

/// Errors when the known part of a computed shape holds more than `MAX_ELEMENTS` elements.
fn check_size(shape: &[Dim]) -> Res<()> {
    let known = shape
        .iter()
        .filter_map(Dim::known)
        .try_fold(1u64, |a, d| a.checked_mul(d));
    let zero = shape.contains(&Dim::Known(0));
    match known {
        _ if zero => Ok(()),
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(format!(
            "the output shape {} is too large (more than {MAX_ELEMENTS} elements)",
            fmt_shape(shape)
        )),
    }
}

/// The broadcast shape of several inputs, with a message naming the one that does not fit.
fn broadcast(all: &[Arg<'_>]) -> Res<Shape> {
    let mut out: Shape = Vec::new();
    for (i, x) in all.iter().enumerate() {
        out = broadcast_shapes(&out, x.shape()).map_err(|(a, b)| {
            let with = match (i, all.first()) {
                (1, Some(first)) => format!("{first} {}", first.ty),
                _ => format!(
                    "the broadcast shape {} of the inputs before it",
                    fmt_shape(&out)
                ),
            };
            x.shape_err(format!("which does not broadcast with {with} ({b} vs {a})"))
        })?;
    }
    Ok(out)
}

// ------------------------------------------------------------------ elementwise

fn unary(
    inputs: &[InferInput<'_>],
    ok: fn(DType) -> bool,
    expected: &str,
    out: Option<DType>,
) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(ok(x.dtype()), expected)?;
    Ok(TensorType::new(
        out.unwrap_or(x.dtype()),
        x.ty.shape.clone(),
    ))
}

/// Same-dtype broadcasting binary op; `out` overrides the result dtype (comparisons).
fn binary(
    inputs: &[InferInput<'_>],
    ok: fn(DType) -> bool,
    expected: &str,
    out: Option<DType>,
) -> Res<TensorType> {
    let [a, b] = args(inputs, ["A", "B"])?;
    a.expect(ok(a.dtype()), expected)?;
    b.expect_same_dtype(&a)?;
    Ok(TensorType::new(
        out.unwrap_or(a.dtype()),
        broadcast(&[a, b])?,
    ))
}

fn modulo(inputs: &[InferInput<'_>], fmod: bool) -> Res<TensorType> {
    let t = binary(inputs, is_numeric, NUMERIC, None)?;
    if t.dtype.is_float() && !fmod {
        return Err(format!(
            "float inputs ({}) need fmod=true (ONNX Mod)",
            t.dtype
        ));
    }
    Ok(t)
}

/// The exponent may have another numeric dtype; the result has the base's.
fn pow(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, y] = args(inputs, ["X", "Y"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    y.expect(is_numeric(y.dtype()), NUMERIC)?;
    Ok(TensorType::new(x.dtype(), broadcast(&[x, y])?))
}

fn where_(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [cond, x, y] = args(inputs, ["condition", "X", "Y"])?;
    cond.expect(cond.dtype() == DType::Bool, "bool")?;
    y.expect_same_dtype(&x)?;
    Ok(TensorType::new(x.dtype(), broadcast(&[cond, x, y])?))
}

fn clip(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, lo, hi] = args(inputs, ["input", "min", "max"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    for bound in [lo, hi] {
        bound.expect_same_dtype(&x)?;
        bound.expect_scalar_like()?;
    }
    Ok(x.ty.clone())
}

// ------------------------------------------------------------------ linear algebra

fn matmul(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [a, b] = args(inputs, ["A", "B"])?;
    a.expect(
        is_numeric(a.dtype()),
        "a float or integer type (FP8 operands go through scaled_matmul)",
    )?;
    b.expect_same_dtype(&a)?;
    Ok(TensorType::new(a.dtype(), matmul_shape(&a, &b)?))
}

/// numpy matmul shapes: a 1-D operand is promoted to a matrix and the added axis removed
/// from the result; batch axes broadcast.
fn matmul_shape(a: &Arg<'_>, b: &Arg<'_>) -> Res<Shape> {
    let no_scalars = "expected rank ≥ 1 (matmul does not take scalars)";
    let (a_batch, m, ka) = match a.shape() {
        [] => return Err(a.shape_err(no_scalars)),
        [k] => (&[][..], None, k),
        [batch @ .., m, k] => (batch, Some(m), k),
    };
    let (b_batch, kb, n) = match b.shape() {
        [] => return Err(b.shape_err(no_scalars)),
        [k] => (&[][..], k, None),
        [batch @ .., k, n] => (batch, k, Some(n)),
    };
    if unify(ka, kb).is_none() {
        let which = if b.rank() <= 2 {
            "first dim".to_string()
        } else {
            format!("dim {}", b.rank() - 2)
        };
        return Err(b.shape_err(format!(
            "its {which} ({kb}) must equal input {}'s last dim ({ka})",
            a.index
        )));
    }
    let mut out = broadcast_shapes(a_batch, b_batch).map_err(|(x, y)| {
        b.shape_err(format!(
            "its batch dims do not broadcast with {a} {} ({y} vs {x})",
            a.ty
        ))
    })?;
    out.extend(m.cloned());
    out.extend(n.cloned());
    Ok(out)
}

fn gemm(inputs: &[InferInput<'_>], trans_a: bool, trans_b: bool) -> Res<TensorType> {
    let ([a, b], c) = args_opt(inputs, ["A", "B"], "C")?;
    a.expect(is_numeric(a.dtype()), NUMERIC)?;
    b.expect_same_dtype(&a)?;
    let ([a0, a1], [b0, b1]) = (a.shape(), b.shape()) else {
        let bad = if a.rank() != 2 { a } else { b };
        return Err(bad.shape_err("expected rank 2"));
    };
    let (m, ka, ka_axis) = if trans_a { (a1, a0, 0) } else { (a0, a1, 1) };
    let (kb, n, kb_axis) = if trans_b { (b1, b0, 1) } else { (b0, b1, 0) };
    if unify(ka, kb).is_none() {
        return Err(b.shape_err(format!(
            "its dim {kb_axis} ({kb}, trans_b={trans_b}) must equal input 0's dim {ka_axis} ({ka}, trans_a={trans_a})"
        )));
    }
    if let Some(c) = c {
        c.expect_same_dtype(&a)?;
        let target = [m.clone(), n.clone()];
        let fits = c.rank() <= 2
            && c.shape()
                .iter()
                .rev()
                .zip(target.iter().rev())
                .all(|(cd, t)| *cd == Dim::Known(1) || unify(cd, t).is_some());
        if !fits {
            return Err(c.shape_err(format!(
                "expected it to broadcast to the result shape {}",
                fmt_shape(&target)
            )));
        }
    }
    Ok(TensorType::new(a.dtype(), vec![m.clone(), n.clone()]))
}

// ------------------------------------------------------------------ conv and pooling

/// The window attributes shared by conv and the pools.
struct WindowAttrs<'o> {
    kernel_shape: &'o [i64],
    strides: &'o [i64],
    pads: &'o [i64],
    dilations: &'o [i64],
    auto_pad: AutoPad,
    ceil_mode: bool,
}

/// One value per spatial axis (`[]` means `default` everywhere), each ≥ `min`.
fn per_axis(name: &str, vals: &[i64], n: usize, default: u64, min: u64) -> Res<Vec<u64>> {
    if vals.is_empty() {
        return Ok(vec![default; n]);
    }
    if vals.len() != n {
        return Err(format!(
            "attribute {name}={} has {} values, expected {n} (one per spatial axis)",
            fmt_list(vals),
            vals.len()
        ));
    }
    vals.iter()
        .map(|&v| {
            u64::try_from(v).ok().filter(|&v| v >= min).ok_or_else(|| {
                format!(
                    "attribute {name}={}: values must be ≥ {min}",
                    fmt_list(vals)
                )
            })
        })
        .collect()
}

/// Output spatial dims for input spatial dims `spatial` and kernel sizes `kernel`.
fn window_dims(spatial: &[Dim], kernel: &[Dim], w: &WindowAttrs<'_>) -> Res<Shape> {
    let n = spatial.len();
    let strides = per_axis("strides", w.strides, n, 1, 1)?;
    let dilations = per_axis("dilations", w.dilations, n, 1, 1)?;
    let pads: Vec<(u64, u64)> = if w.pads.is_empty() {
        vec![(0, 0); n]
    } else {
        if Some(w.pads.len()) != n.checked_mul(2) {
            return Err(format!(
                "attribute pads={} has {} values, expected {} (begin values, then end values, for {n} spatial axes)",
                fmt_list(w.pads),
                w.pads.len(),
                n.saturating_mul(2)
            ));
        }
        let flat = per_axis("pads", w.pads, w.pads.len(), 0, 0)?;
        let (begin, end) = flat.split_at(n.min(flat.len()));
        begin.iter().copied().zip(end.iter().copied()).collect()
    };
    let mut out = Vec::with_capacity(n);
    for (i, input) in spatial.iter().enumerate() {
        let (Some(k), Some(&s), Some(&d), Some(&p)) =
            (kernel.get(i), strides.get(i), dilations.get(i), pads.get(i))
        else {
            return Err("window attributes do not match the spatial rank".into());
        };
        let at = |e: String| format!("spatial axis {i}: {e}");
        let p = match w.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                // ONNX: out = ceil(in / stride) whatever the kernel.
                out.push(match input {
                    Dim::Known(x) => Dim::Known(x.div_ceil(s)),
                    other if s == 1 => other.clone(),
                    _ => Dim::Unknown,
                });
                continue;
            }
            AutoPad::Valid => (0, 0),
            AutoPad::NotSet => p,
        };
        let Dim::Known(k) = *k else {
            out.push(Dim::Unknown);
            continue;
        };
        out.push(match input {
            Dim::Known(x) => Dim::Known(conv_out_dim(*x, k, s, d, p, w.ceil_mode).map_err(at)?),
            other => {
                // A symbolic size survives a window that exactly preserves it.
                if k == 0 {
                    return Err(at("kernel size 0".into()));
                }
                let shrink = d.checked_mul(k - 1);
                let grow = p.0.checked_add(p.1);
                if s == 1 && shrink.is_some() && shrink == grow {
                    other.clone()
                } else {
                    Dim::Unknown
                }
            }
        });
    }
    Ok(out)
}

/// Explicit kernel_shape values (≥ 1, one per spatial axis).
fn kernel_attr(kernel_shape: &[i64], n: usize) -> Res<Shape> {
    if kernel_shape.len() != n {
        return Err(format!(
            "attribute kernel_shape={} has {} values, expected {n} (one per spatial axis)",
            fmt_list(kernel_shape),
            kernel_shape.len()
        ));
    }
    Ok(per_axis("kernel_shape", kernel_shape, n, 1, 1)?
        .into_iter()
        .map(Dim::Known)
        .collect())
}

fn conv(inputs: &[InferInput<'_>], win: &WindowAttrs<'_>, group: i64) -> Res<TensorType> {
    let ([x, w], bias) = args_opt(inputs, ["X", "W"], "B")?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    w.expect_same_dtype(&x)?;
    let [n, c, spatial @ ..] = x.shape() else {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    };
    if spatial.is_empty() {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    }
    let [m, cg, kernel @ ..] = w.shape() else {
        return Err(w.shape_err(format!("expected rank {} like {x}", x.rank())));
    };
    if w.rank() != x.rank() {
        return Err(w.shape_err(format!("expected rank {} like {x}", x.rank())));
    }
    let group_u = u64::try_from(group)
        .ok()
        .filter(|&g| g >= 1)
        .ok_or_else(|| format!("attribute group={group}, expected ≥ 1"))?;
    if let (Dim::Known(c), Dim::Known(cg)) = (c, cg)
        && cg.checked_mul(group_u) != Some(*c)
    {
        return Err(w.shape_err(format!(
            "its dim 1 ({cg}) times group ({group}) must equal input 0's channel dim ({c})"
        )));
    }
    if let Dim::Known(m) = m
        && !m.is_multiple_of(group_u)
    {
        return Err(w.shape_err(format!(
            "its dim 0 ({m} output channels) must be a multiple of group ({group})"
        )));
    }
    let kernel: Shape = if win.kernel_shape.is_empty() {
        kernel.to_vec()
    } else {
        let attr = kernel_attr(win.kernel_shape, spatial.len())?;
        if attr.iter().zip(kernel).any(|(a, k)| unify(a, k).is_none()) {
            return Err(w.shape_err(format!(
                "its kernel dims disagree with attribute kernel_shape={}",
                fmt_list(win.kernel_shape)
            )));
        }
        attr
    };
    let mut out_channels = m.clone();
    if let Some(b) = bias {
        b.expect_same_dtype(&x)?;
        let [bm] = b.shape() else {
            return Err(b.shape_err(format!(
                "expected a 1-D bias of {m} (input 1's dim 0) elements"
            )));
        };
        out_channels = unify(m, bm)
            .ok_or_else(|| b.shape_err(format!("expected {m} elements (input 1's dim 0)")))?;
    }
    let mut out = vec![n.clone(), out_channels];
    out.extend(window_dims(spatial, &kernel, win)?);
    Ok(TensorType::new(x.dtype(), out))
}

fn pool(
    inputs: &[InferInput<'_>],
    win: &WindowAttrs<'_>,
    ok: fn(DType) -> bool,
    expected: &str,
) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(ok(x.dtype()), expected)?;
    let [n, c, spatial @ ..] = x.shape() else {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    };
    if spatial.is_empty() {
        return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
    }
    let kernel = kernel_attr(win.kernel_shape, spatial.len())?;
    let mut out = vec![n.clone(), c.clone()];
    out.extend(window_dims(spatial, &kernel, win)?);
    Ok(TensorType::new(x.dtype(), out))
}

fn global_pool(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x] = args(inputs, ["X"])?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    x.expect_min_rank(3, "N, C, spatial...")?;
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .map(|(i, d)| if i < 2 { d.clone() } else { Dim::Known(1) })
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

// ------------------------------------------------------------------ normalisation, reductions

fn batch_norm(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, params @ ..] = args(inputs, ["X", "scale", "B", "input_mean", "input_var"])?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    let [_, c, ..] = x.shape() else {
        return Err(x.shape_err("expected rank ≥ 2 (N, C, ...)"));
    };
    for p in params {
        p.expect(is_math_float(p.dtype()), MATH_FLOAT)?;
        match p.shape() {
            [pc] if unify(pc, c).is_some() => {}
            _ => return Err(p.shape_err(format!("expected [{c}] (input 0's channel dim)"))),
        }
    }
    Ok(x.ty.clone())
}

fn layer_norm(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let ([x, scale], bias) = args_opt(inputs, ["X", "Scale"], "B")?;
    x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
    let ax = axis_of(&x, axis, "axis")?;
    let normalized = x.shape().get(ax..).unwrap_or_default();
    for p in std::iter::once(scale).chain(bias) {
        p.expect_same_dtype(&x)?;
        let fits = p.rank() == normalized.len()
            && p.shape()
                .iter()
                .zip(normalized)
                .all(|(a, b)| unify(a, b).is_some());
        if !fits {
            return Err(p.shape_err(format!(
                "expected the normalised dims {} of input 0 (axis={axis})",
                fmt_shape(normalized)
            )));
        }
    }
    Ok(x.ty.clone())
}

/// `axes` None (or empty, as ONNX's absent axes input) reduces every axis.
fn reduce(inputs: &[InferInput<'_>], axes: Option<&[i64]>, keepdims: bool) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    x.expect(is_numeric(x.dtype()), NUMERIC)?;
    let reduced: BTreeSet<usize> = match axes {
        Some(a) if !a.is_empty() => axes_of(&x, a, "axes")?.into_iter().collect(),
        _ => (0..x.rank()).collect(),
    };
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter_map(|(i, d)| match (reduced.contains(&i), keepdims) {
            (false, _) => Some(d.clone()),
            (true, true) => Some(Dim::Known(1)),
            (true, false) => None,
        })
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

// ------------------------------------------------------------------ shape and data movement

fn shape_op(inputs: &[InferInput<'_>], start: i64, end: Option<i64>) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    let r = i64::try_from(x.rank()).map_err(|_| "rank too large".to_string())?;
    // Negative positions count from the end; then both clamp to [0, rank].
    let clamp = |v: i64| if v < 0 { v.saturating_add(r) } else { v }.clamp(0, r);
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    let len = u64::try_from(e.saturating_sub(s)).unwrap_or(0);
    Ok(TensorType::fixed(DType::I64, &[len]))
}

fn reshape(inputs: &[InferInput<'_>], allowzero: bool) -> Res<TensorType> {
    let [data, shape] = args(inputs, ["data", "shape"])?;
    let list = int_list(&shape)?;
    let Some(target) = list.values else {
        let n = list.len.ok_or_else(|| {
            shape.shape_err("its length is not known, so neither is the output rank")
        })?;
        return Ok(TensorType::new(data.dtype(), unknown_dims(n, &shape)?));
    };
    if target.len() > MAX_RANK {
        return Err(shape.shape_err(format!(
            "a rank of {} exceeds the maximum ({MAX_RANK})",
            target.len()
        )));
    }
    let listed = fmt_list(&target);
    if allowzero && target.contains(&0) && target.contains(&-1) {
        return Err(format!(
            "{shape} is {listed}: with allowzero=true it cannot hold both 0 and -1"
        ));
    }
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, &t) in target.iter().enumerate() {
        out.push(match t {
            -1 if infer_at.is_some() => return Err(format!("{shape} is {listed}: at most one -1 is allowed")),
            -1 => {
                infer_at = Some(i);
                Dim::Unknown
            }
            0 if !allowzero => data.shape().get(i).cloned().ok_or_else(|| {
                format!("{shape} is {listed}: its 0 at position {i} copies a dim that {data} {} does not have", data.ty)
            })?,
            t => Dim::Known(u64::try_from(t).map_err(|_| format!("{shape} is {listed}: sizes must be ≥ -1"))?),
        });
    }
    let have = DimProduct::of(data.shape()).map_err(|e| data.shape_err(e))?;
    let cannot = |why: String| format!("{data} {} cannot be reshaped to {listed}: {why}", data.ty);
    match infer_at {
        Some(i) => {
            let rest = DimProduct::of(
                out.iter()
                    .enumerate()
                    .filter(|&(j, _)| j != i)
                    .map(|(_, d)| d),
            )
            .map_err(cannot)?;
            let inferred = have.quotient(&rest).map_err(cannot)?;
            if let Some(slot) = out.get_mut(i) {
                *slot = inferred;
            }
        }
        None => {
            let want = DimProduct::of(&out).map_err(cannot)?;
            if have.is_known() && want.is_known() && have.known != want.known {
                return Err(cannot(format!("{} elements vs {}", have.known, want.known)));
            }
        }
    }
    Ok(TensorType::new(data.dtype(), out))
}

fn transpose(inputs: &[InferInput<'_>], perm: &[i64]) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    let r = x.rank();
    let perm: Vec<usize> = if perm.is_empty() {
        (0..r).rev().collect()
    } else {
        let bad = || {
            x.shape_err(format!(
                "attribute perm={} is not a permutation of 0..{r}",
                fmt_list(perm)
            ))
        };
        let p: Vec<usize> = perm
            .iter()
            .map(|&a| usize::try_from(a).ok().filter(|&a| a < r).ok_or_else(bad))
            .collect::<Res<_>>()?;
        if p.len() != r || p.iter().collect::<BTreeSet<_>>().len() != r {
            return Err(bad());
        }
        p
    };
    let shape = perm
        .iter()
        .filter_map(|&a| x.shape().get(a).cloned())
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

/// `axes` are positions in the output (rank + axes.len()).
fn unsqueeze(inputs: &[InferInput<'_>], axes: &[i64]) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    if axes.is_empty() {
        return Err("attribute axes is empty, expected at least one axis".into());
    }
    let out_rank = x.rank().checked_add(axes.len()).ok_or("rank overflows")?;
    let mut inserted = BTreeSet::new();
    for &a in axes {
        let ax = norm_axis(a, out_rank).ok_or_else(|| {
            x.shape_err(format!(
                "axes entry {a} is out of range for the output rank {out_rank} {}",
                axis_range(out_rank)
            ))
        })?;
        if !inserted.insert(ax) {
            return Err(x.shape_err(format!(
                "axes {} names output axis {ax} twice",
                fmt_list(axes)
            )));
        }
    }
    let mut dims = x.shape().iter();
    let shape = (0..out_rank)
        .map(|i| {
            if inserted.contains(&i) {
                Dim::Known(1)
            } else {
                dims.next().cloned().unwrap_or(Dim::Unknown)
            }
        })
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

/// `axes` None removes the dims known to be 1 (symbolic dims stay: they are assumed not 1).
fn squeeze(inputs: &[InferInput<'_>], axes: Option<&[i64]>) -> Res<TensorType> {
    let [x] = args(inputs, ["data"])?;
    let removed: BTreeSet<usize> = match axes {
        None => x
            .shape()
            .iter()
            .enumerate()
            .filter(|(_, d)| **d == Dim::Known(1))
            .map(|(i, _)| i)
            .collect(),
        Some(a) => {
            let axes = axes_of(&x, a, "axes")?;
            for &ax in &axes {
                if let Some(Dim::Known(n)) = x.shape().get(ax)
                    && *n != 1
                {
                    return Err(x.shape_err(format!(
                        "axis {ax} has size {n}, only size-1 axes can be squeezed"
                    )));
                }
            }
            axes.into_iter().collect()
        }
    };
    let shape = x
        .shape()
        .iter()
        .enumerate()
        .filter(|(i, _)| !removed.contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    Ok(TensorType::new(x.dtype(), shape))
}

fn flatten(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let [x] = args(inputs, ["input"])?;
    let r = x.rank();
    // Flatten's axis may also equal the rank: [-r, r].
    let ax = i64::try_from(r)
        .ok()
        .and_then(|ri| norm_axis(axis, r).or((axis == ri).then_some(r)))
        .ok_or_else(|| x.shape_err(format!("axis={axis} is out of range [-{r}, {r}]")))?;
    let (outer, inner) = x.shape().split_at_checked(ax).unwrap_or((x.shape(), &[]));
    let outer = DimProduct::of(outer).map_err(|e| x.shape_err(e))?.to_dim();
    let inner = DimProduct::of(inner).map_err(|e| x.shape_err(e))?.to_dim();
    Ok(TensorType::new(x.dtype(), vec![outer, inner]))
}

fn concat(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let all = variadic(inputs)?;
    let Some(first) = all.first() else {
        return Err("expects at least 1 input, got 0".into());
    };
    let ax = axis_of(first, axis, "axis")?;
    let mut shape = first.ty.shape.clone();
    for x in all.iter().skip(1) {
        x.expect_same_dtype(first)?;
        if x.rank() != first.rank() {
            return Err(x.shape_err(format!("expected rank {} like {first}", first.rank())));
        }
        for (i, (acc, d)) in shape.iter_mut().zip(x.shape()).enumerate() {
            *acc = if i == ax {
                add_dims(acc, d)?
            } else {
                unify(acc, d).ok_or_else(|| {
                    x.shape_err(format!("its dim {i} ({d}) must equal the other inputs' ({acc}); only axis {ax} may differ"))
                })?
            };
        }
    }
    Ok(TensorType::new(first.dtype(), shape))
}

fn split_op(inputs: &[InferInput<'_>], axis: i64, split: &[i64]) -> Res<Vec<TensorType>> {
    let [x] = args(inputs, ["input"])?;
    let ax = axis_of(&x, axis, "axis")?;
    if split.is_empty() {
        return Err("attribute split is empty, expected one size per output".into());
    }
    let sizes: Vec<u64> = split
        .iter()
        .map(|&s| {
            u64::try_from(s)
                .map_err(|_| format!("attribute split={}: sizes must be ≥ 0", fmt_list(split)))
        })
        .collect::<Res<_>>()?;
    let total = sizes
        .iter()
        .try_fold(0u64, |a, &s| a.checked_add(s))
        .ok_or("split sizes overflow")?;
    if let Some(Dim::Known(d)) = x.shape().get(ax)
        && *d != total
    {
        return Err(x.shape_err(format!(
            "attribute split={} sums to {total}, but axis {ax} has size {d}",
            fmt_list(split)
        )));
    }
    Ok(sizes
        .into_iter()
        .map(|s| {
            let mut shape = x.ty.shape.clone();
            if let Some(d) = shape.get_mut(ax) {
                *d = Dim::Known(s);
            }
            TensorType::new(x.dtype(), shape)
        })
        .collect())
}

/// Length of `start..end` by `step` over a dim of size `dim`, with ONNX's clamping.
fn slice_len(dim: u64, start: i64, end: i64, step: i64) -> u64 {
    let d = i128::from(dim);
    if d == 0 || step == 0 {
        return 0;
    }
    let (mut s, mut e, st) = (i128::from(start), i128::from(end), i128::from(step));
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let len = if st > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        if e > s { (e - s + st - 1) / st } else { 0 }
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        if s > e { (s - e - st - 1) / -st } else { 0 }
    };
    u64::try_from(len).unwrap_or(0)
}

/// A slice of a dim whose size is not known keeps that dim only when it takes everything.
fn slice_symbolic(dim: &Dim, start: i64, end: i64, step: i64) -> Dim {
    let huge = i64::from(i32::MAX);
    let whole_forward = step == 1 && start == 0 && end >= huge;
    let whole_backward = step == -1 && (start == -1 || start >= huge) && end <= -huge;
    if whole_forward || whole_backward {
        dim.clone()
    } else {
        Dim::Unknown
    }
}

fn slice(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [data, starts, ends, axes, steps] =
        args(inputs, ["data", "starts", "ends", "axes", "steps"])?;
    let lists = [
        (starts, int_list(&starts)?),
        (ends, int_list(&ends)?),
        (axes, int_list(&axes)?),
        (steps, int_list(&steps)?),
    ];
    let known_len = lists.iter().find_map(|(a, l)| l.len.map(|n| (a, n)));
    if let Some((first, n)) = known_len
        && let Some((a, l)) = lists.iter().find(|(_, l)| l.len.is_some_and(|m| m != n))
    {
        return Err(a.shape_err(format!(
            "it has {} entries but {first} has {n}",
            l.len.unwrap_or(0)
        )));
    }
    let [(_, s), (_, e), (_, a), (_, st)] = lists;
    let mut shape = data.ty.shape.clone();
    let Some(axes_v) = a.values else {
        // Any axis may be sliced.
        return Ok(TensorType::new(
            data.dtype(),
            vec![Dim::Unknown; shape.len()],
        ));
    };
    let axes_v = axes_of(&data, &axes_v, "axes")?;
    let (Some(sv), Some(ev), Some(stv)) = (s.values, e.values, st.values) else {
        for ax in axes_v {
            if let Some(d) = shape.get_mut(ax) {
                *d = Dim::Unknown;
            }
        }
        return Ok(TensorType::new(data.dtype(), shape));
    };
    for (((ax, start), end), step) in axes_v.into_iter().zip(sv).zip(ev).zip(stv) {
        if step == 0 {
            return Err(format!("{steps} holds a 0 step, steps must be non-zero"));
        }
        if let Some(d) = shape.get_mut(ax) {
            *d = match &*d {
                Dim::Known(n) => Dim::Known(slice_len(*n, start, end, step)),
                other => slice_symbolic(other, start, end, step),
            };
        }
    }
    Ok(TensorType::new(data.dtype(), shape))
}

fn gather(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let [data, indices] = args(inputs, ["data", "indices"])?;
    indices.expect(is_index(indices.dtype()), "i64 or i32")?;
    let ax = axis_of(&data, axis, "axis")?;
    let (before, after) = data
        .shape()
        .split_at_checked(ax)
        .ok_or("axis out of range")?;
    let Some((axis_dim, after)) = after.split_first() else {
        return Err(data.shape_err(format!("axis={axis} is out of range")));
    };
    if let (Some(t), Dim::Known(size)) = (indices.value, axis_dim) {
        let vals = t.to_i64_vec().map_err(|e| format!("{indices}: {e}"))?;
        let lim = i128::from(*size);
        if let Some(bad) = vals
            .iter()
            .find(|&&i| !(-lim..lim).contains(&i128::from(i)))
        {
            return Err(format!(
                "{indices} holds index {bad}, out of range for axis {ax} of size {size} in {data} {}",
                data.ty
            ));
        }
    }
    let mut shape = before.to_vec();
    shape.extend_from_slice(indices.shape());
    shape.extend_from_slice(after);
    Ok(TensorType::new(data.dtype(), shape))
}

/// Bidirectional broadcast of the input with the target shape.
fn expand(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, shape] = args(inputs, ["input", "shape"])?;
    let list = int_list(&shape)?;
    let target = match (&list.values, list.len) {
        (Some(v), _) => sizes_from(v, &shape)?,
        (None, Some(n)) => unknown_dims(n, &shape)?,
        (None, None) => {
            return Err(shape.shape_err("its length is not known, so neither is the output rank"));
        }
    };
    let out = broadcast_shapes(x.shape(), &target).map_err(|(a, b)| {
        format!(
            "{shape} is {}, which does not broadcast with {x} {} ({b} vs {a})",
            fmt_shape(&target),
            x.ty
        )
    })?;
    check_size(&out)?;
    Ok(TensorType::new(x.dtype(), out))
}

fn constant_of_shape(inputs: &[InferInput<'_>], value: &Tensor) -> Res<TensorType> {
    let [shape] = args(inputs, ["input"])?;
    if value.len() != 1 {
        return Err(format!(
            "attribute value has type {}, expected one element",
            value.ty()
        ));
    }
    let list = int_list(&shape)?;
    let dims = match (&list.values, list.len) {
        (Some(v), _) => sizes_from(v, &shape)?,
        (None, Some(n)) => unknown_dims(n, &shape)?,
        (None, None) => {
            return Err(shape.shape_err("its length is not known, so neither is the output rank"));
        }
    };
    check_size(&dims)?;
    Ok(TensorType::new(value.dtype(), dims))
}

/// A scalar input's value as f64 (ints and non-FP8 floats).
fn scalar_value(a: &Arg<'_>) -> Res<Option<f64>> {
    let Some(t) = a.value else { return Ok(None) };
    let v = t.to_f64_vec().map_err(|e| format!("{a}: {e}"))?;
    Ok(v.first().copied())
}

fn scalar_int(a: &Arg<'_>) -> Res<Option<i64>> {
    let Some(t) = a.value else { return Ok(None) };
    let v = t.to_i64_vec().map_err(|e| format!("{a}: {e}"))?;
    Ok(v.first().copied())
}

/// Number of elements of `range(start, limit, delta)`: `max(ceil((limit − start) / delta), 0)`.
fn range_len(start: &Arg<'_>, limit: &Arg<'_>, delta: &Arg<'_>) -> Res<Option<u64>> {
    let n: i128 = if start.dtype().is_int() {
        let (Some(s), Some(l), Some(d)) =
            (scalar_int(start)?, scalar_int(limit)?, scalar_int(delta)?)
        else {
            return Ok(None);
        };
        if d == 0 {
            return Err(format!("{delta} is 0, expected a non-zero step"));
        }
        let (diff, d) = (i128::from(l) - i128::from(s), i128::from(d));
        if diff == 0 || (diff > 0) != (d > 0) {
            0
        } else {
            (diff.abs() + d.abs() - 1) / d.abs()
        }
    } else {
        let (Some(s), Some(l), Some(d)) = (
            scalar_value(start)?,
            scalar_value(limit)?,
            scalar_value(delta)?,
        ) else {
            return Ok(None);
        };
        if d == 0.0 {
            return Err(format!("{delta} is 0, expected a non-zero step"));
        }
        let n = ((l - s) / d).ceil();
        if !n.is_finite() {
            return Err(format!("range({s}, {l}, {d}) has no finite length"));
        }
        if n > MAX_ELEMENTS as f64 {
            i128::from(MAX_ELEMENTS) + 1
        } else {
            n.max(0.0) as i128
        }
    };
    match u64::try_from(n) {
        Ok(n) if n <= MAX_ELEMENTS => Ok(Some(n)),
        _ => Err(format!(
            "range has {n} elements, more than the maximum {MAX_ELEMENTS}"
        )),
    }
}

fn range(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [start, limit, delta] = args(inputs, ["start", "limit", "delta"])?;
    start.expect(is_numeric(start.dtype()), NUMERIC)?;
    for a in [start, limit, delta] {
        a.expect_same_dtype(&start)?;
        a.expect_scalar_like()?;
    }
    let n = range_len(&start, &limit, &delta)?;
    Ok(TensorType::new(
        start.dtype(),
        vec![n.map_or(Dim::Unknown, Dim::Known)],
    ))
}

/// `pads` is `[begin_0, begin_1, ..., end_0, end_1, ...]`; negative pads crop.
fn pad(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, pads, value] = args(inputs, ["data", "pads", "constant_value"])?;
    let list = int_list(&pads)?;
    let r = x.rank();
    let want = r.checked_mul(2).ok_or("rank overflows")?;
    if let Some(n) = list.len
        && n != want
    {
        return Err(pads.shape_err(format!(
            "expected {want} entries (begin and end for each of the {r} axes of {x})"
        )));
    }
    value.expect_same_dtype(&x)?;
    value.expect_scalar_like()?;
    let Some(p) = list.values else {
        return Ok(TensorType::new(x.dtype(), vec![Dim::Unknown; r]));
    };
    let (begin, end) = p.split_at_checked(r).ok_or("pads length mismatch")?;
    let mut shape = Vec::with_capacity(r);
    for (i, ((d, &b), &e)) in x.shape().iter().zip(begin).zip(end).enumerate() {
        let grow = i128::from(b) + i128::from(e);
        shape.push(match d {
            Dim::Known(n) => {
                let size = i128::from(*n) + grow;
                Dim::Known(u64::try_from(size).map_err(|_| {
                    format!(
                        "{pads} is {}: axis {i} of {x} {} would have size {size}",
                        fmt_list(&p),
                        x.ty
                    )
                })?)
            }
            other if grow == 0 => other.clone(),
            _ => Dim::Unknown,
        });
    }
    check_size(&shape)?;
    Ok(TensorType::new(x.dtype(), shape))
}

fn tile(inputs: &[InferInput<'_>]) -> Res<TensorType> {
    let [x, repeats] = args(inputs, ["input", "repeats"])?;
    let list = int_list(&repeats)?;
    if let Some(n) = list.len
        && n != x.rank()
    {
        return Err(repeats.shape_err(format!(
            "expected {} entries (one per axis of {x})",
            x.rank()
        )));
    }
    let Some(reps) = list.values else {
        let shape = x
            .shape()
            .iter()
            .map(|d| {
                if *d == Dim::Known(0) {
                    d.clone()
                } else {
                    Dim::Unknown
                }
            })
            .collect();
        return Ok(TensorType::new(x.dtype(), shape));
    };
    let mut shape = Vec::with_capacity(reps.len());
    for (d, &rep) in x.shape().iter().zip(&reps) {
        let rep = u64::try_from(rep)
            .map_err(|_| format!("{repeats} is {}: repeats must be ≥ 0", fmt_list(&reps)))?;
        shape.push(match (d, rep) {
            (Dim::Known(n), _) => Dim::Known(n.checked_mul(rep).ok_or("tiled size overflows u64")?),
            (_, 0) => Dim::Known(0),
            (other, 1) => other.clone(),
            _ => Dim::Unknown,
        });
    }
    check_size(&shape)?;
    Ok(TensorType::new(x.dtype(), shape))
}

// ------------------------------------------------------------------ quantization

/// The scale (and zero point) of ONNX Q/DQ: a scalar (per tensor) or 1-D along `axis`
/// (per axis). The zero point must have `zp_dtype` and the scale's shape.
fn check_qparams(
    x: &Arg<'_>,
    scale: &Arg<'_>,
    zero_point: Option<&Arg<'_>>,
    axis: i64,
    zp_dtype: DType,
) -> Res<()> {
    scale.expect(is_math_float(scale.dtype()), MATH_FLOAT)?;
    match scale.shape() {
        [] | [Dim::Known(1)] => {}
        [n] => {
            let ax = axis_of(x, axis, "axis")?;
            let along = x.shape().get(ax).cloned().unwrap_or(Dim::Unknown);
            if unify(n, &along).is_none() {
                return Err(scale.shape_err(format!(
                    "a per-axis scale needs {along} entries (axis {ax} of {x})"
                )));
            }
        }
        _ => {
            return Err(scale.shape_err(
                "expected a scalar or a 1-D per-axis scale (blocked quantization is not supported)",
            ));
        }
    }
    if let Some(zp) = zero_point {
        zp.expect(zp.dtype() == zp_dtype, zp_dtype.name())?;
        // A per-tensor zero point may be [1] beside a scalar scale, or the reverse (ONNX's
        // float8 Q/DQ backend tests do this; the reference and onnxruntime accept it).
        let one = |s: &[Dim]| s.iter().all(|d| *d == Dim::Known(1));
        let same = (one(zp.shape()) && one(scale.shape()) && zp.rank() <= 1 && scale.rank() <= 1)
            || (zp.rank() == scale.rank()
                && zp
                    .shape()
                    .iter()
                    .zip(scale.shape())
                    .all(|(a, b)| unify(a, b).is_some()));
        if !same {
            return Err(zp.shape_err(format!("expected the shape of {scale} {}", scale.ty)));
        }
    }
    Ok(())
}

fn quantize_linear(inputs: &[InferInput<'_>], axis: i64, to: DType) -> Res<TensorType> {
    let ([x, scale], zp) = args_opt(inputs, ["x", "y_scale"], "y_zero_point")?;
    let quantized = to.is_fp8() || matches!(to, DType::I8 | DType::U8 | DType::I16);
    expect_attr(
        quantized,
        "to",
        to,
        "a quantized type (i8, u8, i16, f8e4m3, f8e5m2)",
    )?;
    x.expect(
        is_math_float(x.dtype()) || x.dtype() == DType::I32,
        "a float type (not FP8) or i32",
    )?;
    check_qparams(&x, &scale, zp.as_ref(), axis, to)?;
    Ok(TensorType::new(to, x.ty.shape.clone()))
}

fn dequantize_linear(inputs: &[InferInput<'_>], axis: i64) -> Res<TensorType> {
    let ([x, scale], zp) = args_opt(inputs, ["x", "x_scale"], "x_zero_point")?;
    let quantized =
        x.dtype().is_fp8() || matches!(x.dtype(), DType::I8 | DType::U8 | DType::I16 | DType::I32);
    x.expect(
        quantized,
        "a quantized type (i8, u8, i16, i32, f8e4m3, f8e5m2)",
    )?;
    check_qparams(&x, &scale, zp.as_ref(), axis, x.dtype())?;
    Ok(TensorType::new(scale.dtype(), x.ty.shape.clone()))
}

// ------------------------------------------------------------------ fp8c's FP8 ops

/// Inputs: the amax source (an f32[L] history, or f32[] for `source=current`) and the
/// previous scale f32[]; outputs scale and scale_inv.
fn compute_scale(
    inputs: &[InferInput<'_>],
    fmt: DType,
    margin: f32,
    source: AmaxSource,
    epsilon: f32,
) -> Res<Vec<TensorType>> {
    let roles = match source {
        AmaxSource::Current => ["amax", "prev_scale"],
        _ => ["amax_history", "prev_scale"],
    };
    let [amax, prev] = args(inputs, roles)?;
    expect_attr(fmt.is_fp8(), "fmt", fmt, "an FP8 type (f8e4m3 or f8e5m2)")?;
    expect_attr(margin.is_finite(), "margin", margin, "a finite number")?;
    expect_attr(
        epsilon.is_finite() && epsilon >= 0.0,
        "epsilon",
        epsilon,
        "a finite number ≥ 0",
    )?;
    match source {
        AmaxSource::Current => amax.expect_f32_rank(0)?,
        AmaxSource::HistoryMax | AmaxSource::HistoryMostRecent => {
            amax.expect_f32_rank(1)?;
            if matches!(amax.shape(), [Dim::Known(0)]) {
                return Err(amax.shape_err("an amax history needs at least one entry"));
            }
        }
    }
    prev.expect_f32_rank(0)?;
    Ok(vec![
        TensorType::scalar(DType::F32),
        TensorType::scalar(DType::F32),
    ])
}

// ------------------------------------------------------------------ training ops (autodiff)

/// The output types of the training ops: the backward ops (shaped like the forward op's
/// inputs, checked against the forward op's own rule), the losses and the optimizer steps.
fn training(op: &Op, inputs: &[InferInput<'_>]) -> Res<Vec<TensorType>> {
    let same_as = |a: &Arg<'_>, first: &Arg<'_>| -> Res<()> {
        a.expect_same_dtype(first)?;
        if a.rank() == first.rank()
            && a.shape()
                .iter()
                .zip(first.shape())
                .all(|(x, y)| unify(x, y).is_some())
        {
            Ok(())
        } else {
            Err(a.shape_err(format!("expected the shape of {first} {}", first.ty)))
        }
    };
    let scalar_f32 = |a: &Arg<'_>| a.expect_f32_rank(0);
    Ok(match op {
        Op::GatherGrad { axis, size } => {
            let [dy, indices] = args(inputs, ["dy", "indices"])?;
            dy.expect(is_math_float(dy.dtype()), MATH_FLOAT)?;
            indices.expect(is_index(indices.dtype()), "i64 or i32")?;
            let size =
                u64::try_from(*size).map_err(|_| format!("attribute size={size}, expected ≥ 0"))?;
            // data rank = dy rank − indices rank + 1
            let data_rank = (dy.rank() + 1)
                .checked_sub(indices.rank())
                .filter(|&r| r >= 1)
                .ok_or_else(|| {
                    dy.shape_err(format!(
                        "has fewer dims than {indices} {} needs",
                        indices.ty
                    ))
                })?;
            let ax = norm_axis(*axis, data_rank).ok_or_else(|| {
                format!(
                    "attribute axis={axis} is out of range {} for the data",
                    axis_range(data_rank)
                )
            })?;
            let (before, rest) = dy.shape().split_at(ax);
            let (idx_dims, after) = rest.split_at(indices.rank());
            if idx_dims
                .iter()
                .zip(indices.shape())
                .any(|(a, b)| unify(a, b).is_none())
            {
                return Err(dy.shape_err(format!(
                    "its dims {ax}.. must be {indices}'s {}",
                    indices.ty
                )));
            }
            let mut shape = before.to_vec();
            shape.push(Dim::Known(size));
            shape.extend_from_slice(after);
            vec![TensorType::new(dy.dtype(), shape)]
        }
        Op::LayerNormGrad { axis, .. } => {
            let [x, scale, dy] = args(inputs, ["x", "scale", "dy"])?;
            layer_norm(&inputs[..2], *axis)?;
            same_as(&dy, &x)?;
            vec![x.ty.clone(), scale.ty.clone(), scale.ty.clone()]
        }
        Op::SoftmaxGrad { axis, .. } => {
            let [y, dy] = args(inputs, ["y", "dy"])?;
            y.expect(is_math_float(y.dtype()), MATH_FLOAT)?;
            axis_of(&y, *axis, "axis")?;
            same_as(&dy, &y)?;
            vec![y.ty.clone()]
        }
        Op::GeluGrad { .. } => {
            let [x, dy] = args(inputs, ["x", "dy"])?;
            x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            same_as(&dy, &x)?;
            vec![x.ty.clone()]
        }
        Op::ConvGradInput {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
            input_shape,
        } => {
            let [dy, w] = args(inputs, ["dy", "w"])?;
            let dims = input_shape
                .iter()
                .map(|&d| u64::try_from(d).map(Dim::Known))
                .collect::<Result<Shape, _>>()
                .map_err(|_| {
                    format!(
                        "attribute input_shape={} holds a negative size",
                        fmt_list(input_shape)
                    )
                })?;
            let x_ty = TensorType::new(w.dtype(), dims);
            let win = WindowAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: false,
            };
            let y = conv(&[InferInput::new(&x_ty), inputs[1]], &win, *group).map_err(|e| {
                format!(
                    "the forward conv of attribute input_shape={}: {e}",
                    fmt_list(input_shape)
                )
            })?;
            same_as(&dy, &Arg::new(0, "forward output", &InferInput::new(&y)))?;
            vec![x_ty]
        }
        Op::ConvGradWeight {
            kernel_shape,
            strides,
            pads,
            dilations,
            group,
            auto_pad,
        } => {
            let [x, dy] = args(inputs, ["x", "dy"])?;
            x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            let (Some(c), Some(m)) = (x.shape().get(1), dy.shape().get(1)) else {
                return Err(x.shape_err("expected rank ≥ 3 (N, C, spatial...)"));
            };
            if kernel_shape.len() + 2 != x.rank() {
                return Err(format!(
                    "attribute kernel_shape={} needs one size per spatial axis of {x} {}",
                    fmt_list(kernel_shape),
                    x.ty
                ));
            }
            let g = u64::try_from(*group)
                .ok()
                .filter(|&g| g >= 1)
                .ok_or_else(|| format!("attribute group={group}, expected ≥ 1"))?;
            let cg = match c {
                Dim::Known(c) if c.is_multiple_of(g) => Dim::Known(c / g),
                Dim::Known(c) => {
                    return Err(x.shape_err(format!(
                        "its {c} channels are not a multiple of group={group}"
                    )));
                }
                _ => Dim::Unknown,
            };
            let mut w_shape = vec![m.clone(), cg];
            w_shape.extend(kernel_attr(kernel_shape, kernel_shape.len())?);
            let w_ty = TensorType::new(x.dtype(), w_shape);
            let win = WindowAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: false,
            };
            let y = conv(&[inputs[0], InferInput::new(&w_ty)], &win, *group)?;
            same_as(&dy, &Arg::new(0, "forward output", &InferInput::new(&y)))?;
            vec![w_ty]
        }
        Op::MaxPoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
        }
        | Op::AveragePoolGrad {
            kernel_shape,
            strides,
            pads,
            dilations,
            ceil_mode,
            auto_pad,
            ..
        } => {
            let [x, dy] = args(inputs, ["x", "dy"])?;
            let win = WindowAttrs {
                kernel_shape,
                strides,
                pads,
                dilations,
                auto_pad: *auto_pad,
                ceil_mode: *ceil_mode,
            };
            let y = pool(&inputs[..1], &win, is_math_float, MATH_FLOAT)?;
            same_as(&dy, &Arg::new(0, "forward output", &InferInput::new(&y)))?;
            vec![x.ty.clone()]
        }
        Op::SoftmaxCrossEntropy => {
            let [logits, labels] = args(inputs, ["logits", "labels"])?;
            cross_entropy_operands(&logits, &labels)?;
            vec![TensorType::scalar(logits.dtype()), logits.ty.clone()]
        }
        Op::SoftmaxCrossEntropyGrad => {
            let [log_probs, labels, dloss] = args(inputs, ["log_probs", "labels", "dloss"])?;
            cross_entropy_operands(&log_probs, &labels)?;
            dloss.expect_same_dtype(&log_probs)?;
            dloss.expect_rank(0)?;
            vec![log_probs.ty.clone()]
        }
        Op::AllFinite => {
            for x in variadic(inputs)? {
                x.expect(is_math_float(x.dtype()), MATH_FLOAT)?;
            }
            vec![TensorType::scalar(DType::Bool)]
        }
        Op::SgdUpdate { .. } => {
            let [param, grad, buf, lr] = args(inputs, ["param", "grad", "momentum_buffer", "lr"])?;
            param.expect(is_math_float(param.dtype()), MATH_FLOAT)?;
            same_as(&grad, &param)?;
            same_as(&buf, &param)?;
            scalar_f32(&lr)?;
            vec![param.ty.clone(), param.ty.clone()]
        }
        Op::AdamwUpdate { .. } => {
            let [param, grad, m, v, lr, t] = args(inputs, ["param", "grad", "m", "v", "lr", "t"])?;
            param.expect(is_math_float(param.dtype()), MATH_FLOAT)?;
            for x in [grad, m, v] {
                same_as(&x, &param)?;
            }
            scalar_f32(&lr)?;
            scalar_f32(&t)?;
            vec![param.ty.clone(), param.ty.clone(), param.ty.clone()]
        }
        other => return Err(format!("internal: `{}` is not a training op", other.name())),
    })
}

/// Logits `[.., C]` of a float type and integer labels of the leading dims.
fn cross_entropy_operands(logits: &Arg<'_>, labels: &Arg<'_>) -> Res<()> {
    logits.expect(is_math_float(logits.dtype()), MATH_FLOAT)?;
    logits.expect_min_rank(1, "the last axis holds the classes")?;
    labels.expect(is_index(labels.dtype()), "i64 or i32 class indices")?;
    let lead = &logits.shape()[..logits.rank() - 1];
    let fits = labels.rank() == lead.len()
        && labels
            .shape()
            .iter()
            .zip(lead)
            .all(|(a, b)| unify(a, b).is_some());
    if !fits {
        return Err(labels.shape_err(format!(
            "expected {} (the dims of {logits} before its class axis)",
            fmt_shape(lead)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_dim_matches_hand_computed() {
        // floor((7 + 1 + 1 − 3) / 2) + 1 = 4
        assert_eq!(conv_out_dim(7, 3, 2, 1, (1, 1), false), Ok(4));
        // ceil: (5 − 2) / 2 = 1.5 → 2, +1 = 3; last window starts at 4 < 5: kept.
        assert_eq!(conv_out_dim(5, 2, 2, 1, (0, 0), true), Ok(3));
        // ceil with padding: in 4, k 2, s 2, pads (1,1): span 4, ceil 2 + 1 = 3; last start
        // (3−1)·2 = 4 ≥ 4 + 1? no → 3 kept. With pads (0,1): span 3 → 2 + 1 = 3, start 4 ≥ 4 → 2.
        assert_eq!(conv_out_dim(4, 2, 2, 1, (1, 1), true), Ok(3));
        assert_eq!(conv_out_dim(4, 2, 2, 1, (0, 1), true), Ok(2));
        assert!(conv_out_dim(2, 5, 1, 1, (0, 0), false).is_err());
        assert!(conv_out_dim(u64::MAX, 3, 1, u64::MAX, (1, 1), false).is_err());
    }

    #[test]
    fn slice_len_follows_onnx_clamping() {
        assert_eq!(slice_len(10, 2, 8, 3), 2); // 2, 5
        assert_eq!(slice_len(10, -1, i64::MIN, -1), 10);
        assert_eq!(slice_len(10, i64::MAX, i64::MIN, -2), 5);
        assert_eq!(slice_len(10, 0, i64::MAX, 1), 10);
        assert_eq!(slice_len(0, -1, i64::MIN, -1), 0);
        assert_eq!(slice_len(4, 3, 1, 1), 0);
    }

    #[test]
    fn broadcast_dims_follow_the_symbolic_rules() {
        let s = |n: &str| Dim::Sym(n.into());
        assert_eq!(broadcast_dim(&s("b"), &Dim::Known(1)), Some(s("b")));
        assert_eq!(broadcast_dim(&s("b"), &s("b")), Some(s("b")));
        assert_eq!(broadcast_dim(&s("b"), &Dim::Known(4)), Some(Dim::Known(4)));
        assert_eq!(broadcast_dim(&s("b"), &s("c")), Some(Dim::Unknown));
        assert_eq!(
            broadcast_dim(&Dim::Unknown, &Dim::Known(1)),
            Some(Dim::Unknown)
        );
        assert_eq!(broadcast_dim(&Dim::Known(3), &Dim::Known(4)), None);
    }
}
