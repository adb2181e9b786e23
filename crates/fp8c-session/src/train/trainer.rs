//! A training session on a runtime backend: the library entry point the CLI and the examples
//! (or another compiler) call.
//!
//! [`Trainer::new`] compiles a static forward graph with the pass pipeline (autodiff on), lowers the
//! training step and prepares it on a [`Backend`]; [`Trainer::step`] runs one step. The
//! executable keeps everything that changes between steps, so a step is just `run`:
//! trained parameters become state entries of the same name (their initial values are loaded
//! with `set_state`), next to the optimizer moments, the scaling state and the counters.
//! [`Trainer::state`] is therefore the whole training state (what a checkpoint saves) and
//! [`Trainer::set_state`] restores it bit for bit.
//!
//! Delayed scaling needs an amax history before its first quantization. TransformerEngine
//! starts every history at zero and every scale at 1, so its first step quantizes with scale
//! 1: gradients of 1e-4 land among E5M2's subnormals, and that step's weight gradients are
//! mostly noise (on the GPT-2-style export, cosine 0.2–0.3 to the f32 gradient of the same
//! step, against 0.99 once the histories hold an entry). Under Adam, whose first update has
//! the size of the learning rate on every element whatever the gradient's size, that one step
//! moves every weight in a random direction and the run never returns to the f32 trajectory.
//! A fresh trainer therefore measures the histories from its first batch before that step
//! runs (torchao's `enable_amax_init`, on by default there too), and so does a resumed one
//! whose checkpoint lacked or held stale scaling state ([`Trainer::rescale_on_next_step`],
//! `checkpoint::load`: the bogus scales of TransformerEngine issue 982). State restored
//! with [`Trainer::set_state`] is used as given.

use crate::error::Result;
use crate::error::{Error, bail};
use crate::model::Model;
use crate::options::CompileOptions;
use crate::runner::Device;
use crate::train::split::{Parallel, SplitStep};
use fp8c_dist::{Collective, Single};
use fp8c_ir::{Graph, IrError, Op, Tensor, Value};
use fp8c_passes::autodiff::split::{AMAX_OUTPUT, GRAD_OUTPUT};
use fp8c_passes::autodiff::{TrainInfo, TrainSpec};
use fp8c_passes::{PassCx, PassManager, PassOptions};
use fp8c_runtime::{Backend, Executable, Program};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one step reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// The step's number (0 for the first step of a fresh run).
    pub step: u64,
    /// The loss of this step's batch (computed before the update; with gradient
    /// accumulation the mean over its micro-batches).
    pub loss: f64,
    /// The learning rate used.
    pub lr: f64,
    /// False when the step was skipped (non-finite loss or gradient).
    pub applied: bool,
    /// The global L2 norm of the gradients before clipping (with `clip_grad_norm` only).
    pub grad_norm: Option<f64>,
    /// The fraction of the (last micro-)batch's rows whose argmax is the label (a
    /// classification output with integer labels only).
    pub accuracy: Option<f64>,
    /// Seconds since the training loop started ([`Trainer::fit`]; 0 from [`Trainer::step`]).
    pub elapsed_s: f64,
}

/// A prepared training step and its state.
pub struct Trainer {
    graph: Graph,
    program: Program,
    pub(super) exe: Box<dyn Executable>,
    info: TrainInfo,
    /// What the training graph was built for (loss, output, accumulation, test hooks).
    spec: TrainSpec,
    /// The precision mode of the policy (what checkpoints record).
    precision: fp8c_passes::precision::PrecisionMode,
    /// What the passes recorded (notes, IR dumps, decisions, scaling and fusion statistics).
    passes: PassCx,
    /// Steps run and steps skipped, as exact integers (the graph's own counters are f32,
    /// exact only to 2^24; these are what checkpoints record).
    pub(super) counts: (u64, u64),
    /// Params the graph still reads as params (not trained), with their data.
    frozen: BTreeMap<String, Tensor>,
    /// Names of the trained params (now state entries).
    trained: Vec<String>,
    /// FP8 tensors (`fc1.x`) whose amax history and scale the next step recomputes first.
    pub(super) rescale: Vec<String>,
    /// True until the first step ran: `rescale` is then the initial measurement, not a repair.
    pub(super) initial: bool,
    /// Step times, when profiling ([`Trainer::set_profiling`]).
    pub(super) profile: Option<fp8c_runtime::Profile>,
    /// The micro-batch half of a split step (several micro-batches or ranks per step); `exe`
    /// is then the apply half, which holds the whole training state.
    pub(crate) split: Option<SplitStep>,
}

impl Trainer {
    /// Compiles `forward` (static input shapes) for training with `options` (precision policy
    /// and recipe) and prepares it on `backend`, every GEMM accumulating as the recipe says
    /// (fast accumulation through the host's model of Hopper's accumulator on a host backend;
    /// [`Trainer::for_model`] applies [`crate::HostAccum`] instead).
    pub fn new(
        forward: &Graph,
        spec: &TrainSpec,
        options: PassOptions,
        backend: &dyn Backend,
    ) -> Result<Trainer> {
        Self::build(
            forward,
            spec,
            options,
            backend,
            |_| {},
            Arc::new(Single),
            Parallel::default(),
        )
    }

    /// [`Trainer::new`], `adapt` changing the training graph before it is lowered.
    ///
    /// With several micro-batches per step (`spec.accumulate` on each of `comm`'s ranks) the
    /// step is split at its reductions ([`crate::train::split`]).
    fn build(
        forward: &Graph,
        spec: &TrainSpec,
        options: PassOptions,
        backend: &dyn Backend,
        adapt: impl FnOnce(&mut Graph),
        comm: Arc<dyn Collective>,
        parallel: Parallel,
    ) -> Result<Trainer> {
        let mut g = forward.clone();
        let precision = options.policy.mode;
        let local = u64::from(spec.accumulate.max(1));
        let total = local * comm.size() as u64;
        let mut spec = spec.clone();
        if total > 1 {
            spec.split = true;
            spec.accumulate = u32::try_from(total)
                .map_err(|_| Error::Invalid(format!("{total} micro-batches per step")))?;
        }
        let reduce_amax = match options.recipe {
            fp8c_core::Recipe::Delayed(d) => d.reduce_amax,
            fp8c_core::Recipe::Current(_) => true,
        };
        let sharded = parallel.shard_optimizer && comm.size() > 1;
        if parallel.fp8_all_gather {
            if !parallel.shard_optimizer {
                bail!(
                    "--fp8-all-gather needs --shard optimizer (it all-gathers the sharded weights)"
                );
            }
            if precision != fp8c_passes::precision::PrecisionMode::Fp8
                || !matches!(options.recipe, fp8c_core::Recipe::Delayed(_))
            {
                bail!(
                    "--fp8-all-gather needs --precision fp8 with --recipe delayed (each owner quantizes its slice of a weight with the weight's scale of the last step)"
                );
            }
            spec.fp8_weights = sharded;
        }
        let mut cx = PassCx::new(PassOptions {
            train: Some(spec.clone()),
            ..options
        });
        PassManager::default().run(&mut g, &mut cx)?;
        // Recover the pass's info (cheaply: which params are updated).
        let trained: Vec<String> = g
            .params()
            .iter()
            .map(|&id| fp8c_ir::interface_name(&g.node(id).op).to_string())
            .filter(|n| g.state_updates().contains_key(n))
            .collect();
        let initial = params_to_state(&mut g, &trained)?;
        adapt(&mut g);
        backend.check()?;
        let (split, apply_graph) = if spec.split {
            let (micro, mut apply) = fp8c_passes::autodiff::split::split_step(&g)?;
            let program = fp8c_runtime::lower(&micro)?;
            let exe = backend.prepare_graph(&micro, &program, micro.weights())?;
            let reads = micro
                .state()
                .iter()
                .map(|&(id, _)| fp8c_ir::interface_name(&micro.node(id).op).to_string())
                .collect();
            let grads = grad_outputs(&micro);
            let amaxes = micro
                .outputs()
                .iter()
                .filter_map(|o| o.name.strip_prefix(AMAX_OUTPUT).map(str::to_string))
                .collect();
            let shard = if parallel.shard_optimizer && comm.size() > 1 {
                let n: u64 = grads
                    .iter()
                    .map(|(_, s): &(String, Vec<u64>)| s.iter().product::<u64>())
                    .sum();
                let (r, size) = (comm.rank() as u64, comm.size() as u64);
                let range = (n * r / size, n * (r + 1) / size);
                let slices = fp8c_passes::autodiff::split::shard_update(&mut apply, &grads, range)?;
                let kinds = match spec.optimizer.map(|o| o.kind) {
                    Some(fp8c_passes::autodiff::Optimizer::Sgd { .. }) => vec!["", ".momentum"],
                    _ => vec!["", ".m", ".v"],
                };
                Some(crate::train::split::Shard {
                    slices,
                    kinds: kinds.into_iter().map(String::from).collect(),
                })
            } else {
                None
            };
            let step = SplitStep {
                graph: micro,
                program,
                exe,
                reads,
                grads,
                amaxes,
                comm,
                local,
                reduce_amax,
                shard,
                fp8: cx
                    .train
                    .as_ref()
                    .map(|i| i.fp8_weights.clone())
                    .unwrap_or_default(),
                fp8_inputs: BTreeMap::new(),
                gathered: (0, 0),
                refreshes: 0,
            };
            (Some(step), apply)
        } else {
            (None, g.clone())
        };
        let program = fp8c_runtime::lower(&apply_graph)?;
        let mut exe = backend.prepare_graph(&apply_graph, &program, apply_graph.weights())?;
        for (name, t) in initial {
            match split.as_ref().and_then(|s| s.slice_of(&name, &t)) {
                Some(part) => exe.set_state(&name, part?)?,
                None if split.as_ref().is_some_and(|s| s.is_sharded_entry(&name)) => {}
                None => exe.set_state(&name, t)?,
            }
        }
        // Every delayed-scaling history starts empty: the first step measures them first.
        let rescale = exe
            .state()
            .keys()
            .filter_map(|k| k.strip_suffix(".amax_history").map(str::to_string))
            .collect();
        let info = cx.train.take().unwrap_or_else(|| TrainInfo {
            trained: trained.clone(),
            ..Default::default()
        });
        Ok(Trainer {
            frozen: g.weights().clone(),
            graph: g,
            program,
            exe,
            info,
            spec,
            precision,
            passes: cx,
            counts: (0, 0),
            trained,
            rescale,
            initial: true,
            profile: None,
            split,
        })
    }

    /// Compiles `model` for training on `device`: `opts` gives the input shapes to bind (the
    /// batch), the precision policy, the recipe and how a host device sums fast-accumulation
    /// GEMMs ([`crate::HostAccum`]; [`Trainer::new`] keeps the recipe's GEMMs as they are).
    /// Errors are prefixed with the model's file.
    pub fn for_model(
        model: &Model,
        spec: &TrainSpec,
        opts: &CompileOptions,
        device: Device,
    ) -> Result<Trainer> {
        Self::for_model_on(
            model,
            spec,
            opts,
            device,
            Arc::new(Single),
            Parallel::default(),
        )
    }

    /// [`Trainer::for_model`] for one rank of the group `comm` (data-parallel training: each
    /// step spans `spec.accumulate` micro-batches on every rank, reduced across them; see
    /// [`crate::train::split`]). Every rank must call it with the same model and options.
    pub fn for_model_on(
        model: &Model,
        spec: &TrainSpec,
        opts: &CompileOptions,
        device: Device,
        comm: Arc<dyn Collective>,
        parallel: Parallel,
    ) -> Result<Trainer> {
        opts.validate()?;
        let mut forward = model.clone();
        let bound = forward.bind_input_shapes(&opts.input_shapes);
        model.in_file(bound)?;
        let trainer = Trainer::build(
            forward.graph(),
            spec,
            opts.pass_options(),
            device.backend().as_ref(),
            |g| opts.host_accum.apply(g, device),
            comm,
            parallel,
        );
        model.in_file(trainer)
    }

    /// Runs one step on `inputs` (the model's inputs and the labels/target, by name).
    pub fn step(&mut self, inputs: &BTreeMap<String, Tensor>) -> Result<StepReport> {
        let step = self.counts.0;
        let out = self.step_outputs(inputs)?;
        let scalar = |k: &str| -> f64 {
            out.get(k)
                .and_then(|t| t.to_f64_vec().ok())
                .and_then(|v| v.first().copied())
                .unwrap_or(f64::NAN)
        };
        Ok(StepReport {
            step,
            loss: scalar("loss"),
            lr: scalar("lr"),
            applied: scalar("finite") != 0.0,
            grad_norm: out.get("grad_norm").map(|_| scalar("grad_norm")),
            accuracy: None,
            elapsed_s: 0.0,
        })
    }

    /// Runs one step (with gradient accumulation: one micro-batch, the step counted on the
    /// last, whose `train.apply` input is 1) and returns every graph output (loss, lr, finite,
    /// and the model output or gradients when the spec asked for them).
    pub fn step_outputs(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>> {
        if self.split.is_some() {
            bail!(
                "this trainer's step spans several micro-batches or ranks: run it with Trainer::train_step or Trainer::fit"
            );
        }
        if !self.rescale.is_empty() {
            self.recompute_scaling(inputs)?;
        }
        self.initial = false;
        let out = match self.profile.as_mut() {
            Some(p) => {
                let mut timer = p.start_skipping(self.exe.precomputed_steps());
                let out = self
                    .exe
                    .run_observed(inputs, &mut |s, i, o| timer.observe(s, i, o))?;
                timer.finish();
                out
            }
            None => self.exe.run(inputs)?,
        };
        // With gradient accumulation only the last micro-batch (`train.apply` = 1) ends a step.
        let ends_step = inputs
            .get(fp8c_passes::autodiff::APPLY_INPUT)
            .and_then(|t| t.to_f64_vec().ok())
            .is_none_or(|v| v.first().is_some_and(|&a| a > 0.5));
        if !ends_step {
            return Ok(out);
        }
        let applied = out
            .get("finite")
            .and_then(|t| t.bytes().first().copied())
            .is_none_or(|b| b != 0);
        self.counts.0 += 1;
        if !applied {
            self.counts.1 += 1;
        }
        Ok(out)
    }

    /// Starts (or stops) timing every step of the training program: time per op kind and per
    /// node over the steps run since ([`Trainer::profile`]; `fp8c train --profile`).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(fp8c_runtime::Profile::new);
    }

    /// The step times gathered since profiling was turned on.
    pub fn profile(&self) -> Option<&fp8c_runtime::Profile> {
        self.profile.as_ref()
    }

    /// The whole training state by name: trained weights, optimizer moments, scaling state,
    /// counters.
    pub fn state(&self) -> BTreeMap<String, Tensor> {
        if self.is_sharded() {
            // Gathered from every rank: see `try_state`.
            return self.try_state().unwrap_or_else(|e| {
                tracing::error!("gathering the sharded state: {e}");
                BTreeMap::new()
            });
        }
        let mut state = self.exe.state();
        if let Some(split) = &self.split {
            for (k, v) in split.exe.state() {
                state.entry(k).or_insert(v);
            }
        }
        state
    }

    /// The whole training state, or the error that kept an entry from being read (checkpoints
    /// use this, so a failed device download is an error, not a missing entry).
    pub fn try_state(&self) -> Result<BTreeMap<String, Tensor>> {
        let mut state = self.exe.try_state()?;
        if let Some(split) = self.split.as_ref().filter(|s| s.shard.is_some()) {
            state.retain(|k, _| !split.is_sharded_entry(k));
            state.extend(split.gather_all(&*self.exe)?);
        }
        if let Some(split) = &self.split {
            for (k, v) in split.exe.try_state()? {
                state.entry(k).or_insert(v);
            }
        }
        Ok(state)
    }

    /// Restores state entries (a checkpoint); every name must exist with its declared type.
    /// An amax history given here is used as it is: the next step does not measure it again.
    pub fn set_state(&mut self, state: &BTreeMap<String, Tensor>) -> Result<()> {
        for (k, t) in state {
            if let Some(split) = self.split.as_mut()
                && split.is_sharded_entry(k)
            {
                if let Some(part) = split.slice_of(k, t) {
                    self.exe.set_state(k, part?)?;
                }
                if split.reads.contains(k) {
                    split.exe.set_state(k, t.clone())?;
                }
                continue;
            }
            let in_apply = self.exe.state_entry(k).is_some();
            let in_micro = self
                .split
                .as_ref()
                .is_some_and(|s| s.exe.state_entry(k).is_some());
            if in_apply || !in_micro {
                self.exe.set_state(k, t.clone())?;
            }
            if let Some(split) = self.split.as_mut()
                && in_micro
            {
                split.exe.set_state(k, t.clone())?;
            }
        }
        self.rescale
            .retain(|t| !state.contains_key(&format!("{t}.amax_history")));
        Ok(())
    }

    /// The current value of every parameter of the model: trained ones from the state, the
    /// others as they were.
    pub fn weights(&self) -> BTreeMap<String, Tensor> {
        let state = self.state();
        let mut w = self.frozen.clone();
        for n in &self.trained {
            if let Some(t) = state.get(n) {
                w.insert(n.clone(), t.clone());
            }
        }
        w
    }

    /// Steps run so far (skipped ones included), exactly.
    pub fn steps(&self) -> u64 {
        self.counts.0
    }

    /// Steps skipped because of a non-finite loss or gradient, exactly.
    pub fn skipped_steps(&self) -> u64 {
        self.counts.1
    }

    /// Sets the step counters (a checkpoint restores them; the graph's own f32 counters come
    /// with the state).
    pub fn set_counts(&mut self, steps: u64, skipped: u64) {
        self.counts = (steps, skipped);
    }

    /// The FP8 tensors with delayed-scaling state (`fc1.x` for the entries
    /// `fc1.x.amax_history`, `fc1.x.scale` and `fc1.x.scale_inv`).
    pub fn scaled_tensors(&self) -> Vec<String> {
        self.exe
            .state()
            .keys()
            .filter_map(|k| k.strip_suffix(".amax_history").map(str::to_string))
            .collect()
    }

    /// Makes the next step first recompute the amax history and scale of `tensors` (names
    /// from [`Trainer::scaled_tensors`]) from its own inputs: two measuring runs whose other
    /// effects are undone, the first with the current scales (its gradient amaxes are those
    /// of a forward quantized with them), the second with the scales the first gave; the
    /// history then holds the second's amax as its newest entry and the scale follows it.
    pub fn rescale_on_next_step(&mut self, tensors: Vec<String>) {
        self.rescale = tensors;
        self.initial = false;
    }

    fn recompute_scaling(&mut self, inputs: &BTreeMap<String, Tensor>) -> Result<()> {
        let mut inputs = inputs.clone();
        // With gradient accumulation, a measuring run is a whole step (the history rolls).
        if inputs.contains_key(fp8c_passes::autodiff::APPLY_INPUT) {
            inputs.insert(
                fp8c_passes::autodiff::APPLY_INPUT.into(),
                Tensor::scalar_f32(1.0),
            );
        }
        self.measure_scaling(&mut |t| t.exe.run(&inputs).map(drop).map_err(Into::into))
    }

    /// [`Trainer::recompute_scaling`] with `run` making one measuring step: two runs whose
    /// other effects are undone (see [`Trainer::rescale_on_next_step`]).
    pub(crate) fn measure_scaling(
        &mut self,
        run: &mut dyn FnMut(&mut Trainer) -> Result<()>,
    ) -> Result<()> {
        let tensors = std::mem::take(&mut self.rescale);
        let base = self.state();
        let names = |t: &String| ["amax_history", "scale", "scale_inv"].map(|s| format!("{t}.{s}"));
        let mut current = base.clone();
        for pass in 0..2 {
            self.set_state(&current)?;
            run(self)?;
            let after = self.state();
            current = base.clone();
            for t in &tensors {
                let [h, s, si] = names(t);
                // The first pass passes on its scales only (its history saw scale-1
                // quantization upstream); the second gives history and scales.
                let take: &[&String] = if pass == 0 {
                    &[&s, &si]
                } else {
                    &[&h, &s, &si]
                };
                for k in take {
                    if let Some(v) = after.get(*k) {
                        current.insert((*k).clone(), v.clone());
                    }
                }
            }
        }
        self.set_state(&current)?;
        let unmeasured: Vec<&String> = tensors
            .iter()
            .filter(|t| {
                current
                    .get(&format!("{t}.amax_history"))
                    .and_then(|h| h.to_f32_vec().ok())
                    .is_none_or(|h| h.iter().all(|&v| v == 0.0))
            })
            .collect();
        let rest = if unmeasured.is_empty() {
            String::new()
        } else {
            format!(
                "; {} measured no amax (a zero or non-finite batch) and keep scale 1",
                unmeasured.len()
            )
        };
        let measured = tensors.len() - unmeasured.len();
        if self.initial {
            tracing::info!(
                "initialised the amax history and scale of {measured} FP8 tensor(s) from the first batch{rest}"
            );
        } else {
            tracing::warn!(
                "recomputed the amax history and scale of {measured} FP8 tensor(s) from this step's batch{rest}"
            );
        }
        Ok(())
    }

    /// The names of the trained parameters.
    pub fn trained(&self) -> &[String] {
        &self.trained
    }

    /// Whether each rank keeps only its shard of the master weights and moments (then
    /// [`Trainer::state`], [`Trainer::weights`] and checkpoints are collectives: every rank
    /// must call them together).
    pub fn is_sharded(&self) -> bool {
        self.split.as_ref().is_some_and(|s| s.shard.is_some())
    }

    /// Bytes of optimizer state (the trained parameters' f32 master copies and their
    /// moments) this rank holds, and the whole run's: with `--shard optimizer` each rank holds
    /// about 1/N of it.
    pub fn optimizer_state_bytes(&self) -> (u64, u64) {
        let kinds: &[&str] = match self.spec.optimizer.map(|o| o.kind) {
            Some(fp8c_passes::autodiff::Optimizer::Sgd { .. }) => &["", ".momentum"],
            _ => &["", ".m", ".v"],
        };
        let state = self.exe.state();
        let mut mine = 0;
        let mut total = 0;
        for p in &self.trained {
            let whole = self
                .split
                .as_ref()
                .and_then(|s| s.grads.iter().find(|(g, _)| g == p))
                .map(|(_, d)| 4 * d.iter().product::<u64>());
            for k in kinds {
                let here = state
                    .get(&format!("{p}{k}"))
                    .map(|t| t.bytes().len() as u64);
                mine += here.unwrap_or(0);
                total += whole.or(here).unwrap_or(0);
            }
        }
        (mine, total)
    }

    /// With a sharded update: the bytes this rank contributed to the weights' all-gathers
    /// (f32 weights, FP8 codes) and how many gathers there were.
    pub fn weights_gathered(&self) -> Option<(u64, u64, u64)> {
        self.split
            .as_ref()
            .filter(|s| s.shard.is_some())
            .map(|s| (s.gathered.0, s.gathered.1, s.refreshes))
    }

    /// This process's rank and the number of ranks of the run (0 and 1 alone).
    pub fn rank(&self) -> (usize, usize) {
        self.split
            .as_ref()
            .map_or((0, 1), |s| (s.comm.rank(), s.comm.size()))
    }

    /// The collective group of a split step (None: a single micro-batch per step).
    pub fn collective(&self) -> Option<&Arc<dyn Collective>> {
        self.split.as_ref().map(|s| &s.comm)
    }

    /// What the training graph was built for.
    pub fn spec(&self) -> &TrainSpec {
        &self.spec
    }

    /// What a checkpoint of this trainer records about its run, for data order `seed` and
    /// `batch` samples per micro-batch, the model unnamed (the CLI names its file and digest,
    /// [`crate::train::checkpoint::Meta::with_model_file`]).
    pub fn meta(&self, seed: u64, batch: u64) -> crate::train::checkpoint::Meta {
        let loss = match self.spec.loss {
            fp8c_passes::autodiff::Loss::CrossEntropy => "ce",
            fp8c_passes::autodiff::Loss::Mse => "mse",
            fp8c_passes::autodiff::Loss::Scalar => "scalar",
        };
        let mut meta = crate::train::checkpoint::Meta::new(
            "",
            crate::precision_name(self.precision),
            loss,
            seed,
            batch,
        );
        if let Some(split) = &self.split {
            meta.accumulate = split.local as u32;
            meta.ranks = split.comm.size() as u32;
        }
        meta
    }

    /// Saves the whole state to the checkpoint folder `dir` (see [`crate::train::checkpoint`]),
    /// described as the run `fit` says (its `meta`, else [`Trainer::meta`] of its seed and
    /// batch).
    pub fn save_checkpoint(
        &self,
        dir: &std::path::Path,
        fit: &crate::train::FitOptions,
    ) -> Result<()> {
        crate::train::checkpoint::save(dir, self, &self.meta_of(fit))
    }

    /// Restores the checkpoint in `dir`, which must describe the same run as `fit` (model,
    /// precision, loss, seed, batch), and returns the step it continues from.
    pub fn resume(&mut self, dir: &std::path::Path, fit: &crate::train::FitOptions) -> Result<u64> {
        let meta = self.meta_of(fit);
        crate::train::checkpoint::load(dir, self, &meta)
    }

    /// What checkpoints of the run `fit` describes record.
    pub(crate) fn meta_of(&self, fit: &crate::train::FitOptions) -> crate::train::checkpoint::Meta {
        fit.meta
            .clone()
            .unwrap_or_else(|| self.meta(fit.seed, fit.batch))
    }

    /// What the autodiff pass reported.
    pub fn info(&self) -> &TrainInfo {
        &self.info
    }

    /// Notes the passes left (shown with `-v`).
    pub fn notes(&self) -> &[String] {
        &self.passes.notes
    }

    /// `(pass, IR text)` after each pass named in `print_after`.
    pub fn dumps(&self) -> &[(String, String)] {
        &self.passes.dumps
    }

    /// The precision decision of every GEMM of the forward graph.
    pub fn decisions(&self) -> &[fp8c_passes::precision::Decision] {
        &self.passes.decisions
    }

    /// The explain report of the training graph: one row per GEMM (every node with `all`),
    /// then totals.
    pub fn report(&self, all: bool) -> fp8c_passes::report::Report {
        let mut r = fp8c_passes::report::build(&self.graph, &self.passes, all);
        r.memory = Some(self.memory());
        r
    }

    /// What the training step's planned memory peak holds, by role (weights, gradients,
    /// optimizer state, saved activations, workspace).
    pub fn memory(&self) -> fp8c_passes::report::Memory {
        crate::memory::memory_report(&self.program)
    }

    /// What the memory options did (`--recompute` found nothing to do, or left fused
    /// attention alone), for the user.
    pub fn memory_notes(&self) -> &[String] {
        &self.info.notes
    }

    /// The GEMMs that stay in high precision although FP8 was asked for, one line per reason
    /// class (see [`crate::Compiled::high_precision_summary`]).
    pub fn high_precision_summary(&self) -> Vec<String> {
        crate::compiled::high_precision_summary(&self.passes.decisions)
    }

    /// The compiled training graph (trained params turned into state).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The lowered program (of a split step: the update's).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// A split step's micro-batch graph and program (None: one micro-batch per step).
    pub fn micro_batch_program(&self) -> Option<(&Graph, &Program)> {
        self.split.as_ref().map(|s| (&s.graph, &s.program))
    }
}

/// The micro-batch graph's gradient outputs (`grad.{param}`), in output order, with shapes.
fn grad_outputs(micro: &Graph) -> Vec<(String, Vec<u64>)> {
    micro
        .outputs()
        .iter()
        .filter_map(|o| {
            let p = o.name.strip_prefix(GRAD_OUTPUT)?;
            let dims = micro.value_type(o.value).known_dims()?;
            Some((p.to_string(), dims))
        })
        .collect()
}

/// Turns each named param into a state entry of the same name, read and updated in its
/// place; returns the params' data (the state's initial values).
pub fn params_to_state(
    g: &mut Graph,
    names: &[String],
) -> std::result::Result<BTreeMap<String, Tensor>, IrError> {
    let mut initial = BTreeMap::new();
    for name in names {
        let id = g
            .params()
            .iter()
            .copied()
            .find(|&id| fp8c_ir::interface_name(&g.node(id).op) == name)
            .ok_or_else(|| IrError::NotFound {
                kind: "param",
                name: name.clone(),
            })?;
        let data =
            g.weights().get(name).cloned().ok_or_else(|| {
                IrError::Other(format!("param \"{name}\" has no data to train from"))
            })?;
        let update = g.state_updates().get(name).copied();
        let ty = g.node(id).outputs[0].clone();
        let s = g.add_state(name, ty, 0.0)?;
        g.replace_uses(Value::new(id, 0), s)?;
        // The update read the param only through uses just replaced; drop the old node.
        g.remove_node(id)?;
        if let Some(u) = update {
            let u = if u == Value::new(id, 0) { s } else { u };
            g.set_state_update(name, u)?;
        }
        debug_assert!(!matches!(g.node(s.node).op, Op::Param { .. }));
        initial.insert(name.clone(), data);
    }
    Ok(initial)
}
