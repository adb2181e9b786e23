//! A lowered graph: an ordered list of kernel calls ([`Step`]s) over numbered buffers, with
//! the interface bindings and a memory plan. Every backend consumes the same [`Program`].
//!
//! Invariants (established by [`crate::lower`], checked by [`Program::validate`]):
//! - steps are in a topological order: every buffer a step reads is written before it (by an
//!   earlier step, or it is resident or an input);
//! - every buffer has a fully static type and is written by at most one step;
//! - arena buffers (graph inputs and step results) carry a live range `[def, last]` in step
//!   indices and a byte offset in one arena; two arena buffers whose live ranges overlap never
//!   overlap in bytes. Graph outputs and state updates live to the last step;
//! - resident buffers (params, constants, state) live for the whole program, outside the arena.

use crate::RuntimeError;
use fp8c_ir::{Op, Tensor, TensorType};
use std::collections::BTreeMap;
use std::fmt;

/// Identifies a buffer of a [`Program`] (its index in [`Program::buffers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufId(pub u32);

impl BufId {
    /// The index into [`Program::buffers`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for BufId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

/// One kernel call: a node's op over input buffers, writing output buffers (one per slot).
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The graph node this step computes (errors and observers name it).
    pub node: String,
    /// The operation.
    pub op: Op,
    /// Buffers read, in the op's input order.
    pub inputs: Vec<BufId>,
    /// Buffers written, one per output slot.
    pub outputs: Vec<BufId>,
}

/// Where a buffer's value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// A graph input, fed by the caller on each run (arena).
    Input(String),
    /// A parameter; its data comes with `prepare` (resident).
    Param(String),
    /// A state entry; starts as a splat of its initial value and persists across runs
    /// (resident).
    State(String),
    /// A constant, pre-filled (resident).
    Constant(Tensor),
    /// A step result (arena).
    Temp,
}

impl BufferKind {
    /// True for buffers that live in the arena (inputs and step results).
    pub fn in_arena(&self) -> bool {
        matches!(self, BufferKind::Input(_) | BufferKind::Temp)
    }

    fn word(&self) -> &'static str {
        match self {
            BufferKind::Input(_) => "input",
            BufferKind::Param(_) => "param",
            BufferKind::State(_) => "state",
            BufferKind::Constant(_) => "const",
            BufferKind::Temp => "temp",
        }
    }
}

/// One buffer: its type, size, origin and (for arena buffers) its live range and offset.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// Its id.
    pub id: BufId,
    /// The value it holds: the producing node's name, with `:slot` for slots after the first.
    pub name: String,
    /// Its static type.
    pub ty: TensorType,
    /// Concrete dims of `ty`.
    pub dims: Vec<u64>,
    /// Size in bytes (elements × element size).
    pub bytes: u64,
    /// Where its value comes from.
    pub kind: BufferKind,
    /// Arena buffers: first and last step index during which the bytes must be kept
    /// (`def..=last`). Resident buffers: `None`.
    pub live: Option<(usize, usize)>,
    /// Arena buffers: byte offset in the arena (aligned to [`ARENA_ALIGN`]).
    pub offset: Option<u64>,
}

/// Alignment of arena offsets in bytes (cudaMalloc's, and enough for any vector load).
pub const ARENA_ALIGN: u64 = 256;

/// A state entry and the buffer holding its update, if it has one.
#[derive(Clone, Debug, PartialEq)]
pub struct StateBinding {
    /// The state entry's name.
    pub name: String,
    /// The resident buffer holding its value.
    pub buf: BufId,
    /// Its initial value (every element).
    pub init: f64,
    /// The buffer whose value becomes the state at the end of a run.
    pub update: Option<BufId>,
}

/// A state entry's value before its first update: every element `init` (an FP8 entry can
/// only start at zero, which is every FP8 format's all-zero code). Every backend starts its
/// state from this.
pub fn initial_state(dtype: fp8c_ir::DType, dims: &[u64], init: f64) -> Result<Tensor, String> {
    if dtype.is_fp8() {
        if init == 0.0 {
            return Tensor::zeros(dtype, dims.to_vec()).map_err(|e| e.to_string());
        }
        return Err(format!("cannot initialise {dtype} state to {init}"));
    }
    let n = dims.iter().product::<u64>() as usize;
    Tensor::from_f64_as(dtype, dims.to_vec(), &vec![init; n]).map_err(|e| e.to_string())
}

/// Sizes the memory plan arrived at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Size of the arena holding every input and step result: the peak planned bytes.
    pub arena_bytes: u64,
    /// Largest sum of aligned sizes of arena buffers live at one step: the lower bound any
    /// plan must reach (`arena_bytes / live_peak_bytes` is the fragmentation).
    pub live_peak_bytes: u64,
    /// Bytes of the resident buffers (params, constants, state).
    pub resident_bytes: u64,
    /// Sum of aligned sizes of all arena buffers: what no reuse at all would need.
    pub no_reuse_bytes: u64,
}

/// A lowered graph, ready for any backend. See the module docs for its invariants.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub(crate) name: String,
    pub(crate) steps: Vec<Step>,
    pub(crate) buffers: Vec<Buffer>,
    pub(crate) inputs: Vec<(String, BufId)>,
    pub(crate) params: Vec<(String, BufId)>,
    pub(crate) state: Vec<StateBinding>,
    pub(crate) outputs: Vec<(String, BufId)>,
    pub(crate) plan: MemoryPlan,
    /// Per step, the arena buffers whose last use it is (the executor may drop them after).
    pub(crate) frees: Vec<Vec<BufId>>,
}

impl Program {
    /// Checks that every result a step writes, and every state entry, fits in host memory
    /// ([`fp8c_ir::memory::check_tensor_bytes`]): what the host backends (the CPU reference,
    /// MLIR's JIT) call before allocating anything, so an absurd output (Expand to 2^31
    /// elements) is an error naming its node, not an abort.
    pub fn check_host_memory(&self) -> Result<(), RuntimeError> {
        for s in &self.steps {
            for &b in &s.outputs {
                let buf = self.buffer(b);
                fp8c_ir::memory::check_tensor_bytes(buf.bytes).map_err(|m| {
                    RuntimeError::node(&s.node, s.op.name(), format!("its output {}: {m}", buf.ty))
                })?;
            }
        }
        for st in self.state() {
            let buf = self.buffer(st.buf);
            fp8c_ir::memory::check_tensor_bytes(buf.bytes).map_err(|message| {
                RuntimeError::State {
                    name: st.name.clone(),
                    message: format!("{}: {message}", buf.ty),
                }
            })?;
        }
        Ok(())
    }

    /// Checks a caller's inputs against the program's interface (every backend's `run`
    /// does this first): unknown names, missing inputs, wrong dtype or shape, each an error
    /// naming the input.
    pub fn check_inputs(&self, inputs: &BTreeMap<String, Tensor>) -> Result<(), RuntimeError> {
        let p = self;
        let names: Vec<&str> = p.inputs().iter().map(|(n, _)| n.as_str()).collect();
        for given in inputs.keys() {
            if !names.contains(&given.as_str()) {
                return Err(RuntimeError::input(
                    given,
                    format!(
                        "is not an input of the graph (its inputs are: {})",
                        names.join(", ")
                    ),
                ));
            }
        }
        for (name, id) in p.inputs() {
            let b = p.buffer(*id);
            let t = inputs.get(name).ok_or_else(|| {
                RuntimeError::input(name, format!("is missing (expected {})", b.ty))
            })?;
            if t.dtype() != b.ty.dtype {
                return Err(RuntimeError::input(
                    name,
                    format!("has dtype {}, the graph expects {}", t.dtype(), b.ty),
                ));
            }
            if t.shape() != b.dims {
                return Err(RuntimeError::input(
                    name,
                    format!(
                        "has shape {:?}, the program was compiled for {}",
                        t.shape(),
                        b.ty
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The steps in execution order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Every buffer, indexed by [`BufId::index`].
    pub fn buffers(&self) -> &[Buffer] {
        &self.buffers
    }

    /// The buffer `id`.
    pub fn buffer(&self, id: BufId) -> &Buffer {
        &self.buffers[id.index()]
    }

    /// Graph inputs in graph order: name and buffer.
    pub fn inputs(&self) -> &[(String, BufId)] {
        &self.inputs
    }

    /// Parameters: name and buffer.
    pub fn params(&self) -> &[(String, BufId)] {
        &self.params
    }

    /// State entries with their update buffers.
    pub fn state(&self) -> &[StateBinding] {
        &self.state
    }

    /// The state entry `name`, if `value` has its type: what `Executable::set_state`
    /// checks before it replaces the entry's value.
    pub fn state_for_value(
        &self,
        name: &str,
        value: &Tensor,
    ) -> Result<&StateBinding, RuntimeError> {
        let s = self
            .state()
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| RuntimeError::State {
                name: name.to_string(),
                message: "no such state entry".into(),
            })?;
        let b = self.buffer(s.buf);
        if value.dtype() != b.ty.dtype || value.shape() != b.dims {
            return Err(RuntimeError::State {
                name: name.to_string(),
                message: format!("new value has type {}, the state is {}", value.ty(), b.ty),
            });
        }
        Ok(s)
    }

    /// Graph outputs in graph order: name and buffer.
    pub fn outputs(&self) -> &[(String, BufId)] {
        &self.outputs
    }

    /// The memory plan's sizes.
    pub fn plan(&self) -> MemoryPlan {
        self.plan
    }

    /// Peak planned bytes: the size of the arena holding inputs and intermediate results.
    pub fn peak_bytes(&self) -> u64 {
        self.plan.arena_bytes
    }

    /// Arena buffers whose last reader is step `i` (empty past the end).
    pub fn frees_after(&self, i: usize) -> &[BufId] {
        self.frees.get(i).map_or(&[], Vec::as_slice)
    }

    /// Checks the invariants of the module docs; an `Err` names the first broken one.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        let n = self.buffers.len();
        let mut written = vec![false; n];
        for b in &self.buffers {
            if b.id.index() >= n || self.buffers[b.id.index()].id != b.id {
                return Err(RuntimeError::Plan(format!(
                    "buffer {} is misnumbered",
                    b.id
                )));
            }
            if !matches!(b.kind, BufferKind::Temp) {
                written[b.id.index()] = true;
            }
            match (b.kind.in_arena(), b.live, b.offset) {
                (true, Some((d, l)), Some(off)) => {
                    if d > l {
                        return Err(RuntimeError::Plan(format!(
                            "{} `{}`: live range {d}..={l} is empty",
                            b.id, b.name
                        )));
                    }
                    if off % ARENA_ALIGN != 0 || off + b.bytes > self.plan.arena_bytes {
                        return Err(RuntimeError::Plan(format!(
                            "{} `{}`: offset {off} + {} bytes is misaligned or outside the arena of {} bytes",
                            b.id, b.name, b.bytes, self.plan.arena_bytes
                        )));
                    }
                }
                (false, None, None) => {}
                _ => {
                    return Err(RuntimeError::Plan(format!(
                        "{} `{}` ({}): placement does not match its kind",
                        b.id,
                        b.name,
                        b.kind.word()
                    )));
                }
            }
        }
        for (i, s) in self.steps.iter().enumerate() {
            for &b in &s.inputs {
                let buf = self.buffers.get(b.index()).ok_or_else(|| {
                    RuntimeError::Plan(format!("step {i} \"{}\" reads unknown buffer {b}", s.node))
                })?;
                if !written[b.index()] {
                    return Err(RuntimeError::Plan(format!(
                        "step {i} \"{}\" reads {b} before it is written",
                        s.node
                    )));
                }
                if let Some((d, l)) = buf.live
                    && !(d <= i && i <= l)
                {
                    return Err(RuntimeError::Plan(format!(
                        "step {i} \"{}\" reads {b} outside its live range {d}..={l}",
                        s.node
                    )));
                }
            }
            for &b in &s.outputs {
                let buf = self.buffers.get(b.index()).ok_or_else(|| {
                    RuntimeError::Plan(format!("step {i} \"{}\" writes unknown buffer {b}", s.node))
                })?;
                if written[b.index()] || !matches!(buf.kind, BufferKind::Temp) {
                    return Err(RuntimeError::Plan(format!(
                        "step {i} \"{}\" writes {b}, which is already written",
                        s.node
                    )));
                }
                if buf.live.map(|(d, _)| d) != Some(i) {
                    return Err(RuntimeError::Plan(format!(
                        "step {i} \"{}\" writes {b}, whose live range does not start there",
                        s.node
                    )));
                }
                written[b.index()] = true;
            }
        }
        let last = self.steps.len().saturating_sub(1);
        let kept = self
            .outputs
            .iter()
            .map(|(_, b)| *b)
            .chain(self.state.iter().filter_map(|s| s.update));
        for b in kept {
            if !written[b.index()] {
                return Err(RuntimeError::Plan(format!("result {b} is never written")));
            }
            if let Some((_, l)) = self.buffer(b).live
                && l < last
            {
                return Err(RuntimeError::Plan(format!(
                    "result {b} `{}` dies at step {l}, before the end",
                    self.buffer(b).name
                )));
            }
        }
        check_no_overlap(&self.buffers)
    }

    /// The program as text: a header with the plan's sizes, the buffers, then the steps.
    pub fn dump(&self) -> String {
        self.to_string()
    }
}

fn kib(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64)
    } else if b >= 1 << 10 {
        format!("{:.1} KiB", b as f64 / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// Peak, live-peak and resident sizes in one line, for summaries.
pub fn describe_plan(p: &MemoryPlan) -> String {
    format!(
        "peak planned {} (live peak {}, no reuse {}), resident {}",
        kib(p.arena_bytes),
        kib(p.live_peak_bytes),
        kib(p.no_reuse_bytes),
        kib(p.resident_bytes)
    )
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "program @{}: {} steps, {} buffers; {}",
            self.name,
            self.steps.len(),
            self.buffers.len(),
            describe_plan(&self.plan)
        )?;
        for b in &self.buffers {
            write!(f, "  {} {} {} {} B", b.id, b.kind.word(), b.ty, b.bytes)?;
            if let (Some((d, l)), Some(off)) = (b.live, b.offset) {
                write!(f, " @{off} live {d}..={l}")?;
            }
            match &b.kind {
                BufferKind::Input(n) | BufferKind::Param(n) | BufferKind::State(n) => {
                    writeln!(f, "  # {n}")?
                }
                _ => writeln!(f, "  # {}", b.name)?,
            }
        }
        for (i, s) in self.steps.iter().enumerate() {
            let list = |v: &[BufId]| {
                v.iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                f,
                "  {i}: {} = {}({})  # {}",
                list(&s.outputs),
                s.op.name(),
                list(&s.inputs),
                s.node
            )?;
        }
        for (name, b) in &self.outputs {
            writeln!(f, "  output \"{name}\" = {b}")?;
        }
        for s in &self.state {
            if let Some(u) = s.update {
                writeln!(f, "  state \"{}\" = {} <- {u}", s.name, s.buf)?;
            }
        }
        Ok(())
    }
}

/// Checks that no two arena buffers live at the same step share a byte: a sweep over the
/// steps, each buffer checked when its range starts against the buffers live then, kept by
/// offset (pairwise disjoint while the plan is sound, so its neighbour below is the only one
/// to look at): O(n log n), as a 10^6-step program needs.
pub(crate) fn check_no_overlap(buffers: &[Buffer]) -> Result<(), RuntimeError> {
    let arena: Vec<&Buffer> = buffers
        .iter()
        .filter(|b| b.live.is_some() && b.bytes > 0)
        .collect();
    let mut by_start: Vec<(usize, u64, &Buffer)> = Vec::with_capacity(arena.len());
    for b in &arena {
        let (Some(off), Some(live)) = (b.offset, b.live) else {
            return Err(RuntimeError::Plan(format!("{} has no offset", b.id)));
        };
        by_start.push((live.0, off, b));
    }
    by_start.sort_by_key(|&(s, off, b)| (s, off, b.id));
    let mut by_end: Vec<&Buffer> = arena.clone();
    by_end.sort_by_key(|b| (b.live.map(|l| l.1), b.id));
    // Live buffers by (offset, id).
    let mut present: std::collections::BTreeMap<(u64, BufId), &Buffer> =
        std::collections::BTreeMap::new();
    let mut gone = 0;
    for &(start, off, b) in &by_start {
        while gone < by_end.len() && by_end[gone].live.is_some_and(|l| l.1 < start) {
            let x = by_end[gone];
            present.remove(&(x.offset.unwrap_or(0), x.id));
            gone += 1;
        }
        let end = off + b.bytes;
        if let Some((_, &p)) = present.range(..(end, BufId(0))).next_back()
            && p.offset.unwrap_or(0) + p.bytes > off
        {
            return Err(overlap_error(p, b));
        }
        present.insert((off, b.id), b);
    }
    Ok(())
}

/// The message for two overlapping buffers, the one first by (offset, id) named first.
fn overlap_error<'a>(x: &'a Buffer, y: &'a Buffer) -> RuntimeError {
    let (a, b) = if (x.offset, x.id) <= (y.offset, y.id) {
        (x, y)
    } else {
        (y, x)
    };
    let (a_off, b_off) = (a.offset.unwrap_or(0), b.offset.unwrap_or(0));
    let (a_live, b_live) = (a.live.unwrap_or_default(), b.live.unwrap_or_default());
    RuntimeError::Plan(format!(
        "{} `{}` [{a_off}, {}) live {}..={} overlaps {} `{}` [{b_off}, {}) live {}..={}",
        a.id,
        a.name,
        a_off + a.bytes,
        a_live.0,
        a_live.1,
        b.id,
        b.name,
        b_off + b.bytes,
        b_live.0,
        b_live.1
    ))
}
