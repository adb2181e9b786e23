//! A training step split at its reductions (`TrainSpec::split`), for data-parallel training
//! and any run whose step spans several micro-batches on several ranks.
//!
//! The autodiff pass then builds one graph of two disconnected parts:
//! - the **micro-batch** part: forward and backward of one micro-batch; its outputs are
//!   `loss`, each trained parameter's raw gradient `grad.{param}`, and the amax each delayed
//!   scaling history would record, `amax.{history}` (plus the trained output when kept);
//! - the **apply** part: the step's update from the reduced values, which it reads as inputs
//!   — `train.grad.{param}` (the gradients summed over every micro-batch of the step, in the
//!   step's micro-batch order), `train.amax.{history}` (the maximum over them) and
//!   `train.loss` (non-finite when any micro-batch's loss was) — then the mean over the
//!   `accumulate` micro-batches (`sum · (1/n)`, the operation in-graph accumulation uses),
//!   clipping, the optimizer, the history and scale updates, the non-finite guard and the
//!   counters; every state update is here.
//!
//! [`split_step`] cuts the compiled graph into the two graphs. A caller runs the micro-batch
//! graph once per micro-batch, reduces its outputs across micro-batches and ranks, and runs
//! the apply graph once per step; the micro-batch graph reads the state the apply graph
//! writes (weights, scales).

use super::emit::Emit;
use fp8c_ir::{DType, Graph, IrError, Op, TensorType, Value};

type R<T> = Result<T, IrError>;

/// Prefix of a micro-batch gradient output (`grad.fc1.weight`).
pub const GRAD_OUTPUT: &str = "grad.";
/// Prefix of a micro-batch amax output (`amax.fc1.x.amax_history`).
pub const AMAX_OUTPUT: &str = "amax.";
/// Prefix of the apply part's reduced-gradient inputs (`train.grad.fc1.weight`).
pub const GRAD_INPUT: &str = "train.grad.";
/// Prefix of the apply part's reduced-amax inputs.
pub const AMAX_INPUT: &str = "train.amax.";
/// The apply part's loss input (only its finiteness matters).
pub const LOSS_INPUT: &str = "train.loss";

/// Outputs each raw gradient of `grads` (`(param, gradient)`) as `grad.{param}` and returns
/// what the update reads instead: the input `train.grad.{param}` times `1/n` (`n` > 1).
pub(crate) fn cut_gradients(e: &mut Emit<'_>, grads: &[(String, Value)], n: u32) -> R<Vec<Value>> {
    let mut out = Vec::with_capacity(grads.len());
    for (name, g) in grads {
        let ty = e.ty(*g);
        if ty.dtype != DType::F32 {
            return Err(IrError::Other(format!(
                "split training step: the gradient of \"{name}\" is {}, only f32 gradients are reduced",
                ty.dtype
            )));
        }
        e.g.set_output(&format!("{GRAD_OUTPUT}{name}"), *g)?;
        let input = e.g.add_input(&format!("{GRAD_INPUT}{name}"), ty.clone())?;
        out.push(if n > 1 {
            let state = format!("{name}.grad_acc");
            let inv = e.scalar(&format!("{state}.inv_n"), ty.dtype, 1.0 / f64::from(n))?;
            e.mul(&format!("{state}.mean"), input, inv)?
        } else {
            input
        });
    }
    Ok(out)
}

/// Prefix of the micro-batch part's FP8-code weight inputs (`train.fp8.fc1.weight`).
pub const FP8_WEIGHT_INPUT: &str = "train.fp8.";
/// Prefix of the micro-batch part's weight-amax inputs (`train.wamax.fc1.w.amax_history`).
pub const WEIGHT_AMAX_INPUT: &str = "train.wamax.";

/// A weight the micro-batch part reads as FP8 codes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fp8Weight {
    /// The trained parameter (f32 master weight, a state entry of the apply part).
    pub param: String,
    /// Its FP8 format.
    pub format: DType,
    /// The state entry holding the scale it is quantized with (`{gemm}.w.scale`).
    pub scale: String,
    /// The delayed-scaling history its amax feeds, if any (its input is
    /// `train.wamax.{history}`).
    pub history: Option<String>,
}

/// Makes the micro-batch side read FP8 weights as codes: each trained parameter whose only
/// batch-side uses are one `quantize(param, scale state)` and `amax(param)` (delayed
/// scaling) gets the input `train.fp8.{param}` in place of the quantized value and
/// `train.wamax.{history}` in place of its amax; a parameter read otherwise (a tied
/// embedding, a high-precision GEMM) is left as it is. Bits are unchanged when the inputs
/// hold `quantize(param, scale)` and `amax(param)`, which is what the owners of a sharded
/// update compute. Returns the rewritten weights, in `params` order.
pub fn fp8_weight_inputs(g: &mut Graph, params: &[String]) -> R<Vec<Fp8Weight>> {
    let mut out = Vec::new();
    for p in params {
        let Some(id) = g.find_interface(p) else {
            continue;
        };
        let v = Value { node: id, slot: 0 };
        let users = g.users(v);
        let (mut quant, mut amax, mut other) = (Vec::new(), Vec::new(), false);
        for &(u, slot) in &users {
            match &g.node(u).op {
                Op::Quantize { saturate: true, .. } if slot == 0 => quant.push(u),
                Op::Amax => amax.push(u),
                Op::AdamwUpdate { .. } | Op::SgdUpdate { .. } | Op::Where => {}
                _ => other = true,
            }
        }
        if other || quant.len() != 1 || amax.len() > 1 {
            continue;
        }
        let q = quant[0];
        let scale_node = g.node(q).inputs()[1].node;
        let Op::State { name: scale } = &g.node(scale_node).op else {
            continue;
        };
        let scale = scale.clone();
        let Op::Quantize { to: format, .. } = g.node(q).op else {
            unreachable!("matched above");
        };
        // The amax feeds one history update (delayed scaling).
        let history = match amax.first() {
            None => None,
            Some(&a) => {
                let av = Value { node: a, slot: 0 };
                let hist = g.users(av).into_iter().find_map(|(u, _)| {
                    let n = g.node(u);
                    match (&n.op, n.inputs().first()) {
                        (Op::AmaxHistoryUpdate, Some(h)) => match &g.node(h.node).op {
                            Op::State { name } => Some(name.clone()),
                            _ => None,
                        },
                        _ => None,
                    }
                });
                let Some(hist) = hist else { continue };
                let input = g.add_input(
                    &format!("{WEIGHT_AMAX_INPUT}{hist}"),
                    TensorType::scalar(DType::F32),
                )?;
                g.replace_uses(av, input)?;
                Some(hist)
            }
        };
        let qv = Value { node: q, slot: 0 };
        let ty = g.value_type(qv).clone();
        let input = g.add_input(&format!("{FP8_WEIGHT_INPUT}{p}"), ty)?;
        g.replace_uses(qv, input)?;
        out.push(Fp8Weight {
            param: p.clone(),
            format,
            scale,
            history,
        });
    }
    Ok(out)
}

/// The loss the update's non-finite check reads: the input `train.loss`.
pub(crate) fn loss_input(e: &mut Emit<'_>) -> R<Value> {
    e.g.add_input(LOSS_INPUT, TensorType::scalar(DType::F32))
}

/// Outputs the amax every `amax_history_update` records as `amax.{history}` and makes the
/// update read `train.amax.{history}` instead; returns the new output names.
pub(crate) fn cut_amaxes(g: &mut Graph) -> R<Vec<String>> {
    let ids: Vec<_> = g
        .node_ids()
        .into_iter()
        .filter(|&id| matches!(g.node(id).op, Op::AmaxHistoryUpdate))
        .collect();
    let mut names = Vec::new();
    for id in ids {
        let node = g.node(id).clone();
        let (hist, amax) = (node.inputs()[0], node.inputs()[1]);
        let Op::State { name } = &g.node(hist.node).op else {
            return Err(IrError::node(
                node.name.clone(),
                node.op.name(),
                "split training step: the history is not a state entry",
            ));
        };
        let name = name.clone();
        let ty = g.value_type(amax).clone();
        let out = format!("{AMAX_OUTPUT}{name}");
        g.set_output(&out, amax)?;
        let input = g.add_input(&format!("{AMAX_INPUT}{name}"), ty)?;
        g.set_input(id, 1, input)?;
        names.push(out);
    }
    Ok(names)
}

/// The two graphs of a split step: the micro-batch graph (outputs `loss`, `grad.*`, `amax.*`
/// and any other output that depends on the batch; no state updates) and the apply graph
/// (the remaining outputs and every state update; inputs `train.grad.*`, `train.amax.*`,
/// `train.loss`). Errors if the parts are not separate (an update that reads the batch).
pub fn split_step(g: &Graph) -> R<(Graph, Graph)> {
    let is_cut_input =
        |n: &str| n.starts_with(GRAD_INPUT) || n.starts_with(AMAX_INPUT) || n == LOSS_INPUT;
    let inputs: Vec<String> = g
        .inputs()
        .iter()
        .map(|&id| fp8c_ir::interface_name(&g.node(id).op).to_string())
        .collect();
    if !inputs.iter().any(|n| is_cut_input(n)) {
        return Err(IrError::Other(
            "split_step: the graph was not built as a split step (TrainSpec::split)".into(),
        ));
    }
    // Which nodes depend on the batch (inputs other than the reduced values)?
    let order = g.topo_order()?;
    let mut batch = std::collections::HashSet::new();
    for &id in &order {
        let n = g.node(id);
        let fed = match &n.op {
            Op::Input { name } => !is_cut_input(name),
            _ => n.inputs().iter().any(|v| batch.contains(&v.node)),
        };
        if fed {
            batch.insert(id);
        }
    }
    let keep: Vec<String> = g.outputs().iter().map(|o| o.name.clone()).collect();
    let (micro_out, apply_out): (Vec<String>, Vec<String>) = keep.into_iter().partition(|name| {
        let o = g
            .outputs()
            .iter()
            .find(|o| &o.name == name)
            .expect("an output");
        // Every amax goes to the micro-batch side, a weight's too (it reads no batch): the
        // reduction takes the maximum of all of them alike.
        batch.contains(&o.value.node) || name.starts_with(AMAX_OUTPUT)
    });
    let mut micro = g.clone();
    micro.select_outputs(&micro_out)?;
    micro.clear_state_updates();
    micro.dce();
    for n in inputs.iter().filter(|n| is_cut_input(n)) {
        micro.remove_input(n)?;
    }
    let mut apply = g.clone();
    apply.select_outputs(&apply_out)?;
    apply.dce();
    for n in inputs.iter().filter(|n| !is_cut_input(n)) {
        apply.remove_input(n).map_err(|e| {
            IrError::Other(format!(
                "split_step: the step's update reads the batch input \"{n}\" ({e})"
            ))
        })?;
    }
    Ok((micro, apply))
}

/// One trained parameter's part of a rank's shard of the update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSlice {
    /// The parameter.
    pub param: String,
    /// The elements `start..end` of its flattened value this rank updates.
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// Its state entries of the parameter's shape, now holding only those elements: the
    /// parameter itself, then its optimizer moments (`.m`, `.v`, or `.momentum`).
    pub states: Vec<String>,
}

/// Shards the update of a split step (ZeRO-1 style): of the flat buffer that concatenates
/// the trained parameters `params` (`(name, shape)`, in the gradient buffer's order), this
/// rank updates the elements `range`. Each parameter's optimizer state (the f32 master copy
/// and its moments) keeps only its part of that range — a slice of the flattened tensor,
/// updated from the same slice of the reduced gradient — and a parameter outside the range
/// leaves the graph. Elementwise optimizers give each element the bits of the unsharded
/// update. Returns what this rank keeps, in `params` order.
pub fn shard_update(
    apply: &mut Graph,
    params: &[(String, Vec<u64>)],
    range: (u64, u64),
) -> R<Vec<ShardSlice>> {
    let mut kept = Vec::new();
    let mut at = 0u64;
    for (p, shape) in params {
        let n: u64 = shape.iter().product();
        let (a, b) = (at, at + n);
        at = b;
        let (s, e) = (range.0.max(a), range.1.min(b));
        let Some(opt) = apply.node_ids().into_iter().find(|&id| {
            let node = apply.node(id);
            matches!(node.op, Op::AdamwUpdate { .. } | Op::SgdUpdate { .. })
                && matches!(&apply.node(node.inputs()[0].node).op, Op::State { name } if name == p)
        }) else {
            return Err(IrError::Other(format!(
                "shard_update: no optimizer step updates \"{p}\""
            )));
        };
        let node = apply.node(opt).clone();
        let state_inputs: Vec<usize> = match node.op {
            Op::AdamwUpdate { .. } => vec![0, 2, 3],
            _ => vec![0, 2],
        };
        let states: Vec<String> = state_inputs
            .iter()
            .map(|&i| fp8c_ir::interface_name(&apply.node(node.inputs()[i].node).op).to_string())
            .collect();
        if s >= e {
            for st in &states {
                apply.remove_state_update(st);
            }
            continue;
        }
        let len = e - s;
        for &i in &state_inputs {
            let id = node.inputs()[i].node;
            let dtype = apply.value_type(node.inputs()[i]).dtype;
            for (user, _) in apply.users(node.inputs()[i]) {
                let ok = user == opt || matches!(apply.node(user).op, Op::Where);
                if !ok {
                    return Err(IrError::node(
                        apply.node(user).name.clone(),
                        apply.node(user).op.name(),
                        format!(
                            "shard_update: reads \"{}\" besides its optimizer step",
                            states[state_inputs.iter().position(|&j| j == i).unwrap_or(0)]
                        ),
                    ));
                }
            }
            apply.set_interface_type(id, TensorType::fixed(dtype, &[len]))?;
        }
        let mut em = Emit::new(apply);
        let g = node.inputs()[1];
        let flat = em.reshape(&format!("{p}.shard.flat"), g, &[n])?;
        let starts = em.i64s(&format!("{p}.shard.starts"), &[(s - a) as i64])?;
        let ends = em.i64s(&format!("{p}.shard.ends"), &[(e - a) as i64])?;
        let axes = em.i64s(&format!("{p}.shard.axes"), &[0])?;
        let steps = em.i64s(&format!("{p}.shard.steps"), &[1])?;
        let part = em.op(
            &format!("{p}.shard"),
            Op::Slice,
            &[flat, starts, ends, axes, steps],
        )?;
        apply.set_input(opt, 1, part)?;
        kept.push(ShardSlice {
            param: p.clone(),
            start: s - a,
            end: e - a,
            states,
        });
    }
    apply.dce();
    apply.reinfer()?;
    fp8c_ir::verify(apply)?;
    Ok(kept)
}
