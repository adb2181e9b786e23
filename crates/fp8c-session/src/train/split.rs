//! A training step over several micro-batches, on one rank or many: the split step's two
//! executables (`fp8c_passes::autodiff::split`) and the reductions between them, in one
//! place.
//!
//! A step of `ranks × accumulate` micro-batches: global micro-batch `k = step·total +
//! rank·accumulate + j` is rank `rank`'s `j`-th, so a run reads the same samples whatever the
//! number of ranks. Per step:
//! 1. the micro-batch executable reads the apply executable's current state (weights,
//!    scales) and runs each local micro-batch, giving its loss, gradients and amaxes;
//! 2. **gradients** are summed in global micro-batch order, `((0 + g₀) + g₁) + …`, whatever the
//!    number of ranks: each rank sends chunk `c` of each of its gradients to rank `c` (one
//!    all-to-all), which sums its chunk of all of them in that order, and an all-gather
//!    returns the whole sum to every rank — f32 additions in one fixed order, so the bits do
//!    not depend on how the micro-batches are spread over ranks;
//! 3. **amaxes**: the maximum over the step's micro-batches, MAX-reduced across ranks in one
//!    buffer before the history update (TransformerEngine's `reduce_amax`; off in the recipe,
//!    each rank keeps its own);
//! 4. **the non-finite decision**: the apply executable's loss input is non-finite when any
//!    micro-batch's loss was, on any rank; the loss logged is the mean over the step's
//!    micro-batches summed in global order, the accuracy that of the whole step's batch;
//! 5. the apply executable runs once with the reduced values: every rank applies the same
//!    update to the same state.

use super::data::Dataset;
use super::trainer::StepReport;
use crate::error::{Error, Result, bail};
use fp8c_dist::Collective;
use fp8c_ir::{Graph, Tensor};
use fp8c_passes::autodiff::split::{
    AMAX_INPUT, AMAX_OUTPUT, FP8_WEIGHT_INPUT, Fp8Weight, GRAD_INPUT, GRAD_OUTPUT, LOSS_INPUT,
    ShardSlice, WEIGHT_AMAX_INPUT,
};
use fp8c_passes::autodiff::{POISON_INPUT, TrainSpec};
use fp8c_runtime::{Executable, Profile, Program};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The micro-batch half of a split step, and how the step's reductions are laid out.
pub(crate) struct SplitStep {
    /// The micro-batch graph, its program and executable.
    pub graph: Graph,
    pub program: Program,
    pub exe: Box<dyn Executable>,
    /// The state entries the micro-batch graph reads (refreshed from the apply side).
    pub reads: Vec<String>,
    /// Trained parameters with a gradient, in flat-buffer order, with their shapes.
    pub grads: Vec<(String, Vec<u64>)>,
    /// Delayed-scaling histories whose amax the step records, in buffer order.
    pub amaxes: Vec<String>,
    /// The group of ranks.
    pub comm: Arc<dyn Collective>,
    /// Micro-batches per rank per step.
    pub local: u64,
    /// MAX-reduce the amaxes across ranks (TE's `reduce_amax`).
    pub reduce_amax: bool,
    /// This rank's part of a sharded update (`--shard optimizer`).
    pub shard: Option<Shard>,
    /// The weights the micro-batch graph reads as FP8 codes (`--fp8-all-gather`).
    pub fp8: Vec<Fp8Weight>,
    /// Their codes and amaxes, as the micro-batch graph reads them (set by `refresh`).
    pub fp8_inputs: BTreeMap<String, Tensor>,
    /// Bytes this rank contributed to the weights' all-gathers: f32 weights, FP8 codes.
    pub gathered: (u64, u64),
    /// How many times the weights were gathered.
    pub refreshes: u64,
}

/// How a split step is spread over its ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parallel {
    /// Each rank keeps and updates 1/N of the f32 master weights and optimizer moments
    /// (ZeRO-1): the reduced gradient is sliced, the updated slices all-gathered.
    pub shard_optimizer: bool,
    /// With `shard_optimizer`: the FP8 GEMM weights are all-gathered as FP8 codes, each
    /// owner quantizing its slice with the weight's (replicated) scale, and their amaxes
    /// MAX-reduced (torchao's `enable_fsdp_float8_all_gather`); delayed scaling only.
    pub fp8_all_gather: bool,
}

/// This rank's part of a sharded update.
pub(crate) struct Shard {
    /// The parameter slices this rank updates, in flat order.
    pub slices: Vec<ShardSlice>,
    /// The state-name suffixes of each parameter's sharded entries, in order: `""` (the
    /// master weight), then the moments (`.m`, `.v` or `.momentum`).
    pub kinds: Vec<String>,
}

/// What one rank's micro-batches of a step gave.
struct Local {
    /// Flat gradients, one buffer per micro-batch (one running sum on a single rank).
    grads: Vec<Vec<f32>>,
    amax: Vec<f32>,
    losses: Vec<f64>,
    /// Rows whose argmax is the label, and rows counted (classification outputs).
    hits: (u64, u64),
}

/// The reduced values of a step, as the apply executable reads them.
pub(crate) struct Reduced {
    pub inputs: BTreeMap<String, Tensor>,
    pub loss: f64,
    pub accuracy: Option<f64>,
}

impl SplitStep {
    /// Number of ranks × micro-batches per rank.
    pub fn total(&self) -> u64 {
        self.comm.size() as u64 * self.local
    }

    /// Elements of the flat gradient buffer.
    fn flat_len(&self) -> usize {
        self.grads
            .iter()
            .map(|(_, s)| s.iter().product::<u64>() as usize)
            .sum()
    }

    /// Whether `name` is a sharded state entry (a master weight or a moment).
    pub fn is_sharded_entry(&self, name: &str) -> bool {
        self.shard.as_ref().is_some_and(|sh| {
            self.grads.iter().any(|(p, _)| {
                sh.kinds
                    .iter()
                    .any(|k| name.strip_prefix(p.as_str()) == Some(k.as_str()))
            })
        })
    }

    /// Every sharded entry of kind `suffix` in full, gathered from every rank's slices (a
    /// collective).
    pub fn gather_kind(
        &self,
        apply: &dyn Executable,
        suffix: &str,
    ) -> Result<BTreeMap<String, Tensor>> {
        self.gather_params(apply, suffix, &|_| true)
    }

    /// [`gather_kind`](Self::gather_kind) of the parameters `keep` accepts. Each rank's slices
    /// are in flat order and the ranks' ranges ascend, so the ranks' parts in rank order are
    /// the kept parameters' elements in flat order.
    fn gather_params(
        &self,
        apply: &dyn Executable,
        suffix: &str,
        keep: &dyn Fn(&str) -> bool,
    ) -> Result<BTreeMap<String, Tensor>> {
        let sh = self.shard.as_ref().expect("a sharded step");
        let mut mine = Vec::new();
        for sl in sh.slices.iter().filter(|sl| keep(&sl.param)) {
            let name = format!("{}{suffix}", sl.param);
            let t = apply.state_entry(&name).ok_or_else(|| {
                Error::Invalid(format!("sharded step: no state \"{name}\" on this rank"))
            })?;
            mine.extend_from_slice(t.as_slice::<f32>().map_err(Error::Invalid)?);
        }
        let flat = self.comm.all_gather_f32(&mine).map_err(dist)?.concat();
        let kept: Vec<&(String, Vec<u64>)> = self.grads.iter().filter(|(p, _)| keep(p)).collect();
        let want: usize = kept
            .iter()
            .map(|(_, s)| s.iter().product::<u64>() as usize)
            .sum();
        if flat.len() != want {
            bail!(
                "sharded step: the ranks hold {} of {want} elements of {suffix:?}",
                flat.len()
            );
        }
        let mut out = BTreeMap::new();
        let mut at = 0;
        for (p, shape) in kept {
            let n = shape.iter().product::<u64>() as usize;
            out.insert(
                format!("{p}{suffix}"),
                Tensor::from_f32(shape.clone(), &flat[at..at + n]),
            );
            at += n;
        }
        Ok(out)
    }

    /// The FP8 codes and amaxes of the weights the micro-batch graph reads as codes: each
    /// rank quantizes its slice with the weight's scale and takes its slice's amax; the codes
    /// are all-gathered and the amaxes MAX-reduced (collectives).
    fn gather_fp8(&mut self, apply: &dyn Executable) -> Result<()> {
        let sh = self.shard.as_ref().expect("a sharded step");
        let mut codes = Vec::new();
        let mut amax = vec![0.0f32; self.fp8.len()];
        for (i, w) in self.fp8.iter().enumerate() {
            let Some(sl) = sh.slices.iter().find(|sl| sl.param == w.param) else {
                continue;
            };
            let x = apply.state_entry(&w.param).ok_or_else(|| {
                Error::Invalid(format!(
                    "sharded step: no state \"{}\" on this rank",
                    w.param
                ))
            })?;
            let x = x.as_slice::<f32>().map_err(Error::Invalid)?;
            let scale = apply
                .state_entry(&w.scale)
                .and_then(|t| t.to_f32_vec().ok())
                .and_then(|v| v.first().copied())
                .ok_or_else(|| Error::Invalid(format!("sharded step: no scale \"{}\"", w.scale)))?;
            let fmt = match w.format {
                fp8c_ir::DType::F8E4M3 => fp8c_core::Fp8Format::E4M3,
                fp8c_ir::DType::F8E5M2 => fp8c_core::Fp8Format::E5M2,
                other => bail!("sharded step: \"{}\" is quantized to {other}", w.param),
            };
            let at = codes.len();
            codes.resize(at + x.len(), 0u8);
            fp8c_core::quantize_slice(fmt, x, scale, &mut codes[at..], true);
            amax[i] = fp8c_core::amax_f32(x);
            debug_assert_eq!(x.len() as u64, sl.end - sl.start);
        }
        self.gathered.1 += codes.len() as u64;
        let flat = self.comm.all_gather_bytes(&codes).map_err(dist)?.concat();
        self.comm.all_reduce_max_f32(&mut amax).map_err(dist)?;
        let mut at = 0;
        let mut inputs = BTreeMap::new();
        for (w, a) in self.fp8.iter().zip(&amax) {
            let shape = &self
                .grads
                .iter()
                .find(|(p, _)| *p == w.param)
                .expect("an FP8 weight trains")
                .1;
            let n = shape.iter().product::<u64>() as usize;
            let part = flat.get(at..at + n).ok_or_else(|| {
                Error::Invalid(format!(
                    "sharded step: the ranks hold {} FP8 codes, fewer than the weights need",
                    flat.len()
                ))
            })?;
            inputs.insert(
                format!("{FP8_WEIGHT_INPUT}{}", w.param),
                Tensor::from_bytes(w.format, shape.clone(), part.to_vec())
                    .map_err(Error::Invalid)?,
            );
            if let Some(h) = &w.history {
                inputs.insert(format!("{WEIGHT_AMAX_INPUT}{h}"), Tensor::scalar_f32(*a));
            }
            at += n;
        }
        self.fp8_inputs = inputs;
        Ok(())
    }

    /// The whole sharded state, gathered (a collective).
    pub fn gather_all(&self, apply: &dyn Executable) -> Result<BTreeMap<String, Tensor>> {
        let mut out = BTreeMap::new();
        let kinds = self
            .shard
            .as_ref()
            .map(|s| s.kinds.clone())
            .unwrap_or_default();
        for k in &kinds {
            out.extend(self.gather_kind(apply, k)?);
        }
        Ok(out)
    }

    /// This rank's slice of the full value `t` of sharded entry `name` (None: not its).
    pub fn slice_of(&self, name: &str, t: &Tensor) -> Option<Result<Tensor>> {
        let sh = self.shard.as_ref()?;
        let sl = sh.slices.iter().find(|sl| {
            sh.kinds
                .iter()
                .any(|k| name.strip_prefix(sl.param.as_str()) == Some(k.as_str()))
        })?;
        Some(t.as_slice::<f32>().map_err(Error::Invalid).map(|v| {
            Tensor::from_f32(
                vec![sl.end - sl.start],
                &v[sl.start as usize..sl.end as usize],
            )
        }))
    }

    /// Copies the state the micro-batch graph reads from the apply side (a collective when
    /// the update is sharded: the master weights are gathered from every rank).
    pub fn refresh(&mut self, apply: &dyn Executable) -> Result<()> {
        if self.shard.is_some() {
            self.refreshes += 1;
            let fp8: Vec<String> = self.fp8.iter().map(|w| w.param.clone()).collect();
            let keep = |p: &str| !fp8.iter().any(|f| f == p);
            let weights = self.gather_params(apply, "", &keep)?;
            self.gathered.0 += 4 * self.shard.as_ref().map_or(0, |sh| {
                sh.slices
                    .iter()
                    .filter(|sl| keep(&sl.param))
                    .map(|sl| sl.end - sl.start)
                    .sum::<u64>()
            });
            for (name, t) in weights {
                if self.reads.contains(&name) {
                    self.exe.set_state(&name, t)?;
                }
            }
            if !self.fp8.is_empty() {
                self.gather_fp8(apply)?;
            }
        }
        for name in &self.reads {
            if self.is_sharded_entry(name) {
                continue;
            }
            let t = apply.state_entry(name).ok_or_else(|| {
                Error::Invalid(format!(
                    "split step: state \"{name}\" is not on the update's side"
                ))
            })?;
            self.exe.set_state(name, t)?;
        }
        Ok(())
    }

    /// Runs micro-batch `k` of the data (batch rows by `seed` and `k`).
    fn run_micro(
        &mut self,
        data: &Dataset,
        spec: &TrainSpec,
        (batch, seed, k, poison): (u64, u64, u64, bool),
        profile: Option<&mut Profile>,
    ) -> Result<(BTreeMap<String, Tensor>, Tensor)> {
        let b = data.batch(batch, seed, k);
        let mut inputs = b.inputs;
        inputs.insert(spec.target_input.clone(), b.labels.clone());
        for (k, t) in &self.fp8_inputs {
            inputs.insert(k.clone(), t.clone());
        }
        if spec.poison_input {
            let p = if poison { f32::NAN } else { 0.0 };
            inputs.insert(POISON_INPUT.into(), Tensor::scalar_f32(p));
        }
        let out = match profile {
            Some(p) => {
                let mut timer = p.start_skipping(self.exe.precomputed_steps());
                let out = self
                    .exe
                    .run_observed(&inputs, &mut |s, i, o| timer.observe(s, i, o))?;
                timer.finish();
                out
            }
            None => self.exe.run(&inputs)?,
        };
        Ok((out, b.labels))
    }

    /// The step's local micro-batches.
    fn run_local(
        &mut self,
        data: &Dataset,
        spec: &TrainSpec,
        (batch, seed, step, poison): (u64, u64, u64, bool),
        mut profile: Option<&mut Profile>,
    ) -> Result<Local> {
        let (total, rank) = (self.total(), self.comm.rank() as u64);
        let single = self.comm.size() == 1;
        let n = self.flat_len();
        let mut local = Local {
            grads: if single {
                vec![vec![0.0; n]]
            } else {
                Vec::new()
            },
            amax: vec![0.0; self.amaxes.len()],
            losses: Vec::new(),
            hits: (0, 0),
        };
        for j in 0..self.local {
            let k = step * total + rank * self.local + j;
            let (out, labels) =
                self.run_micro(data, spec, (batch, seed, k, poison), profile.as_deref_mut())?;
            local.losses.push(scalar(&out, "loss"));
            if let Some((h, c)) = out
                .get(&spec.output)
                .and_then(|l| super::spec::accuracy_counts(l, &labels))
            {
                local.hits.0 += h;
                local.hits.1 += c;
            }
            for (i, h) in self.amaxes.iter().enumerate() {
                let a = scalar(&out, &format!("{AMAX_OUTPUT}{h}")) as f32;
                local.amax[i] = local.amax[i].max(a);
            }
            if single {
                // One rank: the running sum in micro-batch order, in place.
                let acc = &mut local.grads[0];
                let mut at = 0;
                for (p, _) in &self.grads {
                    let g = grad(&out, p)?;
                    for (a, x) in acc[at..at + g.len()].iter_mut().zip(g) {
                        *a += x;
                    }
                    at += g.len();
                }
            } else {
                let mut flat = Vec::with_capacity(n);
                for (p, _) in &self.grads {
                    flat.extend_from_slice(grad(&out, p)?);
                }
                local.grads.push(flat);
            }
        }
        Ok(local)
    }

    /// Runs this rank's micro-batches of step `step` and reduces them with every rank's.
    #[allow(clippy::too_many_arguments)]
    pub fn micro_batches(
        &mut self,
        data: &Dataset,
        spec: &TrainSpec,
        batch: u64,
        seed: u64,
        step: u64,
        poison: bool,
        profile: Option<&mut Profile>,
    ) -> Result<Reduced> {
        let local = self.run_local(data, spec, (batch, seed, step, poison), profile)?;
        self.reduce(local)
    }

    /// The reductions of the module docs.
    fn reduce(&self, mut local: Local) -> Result<Reduced> {
        let comm = &*self.comm;
        let sum = if comm.size() == 1 {
            local.grads.pop().unwrap_or_default()
        } else {
            ordered_sum(comm, &local.grads, self.flat_len())?
        };
        let mut amax = local.amax;
        if self.reduce_amax && !amax.is_empty() {
            comm.all_reduce_max_f32(&mut amax).map_err(dist)?;
        }
        // Losses and accuracy counts of every micro-batch, in global order.
        let mut mine: Vec<u8> = Vec::new();
        for l in &local.losses {
            mine.extend_from_slice(&l.to_le_bytes());
        }
        mine.extend_from_slice(&local.hits.0.to_le_bytes());
        mine.extend_from_slice(&local.hits.1.to_le_bytes());
        let mut loss_sum = 0.0;
        let mut all_finite = true;
        let (mut hits, mut counted) = (0u64, 0u64);
        for bytes in comm.all_gather_bytes(&mine).map_err(dist)? {
            let (losses, counts) = bytes.split_at(bytes.len() - 16);
            for c in losses.chunks_exact(8) {
                let l = f64::from_le_bytes(c.try_into().expect("8 bytes"));
                all_finite &= l.is_finite();
                loss_sum += l;
            }
            hits += u64::from_le_bytes(counts[..8].try_into().expect("8 bytes"));
            counted += u64::from_le_bytes(counts[8..].try_into().expect("8 bytes"));
        }
        let mut inputs = BTreeMap::new();
        let mut at = 0;
        for (p, shape) in &self.grads {
            let n = shape.iter().product::<u64>() as usize;
            inputs.insert(
                format!("{GRAD_INPUT}{p}"),
                Tensor::from_f32(shape.clone(), &sum[at..at + n]),
            );
            at += n;
        }
        for (h, a) in self.amaxes.iter().zip(&amax) {
            inputs.insert(format!("{AMAX_INPUT}{h}"), Tensor::scalar_f32(*a));
        }
        inputs.insert(
            LOSS_INPUT.into(),
            Tensor::scalar_f32(if all_finite { 0.0 } else { f32::NAN }),
        );
        Ok(Reduced {
            inputs,
            loss: loss_sum / self.total() as f64,
            accuracy: (counted > 0).then(|| hits as f64 / counted as f64),
        })
    }

    /// The reduced inputs of a step made of global micro-batch `k` alone, computed by every
    /// rank for itself (no collective): the first-batch measurement of delayed scaling's
    /// histories, which a single process makes from its first micro-batch.
    pub fn one_micro_batch(
        &mut self,
        data: &Dataset,
        spec: &TrainSpec,
        batch: u64,
        seed: u64,
        k: u64,
    ) -> Result<BTreeMap<String, Tensor>> {
        let (out, _) = self.run_micro(data, spec, (batch, seed, k, false), None)?;
        let mut inputs = BTreeMap::new();
        for (p, shape) in &self.grads {
            // 0 + g, as the summed micro-batches start.
            let g: Vec<f32> = grad(&out, p)?.iter().map(|&x| 0.0 + x).collect();
            inputs.insert(
                format!("{GRAD_INPUT}{p}"),
                Tensor::from_f32(shape.clone(), &g),
            );
        }
        for h in &self.amaxes {
            let a = scalar(&out, &format!("{AMAX_OUTPUT}{h}")) as f32;
            inputs.insert(format!("{AMAX_INPUT}{h}"), Tensor::scalar_f32(a));
        }
        let l = scalar(&out, "loss");
        inputs.insert(
            LOSS_INPUT.into(),
            Tensor::scalar_f32(if l.is_finite() { 0.0 } else { f32::NAN }),
        );
        Ok(inputs)
    }
}

/// The elementwise sum of every rank's `local` buffers (each `n` long), in global order
/// (rank by rank, each rank's buffers in order), on every rank: rank `c` sums chunk `c` of
/// all of them, then an all-gather joins the chunks.
fn ordered_sum(comm: &dyn Collective, local: &[Vec<f32>], n: usize) -> Result<Vec<f32>> {
    let ranks = comm.size();
    let bounds: Vec<usize> = (0..=ranks).map(|c| n * c / ranks).collect();
    let parts: Vec<Vec<f32>> = (0..ranks)
        .map(|c| {
            local
                .iter()
                .flat_map(|g| g[bounds[c]..bounds[c + 1]].iter().copied())
                .collect()
        })
        .collect();
    let refs: Vec<&[f32]> = parts.iter().map(Vec::as_slice).collect();
    let received = comm.all_to_all_f32(&refs).map_err(dist)?;
    let me = comm.rank();
    let width = bounds[me + 1] - bounds[me];
    let mut chunk = vec![0.0f32; width];
    for from in &received {
        if width == 0 {
            continue;
        }
        if from.len() % width != 0 {
            bail!(
                "split step: a rank sent {} values for a chunk of {width}",
                from.len()
            );
        }
        for g in from.chunks_exact(width) {
            for (a, x) in chunk.iter_mut().zip(g) {
                *a += x;
            }
        }
    }
    let chunks = comm.all_gather_f32(&chunk).map_err(dist)?;
    Ok(chunks.concat())
}

/// Output `k`'s first value as f64 (NaN when absent).
fn scalar(out: &BTreeMap<String, Tensor>, k: &str) -> f64 {
    out.get(k)
        .and_then(|t| t.to_f64_vec().ok())
        .and_then(|v| v.first().copied())
        .unwrap_or(f64::NAN)
}

/// The micro-batch gradient of `param`, as f32 values.
fn grad<'a>(out: &'a BTreeMap<String, Tensor>, param: &str) -> Result<&'a [f32]> {
    let t = out
        .get(&format!("{GRAD_OUTPUT}{param}"))
        .ok_or_else(|| Error::Invalid(format!("split step: no gradient output for \"{param}\"")))?;
    if t.dtype() != fp8c_ir::DType::F32 {
        bail!("split step: the gradient of \"{param}\" is not f32");
    }
    t.as_slice::<f32>()
        .map_err(|e| Error::Invalid(format!("split step: the gradient of \"{param}\": {e}")))
}

/// A collective's error as a session error.
pub(crate) fn dist(e: fp8c_dist::DistError) -> Error {
    Error::Invalid(format!("collective: {e}"))
}

/// The step report of a split step from its reduced values and the apply outputs.
pub(crate) fn report(step: u64, reduced: &Reduced, out: &BTreeMap<String, Tensor>) -> StepReport {
    StepReport {
        step,
        loss: reduced.loss,
        lr: scalar(out, "lr"),
        applied: scalar(out, "finite") != 0.0,
        grad_norm: out.get("grad_norm").map(|_| scalar(out, "grad_norm")),
        accuracy: reduced.accuracy,
        elapsed_s: 0.0,
    }
}
