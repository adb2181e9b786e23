//! Calibration of delayed scaling, as TransformerEngine's `fp8_calibration` does it: run
//! calibration inputs through the f32 path, record the amax of every GEMM operand into its
//! tensor's amax history, and compute the scale from it.
//!
//! Calibrating through the FP8 program instead would record amaxes of activations already
//! distorted by the initial scales (1.0) of the layers above.

use crate::error::{Error, Result};
use crate::runner::Runner;
use fp8c_core::{AmaxComputeAlgo, DelayedScaling, Fp8Format};
use fp8c_ir::{AmaxSource, DType, Graph, NodeId, Op, Tensor};
use fp8c_runtime::Step;
use std::collections::BTreeMap;

/// What [`calibrate`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    /// FP8 tensors whose history and scale were filled.
    pub calibrated: usize,
    /// FP8 tensors with an amax history in the target.
    pub total: usize,
}

/// Fills the delayed-scaling state of `target` (an FP8 program compiled with `recipe`) from
/// `inputs` run through `reference`, the same model compiled in f32.
pub fn calibrate(
    target: &mut Runner,
    reference: &mut Runner,
    inputs: &BTreeMap<String, Tensor>,
    recipe: &DelayedScaling,
) -> Result<Calibration> {
    let state = target.state();
    let hist = |t: &str| format!("{t}.amax_history");
    let g32 = reference.graph().clone();
    // GEMM node name → the scaling pass's names of its two FP8 operands (`fc1.x`, `fc1.w`).
    let names: BTreeMap<String, [String; 2]> = g32
        .node_ids()
        .into_iter()
        .filter(|&id| g32.node(id).op.is_gemm_like())
        .filter_map(|id| Some((g32.node(id).name.clone(), operand_names(&g32, id)?)))
        .collect();
    let mut amax: BTreeMap<String, f32> = BTreeMap::new();
    let mut observe = |s: &Step, ins: &[&Tensor], _: &[Tensor]| {
        let Some(operands) = names.get(&s.node) else {
            return;
        };
        for (t, x) in operands.iter().zip(ins) {
            if !state.contains_key(&hist(t)) {
                continue;
            }
            let Ok(v) = x.to_f32_vec() else { continue };
            let m = fp8c_core::amax_f32(&v);
            let e = amax.entry(t.clone()).or_insert(m);
            *e = fp8c_core::amax_f32(&[*e, m]);
        }
    };
    reference.run_observed(inputs, &mut observe)?;
    let compute = compute_scale_op(recipe);
    let total = state
        .keys()
        .filter(|k| k.ends_with(".amax_history"))
        .count();
    for (t, m) in &amax {
        let (scale, scale_inv) = (format!("{t}.scale"), format!("{t}.scale_inv"));
        let (Some(h), Some(prev)) = (state.get(&hist(t)), state.get(&scale)) else {
            continue;
        };
        let tensor_err = |e: fp8c_eval::EvalError| Error::Invalid(format!("tensor {t}: {e}"));
        let mut upd = fp8c_eval::eval_op(&Op::AmaxHistoryUpdate, &[h, &Tensor::scalar_f32(*m)])
            .map_err(tensor_err)?;
        let mut s = fp8c_eval::eval_op(&compute, &[&upd[0], prev]).map_err(tensor_err)?;
        target.set_state(&hist(t), upd.remove(1))?;
        target.set_state(&scale_inv, s.remove(1))?;
        target.set_state(&scale, s.remove(0))?;
    }
    Ok(Calibration {
        calibrated: amax.len(),
        total,
    })
}

/// The scaling pass's names of a GEMM's two FP8 operand tensors.
pub(crate) fn operand_names(g: &Graph, id: NodeId) -> Option<[String; 2]> {
    let n = g.node(id);
    let (&a, &b) = (n.inputs().first()?, n.inputs().get(1)?);
    let (x, w) = fp8c_passes::scaling::operand_names(g, &n.name, a, b);
    Some([x, w])
}

/// The `ComputeScale` op of a delayed recipe's forward format (history → scale, scale_inv).
fn compute_scale_op(recipe: &DelayedScaling) -> Op {
    let fmt = match recipe.fp8_format.forward() {
        Fp8Format::E4M3 => DType::F8E4M3,
        Fp8Format::E5M2 => DType::F8E5M2,
    };
    Op::ComputeScale {
        fmt,
        margin: recipe.margin,
        source: match recipe.amax_compute_algo {
            AmaxComputeAlgo::Max => AmaxSource::HistoryMax,
            AmaxComputeAlgo::MostRecent => AmaxSource::HistoryMostRecent,
        },
        epsilon: 0.0,
        power_2: recipe.power_2_scale,
    }
}
