//! The CPU reference backend: executes each [`Step`] of a [`Program`] with
//! [`fp8c_eval::eval_op`], so FP8 is bit-exact through fp8c-core and GEMMs accumulate in f32
//! on the `gemm` crate (kernels use rayon's pool where the work is large enough).
//!
//! Buffer reuse is logical here: the executor holds one `Tensor` per live buffer and drops it
//! after its last reader (the plan's `frees`), so host memory follows the same liveness the
//! plan's offsets encode. Every step's results are checked against the types the plan was
//! made for, so a kernel and type inference can never silently disagree.
//!
//! Steps that read only parameters, constants and other such steps' results (weights an
//! export computes with `ConstantOfShape`, a weight's transpose or FP8 cast) give the same
//! values on every run: `prepare` computes them once and keeps the results a run reads, as
//! onnxruntime's constant folding does, and each run starts from them (a result only other
//! such steps read goes after its last reader: an FP8 conv's dequantized weight once its
//! batch-norm factors have scaled it). The observer still sees every such step at the start
//! of each run, with its inputs and outputs (those not kept computed again for it), so
//! `--stats` and `--profile` list them; a profile counts them with no time
//! (`Executable::precomputed_steps`).

use crate::backend::{Backend, Executable, Observer, RuntimeError};
use crate::conv_epilogue::{self, Chain};
use crate::cpu_moves;
use crate::program::{BufId, BufferKind, Program, Step};
use fp8c_ir::Tensor;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The CPU reference backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn check(&self) -> Result<(), RuntimeError> {
        Ok(())
    }

    fn prepare(
        &self,
        p: &Program,
        weights: &BTreeMap<String, Tensor>,
    ) -> Result<Box<dyn Executable>, RuntimeError> {
        Ok(Box::new(CpuExecutable::new(p, weights)?))
    }
}

/// A program prepared for the CPU: the program, its parameter data and its state.
pub struct CpuExecutable {
    program: Program,
    /// Parameter data by buffer index.
    params: BTreeMap<BufId, Tensor>,
    /// Current state values by buffer index.
    state: BTreeMap<BufId, Tensor>,
    /// Per step, whether it was computed at prepare (its inputs never change).
    hoisted: Vec<bool>,
    /// The results of the hoisted steps, by buffer index.
    kept: BTreeMap<BufId, Tensor>,
    /// Per step, the conv epilogue starting there (`conv_epilogue.rs`).
    chains: Vec<Option<Chain>>,
}

impl CpuExecutable {
    /// Prepares `p`: checks and takes the parameter data, initialises the state.
    pub fn new(p: &Program, weights: &BTreeMap<String, Tensor>) -> Result<Self, RuntimeError> {
        p.check_host_memory()?;
        let mut params = BTreeMap::new();
        for (name, id) in p.params() {
            let b = p.buffer(*id);
            let t = weights.get(name).ok_or_else(|| RuntimeError::Param {
                name: name.clone(),
                message: "no data was given for it".into(),
            })?;
            if t.dtype() != b.ty.dtype || t.shape() != b.dims {
                return Err(RuntimeError::Param {
                    name: name.clone(),
                    message: format!("data has type {}, the program expects {}", t.ty(), b.ty),
                });
            }
            params.insert(*id, t.clone());
        }
        let mut state = BTreeMap::new();
        for s in p.state() {
            let b = p.buffer(s.buf);
            let t = crate::initial_state(b.ty.dtype, &b.dims, s.init).map_err(|m| {
                RuntimeError::State {
                    name: s.name.clone(),
                    message: m,
                }
            })?;
            state.insert(s.buf, t);
        }
        let (hoisted, kept) = hoist(p, &params)?;
        let chains = conv_epilogue::plan(p, &hoisted);
        Ok(CpuExecutable {
            program: p.clone(),
            params,
            state,
            hoisted,
            kept,
            chains,
        })
    }

    /// The program this executable runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The conv epilogues a run without an observer takes: each conv step's node with the
    /// nodes of the elementwise steps fused into it (`conv_epilogue.rs`).
    pub fn conv_epilogues(&self) -> Vec<(String, Vec<String>)> {
        let steps = self.program.steps();
        let chains = self.chains.iter().enumerate();
        chains
            .filter_map(|(i, c)| {
                let nodes = c.as_ref()?.steps().map(|k| steps[k].node.clone());
                Some((steps[i].node.clone(), nodes.collect()))
            })
            .collect()
    }
}

impl Executable for CpuExecutable {
    fn precomputed_steps(&self) -> std::collections::BTreeSet<String> {
        let steps = self.program.steps().iter().zip(&self.hoisted);
        steps
            .filter(|(_, h)| **h)
            .map(|(s, _)| s.node.clone())
            .collect()
    }

    fn run(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.run_pooled(inputs, None)
    }

    fn run_observed(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        obs: &mut Observer<'_>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.run_pooled(inputs, Some(obs))
    }

    fn state(&self) -> BTreeMap<String, Tensor> {
        self.program
            .state()
            .iter()
            .filter_map(|s| Some((s.name.clone(), self.state.get(&s.buf)?.clone())))
            .collect()
    }

    fn set_state(&mut self, name: &str, value: Tensor) -> Result<(), RuntimeError> {
        let s = self.program.state_for_value(name, &value)?;
        self.state.insert(s.buf, value);
        Ok(())
    }

    fn state_entry(&self, name: &str) -> Option<Tensor> {
        let s = self.program.state().iter().find(|s| s.name == name)?;
        self.state.get(&s.buf).cloned()
    }
}

/// How long a worker kept awake by [`keep_warm`] waits for work before it goes back to
/// rayon's own sleep.
const WARM_IDLE: Duration = Duration::from_millis(2);

/// Keeps a worker of the pool awake while a run lasts, taking the run's parallel pieces as
/// they come (`rayon::yield_now` runs one pending job of the pool), as onnxruntime's workers
/// spin during a run. Without it a worker falls asleep between the run's small parallel ops
/// and each op pays a futex wake-up and a context switch: at two threads that cost more than
/// the second core gave (llama-tiny ran no faster on two threads than on one). A worker that
/// finds no work for [`WARM_IDLE`] stops (a long serial step does not keep a core busy for
/// nothing), and the job returns at once on the run's own thread (which may pick it up while
/// it waits for a piece of its own): spinning there would never let the run finish.
fn keep_warm(done: &AtomicBool, owner: Option<usize>) {
    if rayon::current_thread_index() == owner {
        return;
    }
    let mut idle_since = Instant::now();
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => idle_since = Instant::now(),
            _ if idle_since.elapsed() > WARM_IDLE => return,
            _ => std::hint::spin_loop(),
        }
    }
}

impl CpuExecutable {
    /// Runs the program on one of rayon's workers, with or without an observer.
    fn run_pooled(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        obs: Option<&mut Observer<'_>>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        // The steps run on one of rayon's worker threads: a kernel's parallel loop then
        // starts from inside the pool (its pieces go to the worker's own queue, and with one
        // thread run inline) instead of being handed to the pool and waited for with a
        // blocking latch, two context switches per op that dominated small models. The other
        // workers stay awake for the run (`keep_warm`).
        let done = AtomicBool::new(false);
        rayon::scope(|s| {
            let owner = rayon::current_thread_index();
            for _ in 1..rayon::current_num_threads() {
                let done = &done;
                s.spawn(move |_| keep_warm(done, owner));
            }
            let out = self.run_steps(inputs, obs);
            done.store(true, Ordering::Release);
            out
        })
    }

    /// Runs every step of the program on the calling thread (see `run_pooled`). Without an
    /// observer, a conv and the elementwise steps after it run as one where prepare found
    /// such a chain (`conv_epilogue.rs`), a `where` on one bool hands over the operand it
    /// selects (`cpu_moves.rs`), and an elementwise step whose input dies at that step writes
    /// its result over that input where `fp8c_eval::eval_in_place` handles it (same bits, no
    /// fresh buffer); an observer sees every step's inputs as they were, so then each step
    /// runs alone and writes anew. The results leave their slots without a copy.
    fn run_steps(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        mut obs: Option<&mut Observer<'_>>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.program.check_inputs(inputs)?;
        let p = &self.program;
        let mut slots: Vec<Option<Cow<'_, Tensor>>> = vec![None; p.buffers().len()];
        for b in p.buffers() {
            let v = match &b.kind {
                BufferKind::Input(n) => inputs.get(n),
                BufferKind::Param(_) => self.params.get(&b.id),
                BufferKind::State(_) => self.state.get(&b.id),
                BufferKind::Constant(t) => Some(t),
                BufferKind::Temp => self.kept.get(&b.id),
            };
            slots[b.id.index()] = v.map(Cow::Borrowed);
        }
        // The steps computed at prepare, shown to the observer first (see the module docs);
        // the results prepare did not keep (read by other such steps alone) are computed
        // again for it.
        if let Some(obs) = obs.as_mut() {
            let mut again: BTreeMap<BufId, Tensor> = BTreeMap::new();
            for (step, _) in p.steps().iter().zip(&self.hoisted).filter(|(_, h)| **h) {
                let view = |b: &BufId| slots[b.index()].as_deref().or_else(|| again.get(b));
                let outs = {
                    let ins = precomputed_inputs(step, view)?;
                    let kept: Option<Vec<Tensor>> =
                        step.outputs.iter().map(|b| view(b).cloned()).collect();
                    let outs = match kept {
                        Some(outs) => outs,
                        None => eval_step(p, step, &ins)?,
                    };
                    obs(step, &ins, &outs);
                    outs
                };
                for (b, t) in step.outputs.iter().zip(&outs) {
                    if slots[b.index()].is_none() {
                        again.insert(*b, t.clone());
                    }
                }
            }
        }
        // Steps up to this index ran inside a conv epilogue.
        let mut fused_to = None;
        for (i, step) in p.steps().iter().enumerate() {
            if fused_to.is_some_and(|last| i <= last) {
                continue;
            }
            if obs.is_none()
                && let Some(chain) = &self.chains[i]
                && let Some(t) = conv_epilogue::run(p, i, chain, &slots)?
            {
                let last = chain.last();
                slots[p.steps()[last].outputs[0].index()] = Some(Cow::Owned(t));
                for k in i..=last {
                    for &b in p.frees_after(k) {
                        slots[b.index()] = None;
                    }
                }
                fused_to = Some(last);
                continue;
            }
            if self.hoisted[i] {
                for &b in p.frees_after(i) {
                    slots[b.index()] = None;
                }
                continue;
            }
            if obs.is_none()
                && let Some(t) = cpu_moves::select_whole(p, i, &mut slots)
            {
                slots[step.outputs[0].index()] = Some(Cow::Owned(t));
                for &b in p.frees_after(i) {
                    slots[b.index()] = None;
                }
                continue;
            }
            if obs.is_none()
                && let Some(t) = in_place(p, i, &mut slots)?
            {
                slots[step.outputs[0].index()] = Some(Cow::Owned(t));
                for &b in p.frees_after(i) {
                    slots[b.index()] = None;
                }
                continue;
            }
            let outs = {
                let ins = step
                    .inputs
                    .iter()
                    .map(|b| {
                        slots[b.index()].as_deref().ok_or_else(|| {
                            RuntimeError::node(
                                &step.node,
                                step.op.name(),
                                format!("internal: buffer {b} is not available"),
                            )
                        })
                    })
                    .collect::<Result<Vec<&Tensor>, _>>()?;
                let outs = eval_step(p, step, &ins)?;
                if let Some(obs) = obs.as_mut() {
                    obs(step, &ins, &outs);
                }
                outs
            };
            for (t, &b) in outs.into_iter().zip(&step.outputs) {
                slots[b.index()] = Some(Cow::Owned(t));
            }
            for &b in p.frees_after(i) {
                slots[b.index()] = None;
            }
        }
        let (out, updates) = cpu_moves::take_results(p, &mut slots)?;
        drop(slots);
        for (buf, t) in updates {
            self.state.insert(buf, t);
        }
        Ok(out)
    }
}

/// Step `i` evaluated over one of its inputs, when that input dies at the step, is a value
/// this run made (not a parameter, constant, input or state) and the op is an elementwise
/// one `fp8c_eval::eval_in_place` handles: the result, taken from `slots`. None (and
/// `slots` as they were) otherwise.
fn in_place(
    p: &Program,
    i: usize,
    slots: &mut [Option<Cow<'_, Tensor>>],
) -> Result<Option<Tensor>, RuntimeError> {
    let step = &p.steps()[i];
    if step.outputs.len() != 1
        || !(1..=2).contains(&step.inputs.len())
        || !matches!(step.op.view(), fp8c_ir::OpView::Elementwise(_))
    {
        return Ok(None);
    }
    let dies = p.frees_after(i);
    let Some(pos) = step.inputs.iter().position(|b| {
        dies.contains(b)
            && matches!(slots[b.index()], Some(Cow::Owned(_)))
            && step.inputs.iter().filter(|x| *x == b).count() == 1
    }) else {
        return Ok(None);
    };
    let b = step.inputs[pos];
    let Some(Cow::Owned(mut t)) = slots[b.index()].take() else {
        return Ok(None);
    };
    let other = match step.inputs.get(1 - pos) {
        Some(o) => slots[o.index()].as_deref(),
        None => None,
    };
    let done = (step.inputs.len() == 1 || other.is_some())
        && fp8c_eval::eval_in_place(&step.op, &mut t, pos, other);
    if !done {
        slots[b.index()] = Some(Cow::Owned(t));
        return Ok(None);
    }
    let want = p.buffer(step.outputs[0]);
    if t.dtype() != want.ty.dtype || !same_dims(t.shape(), &want.dims) {
        return Err(RuntimeError::node(
            &step.node,
            step.op.name(),
            format!(
                "internal: produced {}, type inference planned {}",
                t.ty(),
                want.ty
            ),
        ));
    }
    Ok(Some(t))
}

/// Computes, once, every step whose inputs are parameters, constants or results of such
/// steps (see the module docs). Returns which steps those are and the results a run reads:
/// those of a step computed at run time, a graph output or a state update. A result only
/// other hoisted steps read is dropped after its last such reader (an FP8 conv's
/// dequantized weight, once its batch-norm factors have scaled it), so the executable holds
/// each weight's last form only; [`CpuExecutable::run_steps`] computes the dropped ones
/// again for an observer.
fn hoist(
    p: &Program,
    params: &BTreeMap<BufId, Tensor>,
) -> Result<(Vec<bool>, BTreeMap<BufId, Tensor>), RuntimeError> {
    use std::collections::{HashMap, HashSet};
    // Which steps: every input a param with data, a constant or a hoisted step's result.
    let mut hoisted = vec![false; p.steps().len()];
    let mut made: HashSet<BufId> = HashSet::new();
    for (i, step) in p.steps().iter().enumerate() {
        let known = step.inputs.iter().all(|b| match &p.buffer(*b).kind {
            BufferKind::Param(_) => params.contains_key(b),
            BufferKind::Constant(_) => true,
            BufferKind::Temp => made.contains(b),
            BufferKind::Input(_) | BufferKind::State(_) => false,
        });
        if known {
            hoisted[i] = true;
            made.extend(step.outputs.iter().copied());
        }
    }
    // What a run reads of them, and how many hoisted readers each result has left.
    let mut needed: HashSet<BufId> = p.outputs().iter().map(|(_, b)| *b).collect();
    needed.extend(p.state().iter().filter_map(|s| s.update));
    let mut left: HashMap<BufId, usize> = HashMap::new();
    for (step, &h) in p.steps().iter().zip(&hoisted) {
        if h {
            for b in &step.inputs {
                *left.entry(*b).or_default() += 1;
            }
        } else {
            needed.extend(step.inputs.iter().copied());
        }
    }
    let mut kept: BTreeMap<BufId, Tensor> = BTreeMap::new();
    for (step, _) in p.steps().iter().zip(&hoisted).filter(|(_, h)| **h) {
        let outs = {
            let value = |b: &BufId| match &p.buffer(*b).kind {
                BufferKind::Param(_) => params.get(b),
                BufferKind::Constant(t) => Some(t),
                _ => kept.get(b),
            };
            let ins = precomputed_inputs(step, value)?;
            eval_step(p, step, &ins)?
        };
        kept.extend(step.outputs.iter().copied().zip(outs));
        for b in &step.inputs {
            if let Some(n) = left.get_mut(b) {
                *n -= 1;
                if *n == 0 && !needed.contains(b) {
                    kept.remove(b);
                }
            }
        }
    }
    kept.retain(|b, _| needed.contains(b));
    Ok((hoisted, kept))
}

/// The inputs of a precomputed step, looked up by `value` (params, constants, results
/// computed before it); a missing one is an internal error naming the step.
fn precomputed_inputs<'t>(
    step: &Step,
    value: impl Fn(&BufId) -> Option<&'t Tensor>,
) -> Result<Vec<&'t Tensor>, RuntimeError> {
    step.inputs
        .iter()
        .map(value)
        .collect::<Option<Vec<&Tensor>>>()
        .ok_or_else(|| {
            RuntimeError::node(
                &step.node,
                step.op.name(),
                "internal: a precomputed step's input is not available",
            )
        })
}

/// Evaluates one step, checking its results against the types the plan was made for.
/// Whether two shapes are equal, compared inline: the slices' `==` calls `memcmp`, which took
/// 4% of a small model's run (the check runs for every step's every output).
#[inline]
pub(crate) fn same_dims(a: &[u64], b: &[u64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

fn eval_step(p: &Program, step: &Step, ins: &[&Tensor]) -> Result<Vec<Tensor>, RuntimeError> {
    let fail = |m: String| RuntimeError::node(&step.node, step.op.name(), m);
    let outs = fp8c_eval::eval_op(&step.op, ins).map_err(|e| fail(e.message.clone()))?;
    if outs.len() != step.outputs.len() {
        return Err(fail(format!(
            "internal: produced {} outputs, the plan has {}",
            outs.len(),
            step.outputs.len()
        )));
    }
    for (t, &b) in outs.iter().zip(&step.outputs) {
        let want = p.buffer(b);
        if t.dtype() != want.ty.dtype || !same_dims(t.shape(), &want.dims) {
            return Err(fail(format!(
                "internal: produced {}, type inference planned {}",
                t.ty(),
                want.ty
            )));
        }
    }
    Ok(outs)
}
