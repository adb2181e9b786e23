//! The movement family on CUDA: views are copies, the rest are strided copies, fills,
//! tiled transposes, gathers and scatters (`movement.cu`, `gather.cu`), `range` and `trilu`
//! kernels. Slice bounds, pads and tile repeats must be constants. Scatters apply their
//! updates in the CPU reference's order (`gather.cu`): scatter_elements in one device thread,
//! correct but slow on large updates.

use super::{Action, Lowerer, R, contiguous_strides, index_word, norm_axis, numel, split3};
use crate::cuda::codegen::{Access, broadcast_strides};
use crate::cuda::device::KernelArgs;
use crate::cuda::kernels;
use crate::program::{BufId, Step};
use fp8c_ir::{DType, MovementOp, PadMode, ScatterReduction, Support, Tensor};

/// `movement.cu`'s `PadView` (the field order and types must match).
#[repr(C)]
#[derive(Clone, Copy)]
struct PadView {
    rank: u32,
    mode: u32,
    out_dims: [u64; 8],
    in_dims: [i64; 8],
    begin: [i64; 8],
    in_strides: [i64; 8],
    value: u64,
}

/// Whether CUDA runs `op` (see [`super::support`]).
pub(crate) fn support(op: MovementOp<'_>) -> Support {
    match op {
        MovementOp::Range | MovementOp::Tile | MovementOp::Trilu { .. } => Support::Yes,
        MovementOp::GatherNd { .. } => Support::Yes,
        MovementOp::GatherElements { .. }
        | MovementOp::ScatterElements { .. }
        | MovementOp::ScatterNd { .. }
        | MovementOp::After => Support::Yes,
        MovementOp::Pad { .. } => Support::Yes,
        MovementOp::Shape { .. }
        | MovementOp::Reshape { .. }
        | MovementOp::Transpose { .. }
        | MovementOp::Unsqueeze { .. }
        | MovementOp::Squeeze { .. }
        | MovementOp::Flatten { .. }
        | MovementOp::Concat { .. }
        | MovementOp::Split { .. }
        | MovementOp::Slice
        | MovementOp::Gather { .. }
        | MovementOp::Expand
        | MovementOp::ConstantOfShape { .. }
        | MovementOp::GatherGrad { .. } => Support::Yes,
        MovementOp::__Lifetime(never, _) => match never {},
    }
}

/// `movement.cu`'s StridedView, field for field.
/// `GatherNdGeom` of `kernels/gather.cu`.
/// `ElemGeom` of `kernels/gather.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ElemGeom {
    rank: u32,
    axis: u32,
    dims: [u64; 8],
    idims: [u64; 8],
    strides: [u64; 8],
}

/// `gather.cu`'s code of a scatter reduction.
fn reduction_code(r: ScatterReduction) -> i32 {
    match r {
        ScatterReduction::None => 0,
        ScatterReduction::Add => 1,
        ScatterReduction::Mul => 2,
        ScatterReduction::Max => 3,
        ScatterReduction::Min => 4,
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct GatherNdGeom {
    k: u64,
    dims: [u64; 8],
    strides: [u64; 8],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct StridedView {
    rank: u32,
    pad: u32,
    dims: [u64; 8],
    in_strides: [i64; 8],
    out_strides: [i64; 8],
    in_offset: i64,
    out_offset: i64,
}

impl Lowerer<'_> {
    pub(super) fn lower_movement(
        &mut self,
        m: MovementOp<'_>,
        step: &Step,
        flag: &mut Option<usize>,
    ) -> R<Vec<Action>> {
        let (ins, outs) = (&step.inputs, &step.outputs);
        match m {
            MovementOp::Reshape { .. }
            | MovementOp::Squeeze { .. }
            | MovementOp::Unsqueeze { .. }
            | MovementOp::Flatten { .. }
            | MovementOp::After => {
                let (x, y) = (ins[0], outs[0]);
                Ok(vec![Action::Copy {
                    dst: self.ptr(y),
                    src: self.ptr(x),
                    bytes: self.buf(y).bytes,
                }])
            }
            MovementOp::Transpose { perm } => self.transpose(ins[0], outs[0], perm),
            MovementOp::Expand => {
                let (x, y) = (ins[0], outs[0]);
                let (xd, yd) = (self.buf(x).dims.clone(), self.buf(y).dims.clone());
                let strides = match Access::for_shapes(&xd, &yd) {
                    Access::Full => contiguous_strides(&yd),
                    Access::Scalar => vec![0; yd.len()],
                    Access::Row(_) | Access::Strided(_) => broadcast_strides(&xd, &yd),
                };
                self.strided_copy(x, y, &yd, &strides, 0, &contiguous_strides(&yd), 0)
            }
            MovementOp::Slice => self.slice(ins, outs[0]),
            MovementOp::Concat { axis } => {
                let y = outs[0];
                let yd = self.buf(y).dims.clone();
                let ax = norm_axis(*axis, yd.len())?;
                let ys = contiguous_strides(&yd);
                let mut at = 0i64;
                let mut actions = Vec::new();
                for &x in ins {
                    let xd = self.buf(x).dims.clone();
                    if numel(self.buf(x)) > 0 {
                        actions.extend(self.strided_copy(
                            x,
                            y,
                            &xd,
                            &contiguous_strides(&xd),
                            0,
                            &ys,
                            at * ys[ax],
                        )?);
                    }
                    at += xd[ax] as i64;
                }
                Ok(actions)
            }
            MovementOp::Split { axis, .. } => {
                let x = ins[0];
                let xd = self.buf(x).dims.clone();
                let ax = norm_axis(*axis, xd.len())?;
                let xs = contiguous_strides(&xd);
                let mut at = 0i64;
                let mut actions = Vec::new();
                for &y in outs {
                    let yd = self.buf(y).dims.clone();
                    if numel(self.buf(y)) > 0 {
                        actions.extend(self.strided_copy(
                            x,
                            y,
                            &yd,
                            &xs,
                            at * xs[ax],
                            &contiguous_strides(&yd),
                            0,
                        )?);
                    }
                    at += yd[ax] as i64;
                }
                Ok(actions)
            }
            MovementOp::Gather { axis } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.gather(ins[0], ins[1], outs[0], *axis, f)
            }
            MovementOp::GatherGrad { axis, .. } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.gather_grad(ins[0], ins[1], outs[0], *axis, f)
            }
            MovementOp::Pad { mode } => self.pad(ins, outs[0], *mode),
            MovementOp::ConstantOfShape { value } => {
                let y = outs[0];
                self.fill(y, value.bytes())
            }
            MovementOp::Shape { start, end } => {
                let x = self.buf(ins[0]);
                let r = x.dims.len() as i64;
                let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, e) = (clampi(*start), clampi(end.unwrap_or(r)));
                let dims: Vec<i64> = x.dims[s..e.max(s)].iter().map(|&d| d as i64).collect();
                let t = Tensor::from_i64(vec![dims.len() as u64], &dims);
                let src = self.alloc(t.bytes().len() as u64)?;
                self.dev.upload(src, t.bytes()).map_err(|e| e.to_string())?;
                Ok(vec![Action::Copy {
                    dst: self.ptr(outs[0]),
                    src,
                    bytes: t.bytes().len() as u64,
                }])
            }
            MovementOp::Range => self.range(ins, outs[0]),
            MovementOp::GatherNd { batch_dims } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.gather_nd(ins[0], ins[1], outs[0], *batch_dims, f)
            }
            MovementOp::Tile => self.tile(ins, outs[0]),
            MovementOp::GatherElements { axis } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.gather_elements(ins, outs[0], *axis, f)
            }
            MovementOp::ScatterElements { axis, reduction } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.scatter(ins, outs[0], Some(*axis), *reduction, f)
            }
            MovementOp::ScatterNd { reduction } => {
                let (i, f) = self.next_flag();
                *flag = Some(i);
                self.scatter(ins, outs[0], None, *reduction, f)
            }
            MovementOp::Trilu { upper } => self.trilu(ins, outs[0], *upper),
            MovementOp::__Lifetime(never, _) => match never {},
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn strided_copy(
        &self,
        src: BufId,
        dst: BufId,
        dims: &[u64],
        in_strides: &[i64],
        in_offset: i64,
        out_strides: &[i64],
        out_offset: i64,
    ) -> R<Vec<Action>> {
        let es = self.buf(src).ty.dtype.size();
        if es != self.buf(dst).ty.dtype.size() {
            return Err("internal: strided copy between element sizes".into());
        }
        self.strided_copy_ptr(
            (self.ptr(src), self.ptr(dst)),
            es,
            dims,
            (in_strides, in_offset),
            (out_strides, out_offset),
        )
    }

    /// [`Self::strided_copy`] between raw device pointers (scratch memory) of `es`-byte
    /// elements.
    pub(super) fn strided_copy_ptr(
        &self,
        (src, dst): (u64, u64),
        es: usize,
        dims: &[u64],
        (in_strides, in_offset): (&[i64], i64),
        (out_strides, out_offset): (&[i64], i64),
    ) -> R<Vec<Action>> {
        if dims.len() > 8 {
            return Err(format!(
                "rank {} is above the 8 dims CUDA copies handle",
                dims.len()
            ));
        }
        let n: u64 = dims.iter().product();
        if n == 0 {
            return Ok(vec![]);
        }
        let mut v = StridedView {
            rank: dims.len() as u32,
            pad: 0,
            dims: [1; 8],
            in_strides: [0; 8],
            out_strides: [0; 8],
            in_offset,
            out_offset,
        };
        v.dims[..dims.len()].copy_from_slice(dims);
        v.in_strides[..dims.len()].copy_from_slice(in_strides);
        v.out_strides[..dims.len()].copy_from_slice(out_strides);
        let mut a = KernelArgs::new();
        a.ptr(src).ptr(dst).push(v).u64(n);
        Ok(vec![self.launch_1d(
            kernels::MOVEMENT,
            &format!("fp8c_strided_copy_{es}"),
            n,
            1,
            a,
        )?])
    }

    fn transpose(&self, x: BufId, y: BufId, perm: &[i64]) -> R<Vec<Action>> {
        let xd = self.buf(x).dims.clone();
        let r = xd.len();
        // An empty perm reverses the axes (ONNX's default, as the evaluator reads it).
        let perm: Vec<usize> = if perm.is_empty() {
            (0..r).rev().collect()
        } else {
            perm.iter().map(|&p| norm_axis(p, r)).collect::<R<_>>()?
        };
        if perm.len() != r {
            return Err(format!("perm {perm:?} does not permute {r} axes"));
        }
        let es = self.buf(x).ty.dtype.size();
        let n = numel(self.buf(x));
        if n == 0 {
            return Ok(vec![]);
        }
        let identity_lead = r >= 2 && (0..r - 2).all(|i| perm[i] == i);
        if identity_lead && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 {
            let (rows, cols) = (xd[r - 2], xd[r - 1]);
            let batch: u64 = xd[..r - 2].iter().product();
            let tiles = batch * rows.div_ceil(32) * cols.div_ceil(32);
            let grid = tiles.min(u64::from(self.dev.info.sm_count) * 16) as u32;
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(x))
                .ptr(self.ptr(y))
                .u64(batch)
                .u64(rows)
                .u64(cols);
            return Ok(vec![self.launch(
                kernels::MOVEMENT,
                &format!("fp8c_transpose2d_{es}"),
                grid,
                (32, 8, 1),
                a,
            )?]);
        }
        let xs = contiguous_strides(&xd);
        let yd: Vec<u64> = perm.iter().map(|&p| xd[p]).collect();
        let in_strides: Vec<i64> = perm.iter().map(|&p| xs[p]).collect();
        self.strided_copy(x, y, &yd, &in_strides, 0, &contiguous_strides(&yd), 0)
    }

    fn slice(&self, ins: &[BufId], y: BufId) -> R<Vec<Action>> {
        let x = ins[0];
        let xd = self.buf(x).dims.clone();
        let r = xd.len();
        let starts = self.int_list(ins[1], "starts")?;
        let ends = self.int_list(ins[2], "ends")?;
        let axes = match ins.get(3) {
            Some(&b) => self.int_list(b, "axes")?,
            None => (0..starts.len() as i64).collect(),
        };
        let steps = match ins.get(4) {
            Some(&b) => self.int_list(b, "steps")?,
            None => vec![1; starts.len()],
        };
        let xs = contiguous_strides(&xd);
        let mut first = vec![0i64; r];
        let mut step_of = vec![1i64; r];
        for i in 0..starts
            .len()
            .min(ends.len())
            .min(axes.len())
            .min(steps.len())
        {
            let ax = norm_axis(axes[i], r)?;
            let step = steps[i];
            if step == 0 {
                return Err("a slice step is 0".into());
            }
            let d = xd[ax] as i64;
            let mut s = starts[i];
            if s < 0 {
                s = s.saturating_add(d);
            }
            s = if step > 0 {
                s.clamp(0, d)
            } else {
                s.clamp(0, (d - 1).max(0))
            };
            first[ax] = s;
            step_of[ax] = step;
        }
        let yd = self.buf(y).dims.clone();
        let offset: i64 = (0..r).map(|k| first[k] * xs[k]).sum();
        let in_strides: Vec<i64> = (0..r).map(|k| step_of[k] * xs[k]).collect();
        self.strided_copy(x, y, &yd, &in_strides, offset, &contiguous_strides(&yd), 0)
    }

    /// Fills `y` with the element whose bytes are `value` (1, 2, 4 or 8 bytes).
    fn fill(&self, y: BufId, value: &[u8]) -> R<Vec<Action>> {
        let es = self.buf(y).ty.dtype.size();
        if value.len() != es {
            return Err("the fill value's type differs from the output's".into());
        }
        let n = numel(self.buf(y));
        if n == 0 {
            return Ok(vec![]);
        }
        let mut bits = [0u8; 8];
        bits[..es].copy_from_slice(value);
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(y)).u64(u64::from_le_bytes(bits)).u64(n);
        Ok(vec![self.launch_1d(
            kernels::MOVEMENT,
            &format!("fp8c_fill_{es}"),
            n,
            1,
            a,
        )?])
    }

    /// Constant padding (the mode is checked by the caller, see [`pad_mode`]).
    /// ONNX Pad: non-negative constant pads are a fill and a copy into the interior; other
    /// modes and negative pads (crops) one `fp8c_pad` kernel. Pads must be constants.
    fn pad(&self, ins: &[BufId], y: BufId, mode: PadMode) -> R<Vec<Action>> {
        let x = ins[0];
        let pads = self.int_list(ins[1], "pads")?;
        let xd = self.buf(x).dims.clone();
        let r = xd.len();
        if pads.len() != 2 * r {
            return Err("pads must be 2·rank constants on CUDA".into());
        }
        let es = self.buf(y).ty.dtype.size();
        // A constant-mode value computed at run time is read on the device by the kernel.
        let (value, value_ptr) = match ins.get(2) {
            Some(&b) if mode == PadMode::Constant => match self.constant(b) {
                Some(t) => (t.bytes().to_vec(), 0),
                None => (vec![0u8; es], self.ptr(b)),
            },
            _ => (vec![0u8; es], 0),
        };
        let yd = self.buf(y).dims.clone();
        let ys = contiguous_strides(&yd);
        if mode == PadMode::Constant && value_ptr == 0 && pads.iter().all(|&p| p >= 0) {
            let mut actions = self.fill(y, &value)?;
            let offset: i64 = (0..r).map(|k| pads[k] * ys[k]).sum();
            actions.extend(self.strided_copy(
                x,
                y,
                &xd,
                &contiguous_strides(&xd),
                0,
                &ys,
                offset,
            )?);
            return Ok(actions);
        }
        if r > 8 {
            return Err(format!("rank {r} is above the 8 dims CUDA pads handle"));
        }
        if mode != PadMode::Constant && xd.contains(&0) && yd.iter().product::<u64>() > 0 {
            return Err(format!("cannot {mode:?}-pad an axis of size 0"));
        }
        let n: u64 = yd.iter().product();
        if n == 0 {
            return Ok(vec![]);
        }
        let mut v = PadView {
            rank: r as u32,
            mode: match mode {
                PadMode::Constant => 0,
                PadMode::Edge => 1,
                PadMode::Wrap => 2,
                PadMode::Reflect => 3,
            },
            out_dims: [1; 8],
            in_dims: [1; 8],
            begin: [0; 8],
            in_strides: [0; 8],
            value: 0,
        };
        let xs = contiguous_strides(&xd);
        for k in 0..r {
            v.out_dims[k] = yd[k];
            v.in_dims[k] = xd[k] as i64;
            v.begin[k] = pads[k];
            v.in_strides[k] = xs[k];
        }
        let mut word = [0u8; 8];
        word[..value.len().min(8)].copy_from_slice(&value[..value.len().min(8)]);
        v.value = u64::from_le_bytes(word);
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(y))
            .push(v)
            .ptr(value_ptr)
            .u64(n);
        Ok(vec![self.launch_1d(
            kernels::MOVEMENT,
            &format!("fp8c_pad_{es}"),
            n,
            1,
            a,
        )?])
    }

    /// ONNX Tile as one strided copy: each dim `d` repeated `r` times becomes the pair
    /// `[r, d]` of the iteration space, the repeat read with stride 0 (dims repeated once stay
    /// single, so up to 8 iteration dims cover any rank with at most 8 − rank tiled dims).
    fn tile(&self, ins: &[BufId], y: BufId) -> R<Vec<Action>> {
        let x = ins[0];
        let reps = self.int_list(ins[1], "repeats")?;
        let xd = self.buf(x).dims.clone();
        if reps.len() != xd.len() || reps.iter().any(|&r| r < 0) {
            return Err("repeats must be rank non-negative constants on CUDA".into());
        }
        let (xs, ys) = (
            contiguous_strides(&xd),
            contiguous_strides(&self.buf(y).dims),
        );
        let (mut dims, mut ins_s, mut outs_s) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..xd.len() {
            let r = reps[k] as u64;
            if r != 1 {
                dims.push(r);
                ins_s.push(0);
                outs_s.push(xd[k] as i64 * ys[k]);
            }
            dims.push(xd[k]);
            ins_s.push(xs[k]);
            outs_s.push(ys[k]);
        }
        self.strided_copy(x, y, &dims, &ins_s, 0, &outs_s, 0)
    }

    /// ONNX Range into its (static) output: start and delta are read on the device.
    fn range(&self, ins: &[BufId], y: BufId) -> R<Vec<Action>> {
        let name = match self.buf(y).ty.dtype {
            DType::F32 => "fp8c_range_f32",
            DType::I64 => "fp8c_range_i64",
            DType::I32 => "fp8c_range_i32",
            other => return Err(format!("range of {other} is not supported on CUDA yet")),
        };
        let n = numel(self.buf(y));
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(ins[0]))
            .ptr(self.ptr(ins[2]))
            .ptr(self.ptr(y))
            .u64(n);
        Ok(vec![self.launch_1d(kernels::MOVEMENT, name, n, 1, a)?])
    }

    /// ONNX Trilu over the last two dims; the optional k is read on the device.
    fn trilu(&self, ins: &[BufId], y: BufId, upper: bool) -> R<Vec<Action>> {
        let x = ins[0];
        let xd = self.buf(x).dims.clone();
        if xd.len() < 2 {
            return Err("trilu needs rank ≥ 2".into());
        }
        let k = match ins.get(1) {
            Some(&b) if self.buf(b).ty.dtype == DType::I64 => self.ptr(b),
            Some(_) => return Err("trilu's k must be an i64 scalar".into()),
            None => 0,
        };
        let n = numel(self.buf(x));
        if n == 0 {
            return Ok(vec![]);
        }
        let es = self.buf(x).ty.dtype.size();
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(y))
            .ptr(k)
            .u64(xd[xd.len() - 2])
            .u64(xd[xd.len() - 1])
            .i32(i32::from(upper))
            .u64(n);
        Ok(vec![self.launch_1d(
            kernels::MOVEMENT,
            &format!("fp8c_trilu_{es}"),
            n,
            1,
            a,
        )?])
    }

    /// The element geometry of data `x` indexed by `idx` along `axis` (data's rank ≤ 8).
    fn elem_geom(&self, x: BufId, idx: BufId, axis: i64) -> R<ElemGeom> {
        let (dd, id) = (self.buf(x).dims.clone(), self.buf(idx).dims.clone());
        let r = dd.len();
        if r == 0 || r > 8 || id.len() != r {
            return Err(format!(
                "indices {id:?} must have the rank (1 to 8) of data {dd:?}"
            ));
        }
        let ax = norm_axis(axis, r)?;
        let strides = contiguous_strides(&dd);
        let mut g = ElemGeom {
            rank: r as u32,
            axis: ax as u32,
            dims: [1; 8],
            idims: [1; 8],
            strides: [0; 8],
        };
        for k in 0..r {
            g.dims[k] = dd[k];
            g.idims[k] = id[k];
            g.strides[k] = strides[k] as u64;
        }
        Ok(g)
    }

    /// ONNX GatherElements.
    fn gather_elements(&self, ins: &[BufId], y: BufId, axis: i64, err: u64) -> R<Vec<Action>> {
        let (x, idx) = (ins[0], ins[1]);
        let it = index_word(self.buf(idx).ty.dtype, "gather_elements indices")?;
        let g = self.elem_geom(x, idx, axis)?;
        let n = numel(self.buf(idx));
        if n == 0 {
            return Ok(vec![]);
        }
        let es = self.buf(x).ty.dtype.size();
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(x))
            .ptr(self.ptr(idx))
            .ptr(self.ptr(y))
            .push(g)
            .u64(n)
            .ptr(err);
        Ok(vec![self.launch_1d(
            kernels::GATHER,
            &format!("fp8c_gather_elements_{es}_{it}"),
            n,
            1,
            a,
        )?])
    }

    /// ONNX ScatterElements (`axis` given) or ScatterND: a copy of data, then the updates in
    /// order on the device.
    fn scatter(
        &self,
        ins: &[BufId],
        y: BufId,
        axis: Option<i64>,
        reduction: ScatterReduction,
        err: u64,
    ) -> R<Vec<Action>> {
        let (x, idx, upd) = (ins[0], ins[1], ins[2]);
        let dtype = self.buf(x).ty.dtype;
        let word = match (reduction, dtype) {
            (ScatterReduction::None, d) => match d.size() {
                1 => "b1",
                2 => "b2",
                4 => "b4",
                _ => "b8",
            },
            (_, DType::F32) => "f32",
            (_, DType::I64) => "i64",
            (_, DType::I32) => "i32",
            (r, d) => {
                return Err(format!(
                    "scatter with reduction={} of {d} is not supported on CUDA yet (f32, i64 and i32 are)",
                    r.word()
                ));
            }
        };
        let mut actions = vec![Action::Copy {
            dst: self.ptr(y),
            src: self.ptr(x),
            bytes: self.buf(y).bytes,
        }];
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(y)).ptr(self.ptr(idx)).ptr(self.ptr(upd));
        let red = reduction_code(reduction);
        match axis {
            Some(axis) => {
                let it = index_word(self.buf(idx).ty.dtype, "scatter_elements indices")?;
                let g = self.elem_geom(x, idx, axis)?;
                let n = numel(self.buf(idx));
                if n == 0 {
                    return Ok(actions);
                }
                a.push(g).u64(n).i32(red).ptr(err);
                actions.push(self.launch(
                    kernels::GATHER,
                    &format!("fp8c_scatter_elements_{word}_{it}"),
                    1,
                    (1, 1, 1),
                    a,
                )?);
            }
            None => {
                let (dd, id) = (self.buf(x).dims.clone(), self.buf(idx).dims.clone());
                if self.buf(idx).ty.dtype != DType::I64 {
                    return Err("scatter_nd takes int64 indices".into());
                }
                let k = id.last().copied().unwrap_or(0) as usize;
                if k == 0 || k > 8 || k > dd.len() {
                    return Err(format!(
                        "scatter_nd: indices {id:?} do not index data {dd:?} (tuples of 1 to 8)"
                    ));
                }
                let tuples: u64 = id[..id.len() - 1].iter().product();
                let slice: u64 = dd[k..].iter().product();
                if tuples == 0 || slice == 0 {
                    return Ok(actions);
                }
                let strides = contiguous_strides(&dd[..k]);
                let mut g = ElemGeom {
                    rank: k as u32,
                    axis: 0,
                    dims: [1; 8],
                    idims: [1; 8],
                    strides: [0; 8],
                };
                for c in 0..k {
                    g.dims[c] = dd[c];
                    g.strides[c] = strides[c] as u64;
                }
                a.push(g).u64(tuples).u64(slice).i32(red).ptr(err);
                actions.push(self.launch_1d(
                    kernels::GATHER,
                    &format!("fp8c_scatter_nd_{word}"),
                    slice,
                    1,
                    a,
                )?);
            }
        }
        Ok(actions)
    }

    fn gather(&self, data: BufId, idx: BufId, y: BufId, axis: i64, err: u64) -> R<Vec<Action>> {
        let dd = self.buf(data).dims.clone();
        let ax = norm_axis(axis, dd.len())?;
        let (outer, axis_len, inner) = split3(&dd, ax, ax + 1);
        let nidx = numel(self.buf(idx));
        let it = index_word(self.buf(idx).ty.dtype, "gather indices")?;
        let es = self.buf(data).ty.dtype.size();
        let n = outer * nidx * inner;
        if n == 0 {
            return Ok(vec![]);
        }
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(data))
            .ptr(self.ptr(idx))
            .ptr(self.ptr(y))
            .u64(outer)
            .u64(axis_len)
            .u64(inner)
            .u64(nidx)
            .ptr(err);
        Ok(vec![self.launch_1d(
            kernels::GATHER,
            &format!("fp8c_gather_{es}_{it}"),
            n,
            1,
            a,
        )?])
    }

    /// ONNX GatherND (`kernels/gather.cu`): int64 index tuples over the dims after
    /// `batch_dims`, whole trailing slices copied.
    fn gather_nd(
        &self,
        data: BufId,
        idx: BufId,
        y: BufId,
        batch_dims: i64,
        err: u64,
    ) -> R<Vec<Action>> {
        let (dd, id) = (self.buf(data).dims.clone(), self.buf(idx).dims.clone());
        if self.buf(idx).ty.dtype != DType::I64 {
            return Err("gather_nd takes int64 indices".into());
        }
        let b = usize::try_from(batch_dims).map_err(|_| "negative batch_dims".to_string())?;
        let Some(&k) = id.last() else {
            return Err("gather_nd indices need a last (tuple) axis".into());
        };
        let k = k as usize;
        if k == 0 || k > 8 || b + k > dd.len() || b >= id.len() || dd[..b] != id[..b] {
            return Err(format!(
                "gather_nd: indices {id:?} with batch_dims {b} do not index data {dd:?} (tuples of 1 to 8)"
            ));
        }
        let nbatch: u64 = dd[..b].iter().product();
        let nidx: u64 = id[b..id.len() - 1].iter().product();
        let inner: u64 = dd[b + k..].iter().product();
        let batch_stride: u64 = dd[b..].iter().product();
        let mut g = GatherNdGeom {
            k: k as u64,
            dims: [1; 8],
            strides: [0; 8],
        };
        for c in 0..k {
            g.dims[c] = dd[b + c];
            g.strides[c] = dd[b + c + 1..].iter().product();
        }
        let n = nbatch * nidx * inner;
        if n == 0 {
            return Ok(vec![]);
        }
        let es = self.buf(data).ty.dtype.size();
        let mut a = KernelArgs::new();
        a.ptr(self.ptr(data))
            .ptr(self.ptr(idx))
            .ptr(self.ptr(y))
            .u64(nbatch)
            .u64(nidx)
            .u64(inner)
            .u64(batch_stride)
            .push(g)
            .ptr(err);
        Ok(vec![self.launch_1d(
            kernels::GATHER,
            &format!("fp8c_gather_nd_{es}"),
            n,
            1,
            a,
        )?])
    }

    fn gather_grad(&self, dy: BufId, idx: BufId, dx: BufId, axis: i64, err: u64) -> R<Vec<Action>> {
        if self.buf(dy).ty.dtype != DType::F32 {
            return Err("gather_grad is supported for f32 on CUDA".into());
        }
        let xd = self.buf(dx).dims.clone();
        let ax = norm_axis(axis, xd.len())?;
        let (outer, size, inner) = split3(&xd, ax, ax + 1);
        let nidx = numel(self.buf(idx));
        let it = index_word(self.buf(idx).ty.dtype, "indices")?;
        let mut actions = vec![Action::Memset8 {
            ptr: self.ptr(dx),
            value: 0,
            bytes: self.buf(dx).bytes,
        }];
        let n = outer * nidx * inner;
        if n > 0 {
            let mut a = KernelArgs::new();
            a.ptr(self.ptr(dy))
                .ptr(self.ptr(idx))
                .ptr(self.ptr(dx))
                .u64(outer)
                .u64(size)
                .u64(inner)
                .u64(nidx)
                .ptr(err);
            actions.push(self.launch_1d(
                kernels::GATHER,
                &format!("fp8c_gather_grad_f32_{it}"),
                n,
                1,
                a,
            )?);
        }
        Ok(actions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_view_matches_its_c_layout() {
        assert_eq!(std::mem::size_of::<StridedView>(), 8 + 3 * 64 + 16);
    }
}
