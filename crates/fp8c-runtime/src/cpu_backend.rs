//! The CPU reference backend: executes each [`Step`] of a [`Program`] with
//! [`fp8c_eval::eval_op`], so FP8 is bit-exact through fp8c-core and GEMMs accumulate in f32
//! on the `gemm` crate (kernels use rayon's pool where the work is large enough).
//!
//! Buffer reuse is logical here: the executor holds one `Tensor` per live buffer and drops it
//! after its last reader (the plan's `frees`), so host memory follows the same liveness the
//! plan's offsets encode. Every step's results are checked against the types the plan was
//! made for, so a kernel and type inference can never silently disagree.

use crate::backend::{Backend, Executable, Observer, RuntimeError};
use crate::program::{BufId, BufferKind, Program};
use fp8c_ir::Tensor;
use std::borrow::Cow;
use std::collections::BTreeMap;

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
}

impl CpuExecutable {
    /// Prepares `p`: checks and takes the parameter data, initialises the state.
    pub fn new(p: &Program, weights: &BTreeMap<String, Tensor>) -> Result<Self, RuntimeError> {
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
        Ok(CpuExecutable {
            program: p.clone(),
            params,
            state,
        })
    }

    /// The program this executable runs.
    pub fn program(&self) -> &Program {
        &self.program
    }
}

impl Executable for CpuExecutable {
    fn run_observed(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        obs: &mut Observer<'_>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        // The steps run on one of rayon's worker threads: a kernel's parallel loop then
        // starts from inside the pool (its pieces go to the worker's own queue, and with one
        // thread run inline) instead of being handed to the pool and waited for with a
        // blocking latch, two context switches per op that dominated small models.
        rayon::scope(|_| self.run_steps(inputs, obs))
    }

    fn state(&self) -> BTreeMap<String, Tensor> {
        self.program
            .state()
            .iter()
            .filter_map(|s| Some((s.name.clone(), self.state.get(&s.buf)?.clone())))
            .collect()
    }

    fn set_state(&mut self, name: &str, value: Tensor) -> Result<(), RuntimeError> {
        let s = self
            .program
            .state()
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| RuntimeError::State {
                name: name.to_string(),
                message: "no such state entry".into(),
            })?;
        let b = self.program.buffer(s.buf);
        if value.dtype() != b.ty.dtype || value.shape() != b.dims {
            return Err(RuntimeError::State {
                name: name.to_string(),
                message: format!("new value has type {}, the state is {}", value.ty(), b.ty),
            });
        }
        self.state.insert(s.buf, value);
        Ok(())
    }
}

impl CpuExecutable {
    /// Runs every step of the program on the calling thread (see `run_observed`).
    fn run_steps(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        obs: &mut Observer<'_>,
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
                BufferKind::Temp => None,
            };
            slots[b.id.index()] = v.map(Cow::Borrowed);
        }
        for (i, step) in p.steps().iter().enumerate() {
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
                let outs = fp8c_eval::eval_op(&step.op, &ins).map_err(|e| {
                    RuntimeError::node(&step.node, step.op.name(), e.message.clone())
                })?;
                if outs.len() != step.outputs.len() {
                    return Err(RuntimeError::node(
                        &step.node,
                        step.op.name(),
                        format!(
                            "internal: produced {} outputs, the plan has {}",
                            outs.len(),
                            step.outputs.len()
                        ),
                    ));
                }
                for (t, &b) in outs.iter().zip(&step.outputs) {
                    let want = p.buffer(b);
                    if t.dtype() != want.ty.dtype || t.shape() != want.dims {
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
                }
                obs(step, &ins, &outs);
                outs
            };
            for (t, &b) in outs.into_iter().zip(&step.outputs) {
                slots[b.index()] = Some(Cow::Owned(t));
            }
            for &b in p.frees_after(i) {
                slots[b.index()] = None;
            }
        }
        let take = |b: BufId| -> Result<Tensor, RuntimeError> {
            slots[b.index()]
                .as_deref()
                .cloned()
                .ok_or_else(|| RuntimeError::Other(format!("internal: result {b} was freed")))
        };
        let mut out = BTreeMap::new();
        for (name, b) in p.outputs() {
            out.insert(name.clone(), take(*b)?);
        }
        let mut updates = Vec::new();
        for s in p.state() {
            if let Some(u) = s.update {
                updates.push((s.buf, take(u)?));
            }
        }
        drop(slots);
        for (buf, t) in updates {
            self.state.insert(buf, t);
        }
        Ok(out)
    }
}
