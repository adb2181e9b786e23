//! Reductions and normalisations in the MLIR emitter: f64 accumulators in index order (the
//! CPU reference's), the reduce_* ops, softmax, layer_norm and rms_norm; and the ops that fold
//! along an axis in the CPU's loop order: arg_max / arg_min, cum_sum and top_k.

use super::*;
use crate::scalar::ArgKeys;

impl<'c> Emitter<'c, '_> {
    /// The map from `rank` iteration dims to a tensor that keeps the dims not in `axes`
    /// (`keepdims`: reduced dims read index 0).
    pub(super) fn reduced_map(&self, rank: usize, axes: &[usize], keepdims: bool) -> Attribute<'c> {
        let exprs: Vec<AffineExpr> = (0..rank)
            .filter_map(|k| match (axes.contains(&k), keepdims) {
                (true, true) => Some(AffineExpr::constant(self.ctx, 0)),
                (true, false) => None,
                (false, _) => Some(AffineExpr::dim(self.ctx, k)),
            })
            .collect();
        self.map_attr(AffineMap::new(self.ctx, rank, 0, &exprs))
    }

    /// An f64 accumulator over `axes` of `x` (index order, as the CPU's reductions), with
    /// `body(acc, x_f64) -> acc` from `init`; dims kept with size 1.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accumulate<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        in_maps: Vec<Attribute<'c>>,
        dims: &[u64],
        axes: &[usize],
        init: f64,
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&Scalar<'c, 'b>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let f64t = Type::float64(self.ctx);
        let init = FloatAttribute::new(self.ctx, f64t, init).into();
        self.accumulate_in(block, ins, in_maps, dims, axes, (f64t, init), loc, body)
    }

    /// An accumulator of element type `acc` starting at `init` over `axes` of the iteration
    /// space `dims` (reduction loops in index order), with `body(ins…, acc) -> acc`; dims
    /// kept with size 1.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accumulate_in<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        in_maps: Vec<Attribute<'c>>,
        dims: &[u64],
        axes: &[usize],
        (acc, init): (Type<'c>, Attribute<'c>),
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&Scalar<'c, 'b>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let kept: Vec<u64> = dims
            .iter()
            .enumerate()
            .map(|(k, &d)| if axes.contains(&k) { 1 } else { d })
            .collect();
        let acc_ty: Type = RankedTensorType::new(&kept, acc, None).into();
        let init_v: Value = push(block, arith::constant(self.ctx, init, loc));
        let empty = self.empty(block, acc_ty, loc);
        let filled = self.fill(block, init_v, empty, acc_ty, acc, loc);
        let iters: Vec<&str> = (0..dims.len())
            .map(|k| {
                if axes.contains(&k) {
                    "reduction"
                } else {
                    "parallel"
                }
            })
            .collect();
        let out_map = self.reduced_map(dims.len(), axes, true);
        let ctx = self.ctx;
        self.generic_with_out_map(
            block,
            ins,
            in_maps,
            out_map,
            &iters,
            acc_ty,
            filled,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                body(&s, a)
            },
        )
    }

    /// reduce_sum / mean / prod / max / min: f64 accumulation in index order (max and min
    /// with NaN winning, from ∓inf), one rounding to f32, as the CPU's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_f64<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axes: &[usize],
        keepdims: bool,
        fold: Fold,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, dims.len()));
        let init = match fold {
            Fold::Sum | Fold::Mean => 0.0,
            Fold::Prod => 1.0,
            Fold::Max => f64::NEG_INFINITY,
            Fold::Min => f64::INFINITY,
        };
        let acc = self.accumulate(block, &[x], vec![id], dims, axes, init, loc, move |s, a| {
            let xe = s.extf(a[0]);
            match fold {
                Fold::Sum | Fold::Mean => s.addf64(a[1], xe),
                Fold::Prod => s.mulf64(a[1], xe),
                Fold::Max => s.maxf64(a[1], xe),
                Fold::Min => s.minf64(a[1], xe),
            }
        });
        let mean = fold == Fold::Mean;
        let count: u64 = axes.iter().map(|&k| dims[k]).product();
        // Iterate over the kept accumulator (the input's rank, reduced dims of size 1) and
        // write the output through a map that drops those dims unless keepdims.
        let kept_rank = dims.len();
        let in_map = self.map_attr(AffineMap::multi_dim_identity(self.ctx, kept_rank));
        let out_map = self.reduced_map(kept_rank, axes, keepdims);
        let empty = self.empty(block, out_ty, loc);
        let ctx = self.ctx;
        let iters = vec!["parallel"; kept_rank];
        // The iteration space is the accumulator's: reduced dims have size 1, so the output
        // map's constant-0 / dropped dims are consistent.
        self.generic_with_out_map(
            block,
            &[acc],
            vec![in_map],
            out_map,
            &iters,
            out_ty,
            empty,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let v = if mean {
                    s.divf64(a[0], s.f64c(count as f64))
                } else {
                    a[0]
                };
                s.truncf(v)
            },
        )
    }

    /// The five ONNX reductions of `node` on `x`: f32 through [`Self::reduce_f64`], integers
    /// and bool through [`Self::reduce_int`]. Absent or empty axes reduce every axis.
    pub(super) fn reduce_op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        x: Value<'c, 'a>,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let (axes, keepdims, fold) = match &node.op {
            Op::ReduceMean { axes, keepdims } => (axes, *keepdims, Fold::Mean),
            Op::ReduceSum { axes, keepdims } => (axes, *keepdims, Fold::Sum),
            Op::ReduceProd { axes, keepdims } => (axes, *keepdims, Fold::Prod),
            Op::ReduceMax { axes, keepdims } => (axes, *keepdims, Fold::Max),
            Op::ReduceMin { axes, keepdims } => (axes, *keepdims, Fold::Min),
            _ => unreachable!("reduce_op on {}", node.op.name()),
        };
        let dims = self.dims(node.inputs()[0], node)?;
        let r = dims.len() as i64;
        let axes: Vec<usize> = match axes.as_deref() {
            Some(a) if !a.is_empty() => a
                .iter()
                .map(|&x| (if x < 0 { x + r } else { x }) as usize)
                .collect(),
            _ => (0..dims.len()).collect(),
        };
        let dtype = self.graph.value_type(node.inputs()[0]).dtype;
        if dtype.is_int() || dtype == DType::Bool {
            return Ok(self.reduce_int(block, x, &dims, &axes, keepdims, fold, dtype, out_ty, loc));
        }
        if dtype != DType::F32 {
            return Err(unsupported(
                node,
                format!("a reduction of {dtype} is not emitted yet"),
            ));
        }
        Ok(self.reduce_f64(block, x, &dims, &axes, keepdims, fold, out_ty, loc))
    }

    /// An integer (or bool) reduction as the CPU's: each element widened to i64 (by its
    /// signedness; u64 as its bits), folded in wrapping i64 arithmetic (sum and mean from 0,
    /// prod from 1) or compared as signed i64 (max from the type's lowest value, min from its
    /// highest), then wrapped back to the type. A mean is the wrapping sum divided by the
    /// count, truncating toward zero (`arith.divsi`; the count is positive, so it cannot
    /// trap), and 0 over no elements.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_int<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axes: &[usize],
        keepdims: bool,
        fold: Fold,
        dtype: DType,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let ctx = self.ctx;
        let i64t: Type = IntegerType::new(ctx, 64).into();
        let elem = RankedTensorType::try_from(out_ty)
            .map(|t| t.element())
            .expect("a ranked result");
        let width = IntegerType::try_from(elem).map_or(64, |t| t.width());
        let unsigned = matches!(
            dtype,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool
        );
        // The CPU's starting values (fp8c-eval's `int_range`): the type's range for the
        // signed types, u8 and bool; i64's for u16, u32 and u64, which wrap to the same bits.
        let (lo, hi) = match dtype {
            DType::I32 => (i32::MIN.into(), i32::MAX.into()),
            DType::I16 => (i16::MIN.into(), i16::MAX.into()),
            DType::I8 => (i8::MIN.into(), i8::MAX.into()),
            DType::U8 => (0, u8::MAX.into()),
            DType::Bool => (0, 1),
            _ => (i64::MIN, i64::MAX),
        };
        let init = match fold {
            Fold::Sum | Fold::Mean => 0,
            Fold::Prod => 1,
            Fold::Max => lo,
            Fold::Min => hi,
        };
        let init = IntegerAttribute::new(i64t, init).into();
        let id = self.map_attr(AffineMap::multi_dim_identity(ctx, dims.len()));
        let acc = self.accumulate_in(
            block,
            &[x],
            vec![id],
            dims,
            axes,
            (i64t, init),
            loc,
            move |s, a| {
                let v = match (width, unsigned) {
                    (64, _) => a[0],
                    (_, true) => s.named_pub("arith.extui", a[0], i64t),
                    (_, false) => s.named_pub("arith.extsi", a[0], i64t),
                };
                let name = match fold {
                    Fold::Sum | Fold::Mean => "arith.addi",
                    Fold::Prod => "arith.muli",
                    Fold::Max => "arith.maxsi",
                    Fold::Min => "arith.minsi",
                };
                s.int(name, a[1], v)
            },
        );
        let count: u64 = axes.iter().map(|&k| dims[k]).product();
        let divide = fold == Fold::Mean && count > 0;
        let rank = dims.len();
        let in_map = self.map_attr(AffineMap::multi_dim_identity(ctx, rank));
        let out_map = self.reduced_map(rank, axes, keepdims);
        let empty = self.empty(block, out_ty, loc);
        self.generic_with_out_map(
            block,
            &[acc],
            vec![in_map],
            out_map,
            &vec!["parallel"; rank],
            out_ty,
            empty,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let v = if divide {
                    s.int("arith.divsi", a[0], s.i64c(count as i64))
                } else {
                    a[0]
                };
                if width == 64 {
                    v
                } else {
                    s.named_pub("arith.trunci", v, elem)
                }
            },
        )
    }

    /// softmax over `axis` in f64 (the CPU's): max, Σ exp(x − max), exp(x − max) / Σ.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn softmax<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axis: usize,
        log: bool,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &[axis], true);
        let max = self.accumulate(
            block,
            &[x],
            vec![id()],
            dims,
            &[axis],
            f64::NEG_INFINITY,
            loc,
            |s, a| {
                let xe = s.extf(a[0]);
                s.maxf64(a[1], xe)
            },
        );
        let sum = self.accumulate(
            block,
            &[x, max],
            vec![id(), kept()],
            dims,
            &[axis],
            0.0,
            loc,
            |s, a| {
                let e = s.exp_diff(a[0], a[1]);
                s.addf64(a[2], e)
            },
        );
        let ctx = self.ctx;
        self.generic(
            block,
            &[x, max, sum],
            vec![id(), kept(), kept()],
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                if log {
                    // x − max − ln(sum), in f64 and in that order, as the CPU's log_softmax.
                    let d = s.subf64(s.extf(a[0]), a[1]);
                    let ls = s.logf64(a[2]);
                    s.truncf(s.subf64(d, ls))
                } else {
                    let e = s.exp_diff(a[0], a[1]);
                    s.truncf(s.divf64(e, a[2]))
                }
            },
        )
    }

    /// `Σ x` and `Σ (x − mean)²` over `axes` in f64, kept with size-1 dims: the statistics
    /// `layer_norm` computes.
    pub(super) fn row_stats<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axes: &[usize],
        loc: Location<'c>,
    ) -> (Value<'c, 'a>, Value<'c, 'a>) {
        let r = dims.len();
        let nf = axes.iter().map(|&k| dims[k]).product::<u64>() as f64;
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, axes, true);
        let sum = self.accumulate(block, &[x], vec![id()], dims, axes, 0.0, loc, |s, a| {
            s.addf64(a[1], s.extf(a[0]))
        });
        let var = self.accumulate(
            block,
            &[x, sum],
            vec![id(), kept()],
            dims,
            axes,
            0.0,
            loc,
            move |s, a| {
                let mean = s.divf64(a[1], s.f64c(nf));
                let d = s.subf64(s.extf(a[0]), mean);
                s.addf64(a[2], s.mulf64(d, d))
            },
        );
        (sum, var)
    }

    /// layer_norm over axes `axis..` in f64 (the CPU's): mean, variance about the mean,
    /// `(x − mean) · inv · scale (+ bias)`, one rounding.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer_norm<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        pdims: &[Vec<u64>],
        dims: &[u64],
        axis: usize,
        epsilon: f32,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let axes: Vec<usize> = (axis..r).collect();
        let n: u64 = dims[axis..].iter().product();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &axes, true);
        let (sum, var) = self.row_stats(block, ins[0], dims, &axes, loc);
        let nf = n as f64;
        let mut ops = vec![ins[0], sum, var];
        let mut maps = vec![id(), kept(), kept()];
        for (k, pd) in pdims.iter().enumerate() {
            ops.push(ins[1 + k]);
            maps.push(self.broadcast_map(pd, dims));
        }
        let has_bias = pdims.len() > 1;
        let ctx = self.ctx;
        let eps = f64::from(epsilon);
        self.generic(
            block,
            &ops,
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let (mean, inv) = s.mean_inv(a[1], a[2], nf, eps);
                let t = s.mulf64(s.mulf64(s.subf64(s.extf(a[0]), mean), inv), s.extf(a[3]));
                let y = if has_bias {
                    s.addf64(t, s.extf(a[4]))
                } else {
                    t
                };
                s.truncf(y)
            },
        )
    }
}

/// What a reduction folds with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fold {
    Sum,
    Mean,
    Prod,
    Max,
    Min,
}

impl<'c> Emitter<'c, '_> {
    /// ONNX ArgMax / ArgMin along `axis` as the CPU's loop: `best` starts at 0 and moves to
    /// index j when `x[j]` strictly beats `x[best]` (or ties it, with `last`); comparisons with
    /// a NaN are false, so a NaN is never selected over a number and a leading NaN stays. The
    /// i64 accumulator is the index; the body reads `x[best]` with `tensor.extract`. Reduction
    /// loops run in index order, the CPU's.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn arg_extreme<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axis: usize,
        (keepdims, last, max): (bool, bool, bool),
        keys: ArgKeys,
        (elem, out_ty): (Type<'c>, Type<'c>),
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let i64t: Type = IntegerType::new(self.ctx, 64).into();
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let zero = s.i64c(0);
        let empty = self.empty(block, out_ty, loc);
        let init = self.fill(block, zero, empty, out_ty, i64t, loc);
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let out_map = self.reduced_map(r, &[axis], keepdims);
        let iters: Vec<&str> = (0..r)
            .map(|k| if k == axis { "reduction" } else { "parallel" })
            .collect();
        let ctx = self.ctx;
        self.generic_with_out_map(
            block,
            &[x],
            vec![id],
            out_map,
            &iters,
            out_ty,
            init,
            loc,
            move |b, a| {
                use melior::dialect::arith::{CmpfPredicate as F, CmpiPredicate as I};
                let s = Scalar { ctx, block: b, loc };
                let best = a[1];
                let coords: Vec<Value> = (0..r)
                    .map(|k| {
                        if k == axis {
                            s.named_pub("arith.index_cast", best, Type::index(ctx))
                        } else {
                            s.linalg_index(k)
                        }
                    })
                    .collect();
                let (xj, xb) = (a[0], s.extract(x, &coords, elem));
                let (beats, ties) = match keys {
                    ArgKeys::Float | ArgKeys::U64AsF64 => {
                        let widen = |v| match keys {
                            ArgKeys::U64AsF64 => s.named_pub("arith.uitofp", v, Type::float64(ctx)),
                            _ if elem == Type::float64(ctx) || elem == Type::float32(ctx) => v,
                            _ => s.named_pub("arith.extf", v, Type::float32(ctx)),
                        };
                        let (xj, xb) = (widen(xj), widen(xb));
                        let p = if max { F::Ogt } else { F::Olt };
                        (s.cmpf(p, xj, xb), s.cmpf(F::Oeq, xj, xb))
                    }
                    ArgKeys::Int(unsigned) => {
                        let p = match (max, unsigned) {
                            (true, true) => I::Ugt,
                            (true, false) => I::Sgt,
                            (false, true) => I::Ult,
                            (false, false) => I::Slt,
                        };
                        (s.cmpi(p, xj, xb), s.cmpi(I::Eq, xj, xb))
                    }
                };
                let take = if last { s.or(beats, ties) } else { beats };
                let j = s.named_pub("arith.index_cast", s.linalg_index(axis), i64t);
                s.select(take, j, best)
            },
        )
    }
}

impl<'c> Emitter<'c, '_> {
    /// ONNX CumSum along `axis` as the CPU's scan: each output is a sum in scan order (from
    /// the end with `reverse`) from 0 of the elements up to it (before it with `exclusive`),
    /// in `acc_elem` (f32 for f16 / bf16, whose result is rounded once after; integers wrap).
    /// The iteration space is the output's plus one reduction dim over the scan steps; a step
    /// past the output's position adds nothing. A reverse scan is the forward scan of the
    /// input reversed along the axis, reversed back (linalg needs invertible maps).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn cum_sum<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axis: usize,
        (exclusive, reverse): (bool, bool),
        (acc_elem, float): (Type<'c>, bool),
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let (r, ctx) = (dims.len(), self.ctx);
        let acc_ty: Type = RankedTensorType::new(dims, acc_elem, None).into();
        let x = if reverse {
            let x_ty = x.r#type();
            self.reverse_axis(block, x, dims, axis, x_ty, loc)
        } else {
            x
        };
        let zero: Attribute = if float {
            FloatAttribute::new(ctx, acc_elem, 0.0).into()
        } else {
            IntegerAttribute::new(acc_elem, 0).into()
        };
        let zero = push(block, arith::constant(ctx, zero, loc));
        let empty = self.empty(block, acc_ty, loc);
        let init = self.fill(block, zero, empty, acc_ty, acc_elem, loc);
        // x is read at the step's position along the axis.
        let x_exprs: Vec<AffineExpr> = (0..r)
            .map(|k| AffineExpr::dim(ctx, if k == axis { r } else { k }))
            .collect();
        let x_map = self.map_attr(AffineMap::new(ctx, r + 1, 0, &x_exprs));
        let out_exprs: Vec<AffineExpr> = (0..r).map(|k| AffineExpr::dim(ctx, k)).collect();
        let out_map = self.map_attr(AffineMap::new(ctx, r + 1, 0, &out_exprs));
        let mut iters = vec!["parallel"; r];
        iters.push("reduction");
        let acc = self.generic_with_out_map(
            block,
            &[x],
            vec![x_map],
            out_map,
            &iters,
            acc_ty,
            init,
            loc,
            move |b, a| {
                use melior::dialect::arith::CmpiPredicate as I;
                let s = Scalar { ctx, block: b, loc };
                let (i, j) = (s.linalg_index(axis), s.linalg_index(r));
                let p = if exclusive { I::Ult } else { I::Ule };
                let include = s.cmpi(p, j, i);
                let xv = if float { s.to_f32_or_f64(a[0]) } else { a[0] };
                let sum = if float {
                    s.addf64(a[1], xv)
                } else {
                    s.int("arith.addi", a[1], xv)
                };
                s.select(include, sum, a[1])
            },
        );
        if reverse {
            self.reverse_axis(block, acc, dims, axis, acc_ty, loc)
        } else {
            acc
        }
    }

    /// `x` (of `dims`) reversed along `axis`.
    fn reverse_axis<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axis: usize,
        ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let ctx = self.ctx;
        let last = AffineExpr::constant(ctx, dims[axis] as i64 - 1);
        let exprs: Vec<AffineExpr> = (0..dims.len())
            .map(|k| {
                let d = AffineExpr::dim(ctx, k);
                if k == axis {
                    last + d * AffineExpr::constant(ctx, -1)
                } else {
                    d
                }
            })
            .collect();
        let map = self.map_attr(AffineMap::new(ctx, dims.len(), 0, &exprs));
        self.per_element(block, &[x], vec![map], ty, loc, |_, a| a[0])
    }
}

impl<'c> Emitter<'c, '_> {
    /// rms_norm over axes `axis..` as the CPU: `Σ x²` in f64 as its four lane sums (element
    /// `4i + l` of the flattened row into lane `l`, each in index order, then `(s0 + s1) +
    /// (s2 + s3)`), `inv = 1/√(Σ/n + ε)`, `x · inv · scale` in f64, one rounding.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rms_norm<'a>(
        &self,
        block: &'a Block<'c>,
        (x, scale): (Value<'c, 'a>, Value<'c, 'a>),
        scale_dims: &[u64],
        dims: &[u64],
        axis: usize,
        epsilon: f32,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let axes: Vec<usize> = (axis..r).collect();
        let n: u64 = dims[axis..].iter().product();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &axes, true);
        // Each normalised dim's stride in the flattened row.
        let strides: Vec<(usize, i64)> = axes
            .iter()
            .map(|&k| (k, dims[k + 1..].iter().product::<u64>() as i64))
            .collect();
        let mut ops = vec![x];
        let mut maps = vec![id()];
        for lane in 0..4i64 {
            let strides = strides.clone();
            let acc = self.accumulate(
                block,
                &[x],
                vec![id()],
                dims,
                &axes,
                0.0,
                loc,
                move |s, a| {
                    use melior::dialect::arith::CmpiPredicate as I;
                    let mut flat = s.index_const(0);
                    for &(k, st) in &strides {
                        let term = s.int("arith.muli", s.linalg_index(k), s.index_const(st));
                        flat = s.int("arith.addi", flat, term);
                    }
                    let l = s.int("arith.remui", flat, s.index_const(4));
                    let mine = s.cmpi(I::Eq, l, s.index_const(lane));
                    let xe = s.extf(a[0]);
                    let sum = s.addf64(a[1], s.mulf64(xe, xe));
                    s.select(mine, sum, a[1])
                },
            );
            ops.push(acc);
            maps.push(kept());
        }
        ops.push(scale);
        maps.push(self.broadcast_map(scale_dims, dims));
        let ctx = self.ctx;
        let (nf, eps) = (n as f64, f64::from(epsilon));
        self.generic(
            block,
            &ops,
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let sq = s.addf64(s.addf64(a[1], a[2]), s.addf64(a[3], a[4]));
                // LayerNorm's 1/√(Σ/n + ε), the mean left out (zero).
                let (_, inv) = s.mean_inv(s.f64c(0.0), sq, nf, eps);
                s.truncf(s.mulf64(s.mulf64(s.extf(a[0]), inv), s.extf(a[5])))
            },
        )
    }
}

impl<'c> Emitter<'c, '_> {
    /// ONNX TopK along `axis` as the CPU's total order: best first (largest or smallest), NaN
    /// above every number, equal keys in index order. That order is strict, so each element's
    /// rank (how many elements of its line precede it) is a permutation: one `linalg.generic`
    /// counts ranks, a second picks for output position r the index whose rank is r, and
    /// the values are read at those indices (exact in every type).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn top_k<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axis: usize,
        largest: bool,
        keys: ArgKeys,
        (elem, (values_ty, indices_ty), out_dims): (Type<'c>, (Type<'c>, Type<'c>), &[u64]),
        loc: Location<'c>,
    ) -> Vec<Value<'c, 'a>> {
        let (r, ctx) = (dims.len(), self.ctx);
        let i64t: Type = IntegerType::new(ctx, 64).into();
        let s = Scalar { ctx, block, loc };
        let zero = s.i64c(0);
        let d = |k| AffineExpr::dim(ctx, k);
        // Maps over r + 1 dims: the own dims, and the last one along the axis instead.
        let own = self.map_attr(AffineMap::new(
            ctx,
            r + 1,
            0,
            &(0..r).map(d).collect::<Vec<_>>(),
        ));
        let other_exprs: Vec<AffineExpr> =
            (0..r).map(|k| d(if k == axis { r } else { k })).collect();
        let other = || self.map_attr(AffineMap::new(ctx, r + 1, 0, &other_exprs));
        let mut iters = vec!["parallel"; r];
        iters.push("reduction");
        // rank[j] = #{j' : j' precedes j}.
        let rank_ty: Type = RankedTensorType::new(dims, i64t, None).into();
        let empty = self.empty(block, rank_ty, loc);
        let init = self.fill(block, zero, empty, rank_ty, i64t, loc);
        let rank = self.generic_with_out_map(
            block,
            &[x, x],
            vec![own, other()],
            own,
            &iters,
            rank_ty,
            init,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let (j, jo) = (s.linalg_index(axis), s.linalg_index(r));
                let (beats, ties) = s.total_order(keys, largest, elem, a[1], a[0]);
                use melior::dialect::arith::CmpiPredicate as I;
                let earlier = s.cmpi(I::Ult, jo, j);
                let before = s.or(beats, s.and(ties, earlier));
                let one = s.named_pub("arith.extui", before, i64t);
                s.int("arith.addi", a[2], one)
            },
        );
        // indices[r] = the j with rank[j] == r.
        let empty = self.empty(block, indices_ty, loc);
        let init = self.fill(block, zero, empty, indices_ty, i64t, loc);
        let out_own = self.map_attr(AffineMap::new(
            ctx,
            r + 1,
            0,
            &(0..r).map(d).collect::<Vec<_>>(),
        ));
        let indices = self.generic_with_out_map(
            block,
            &[rank],
            vec![other()],
            out_own,
            &iters,
            indices_ty,
            init,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let pos = s.named_pub("arith.index_cast", s.linalg_index(axis), i64t);
                let j = s.named_pub("arith.index_cast", s.linalg_index(r), i64t);
                use melior::dialect::arith::CmpiPredicate as I;
                let hit = s.cmpi(I::Eq, a[0], pos);
                s.select(hit, j, a[1])
            },
        );
        let id = self.map_attr(AffineMap::multi_dim_identity(ctx, out_dims.len()));
        let values = self.per_element(block, &[indices], vec![id], values_ty, loc, move |b, a| {
            let s = Scalar { ctx, block: b, loc };
            let coords: Vec<Value> = (0..r)
                .map(|k| {
                    if k == axis {
                        s.named_pub("arith.index_cast", a[0], Type::index(ctx))
                    } else {
                        s.linalg_index(k)
                    }
                })
                .collect();
            s.extract(x, &coords, elem)
        });
        vec![values, indices]
    }
}
