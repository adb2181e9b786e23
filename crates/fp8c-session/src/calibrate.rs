//! Calibration of delayed scaling, as TransformerEngine's `fp8_calibration` does it: run
//! calibration inputs through the f32 path, record the amax of every GEMM operand into its
//! tensor's amax history, and compute the scale from it.
//!
//! Calibrating through the FP8 program instead would record amaxes of activations already
//! distorted by the initial scales (1.0) of the layers above.
//!
//! Only finite values count: an Inf or NaN among a tensor's values is left out of its amax
//! (TE would record the infinite amax and keep the initial scale), and [`Calibration`] says
//! per FP8 tensor how many of its values were finite. A tensor with no finite non-zero value
//! (all NaN, all zero, no samples) has no scale to take, and is an error naming it, never a
//! silent scale of 1.0.

use crate::error::{Error, Result};
use crate::runner::Runner;
use fp8c_core::{AmaxComputeAlgo, DelayedScaling, Fp8Format};
use fp8c_ir::{AmaxSource, DType, Graph, NodeId, Op, Tensor};
use fp8c_runtime::Step;
use std::collections::BTreeMap;

/// What [`calibrate`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    /// FP8 tensors whose history and scale were filled.
    pub calibrated: usize,
    /// FP8 tensors with an amax history in the target.
    pub total: usize,
    /// What calibration saw of each FP8 tensor, by name.
    pub tensors: Vec<TensorCalibration>,
}

/// The values calibration saw of one FP8 tensor (every GEMM reading it, every input).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorCalibration {
    /// The scaling pass's name of the tensor (`fc1.x`).
    pub name: String,
    /// Values seen.
    pub values: u64,
    /// Finite values among them (the amax is theirs).
    pub finite: u64,
    /// The largest magnitude of the finite values (0 when there are none).
    pub amax: f32,
}

impl Calibration {
    /// One line per FP8 tensor with values that were not finite (left out of its amax), for
    /// printing; empty when every value was finite.
    pub fn notes(&self) -> Vec<String> {
        self.tensors
            .iter()
            .filter(|t| t.finite < t.values)
            .map(|t| {
                format!(
                    "calibration: FP8 tensor {}: {} of {} values finite (the {} Inf/NaN left out; amax {} from the finite ones)",
                    t.name,
                    t.finite,
                    t.values,
                    t.values - t.finite,
                    t.amax
                )
            })
            .collect()
    }
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
    // Per tensor: (values, finite values, amax of the finite ones).
    let mut seen: BTreeMap<String, (u64, u64, f32)> = BTreeMap::new();
    let mut observe = |s: &Step, ins: &[&Tensor], _: &[Tensor]| {
        let Some(operands) = names.get(&s.node) else {
            return;
        };
        for (t, x) in operands.iter().zip(ins) {
            if !state.contains_key(&hist(t)) {
                continue;
            }
            let Ok(v) = x.to_f32_vec() else { continue };
            let e = seen.entry(t.clone()).or_insert((0, 0, 0.0));
            e.0 += v.len() as u64;
            for x in v.iter().filter(|x| x.is_finite()) {
                e.1 += 1;
                e.2 = e.2.max(x.abs());
            }
        }
    };
    reference.run_observed(inputs, &mut observe)?;
    let compute = compute_scale_op(recipe);
    let total = state
        .keys()
        .filter(|k| k.ends_with(".amax_history"))
        .count();
    // Every FP8 tensor needs a finite, non-zero amax: its scale is computed from it.
    for k in state.keys() {
        let Some(t) = k.strip_suffix(".amax_history") else {
            continue;
        };
        let (values, finite, m) = seen.get(t).copied().unwrap_or_default();
        if m == 0.0 {
            let what = if values == 0 {
                "no values (no calibration samples reach it)".to_string()
            } else if finite == 0 {
                format!("no finite value (all {values} are Inf or NaN)")
            } else {
                format!("only zeros among its {finite} finite values (of {values})")
            };
            return Err(Error::Invalid(format!(
                "FP8 tensor {t} saw {what}: its scale cannot be calibrated (it would stay 1.0); \
                 give calibration inputs that reach it with finite, non-zero values"
            )));
        }
    }
    for (t, &(values, finite, m)) in &seen {
        tracing::info!("calibration: FP8 tensor {t}: {finite} of {values} values finite, amax {m}");
        let (scale, scale_inv) = (format!("{t}.scale"), format!("{t}.scale_inv"));
        let (Some(h), Some(prev)) = (state.get(&hist(t)), state.get(&scale)) else {
            continue;
        };
        let tensor_err = |e: fp8c_eval::EvalError| Error::Invalid(format!("tensor {t}: {e}"));
        let mut upd = fp8c_eval::eval_op(&Op::AmaxHistoryUpdate, &[h, &Tensor::scalar_f32(m)])
            .map_err(tensor_err)?;
        let mut s = fp8c_eval::eval_op(&compute, &[&upd[0], prev]).map_err(tensor_err)?;
        target.set_state(&hist(t), upd.remove(1))?;
        target.set_state(&scale_inv, s.remove(1))?;
        target.set_state(&scale, s.remove(0))?;
    }
    Ok(Calibration {
        calibrated: seen.len(),
        total,
        tensors: seen
            .into_iter()
            .map(|(name, (values, finite, amax))| TensorCalibration {
                name,
                values,
                finite,
                amax,
            })
            .collect(),
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
