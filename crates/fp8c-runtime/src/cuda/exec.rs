//! A program prepared for the GPU: its buffers on the device, its steps as device actions, and
//! the loop that replays them (eagerly, or as a captured CUDA graph).

use crate::backend::{Executable, Observer, RuntimeError};
use crate::cuda::device::{Device, DeviceGraph};
use crate::cuda::gemm::Lt;
use crate::cuda::lower::{Action, Lowered, Lowerer, step_error};
use crate::cuda::{CudaOptions, libs};
use crate::program::{BufId, BufferKind, Program};
use fp8c_ir::{Op, Tensor};
use std::collections::BTreeMap;

/// A program prepared for a CUDA device. Fields drop in declaration order: the graph and the
/// planned GEMMs before cuBLASLt, cuBLASLt before the device (which frees the memory).
pub struct CudaExecutable {
    /// The captured run (`cuda_graph`), replayed by every later run.
    graph: Option<DeviceGraph>,
    steps: Vec<Lowered>,
    lt: Option<Lt>,
    program: Program,
    addr: Vec<u64>,
    /// Device i32 flags set by steps that find bad values (gather indices, labels), and the
    /// step owning each.
    err_base: u64,
    err_steps: Vec<usize>,
    /// (state buffer, its update, bytes), copied on the device at the end of a run.
    state_copies: Vec<(u64, u64, u64)>,
    runs: u64,
    cuda_graph: bool,
    /// Why capturing the run as a graph failed, once it has: runs stay eager from then on
    /// instead of retrying (and failing) the capture every run.
    graph_failed: Option<String>,
    dev: Device,
}

/// True for ops that run on cuBLASLt.
fn needs_gemm(op: &Op) -> bool {
    matches!(
        op,
        Op::MatMul
            | Op::Gemm { .. }
            | Op::Conv { .. }
            | Op::ConvGradInput { .. }
            | Op::ConvGradWeight { .. }
            | Op::ScaledMatMul { .. }
            | Op::ScaledMatMulEpilogue { .. }
            | Op::BlockScaledMatMul { .. }
    )
}

impl CudaExecutable {
    /// Prepares `p` on the device of `options` (the backend's `check` has passed).
    pub fn new(
        p: &Program,
        weights: &BTreeMap<String, Tensor>,
        options: &CudaOptions,
    ) -> Result<Self, RuntimeError> {
        let dev = if options.emulated {
            Device::emulated(options.emulated_faults.clone())
        } else {
            Device::open(options.device)?
        };
        dev.bind()?;
        let lt = if p.steps().iter().any(|s| needs_gemm(&s.op)) {
            if !dev.is_emulated() {
                libs::require_cublaslt()?;
            }
            Some(Lt::new(&dev)?)
        } else {
            None
        };
        // The arena for inputs and step results, then one allocation per resident buffer.
        let arena = dev.alloc(p.plan().arena_bytes)?;
        let mut addr = vec![0u64; p.buffers().len()];
        for b in p.buffers() {
            addr[b.id.index()] = match (&b.kind, b.offset) {
                (k, Some(off)) if k.in_arena() => arena + off,
                _ => dev.alloc(b.bytes)?,
            };
        }
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
            dev.upload(addr[id.index()], t.bytes())?;
        }
        for s in p.state() {
            let b = p.buffer(s.buf);
            let bytes = crate::initial_state(b.ty.dtype, &b.dims, s.init)
                .map_err(|m| RuntimeError::State {
                    name: s.name.clone(),
                    message: m,
                })?
                .into_bytes();
            dev.upload(addr[s.buf.index()], &bytes)?;
        }
        for b in p.buffers() {
            if let BufferKind::Constant(t) = &b.kind {
                dev.upload(addr[b.id.index()], t.bytes())?;
            }
        }
        let mut uses = vec![0usize; p.buffers().len()];
        for s in p.steps() {
            for &b in &s.inputs {
                uses[b.index()] += 1;
            }
        }
        for (_, b) in p.outputs() {
            uses[b.index()] += 1;
        }
        for s in p.state() {
            if let Some(u) = s.update {
                uses[u.index()] += 1;
            }
        }
        // Room for one error flag per step (a step takes at most one, see `Lowered`); which
        // steps take one is known once they are lowered.
        let err_base = dev.alloc(4 * p.steps().len().max(1) as u64)?;
        let mut lowerer = Lowerer {
            dev: &dev,
            lt: lt.as_ref(),
            program: p,
            addr: &addr,
            uses,
            err_base,
            err_count: 0,
        };
        let mut steps = Vec::with_capacity(p.steps().len());
        let mut flagged = Vec::new();
        let mut failures = Vec::new();
        for (i, step) in p.steps().iter().enumerate() {
            match lowerer.lower(step) {
                Ok(l) => {
                    if let Some(f) = l.err_flag {
                        flagged.push((f, i));
                    }
                    steps.push(l);
                }
                Err(m) => failures.push(step_error(step, m)),
            }
        }
        let mut err_steps = vec![usize::MAX; lowerer.err_count.max(1)];
        for (f, i) in flagged {
            err_steps[f] = i;
        }
        match failures.len() {
            0 => {}
            1 => return Err(failures.remove(0)),
            n => {
                let lines: Vec<String> = failures.iter().map(|e| format!("  {e}")).collect();
                return Err(RuntimeError::Other(format!(
                    "{n} steps cannot run on the CUDA backend:\n{}",
                    lines.join("\n")
                )));
            }
        }
        let state_copies = p
            .state()
            .iter()
            .filter_map(|s| {
                let u = s.update?;
                Some((addr[s.buf.index()], addr[u.index()], p.buffer(s.buf).bytes))
            })
            .collect();
        dev.sync()?;
        Ok(CudaExecutable {
            graph: None,
            steps,
            lt,
            program: p.clone(),
            addr,
            err_base,
            err_steps,
            state_copies,
            runs: 0,
            cuda_graph: options.cuda_graph,
            graph_failed: None,
            dev,
        })
    }

    /// The program this executable runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The device it runs on.
    pub fn device(&self) -> &crate::cuda::DeviceInfo {
        &self.dev.info
    }

    fn upload_inputs(&self, inputs: &BTreeMap<String, Tensor>) -> Result<(), RuntimeError> {
        for (name, id) in self.program.inputs() {
            if let Some(t) = inputs.get(name) {
                self.dev.upload(self.addr[id.index()], t.bytes())?;
            }
        }
        Ok(())
    }

    fn enqueue(&self, a: &Action) -> Result<(), RuntimeError> {
        match a {
            Action::Launch(l) => {
                let mut l = l.clone();
                self.dev.launch(&mut l)
            }
            Action::Memset8 { ptr, value, bytes } => self.dev.memset8(*ptr, *value, *bytes),
            Action::Copy { dst, src, bytes } => self.dev.copy(*dst, *src, *bytes),
            Action::Gemm(call) => self
                .lt
                .as_ref()
                .ok_or_else(|| RuntimeError::Other("internal: a GEMM without cuBLASLt".into()))?
                .run(call, &self.dev),
        }
    }

    /// Everything of one run after the inputs are on the device: flags cleared, every step,
    /// then the state updates.
    fn enqueue_run(&self) -> Result<(), RuntimeError> {
        self.dev
            .memset32(self.err_base, 0, self.err_steps.len() as u64)?;
        for (step, l) in self.program.steps().iter().zip(&self.steps) {
            for a in &l.actions {
                self.enqueue(a)
                    .map_err(|e| step_error(step, e.to_string()))?;
            }
        }
        self.enqueue_state_copies()
    }

    fn enqueue_state_copies(&self) -> Result<(), RuntimeError> {
        for &(dst, src, bytes) in &self.state_copies {
            self.dev.copy(dst, src, bytes)?;
        }
        Ok(())
    }

    /// Captures `enqueue_run` as a CUDA graph.
    fn capture(&self) -> Result<DeviceGraph, RuntimeError> {
        self.dev.begin_capture()?;
        let body = self.enqueue_run();
        // Ending the capture is required even after a failure.
        let graph = self.dev.end_capture();
        body?;
        graph
    }

    fn download(&self, b: BufId) -> Result<Tensor, RuntimeError> {
        let buf = self.program.buffer(b);
        let mut bytes = vec![0u8; buf.bytes as usize];
        self.dev.download(&mut bytes, self.addr[b.index()])?;
        Tensor::from_bytes(buf.ty.dtype, buf.dims.clone(), bytes).map_err(RuntimeError::Other)
    }

    /// Reads the error flags and the outputs once the run is enqueued.
    fn finish(&self) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        let mut flags = vec![0u8; 4 * self.err_steps.len()];
        self.dev.download(&mut flags, self.err_base)?;
        for (i, chunk) in flags.chunks_exact(4).enumerate() {
            if chunk != [0, 0, 0, 0]
                && let Some(step) = self.program.steps().get(self.err_steps[i])
            {
                let what = match step.op {
                    fp8c_ir::Op::Div | fp8c_ir::Op::Mod { .. } => "an integer division by zero",
                    _ => "an index or label is out of range",
                };
                return Err(step_error(
                    step,
                    format!("{what} (found on the device; this run's state updates were applied)"),
                ));
            }
        }
        let mut out = BTreeMap::new();
        for (name, b) in self.program.outputs() {
            out.insert(name.clone(), self.download(*b)?);
        }
        Ok(out)
    }
}

impl Executable for CudaExecutable {
    fn run(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.program.check_inputs(inputs)?;
        self.dev.bind()?;
        self.upload_inputs(inputs)?;
        // The first run goes eagerly (it also warms cuBLASLt); with --cuda-graph the second is
        // captured and every run from then on is one graph launch.
        if self.cuda_graph && self.runs >= 1 && self.graph.is_none() && self.graph_failed.is_none()
        {
            match self.capture() {
                Ok(g) => self.graph = Some(g),
                Err(e) => {
                    tracing::warn!("--cuda-graph: capturing the run failed ({e}); running eagerly");
                    self.graph_failed = Some(e.to_string());
                }
            }
        }
        match &self.graph {
            Some(g) => self.dev.launch_graph(g)?,
            None => self.enqueue_run()?,
        }
        self.runs += 1;
        self.finish()
    }

    fn run_observed(
        &mut self,
        inputs: &BTreeMap<String, Tensor>,
        obs: &mut Observer<'_>,
    ) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.program.check_inputs(inputs)?;
        self.dev.bind()?;
        self.upload_inputs(inputs)?;
        self.dev
            .memset32(self.err_base, 0, self.err_steps.len() as u64)?;
        for (step, l) in self.program.steps().iter().zip(&self.steps) {
            for a in &l.actions {
                self.enqueue(a)
                    .map_err(|e| step_error(step, e.to_string()))?;
            }
            self.dev
                .sync()
                .map_err(|e| step_error(step, e.to_string()))?;
            let ins = step
                .inputs
                .iter()
                .map(|&b| self.download(b))
                .collect::<Result<Vec<_>, _>>()?;
            let outs = step
                .outputs
                .iter()
                .map(|&b| self.download(b))
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&Tensor> = ins.iter().collect();
            obs(step, &refs, &outs);
        }
        self.enqueue_state_copies()?;
        self.runs += 1;
        self.finish()
    }

    fn state(&self) -> BTreeMap<String, Tensor> {
        self.try_state().unwrap_or_default()
    }

    fn try_state(&self) -> Result<BTreeMap<String, Tensor>, RuntimeError> {
        self.dev.bind()?;
        self.program
            .state()
            .iter()
            .map(|s| {
                let t = self.download(s.buf).map_err(|e| RuntimeError::State {
                    name: s.name.clone(),
                    message: format!("cannot read it from the device: {e}"),
                })?;
                Ok((s.name.clone(), t))
            })
            .collect()
    }

    fn set_state(&mut self, name: &str, value: Tensor) -> Result<(), RuntimeError> {
        let s = self.program.state_for_value(name, &value)?;
        self.dev.bind()?;
        self.dev.upload(self.addr[s.buf.index()], value.bytes())?;
        self.dev.sync()
    }
}
