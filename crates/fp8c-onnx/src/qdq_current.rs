//! Current scaling in exported FP8 Q/DQ ONNX (`fp8c compile --emit onnx` with a current or
//! per-tile recipe): the scales fp8c computes at run time are computed by the exported graph.
//!
//! - An **activation** seen as a `[R, K]` matrix (K its reduction axis, the last) gets, per
//!   tile, `amax = ReduceMax(Abs(tile))`, then the scale of fp8c's `block_quantize` /
//!   `compute_scale` spelt in ONNX ops (below), then `QuantizeLinear` / `DequantizeLinear`
//!   with `y_scale = scale_inv`: per tensor (tensorwise, a scalar scale) or blocked along K
//!   (opset 21 `block_size`; rowwise is one block of K per row, TE's `Float8BlockScaling`
//!   1×128, MXFP8 1×32).
//! - A **weight** is quantized here, with fp8c's own `block_quantize` (the evaluator), and stored
//!   as FP8 codes followed by a blocked `DequantizeLinear` along K. A 2-D tile (128×128) is
//!   written as its scale repeated over the tile's columns: ONNX blocks one axis only.
//!
//! The scale, as fp8c computes it (`fp8c_core::compute_scale`, `fp8c_eval` `block_quantize`):
//! - `fp32`: `s = fp8_max / max(amax, epsilon)`, 1 where amax is 0 or not finite, `f32::MAX`
//!   for an infinite quotient; `pow2` rounds `s` down to a power of two, spelt
//!   `2^floor(log2 s)` with one correction step each way (Log's rounding may put an exact
//!   power of two one below); `scale_inv = 1 / s`.
//! - `e8m0`: `scale_inv = 2^(floor(log2 amax) − emax)`, clipped to `[2^−127, 2^127]`, 1 where
//!   amax is 0 or not finite (OCP MX v1.0). Stored as f32: the values are E8M0's, exactly.
//!
//! An f16 or bf16 activation is cast to f32 for its amax and scale, and the scale cast to the
//! activation's type (raised to its smallest positive value first) for Q/DQ in that type; a
//! weight's f32 scales are rounded to its type the same way.
//!
//! QuantizeLinear divides by `y_scale` where fp8c multiplies by the scale: identical when the
//! scale is a power of two (pow2, e8m0), within one FP8 rounding of some elements otherwise.

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, NodeProto, TensorProto};
use crate::tensor::{dtype_to_onnx, tensor_to_proto};
use fp8c_ir::{BlockScaling, DType, Op, Tensor};

/// Per-tile current scaling of one GEMM input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurrentTiles {
    /// Elements per tile along the operand's reduction axis K; 0: all of K.
    pub k_block: i64,
    /// The tile's extent along the other axis: for an activation 1 (a scale per row) or 0
    /// (with `k_block` 0: one scale for the whole tensor); for a weight its columns, 0: all.
    pub other: i64,
    /// How a tile's scale is chosen.
    pub scaling: BlockScaling,
    /// Lower bound on a tile's amax.
    pub epsilon: f32,
}

impl CurrentTiles {
    /// One scale for the whole tensor.
    pub fn tensorwise(self) -> bool {
        self.k_block == 0 && self.other == 0
    }
}

/// Builds nodes and initializers into a graph, with fresh names.
pub(crate) struct Builder<'a> {
    pub nodes: Vec<NodeProto>,
    pub inits: Vec<TensorProto>,
    pub fresh: &'a mut dyn FnMut(String) -> String,
    pub base: String,
}

impl Builder<'_> {
    fn name(&mut self, what: &str) -> String {
        (self.fresh)(format!("{}.{what}", self.base))
    }

    fn op(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>) -> String {
        let out = self.name(op);
        let name = self.name(&format!("{op}_node"));
        self.nodes.push(NodeProto {
            op_type: Some(op.into()),
            name: Some(name),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec![out.clone()],
            attribute: attrs,
            ..Default::default()
        });
        out
    }

    fn constant(&mut self, what: &str, t: &Tensor) -> String {
        let name = self.name(what);
        self.inits.push(tensor_to_proto(&name, t));
        name
    }

    fn f32(&mut self, what: &str, v: f32) -> String {
        self.constant(what, &Tensor::scalar_f32(v))
    }

    /// `2^floor(log2 x)` of positive, finite `x` (a normal or subnormal f32).
    fn floor_pow2(&mut self, x: &str) -> String {
        let ln = self.op("Log", &[x], vec![]);
        let ln2 = self.f32("ln2", std::f32::consts::LN_2);
        let l2 = self.op("Div", &[&ln, &ln2], vec![]);
        let e = self.op("Floor", &[&l2], vec![]);
        let two = self.f32("two", 2.0);
        let p = self.op("Pow", &[&two, &e], vec![]);
        // One step down where Log overshot, one up where it undershot.
        let over = self.op("Greater", &[&p, x], vec![]);
        let half = self.op("Div", &[&p, &two], vec![]);
        let p = self.op("Where", &[&over, &half, &p], vec![]);
        let up = self.op("Mul", &[&p, &two], vec![]);
        let under = self.op("LessOrEqual", &[&up, x], vec![]);
        self.op("Where", &[&under, &up, &p], vec![])
    }

    /// `scale_inv` of tiles with amax `amax` (module docs).
    fn scale_inv(&mut self, amax: &str, t: &CurrentTiles, fmt_max: f32, emax: i32) -> String {
        let zero = self.f32("zero", 0.0);
        let one = self.f32("one", 1.0);
        let inf = self.f32("inf", f32::INFINITY);
        let pos = self.op("Greater", &[amax, &zero], vec![]);
        let fin = self.op("Less", &[amax, &inf], vec![]);
        let ok = self.op("And", &[&pos, &fin], vec![]);
        // Where amax is unusable, compute on 1 and select 1 afterwards (no NaN or log(0)).
        let a = self.op("Where", &[&ok, amax, &one], vec![]);
        let inv = match t.scaling {
            BlockScaling::E8m0 => {
                let p = self.floor_pow2(&a);
                let div = self.f32("emax", 2f32.powi(emax));
                let y = self.op("Div", &[&p, &div], vec![]);
                let lo = self.f32("min_e8m0", 2f32.powi(-127));
                let hi = self.f32("max_e8m0", 2f32.powi(127));
                self.op("Clip", &[&y, &lo, &hi], vec![])
            }
            BlockScaling::Fp32 | BlockScaling::Pow2 => {
                let a = if t.epsilon > 0.0 {
                    let eps = self.f32("epsilon", t.epsilon);
                    self.op("Max", &[&a, &eps], vec![])
                } else {
                    a
                };
                let m = self.f32("fp8_max", fmt_max);
                let s = self.op("Div", &[&m, &a], vec![]);
                let big = self.f32("f32_max", f32::MAX);
                let s = self.op("Min", &[&s, &big], vec![]);
                let s = if t.scaling == BlockScaling::Pow2 {
                    self.floor_pow2(&s)
                } else {
                    s
                };
                self.op("Div", &[&one, &s], vec![])
            }
        };
        self.op("Where", &[&ok, &inv, &one], vec![])
    }

    /// `x` in f32 (a Cast unless it is f32 already).
    fn as_f32(&mut self, x: &str, dtype: DType) -> String {
        if dtype == DType::F32 {
            return x.to_string();
        }
        self.op(
            "Cast",
            &[x],
            vec![int_attr("to", dtype_to_onnx(DType::F32) as i64)],
        )
    }

    /// f32 `scale_inv` as `dtype`, the type of the activation it scales (ONNX's y_scale has
    /// x's type): raised to the type's smallest positive value first, so that no tile's scale
    /// becomes 0.
    fn scale_as(&mut self, inv: String, dtype: DType) -> Result<String, String> {
        if dtype == DType::F32 {
            return Ok(inv);
        }
        let tiny = smallest_positive(dtype)?;
        let tiny = self.f32("smallest_scale", tiny);
        let inv = self.op("Max", &[&inv, &tiny], vec![]);
        Ok(self.op(
            "Cast",
            &[&inv],
            vec![int_attr("to", dtype_to_onnx(dtype) as i64)],
        ))
    }

    /// Quantizes and dequantizes activation `x` of type `dtype` (f32, f16 or bf16) with
    /// current scaling by tiles `t`; `k` is its reduction length (the last axis). The amax and
    /// scale are computed in f32; Q/DQ run in `dtype`. Returns the dequantized value's name.
    pub fn activation(
        &mut self,
        x: &str,
        k: Option<i64>,
        t: &CurrentTiles,
        to: DType,
        dtype: DType,
    ) -> Result<String, String> {
        let (fmt_max, emax, code) = format(to)?;
        let out_type = |extra: Vec<AttributeProto>| {
            let mut v = vec![int_attr("output_dtype", code), int_attr("saturate", 1)];
            v.extend(extra);
            v
        };
        if t.tensorwise() {
            let xf = self.as_f32(x, dtype);
            let abs = self.op("Abs", &[&xf], vec![]);
            let amax = self.op("ReduceMax", &[&abs], vec![int_attr("keepdims", 0)]);
            let inv = self.scale_inv(&amax, t, fmt_max, emax);
            let inv = self.scale_as(inv, dtype)?;
            let q = self.op("QuantizeLinear", &[x, &inv], out_type(vec![]));
            return Ok(self.op("DequantizeLinear", &[&q, &inv], vec![]));
        }
        if t.other != 1 {
            return Err(format!(
                "activation tiles of {}×{} rows and columns are not exportable (per row or per tensor only)",
                t.other, t.k_block
            ));
        }
        let k = k.ok_or("its reduction length is not known")?;
        let b = if t.k_block == 0 { k } else { t.k_block };
        if b <= 0 || k % b != 0 {
            return Err(format!(
                "K = {k} is not a multiple of the {b}-element tiles"
            ));
        }
        let shape = self.op("Shape", &[x], vec![]);
        let flat = self.constant("rows_by_k", &Tensor::from_i64(vec![2], &[-1, k]));
        let x2 = self.op("Reshape", &[x, &flat], vec![]);
        let tiles = self.constant("tiles", &Tensor::from_i64(vec![3], &[-1, k / b, b]));
        let x3 = self.op("Reshape", &[&x2, &tiles], vec![]);
        let x3 = self.as_f32(&x3, dtype);
        let abs = self.op("Abs", &[&x3], vec![]);
        let axes = self.constant("axes", &Tensor::from_i64(vec![1], &[2]));
        let amax = self.op("ReduceMax", &[&abs, &axes], vec![int_attr("keepdims", 0)]);
        let inv = self.scale_inv(&amax, t, fmt_max, emax);
        let inv = self.scale_as(inv, dtype)?;
        let blocked = || vec![int_attr("axis", 1), int_attr("block_size", b)];
        let q = self.op("QuantizeLinear", &[&x2, &inv], out_type(blocked()));
        let dq = self.op("DequantizeLinear", &[&q, &inv], blocked());
        Ok(self.op("Reshape", &[&dq, &shape], vec![]))
    }
}

/// A weight quantized by tiles `t` with fp8c's `block_quantize`: its FP8 codes and the
/// `DequantizeLinear` scale and attributes that restore it. `k_axis` is the weight's reduction
/// axis (0 for `[K, N]`, 1 for a Gemm's `transB` `[N, K]`); per-tensor tiles take any rank.
/// `dtype` is the model's type for the weight (f32, f16, bf16): the scale's type, rounded to
/// nearest and kept above 0, as the activations' scales are.
pub fn weight(
    w: &Tensor,
    k_axis: usize,
    t: &CurrentTiles,
    to: DType,
    dtype: DType,
) -> Result<(Tensor, Tensor, Vec<AttributeProto>), String> {
    let (codes, inv, attrs) = weight_f32(w, k_axis, t, to)?;
    if dtype == DType::F32 {
        return Ok((codes, inv, attrs));
    }
    let tiny = smallest_positive(dtype)?;
    let v: Vec<f64> = inv
        .to_f32_vec()?
        .iter()
        .map(|&s| f64::from(s.max(tiny)))
        .collect();
    let inv = Tensor::from_f64_as(dtype, inv.shape().to_vec(), &v)?;
    Ok((codes, inv, attrs))
}

/// The smallest positive value of `dtype` (f16's or bf16's smallest subnormal).
fn smallest_positive(dtype: DType) -> Result<f32, String> {
    let one_bit = Tensor::from_bytes(dtype, vec![], vec![1, 0])?;
    let v = one_bit.to_f32_vec()?[0];
    if dtype.is_float() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("FP8 Q/DQ scales are f32, f16 or bf16, not {dtype}"))
    }
}

/// [`weight`] with f32 scales.
fn weight_f32(
    w: &Tensor,
    k_axis: usize,
    t: &CurrentTiles,
    to: DType,
) -> Result<(Tensor, Tensor, Vec<AttributeProto>), String> {
    let shape = w.shape().to_vec();
    let quantize = |rows: i64, cols: i64, w: &Tensor| {
        let op = Op::BlockQuantize {
            to,
            saturate: true,
            rows,
            cols,
            scaling: t.scaling,
            epsilon: t.epsilon,
        };
        fp8c_eval::eval_op(&op, &[w]).map_err(|e| e.to_string())
    };
    if t.tensorwise() {
        let n = shape.iter().product::<u64>();
        let flat = w.clone().reshaped(vec![1, n])?;
        let out = quantize(0, 0, &flat)?;
        let codes = out[0].clone().reshaped(shape)?;
        let inv = out[1].to_f32_vec().map_err(|e| e.to_string())?;
        return Ok((codes, Tensor::scalar_f32(inv[0]), vec![]));
    }
    let [r, c] = shape[..] else {
        return Err(format!("a per-tile weight must be 2-D, got {shape:?}"));
    };
    let (rows, cols) = if k_axis == 0 {
        (t.k_block, t.other)
    } else {
        (t.other, t.k_block)
    };
    let out = quantize(rows, cols, w)?;
    let grid = out[1].to_f32_vec().map_err(|e| e.to_string())?;
    let (tr, tc) = (
        if rows == 0 { r } else { rows as u64 },
        if cols == 0 { c } else { cols as u64 },
    );
    let (nr, nc) = (r.div_ceil(tr), c.div_ceil(tc));
    // The scale blocked along K only: each tile's scale repeated along the other axis.
    let (dims, block) = if k_axis == 0 {
        (vec![nr, c], tr)
    } else {
        (vec![r, nc], tc)
    };
    let mut scale = Vec::with_capacity((dims[0] * dims[1]) as usize);
    for i in 0..dims[0] {
        for j in 0..dims[1] {
            let (gi, gj) = if k_axis == 0 {
                (i, j / tc)
            } else {
                (i / tr, j)
            };
            scale.push(grid[(gi * nc + gj) as usize]);
        }
    }
    let attrs = vec![
        int_attr("axis", k_axis as i64),
        int_attr("block_size", block as i64),
    ];
    Ok((out[0].clone(), Tensor::from_f32(dims, &scale), attrs))
}

/// The format's largest value, E8M0's `emax_elem` for it, and its ONNX type code.
fn format(to: DType) -> Result<(f32, i32, i64), String> {
    match to {
        DType::F8E4M3 => Ok((448.0, 8, 17)),
        DType::F8E5M2 => Ok((57344.0, 15, 19)),
        other => Err(format!("cannot quantize to {other}")),
    }
}

pub(crate) fn int_attr(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}
