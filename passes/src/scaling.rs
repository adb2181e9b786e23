//! The scaling pass: materialises every FP8 decision of the precision pass.
//!
//! For each FP8 operand tensor it inserts one `amax`, one `compute_scale` and one `quantize`
//! node (named `{gemm}.x.*` for activations, `{gemm}.w.*` for weights), plus its scaling state
//! exposed as graph state. A tensor read by several FP8 GEMMs (a weight shared by two layers,
//! or the LayerNorm output feeding Q, K and V) is quantized once per step.
//!
//! Delayed scaling (TE's default), for tensor `t` with state `t.amax_history`, `t.scale`,
//! `t.scale_inv`:
//! ```text
//! q          = quantize(x, t.scale)                 # this step uses last step's scale
//! a          = amax(x)
//! rec, next  = amax_history_update(t.amax_history, a)
//! s, s_inv   = compute_scale(rec, t.scale)           # scale from the history, then roll
//! update t.amax_history = next; t.scale = s; t.scale_inv = s_inv
//! ```
//! and the GEMM reads `t.scale_inv` (the inverse of the scale `q` was made with).
//! Current scaling: `a = amax(x); s, s_inv = compute_scale(a, 1.0); q = quantize(x, s)`.
//!
//! GEMMs become `scaled_matmul(qa, qb, sa_inv, sb_inv)` with f32 accumulation (Gemm's
//! transposes, alpha and C become transpose / mul / add around it). Convolutions are kept as
//! convolutions over dequantized FP8 operands (quantize→dequantize→conv), which computes
//! exactly what an FP8 implicit GEMM with f32 accumulation computes, up to summation order.
//!
//! Expert GEMMs (`Rule::ExpertGemm`) whose operand is `gather_nd(table, idx)` of whole expert
//! matrices are rewritten, for inference, as
//! `matmul(block_dequantize(gather_nd(codes, idx), gather_nd(scale_inv, idx)), dequantize(qx))`
//! with `codes, scale_inv = block_quantize(table)` tiled one scale per expert matrix: the
//! table is quantized once (the freeze pass folds it), each expert with its own scale. In
//! training the gathered weights are quantized after the gather like any operand.

use crate::precision::{Precision, Rule};
use crate::{Pass, PassCx};
use fp8c_core::{AmaxComputeAlgo, CurrentScaling, Gemm, Recipe};
use fp8c_ir::{AmaxSource, DType, Graph, IrError, NodeId, Op, Tensor, TensorType, Value};
use serde::Serialize;
use std::collections::HashMap;

/// What the scaling pass inserted (for the report).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScalingStats {
    /// `amax` nodes.
    pub amax: usize,
    /// `compute_scale` nodes.
    pub compute_scale: usize,
    /// `quantize` nodes.
    pub quantize: usize,
    /// `amax_history_update` nodes.
    pub history_update: usize,
    /// State entries added.
    pub state_entries: usize,
    /// Params that are quantized (their FP8 copy replaces them in deployment).
    pub quantized_params: Vec<String>,
}

impl ScalingStats {
    /// amax + compute_scale + quantize nodes (the report's `inserted_nodes`).
    pub fn inserted_nodes(&self) -> usize {
        self.amax + self.compute_scale + self.quantize
    }
}

/// The scaling pass.
pub struct ScalingPass;

impl Pass for ScalingPass {
    fn name(&self) -> &'static str {
        "scaling"
    }

    fn about(&self) -> &'static str {
        "per FP8 operand: amax, compute_scale, quantize nodes and scaling state; GEMM -> scaled_matmul"
    }

    fn run(&self, g: &mut Graph, cx: &mut PassCx) -> Result<bool, IrError> {
        let recipe = cx.options.recipe;
        recipe
            .validate()
            .map_err(|e| IrError::Other(format!("recipe: {e}")))?;
        let fp8: Vec<(String, bool)> = cx
            .decisions
            .iter()
            .filter(|d| d.precision == Precision::Fp8 && d.rule != Rule::AlreadyFp8)
            .map(|d| (d.name.clone(), d.pad))
            .collect();
        let mut overrides = Vec::new();
        for (glob, gran) in &cx.options.policy.granularity {
            let set = crate::precision::compile_globs("--granularity", std::slice::from_ref(glob))
                .map_err(IrError::Other)?;
            overrides.push((set, *gran));
        }
        let mut s = Scaler {
            recipe,
            training: cx.options.train.is_some(),
            cache: HashMap::new(),
            stats: ScalingStats::default(),
            fallbacks: Vec::new(),
            notes: Vec::new(),
            overrides,
        };
        for (name, pad) in &fp8 {
            let id = g
                .find_node(name)
                .ok_or_else(|| IrError::Other(format!("scaling: FP8 node \"{name}\" is gone")))?;
            s.rewrite(g, id, *pad)?;
        }
        g.dce();
        let changed = !fp8.is_empty();
        cx.scaling = s.stats;
        // Every fallback is also the GEMM's own record (--report, run/train summaries).
        for (name, why) in s.fallbacks.drain(..) {
            if let Some(d) = cx.decisions.iter_mut().find(|d| d.name == name) {
                d.scaling_fallback = Some(why.clone());
            }
            cx.notes.push(format!("{name}: {why}"));
        }
        cx.notes.append(&mut s.notes);
        Ok(changed)
    }
}

struct Scaler {
    recipe: Recipe,
    /// A training step is being built (expert tables are then quantized after the gather,
    /// where autodiff's straight-through rules apply).
    training: bool,
    /// Per-GEMM granularity (`PolicyOptions::granularity`), first match winning.
    overrides: Vec<(globset::GlobSet, fp8c_core::Granularity)>,
    /// Quantized form of each tensor already handled: (q, scale_inv).
    cache: HashMap<Value, (Value, Value)>,
    stats: ScalingStats,
    /// `(GEMM, what it got instead and why)` where a GEMM kept per-tensor scaling under a
    /// per-tile recipe, or a `--granularity` was ignored.
    fallbacks: Vec<(String, String)>,
    /// Other notes.
    notes: Vec<String>,
}

impl Scaler {
    fn fmt(&self) -> DType {
        match self.recipe.fp8_format().forward() {
            fp8c_core::Fp8Format::E4M3 => DType::F8E4M3,
            fp8c_core::Fp8Format::E5M2 => DType::F8E5M2,
        }
    }

    /// Quantizes `v` once; `t` is the tensor's name (`fc1.x`).
    fn quantize(&mut self, g: &mut Graph, v: Value, t: &str) -> Result<(Value, Value), IrError> {
        if let Some(&hit) = self.cache.get(&v) {
            return Ok(hit);
        }
        let out = insert_quantize(g, self.recipe, self.fmt(), v, t)?;
        if matches!(self.recipe, Recipe::Delayed(_)) {
            self.stats.history_update += 1;
            self.stats.state_entries += 3;
        }
        self.stats.amax += 1;
        self.stats.compute_scale += 1;
        self.stats.quantize += 1;
        if let Op::Param { name } = &g.node(v.node).op {
            self.stats.quantized_params.push(name.clone());
        }
        self.cache.insert(v, out);
        Ok(out)
    }

    fn rewrite(&mut self, g: &mut Graph, id: NodeId, pad: bool) -> Result<(), IrError> {
        let n = g.node(id).clone();
        let ins = n.inputs().to_vec();
        let out_ty = n.outputs[0].clone();
        if ins.len() < 2 {
            return Err(IrError::node(
                n.name,
                n.op.name(),
                "GEMM needs two operands",
            ));
        }
        let (a_name, b_name) = operand_names(g, &n.name, ins[0], ins[1]);
        let nm = &n.name;
        if let Some((side, gather)) = self.expert_table(g, &n) {
            let names = [a_name.as_str(), b_name.as_str()];
            let result = self.rewrite_expert(g, &n, side, gather, names)?;
            return finish(g, id, &n, result, &out_ty);
        }
        // Per-tile recipes (issue #16): block-scaled GEMMs where the shapes allow them; a
        // `--granularity` glob matching the node picks its own.
        let chosen = self
            .overrides
            .iter()
            .find(|(set, _)| set.is_match(nm))
            .map(|(_, g)| *g);
        if let (Some(g), Recipe::Delayed(_)) = (chosen, self.recipe)
            && g != fp8c_core::Granularity::Tensorwise
        {
            self.fallbacks.push((
                nm.clone(),
                format!(
                    "per-tensor delayed scaling: --granularity {g} ignored (per-tile scaling is current scaling: use --recipe current or a per-tile recipe)"
                ),
            ));
        }
        if let Recipe::Current(r) = self.recipe
            && let r = (CurrentScaling {
                granularity: chosen.unwrap_or(r.granularity),
                ..r
            })
            && let Some(tiling) = r.granularity.tiling()
        {
            let names = (a_name.as_str(), b_name.as_str());
            match crate::block_scaling::rewrite(g, &n, tiling, self.fmt(), &r, names)? {
                Ok(result) => {
                    self.stats.quantize += 2;
                    return finish(g, id, &n, result, &out_ty);
                }
                Err(why) => self.fallbacks.push((
                    nm.clone(),
                    format!("per-tensor scaling instead of {}: {why}", r.granularity),
                )),
            }
        }
        // --pad-to-16: zero-pad the GEMM dims before quantizing (zeros change neither the
        // amax nor the products) and crop the result back.
        let (a, b, crop) = if pad {
            pad_operands(g, &n.op, ins[0], ins[1], nm)?
        } else {
            (ins[0], ins[1], None)
        };
        let (qa, sa) = self.quantize(g, a, &a_name)?;
        let (qb, sb) = self.quantize(g, b, &b_name)?;
        let result = match &n.op {
            Op::MatMul => {
                let y = g.add_node(
                    &format!("{nm}.fp8"),
                    Op::ScaledMatMul {
                        out: out_ty.dtype,
                        fast_accum: self.recipe.fast_accum(Gemm::Fprop),
                    },
                    &[qa, qb, sa, sb],
                )?[0];
                crop_result(g, y, crop, nm)?
            }
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => {
                let t = |g: &mut Graph, v: Value, what: &str| -> Result<Value, IrError> {
                    Ok(g.add_node(
                        &format!("{nm}.{what}.t"),
                        Op::Transpose { perm: vec![1, 0] },
                        &[v],
                    )?[0])
                };
                let qa = if *trans_a { t(g, qa, "x")? } else { qa };
                let qb = if *trans_b { t(g, qb, "w")? } else { qb };
                let y = g.add_node(
                    &format!("{nm}.fp8"),
                    Op::ScaledMatMul {
                        out: out_ty.dtype,
                        fast_accum: self.recipe.fast_accum(Gemm::Fprop),
                    },
                    &[qa, qb, sa, sb],
                )?[0];
                let y = crop_result(g, y, crop, nm)?;
                crate::gemm_tail::gemm_tail(g, nm, y, (*alpha, *beta), ins.get(2).copied())?
            }
            Op::Conv { .. } => {
                let dx = g.add_node(
                    &format!("{a_name}.dq"),
                    Op::Dequantize {
                        to: g.value_type(ins[0]).dtype,
                    },
                    &[qa, sa],
                )?[0];
                let dw = g.add_node(
                    &format!("{b_name}.dq"),
                    Op::Dequantize {
                        to: g.value_type(ins[1]).dtype,
                    },
                    &[qb, sb],
                )?[0];
                let mut conv_in = vec![dx, dw];
                conv_in.extend_from_slice(&ins[2..]);
                g.add_node(&format!("{nm}.fp8"), n.op.clone(), &conv_in)?[0]
            }
            other => {
                return Err(IrError::node(
                    n.name.clone(),
                    other.name(),
                    "not a GEMM-like op",
                ));
            }
        };
        finish(g, id, &n, result, &out_ty)
    }
}

impl Scaler {
    /// For inference, a matmul operand gathered whole from an expert table: `(side, gather
    /// node)` when operand `side` is `gather_nd(table, idx)` (batch_dims 0) of a weight table
    /// `[experts.., R, C]` by indices that pick whole `R × C` matrices.
    fn expert_table(&self, g: &Graph, n: &fp8c_ir::Node) -> Option<(usize, NodeId)> {
        if self.training || !matches!(n.op, Op::MatMul) {
            return None;
        }
        (0..2).find_map(|side| {
            let v = n.inputs()[side];
            let gn = g.node(v.node);
            let Op::GatherNd { batch_dims: 0 } = gn.op else {
                return None;
            };
            let (table, idx) = (gn.inputs()[0], gn.inputs()[1]);
            let picks = g.value_type(idx).shape.last()?.known()?;
            let whole = picks as usize + 2 <= g.value_type(table).rank();
            let used_once = g.users(v).len() == 1;
            // The other operand is the activation (Rule::ExpertGemm's shape).
            let activation = !crate::precision::is_weight(g, n.inputs()[1 - side]);
            (whole
                && used_once
                && activation
                && crate::precision::is_weight(g, table)
                && crate::precision::is_gathered_weight(g, v))
            .then_some((side, v.node))
        })
    }

    /// An expert GEMM at inference: the table is quantized once, one scale per expert (a
    /// `block_quantize` whose tile is a whole expert matrix), the FP8 codes and the scales are
    /// gathered by the router's indices, and the product runs over the dequantized FP8 values
    /// with f32 accumulation (what an FP8 GEMM computes, up to summation order), the other
    /// operand quantized as any activation.
    fn rewrite_expert(
        &mut self,
        g: &mut Graph,
        n: &fp8c_ir::Node,
        side: usize,
        gather: NodeId,
        names: [&str; 2],
    ) -> Result<Value, IrError> {
        let ins = n.inputs().to_vec();
        let (table, idx) = {
            let gi = g.node(gather).inputs();
            (gi[0], gi[1])
        };
        let to = g.value_type(ins[side]).dtype;
        let t = names[side];
        let (scaling, epsilon) = match self.recipe {
            Recipe::Current(r) => (
                if r.power_2_scale {
                    fp8c_ir::BlockScaling::Pow2
                } else {
                    fp8c_ir::BlockScaling::Fp32
                },
                r.amax_epsilon,
            ),
            Recipe::Delayed(d) => (
                if d.power_2_scale {
                    fp8c_ir::BlockScaling::Pow2
                } else {
                    fp8c_ir::BlockScaling::Fp32
                },
                0.0,
            ),
        };
        let (codes, scale_inv) = match self.cache.get(&table) {
            Some(&hit) => hit,
            None => {
                let bq = Op::BlockQuantize {
                    to: self.fmt(),
                    saturate: true,
                    rows: 0,
                    cols: 0,
                    scaling,
                    epsilon,
                };
                let q = g.add_node(&format!("{t}.block_quantize"), bq, &[table])?;
                self.stats.quantize += 1;
                if let Op::Param { name } = &g.node(table.node).op {
                    self.stats.quantized_params.push(name.clone());
                }
                self.cache.insert(table, (q[0], q[1]));
                (q[0], q[1])
            }
        };
        let pick = Op::GatherNd { batch_dims: 0 };
        let qw = g.add_node(&format!("{t}.gather"), pick.clone(), &[codes, idx])?[0];
        let sw = g.add_node(&format!("{t}.scale_gather"), pick, &[scale_inv, idx])?[0];
        let dq = Op::BlockDequantize {
            to,
            rows: 0,
            cols: 0,
        };
        let w = g.add_node(&format!("{t}.dq"), dq, &[qw, sw])?[0];
        let other = ins[1 - side];
        let (qx, sx) = self.quantize(g, other, names[1 - side])?;
        let to_x = g.value_type(other).dtype;
        let x = g.add_node(
            &format!("{}.dq", names[1 - side]),
            Op::Dequantize { to: to_x },
            &[qx, sx],
        )?[0];
        let operands = if side == 0 { [w, x] } else { [x, w] };
        Ok(g.add_node(&format!("{}.fp8", n.name), Op::MatMul, &operands)?[0])
    }
}

/// Replaces GEMM node `id` (`n`) by `result`, which must have its type `out_ty`; the node that
/// now computes the result carries the GEMM's name.
fn finish(
    g: &mut Graph,
    id: NodeId,
    n: &fp8c_ir::Node,
    result: Value,
    out_ty: &TensorType,
) -> Result<(), IrError> {
    if g.value_type(result) != out_ty {
        return Err(IrError::node(
            n.name.clone(),
            n.op.name(),
            format!(
                "FP8 rewrite produced {} instead of {out_ty}",
                g.value_type(result)
            ),
        ));
    }
    g.replace_uses(Value::new(id, 0), result)?;
    g.remove_node(id)?;
    g.rename_node(result.node, &n.name);
    Ok(())
}

/// Inserts the quantization of tensor `v` named `t` (`fc1.x`, `fc1.dy`) in FP8 type `fmt`
/// following `recipe`, with its scaling state for delayed scaling (see the module docs), and
/// returns `(q, scale_inv)`. Shared by the forward scaling pass and the gradient quantizer
/// of autodiff, so both follow the same TE order.
pub fn insert_quantize(
    g: &mut Graph,
    recipe: Recipe,
    fmt: DType,
    v: Value,
    t: &str,
) -> Result<(Value, Value), IrError> {
    let scalar = TensorType::scalar(DType::F32);
    let q_op = Op::Quantize {
        to: fmt,
        saturate: true,
    };
    let out = match recipe {
        Recipe::Delayed(r) => {
            let len = r.amax_history_len as u64;
            let h = g.add_state(
                &format!("{t}.amax_history"),
                TensorType::fixed(DType::F32, &[len]),
                0.0,
            )?;
            let sc = g.add_state(&format!("{t}.scale"), scalar.clone(), 1.0)?;
            let si = g.add_state(&format!("{t}.scale_inv"), scalar, 1.0)?;
            let q = g.add_node(&format!("{t}.q"), q_op, &[v, sc])?[0];
            let a = g.add_node(&format!("{t}.amax"), Op::Amax, &[v])?[0];
            let hist = g.add_node(&format!("{t}.history"), Op::AmaxHistoryUpdate, &[h, a])?;
            let source = match r.amax_compute_algo {
                AmaxComputeAlgo::Max => AmaxSource::HistoryMax,
                AmaxComputeAlgo::MostRecent => AmaxSource::HistoryMostRecent,
            };
            let cs = Op::ComputeScale {
                fmt,
                margin: r.margin,
                source,
                epsilon: 0.0,
                power_2: r.power_2_scale,
            };
            let new = g.add_node(&format!("{t}.compute_scale"), cs, &[hist[0], sc])?;
            g.set_state_update(&format!("{t}.amax_history"), hist[1])?;
            g.set_state_update(&format!("{t}.scale"), new[0])?;
            g.set_state_update(&format!("{t}.scale_inv"), new[1])?;
            (q, si)
        }
        Recipe::Current(r) => {
            let a = g.add_node(&format!("{t}.amax"), Op::Amax, &[v])?[0];
            let one = g.add_node(
                &format!("{t}.scale_init"),
                Op::Constant {
                    value: Tensor::scalar_f32(1.0),
                },
                &[],
            )?[0];
            let cs = Op::ComputeScale {
                fmt,
                margin: 0.0,
                source: AmaxSource::Current,
                epsilon: r.amax_epsilon,
                power_2: r.power_2_scale,
            };
            let sc = g.add_node(&format!("{t}.compute_scale"), cs, &[a, one])?;
            let q = g.add_node(&format!("{t}.q"), q_op, &[v, sc[0]])?[0];
            (q, sc[1])
        }
    };
    Ok(out)
}

/// Names of a GEMM's two operand tensors, which name their nodes and scaling state: `.x` for
/// an activation and `.w` for a weight (`fc1.x`, `fc1.w`); two activations are `.x` and `.y`,
/// two weights `.w` and `.w2`; an expert's weights gathered from a table are a weight.
/// (`fp8c run --calibrate` finds each tensor's state by them.)
pub fn operand_names(g: &Graph, gemm: &str, a: Value, b: Value) -> (String, String) {
    let w = |v| crate::precision::is_weight(g, v) || crate::precision::is_gathered_weight(g, v);
    let (sa, sb) = match (w(a), w(b)) {
        (false, true) => ("x", "w"),
        (true, false) => ("w", "x"),
        (false, false) => ("x", "y"),
        (true, true) => ("w", "w2"),
    };
    (format!("{gemm}.{sa}"), format!("{gemm}.{sb}"))
}

/// Extra rows/columns to reach the next multiple of 16 (0 for unknown dims).
fn to16(d: Option<u64>) -> u64 {
    d.map_or(0, |d| d.next_multiple_of(16) - d)
}

/// Zero-pads the operands of a MatMul (2-D right operand) or Gemm so that N and K are
/// multiples of 16 (M needs no padding: `precision::misaligned` says why). Returns the padded operands and the (axes, sizes) to crop the result to.
type Crop = Option<(Vec<i64>, Vec<u64>)>;
fn pad_operands(
    g: &mut Graph,
    op: &Op,
    a: Value,
    b: Value,
    nm: &str,
) -> Result<(Value, Value, Crop), IrError> {
    let dims = |g: &Graph, v: Value| -> Vec<Option<u64>> {
        g.value_type(v).shape.iter().map(|d| d.known()).collect()
    };
    let (da, db) = (dims(g, a), dims(g, b));
    let (ra, rb) = (da.len(), db.len());
    // (axis of a for M, axis of a for K, axis of b for K, axis of b for N)
    let axes = match op {
        Op::MatMul if ra >= 2 && rb == 2 => (ra - 2, ra - 1, 0, 1),
        Op::Gemm {
            trans_a, trans_b, ..
        } if ra == 2 && rb == 2 => {
            let (am, ak) = if *trans_a { (1, 0) } else { (0, 1) };
            let (bk, bn) = if *trans_b { (1, 0) } else { (0, 1) };
            (am, ak, bk, bn)
        }
        _ => return Ok((a, b, None)),
    };
    let (_, ak, bk, bn) = axes;
    let (k, n) = (da[ak], db[bn]);
    let pa = pad_axes(g, a, &[(ak, to16(k))], &format!("{nm}.a.pad"))?;
    let pb = pad_axes(
        g,
        b,
        &[(bk, to16(k)), (bn, to16(n))],
        &format!("{nm}.b.pad"),
    )?;
    let crop = match n {
        Some(n) if to16(Some(n)) > 0 => {
            let out_rank = if matches!(op, Op::Gemm { .. }) { 2 } else { ra };
            Some((vec![out_rank as i64 - 1], vec![n]))
        }
        _ => None,
    };
    Ok((pa, pb, crop))
}

/// `pad(v)` with zeros at the end of the given axes (v itself when nothing is padded).
fn pad_axes(g: &mut Graph, v: Value, extra: &[(usize, u64)], name: &str) -> Result<Value, IrError> {
    if extra.iter().all(|&(_, e)| e == 0) {
        return Ok(v);
    }
    let ty = g.value_type(v).clone();
    let r = ty.rank();
    let mut pads = vec![0i64; 2 * r];
    for &(axis, e) in extra {
        pads[r + axis] = e as i64;
    }
    let p = g.add_node(
        &format!("{name}.amounts"),
        Op::Constant {
            value: Tensor::from_i64(vec![2 * r as u64], &pads),
        },
        &[],
    )?[0];
    let z = g.add_node(
        &format!("{name}.zero"),
        Op::Constant {
            value: scalar_of(ty.dtype, 0.0)?,
        },
        &[],
    )?[0];
    Ok(g.add_node(
        name,
        Op::Pad {
            mode: fp8c_ir::PadMode::Constant,
        },
        &[v, p, z],
    )?[0])
}

/// Crops a padded GEMM result back to its real size.
fn crop_result(g: &mut Graph, y: Value, crop: Crop, nm: &str) -> Result<Value, IrError> {
    let Some((axes, ends)) = crop else {
        return Ok(y);
    };
    let k = axes.len() as u64;
    let c = |g: &mut Graph, what: &str, vals: &[i64]| -> Result<Value, IrError> {
        Ok(g.add_node(
            &format!("{nm}.crop.{what}"),
            Op::Constant {
                value: Tensor::from_i64(vec![k], vals),
            },
            &[],
        )?[0])
    };
    let starts = c(g, "starts", &vec![0; axes.len()])?;
    let ends_v = c(
        g,
        "ends",
        &ends.iter().map(|&e| e as i64).collect::<Vec<_>>(),
    )?;
    let axes_v = c(g, "axes", &axes)?;
    let steps = c(g, "steps", &vec![1; axes.len()])?;
    Ok(g.add_node(
        &format!("{nm}.crop"),
        Op::Slice,
        &[y, starts, ends_v, axes_v, steps],
    )?[0])
}

fn scalar_of(dt: DType, v: f64) -> Result<Tensor, IrError> {
    Tensor::from_f64_as(dt, vec![], &[v]).map_err(IrError::Other)
}
