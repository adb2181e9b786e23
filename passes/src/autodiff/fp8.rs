//! FP8 in the backward pass: the rules for `quantize`, `dequantize` and `scaled_matmul`, and
//! the quantization of incoming gradients.
//!
//! Autodiff runs after the scaling pass, so every FP8 forward GEMM is already
//! `scaled_matmul(qa, qb, sa_inv, sb_inv)` over the forward FP8 copies of X and W. Its rule
//! quantizes the incoming gradient dY once, in the recipe's backward format (E5M2 under
//! HYBRID, E4M3 under E4M3) with its own scaling state `{gemm}.dy.*`, and emits
//!
//! ```text
//! dgrad = scaled_matmul(q(dY), qbᵀ, dY.scale_inv, sb_inv)     # dY·Wᵀ
//! wgrad = scaled_matmul(qaᵀ, q(dY), sa_inv, dY.scale_inv)     # Xᵀ·dY
//! ```
//!
//! reading the very FP8 tensors the forward GEMM read (transposed views of them): no tensor
//! is quantized twice in a step, and what the forward keeps for the wgrad is the
//! activation's FP8 codes (one byte an element) and scale, as TransformerEngine keeps it.
//! With `save_original_input` (TE's option of that name, `--activations high`) the wgrad
//! instead quantizes the activation as it was before the forward's quantize again, with the
//! forward's scale (the same codes), reading it through `after(x, dY)` so that this runs in
//! backward: the high-precision activation is what stays alive. With `wgrad_high_precision` (torchao's `rowwise_with_gw_hp`)
//! wgrad is instead the f32 `matmul` of the activation before its quantization and the f32
//! dY. A gradient that feeds several FP8 GEMMs is quantized once
//! (the first GEMM names its state).
//!
//! Quantization is a straight-through estimator: the adjoint of an FP8 value is the adjoint
//! of the real number it encodes (f32), `quantize` passes it to its input unchanged and
//! `dequantize` passes its output's adjoint to its FP8 input. Scales carry no gradient.
//!
//! Delayed scaling state for dY follows the forward tensors' exactly (TE's order: record
//! this step's amax, compute the scale from the history, then roll), so each history advances
//! once per step; current scaling computes the scale from this step's amax.

use super::emit::Emit;
use super::rules::{At, Grads};
use fp8c_core::{Fp8Format, Gemm, Recipe};
use fp8c_ir::{DType, Graph, IrError, Op, Value};
use std::collections::HashMap;

type R<T> = Result<T, IrError>;

/// Quantizes gradients for FP8 backward GEMMs, once per gradient value.
pub(crate) struct GradQuantizer {
    recipe: Recipe,
    cache: HashMap<Value, (Value, Value)>,
    /// Names of the gradient tensors quantized (`{gemm}.dy`), in creation order.
    pub quantized: Vec<String>,
    /// wgrad in f32 from the unquantized activation and dY (see the module docs).
    pub wgrad_high_precision: bool,
    /// Keep each FP8 GEMM's activation for backward as it was before its quantization and
    /// quantize it again for the wgrad (see the module docs).
    pub save_original_input: bool,
}

impl GradQuantizer {
    /// A quantizer following `recipe`.
    pub fn new(recipe: Recipe) -> Self {
        GradQuantizer {
            recipe,
            cache: HashMap::new(),
            quantized: Vec::new(),
            wgrad_high_precision: false,
            save_original_input: false,
        }
    }

    /// The FP8 type of gradients.
    pub fn format(&self) -> DType {
        match self.recipe.fp8_format().backward() {
            Fp8Format::E4M3 => DType::F8E4M3,
            Fp8Format::E5M2 => DType::F8E5M2,
        }
    }

    /// `(q, scale_inv)` of gradient `dy` (f32), quantized once; `t` names it (`fc1.dy`).
    pub fn quantize(&mut self, g: &mut Graph, dy: Value, t: &str) -> R<(Value, Value)> {
        if let Some(&hit) = self.cache.get(&dy) {
            return Ok(hit);
        }
        let out = crate::scaling::insert_quantize(g, self.recipe, self.format(), dy, t)?;
        self.quantized.push(t.to_string());
        self.cache.insert(dy, out);
        Ok(out)
    }
}

/// Rules for the FP8 ops.
pub(crate) fn vjp(e: &mut Emit<'_>, q: &mut GradQuantizer, at: &At<'_>) -> R<Option<Grads>> {
    Ok(Some(match at.op {
        // Straight-through: the real-valued adjoint goes to x in x's dtype.
        Op::Quantize { .. } => {
            let x = at.ins[0];
            vec![Some(e.cast(&at.n("d0"), at.dy()?, e.dtype(x))?), None]
        }
        Op::Dequantize { .. } => vec![Some(e.cast(&at.n("d0"), at.dy()?, DType::F32)?), None],
        // The same per tile: the codes' adjoint is x's, the scales carry none.
        Op::BlockQuantize { .. } => {
            let x = at.ins[0];
            vec![Some(e.cast(&at.n("d0"), at.dy()?, e.dtype(x))?)]
        }
        Op::BlockDequantize { .. } => {
            vec![Some(e.cast(&at.n("d0"), at.dy()?, DType::F32)?), None]
        }
        Op::ScaledMatMul { .. } => scaled_matmul(e, q, at)?,
        Op::BlockScaledMatMul {
            k_block,
            a_rows: 1,
            b_cols,
            ..
        } => block_scaled_matmul(e, q, at, *k_block, *b_cols)?,
        _ => return Ok(None),
    }))
}

/// dgrad and wgrad of `scaled_matmul(qa, qb, sa, sb)` as FP8 GEMMs with an FP8 gradient.
fn scaled_matmul(e: &mut Emit<'_>, quant: &mut GradQuantizer, at: &At<'_>) -> R<Grads> {
    let [qa, qb, sa, sb] = [at.ins[0], at.ins[1], at.ins[2], at.ins[3]];
    let dy = at.dy()?;
    let (ad, bd) = (e.dims(qa)?, e.dims(qb)?);
    if ad.len() < 2 || bd.len() < 2 {
        return Err(at.err(
            "an FP8 GEMM with a 1-D operand has no gradient rule (keep it high with --keep-high)",
        ));
    }
    let dy32 = e.cast(&at.n("dy.f32"), dy, DType::F32)?;
    let (qdy, sdy) = quant.quantize(e.g, dy32, &at.n("dy"))?;
    let (m, k, n) = (ad[ad.len() - 2], ad[ad.len() - 1], bd[bd.len() - 1]);
    let batch = super::rules::broadcast_batch(&ad[..ad.len() - 2], &bd[..bd.len() - 2])?;
    let rows: u64 = batch.iter().product::<u64>() * m;
    let recipe = quant.recipe;
    let gemm = |which| Op::ScaledMatMul {
        out: DType::F32,
        fast_accum: recipe.fast_accum(which),
    };
    let mut out = vec![None; 4];
    if at.want(0) {
        // dY [.., M, N] · Bᵀ [.., N, K]
        let bt = e.swap_last2(&at.n("dgrad.wt"), qb)?;
        let d = e.op(&at.n("dgrad"), gemm(Gemm::Dgrad), &[qdy, bt, sdy, sb])?;
        out[0] = Some(e.sum_to(&at.n("dgrad.sum"), d, &ad)?);
    }
    if at.want(1) && quant.wgrad_high_precision {
        // The activation as it was before the scaling pass quantized it (else its decoded
        // FP8 copy), and dY in f32.
        let x = match &e.g.node(qa.node).op {
            Op::Quantize { .. } => {
                let x = e.g.node(qa.node).inputs()[0];
                e.cast(&at.n("wgrad.x.f32"), x, DType::F32)?
            }
            _ => e.op(
                &at.n("wgrad.x.f32"),
                Op::Dequantize { to: DType::F32 },
                &[qa, sa],
            )?,
        };
        let d = if bd.len() == 2 {
            let mut full_a = batch.clone();
            full_a.extend([m, k]);
            if full_a != ad {
                return Err(at.err("an FP8 GEMM whose activation broadcasts has no gradient rule"));
            }
            let xf = e.reshape(&at.n("wgrad.x"), x, &[rows, k])?;
            let xt = e.transpose(&at.n("wgrad.xt"), xf, vec![1, 0])?;
            let dyf = e.reshape(&at.n("wgrad.dy"), dy32, &[rows, n])?;
            e.op(&at.n("wgrad"), Op::MatMul, &[xt, dyf])?
        } else {
            let xt = e.swap_last2(&at.n("wgrad.xt"), x)?;
            let d = e.op(&at.n("wgrad"), Op::MatMul, &[xt, dy32])?;
            e.sum_to(&at.n("wgrad.sum"), d, &bd)?
        };
        out[1] = Some(d);
    } else if at.want(1) {
        let qa = match &e.g.node(qa.node).op {
            Op::Quantize { .. } if quant.save_original_input => {
                let q = e.g.node(qa.node).clone();
                let x = e.op(&at.n("wgrad.x.saved"), Op::After, &[q.inputs()[0], dy32])?;
                e.op(&at.n("wgrad.x.q"), q.op.clone(), &[x, q.inputs()[1]])?
            }
            _ => qa,
        };
        let d = if bd.len() == 2 {
            // Aᵀ [K, rows] · dY [rows, N], every batch row in one GEMM.
            let mut full_a = batch.clone();
            full_a.extend([m, k]);
            if full_a != ad {
                return Err(at.err("an FP8 GEMM whose activation broadcasts has no gradient rule"));
            }
            let af = e.reshape(&at.n("wgrad.x"), qa, &[rows, k])?;
            let at_ = e.transpose(&at.n("wgrad.xt"), af, vec![1, 0])?;
            let dyf = e.reshape(&at.n("wgrad.dy"), qdy, &[rows, n])?;
            e.op(&at.n("wgrad"), gemm(Gemm::Wgrad), &[at_, dyf, sa, sdy])?
        } else {
            let at_ = e.swap_last2(&at.n("wgrad.xt"), qa)?;
            let d = e.op(&at.n("wgrad"), gemm(Gemm::Wgrad), &[at_, qdy, sa, sdy])?;
            e.sum_to(&at.n("wgrad.sum"), d, &bd)?
        };
        out[1] = Some(d);
    }
    Ok(out)
}

/// The high-precision tensor whose per-tile quantization made `q`, and that quantization's
/// scaling and epsilon: `q` is `block_quantize(x).0`, a 2-D transpose of one (a Gemm weight
/// stored `[N, K]`) or a reshape of one (an activation's one-row tiles flattened to 2-D),
/// whose source is then transposed or reshaped the same way.
fn block_source(
    e: &mut Emit<'_>,
    at: &At<'_>,
    q: Value,
    what: &str,
) -> R<(Value, fp8c_ir::BlockScaling, f32)> {
    let node = e.g.node(q.node).clone();
    match &node.op {
        Op::BlockQuantize {
            scaling, epsilon, ..
        } => Ok((node.inputs()[0], *scaling, *epsilon)),
        Op::Transpose { perm } if perm == &[1, 0] => {
            let (x, scaling, epsilon) = block_source(e, at, node.inputs()[0], what)?;
            let xt = e.transpose(&at.n(&format!("{what}.src.t")), x, vec![1, 0])?;
            Ok((xt, scaling, epsilon))
        }
        // Codes of one-row tiles flattened to 2-D (the scaling pass's `x.q.2d`): the source
        // is flattened the same way.
        Op::Reshape { allowzero } => {
            let (x, scaling, epsilon) = block_source(e, at, node.inputs()[0], what)?;
            let x2 = e.op(
                &at.n(&format!("{what}.src.2d")),
                Op::Reshape {
                    allowzero: *allowzero,
                },
                &[x, node.inputs()[1]],
            )?;
            Ok((x2, scaling, epsilon))
        }
        other => Err(at.err(format!(
            "the block-scaled GEMM's {what} comes from {} (not a block_quantize): its backward \
             re-tiles the operand from its high-precision values",
            other.name()
        ))),
    }
}

/// dgrad and wgrad of `block_scaled_matmul { k_block, a_rows: 1, b_cols }(qa, qb, sa, sb)`
/// (issue #16), as TransformerEngine's `Float8BlockScaling` and torchao's rowwise do: each
/// backward GEMM gets operands tiled along its own contraction axis.
///
/// ```text
/// dgrad = bsmm(q_{1×kb}(dY), Wᵀ tiled kb × b, ...)    # dY [M, N] · Wᵀ [N, K]
/// wgrad = bsmm(q_{1×kb}(Xᵀ), q_{kb×1}(dY), ...)       # Xᵀ [K, M] · dY [M, N]
/// ```
///
/// dY is quantized in the recipe's gradient format (E5M2 under HYBRID) with the forward
/// quantization's scaling rule. Wᵀ reuses the forward codes and scales, transposed, when the
/// weight's tiles are square (DeepSeek's 128×128 blocks are their own transpose's tiles);
/// otherwise (1×128 × 128×1, rowwise, MXFP8) W is re-quantized along N from its
/// high-precision values. X is always re-quantized along M (its 1×kb tiles become kb×1 for
/// Xᵀ), from the activation the forward quantized. With `wgrad_high_precision` (torchao's
/// `rowwise_with_gw_hp`) wgrad is the f32 product of that activation and dY.
fn block_scaled_matmul(
    e: &mut Emit<'_>,
    quant: &mut GradQuantizer,
    at: &At<'_>,
    kb: i64,
    b_cols: i64,
) -> R<Grads> {
    let [qa, qb, sb] = [at.ins[0], at.ins[1], at.ins[3]];
    let dy32 = e.cast(&at.n("dy.f32"), at.dy()?, DType::F32)?;
    let (x, scaling, epsilon) = block_source(e, at, qa, "activation")?;
    let (fwd, grad) = (e.dtype(qa), quant.format());
    let bq = |e: &mut Emit<'_>, name: &str, v: Value, to: DType, (rows, cols): (i64, i64)| {
        let o = e.ops(
            &at.n(name),
            Op::BlockQuantize {
                to,
                saturate: true,
                rows,
                cols,
                scaling,
                epsilon,
            },
            &[v],
        )?;
        Ok::<_, IrError>((o[0], o[1]))
    };
    let bsmm = |b_cols| Op::BlockScaledMatMul {
        out: DType::F32,
        k_block: kb,
        a_rows: 1,
        b_cols,
    };
    let mut out = vec![None; 4];
    if at.want(0) {
        let (qdy, sdy) = bq(e, "dgrad.dy", dy32, grad, (1, kb))?;
        let (wt, swt, cols) = if kb > 0 && b_cols == kb {
            let wt = e.transpose(&at.n("dgrad.wt"), qb, vec![1, 0])?;
            let st = e.transpose(&at.n("dgrad.wt.scale_inv"), sb, vec![1, 0])?;
            (wt, st, b_cols)
        } else {
            let (w, ..) = block_source(e, at, qb, "weight")?;
            let w32 = e.cast(&at.n("dgrad.w.f32"), w, DType::F32)?;
            let wt = e.transpose(&at.n("dgrad.wt.f32"), w32, vec![1, 0])?;
            let (q, s) = bq(e, "dgrad.wt", wt, fwd, (kb, 1))?;
            (q, s, 1)
        };
        out[0] = Some(e.op(&at.n("dgrad"), bsmm(cols), &[qdy, wt, sdy, swt])?);
    }
    if at.want(1) && quant.wgrad_high_precision {
        // torchao's rowwise_with_gw_hp: wgrad in f32 from the unquantized activation.
        let x32 = e.cast(&at.n("wgrad.x.f32"), x, DType::F32)?;
        let xt = e.transpose(&at.n("wgrad.xt.f32"), x32, vec![1, 0])?;
        out[1] = Some(e.op(&at.n("wgrad"), Op::MatMul, &[xt, dy32])?);
    } else if at.want(1) {
        let x32 = e.cast(&at.n("wgrad.x.f32"), x, DType::F32)?;
        let xt = e.transpose(&at.n("wgrad.xt.f32"), x32, vec![1, 0])?;
        let (qxt, sxt) = bq(e, "wgrad.xt", xt, fwd, (1, kb))?;
        let (qdy, sdy) = bq(e, "wgrad.dy", dy32, grad, (kb, 1))?;
        out[1] = Some(e.op(&at.n("wgrad"), bsmm(1), &[qxt, qdy, sxt, sdy])?);
    }
    Ok(out)
}
