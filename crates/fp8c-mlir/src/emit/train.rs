//! The training step's own ops in the MLIR emitter, each as the CPU reference computes it:
//! the softmax cross-entropy loss and its gradient (f64, one rounding; `fp8c_eval::loss`),
//! the optimizer updates on f32 master weights (f32, operation for operation as
//! `fp8c_eval::optim` and `kernels/optimizer.cu`, no contraction) and the finiteness check
//! that guards a step.

use super::*;
use melior::dialect::arith::CmpiPredicate as I;

impl<'c> Emitter<'c, '_> {
    /// `softmax_cross_entropy(logits [.., C], labels [..])`: `[loss, log_probs]`. The loss is
    /// the mean of `−log_probs[row, label]` (f64, before rounding) over the rows whose label is
    /// not −100 (PyTorch's ignore_index). A label outside `0..C` makes the loss NaN (the CPU
    /// reference fails the run on it; the JIT code must not read outside the logits).
    pub(super) fn cross_entropy<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        (logits, labels): (Value<'c, 'a>, Value<'c, 'a>),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let dims = self.dims(node.inputs()[0], node)?;
        self.check_logits(node, &dims)?;
        let r = dims.len();
        let c = dims[r - 1];
        let f32t = Type::float32(self.ctx);
        let lp_ty: Type = RankedTensorType::new(&dims, f32t, None).into();
        // max, Σ exp(x − max) and x − max − ln Σ exactly as the CPU's log_softmax.
        let lp = self.softmax(block, logits, &dims, r - 1, true, lp_ty, loc);
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &[r - 1], true);
        let max = self.accumulate(
            block,
            &[logits],
            vec![id()],
            &dims,
            &[r - 1],
            f64::NEG_INFINITY,
            loc,
            |s, a| s.maxf64(a[1], s.extf(a[0])),
        );
        let sum = self.accumulate(
            block,
            &[logits, max],
            vec![id(), kept()],
            &dims,
            &[r - 1],
            0.0,
            loc,
            |s, a| s.addf64(a[2], s.exp_diff(a[0], a[1])),
        );
        // Over the rows (the leading dims): Σ lp64[row, label] and the count of rows that count.
        let lead = &dims[..r - 1];
        let rows: Vec<usize> = (0..lead.len()).collect();
        let lead_id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, lead.len()));
        let lead_kept = {
            let mut e: Vec<AffineExpr> = (0..lead.len())
                .map(|k| AffineExpr::dim(self.ctx, k))
                .collect();
            e.push(AffineExpr::constant(self.ctx, 0));
            self.map_attr(AffineMap::new(self.ctx, lead.len(), 0, &e))
        };
        let n = lead.len();
        let picked = self.accumulate(
            block,
            &[labels, max, sum],
            vec![lead_id, lead_kept, lead_kept],
            lead,
            &rows,
            0.0,
            loc,
            move |s, a| {
                let (label, in_range, ignored) = label_class(s, a[0], c);
                let mut coords: Vec<Value> = (0..n).map(|k| s.linalg_index(k)).collect();
                let zero = s.i64c(0);
                let idx = s.select(in_range, label, zero);
                coords.push(s.named_pub("arith.index_cast", idx, Type::index(s.ctx)));
                let x = s.extract(logits, &coords, Type::float32(s.ctx));
                // x − max − ln Σ in f64, in that order.
                let v = s.subf64(s.subf64(s.extf(x), a[1]), s.logf64(a[2]));
                let added = s.addf64(a[3], v);
                let nan = s.f64c(f64::NAN);
                let added = s.select(in_range, added, nan);
                s.select(ignored, a[3], added)
            },
        );
        let counted = self.count_labels(block, labels, lead, loc);
        // −Σ / N, rounded once.
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let f64t = Type::float64(self.ctx);
        let zeros = vec![s.index_const(0); n];
        let total = s.extract(picked, &zeros, f64t);
        let neg = push(block, arith::negf(total, loc));
        let loss = s.truncf(s.divf64(neg, counted));
        Ok(vec![self.scalar_tensor(block, loss, loc), lp])
    }

    /// `softmax_cross_entropy_grad(log_probs, labels, dloss)`: `(exp(lp) − onehot) · dloss / N`
    /// in f64 from the f32 log-probabilities, 0 on ignored rows, rounded once.
    pub(super) fn cross_entropy_grad<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let dims = self.dims(node.inputs()[0], node)?;
        self.check_logits(node, &dims)?;
        self.f32_operand(node, 2, "read as dloss")?;
        let r = dims.len();
        let c = dims[r - 1];
        let counted = self.count_labels(block, ins[1], &dims[..r - 1], loc);
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let dloss = s.extf(self.extract(block, ins[2], Type::float32(self.ctx), loc));
        let scale = self.scalar_tensor(block, s.divf64(dloss, counted), loc);
        let lead: Vec<AffineExpr> = (0..r - 1).map(|k| AffineExpr::dim(self.ctx, k)).collect();
        let maps = vec![
            self.map_attr(AffineMap::multi_dim_identity(self.ctx, r)),
            self.map_attr(AffineMap::new(self.ctx, r, 0, &lead)),
            self.map_attr(AffineMap::new(self.ctx, r, 0, &[])),
        ];
        let ctx = self.ctx;
        Ok(self.generic(
            block,
            &[ins[0], ins[1], scale],
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let (label, _, ignored) = label_class(&s, a[1], c);
                let j = s.named_pub(
                    "arith.index_cast",
                    s.linalg_index(r - 1),
                    IntegerType::new(ctx, 64).into(),
                );
                let hot = s.cmpi(I::Eq, j, label);
                let onehot = s.select(hot, s.f64c(1.0), s.f64c(0.0));
                let e = s.elementwise(&Op::Exp, &[s.extf(a[0])]).expect("exp");
                let g = s.mulf64(s.subf64(e, onehot), a[2]);
                s.truncf(s.select(ignored, s.f64c(0.0), g))
            },
        ))
    }

    /// The number of labels that are not −100, as an f64 scalar.
    fn count_labels<'a>(
        &self,
        block: &'a Block<'c>,
        labels: Value<'c, 'a>,
        lead: &[u64],
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let n = lead.len();
        let all: Vec<usize> = (0..n).collect();
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, n));
        let count = self.accumulate(block, &[labels], vec![id], lead, &all, 0.0, loc, |s, a| {
            let l = s.named_pub(
                "arith.extsi_or_self",
                a[0],
                IntegerType::new(s.ctx, 64).into(),
            );
            let ignored = s.cmpi(I::Eq, l, s.i64c(fp8c_ir::IGNORE_INDEX));
            let one = s.addf64(a[1], s.f64c(1.0));
            s.select(ignored, a[1], one)
        });
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let zeros = vec![s.index_const(0); n];
        s.extract(count, &zeros, Type::float64(self.ctx))
    }

    /// Logits must be f32 with a class axis, labels an integer tensor of the leading dims.
    fn check_logits(&self, node: &Node, dims: &[u64]) -> Result<(), Error> {
        self.f32_operand(node, 0, "read as logits")?;
        let labels = self.graph.value_type(node.inputs()[1]);
        if dims.is_empty() || !matches!(labels.dtype, DType::I64 | DType::I32) {
            return Err(unsupported(
                node,
                format!(
                    "needs f32 logits with a class axis and i64/i32 labels, got {} and {labels}",
                    self.graph.value_type(node.inputs()[0])
                ),
            ));
        }
        Ok(())
    }

    /// `adamw_update(param, grad, m, v, lr, t)` on f32 tensors: `[param', m', v']`,
    /// fp8c-eval's f32 formulas in their order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn adamw<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (beta1, beta2, epsilon, weight_decay): (f32, f32, f32, f32),
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        for k in 0..6 {
            self.f32_operand(node, k, "updated")?;
        }
        let dims = self.dims(node.inputs()[0], node)?;
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let f32t = Type::float32(self.ctx);
        let lr = self.extract(block, ins[4], f32t, loc);
        let t = self.extract(block, ins[5], f32t, loc);
        let one = s.f32(1.0);
        // β^t is `powf` itself, as the CPU's optim.rs and kernels/optimizer.cu compute it (not
        // the Pow op, whose squares and cubes are products).
        let pow = |b: f32| s.inferred("math.powf", &[s.f32(b), t]);
        let bc1 = s.elementwise(&Op::Sub, &[one, pow(beta1)]).expect("sub");
        let bc2 = s.elementwise(&Op::Sub, &[one, pow(beta2)]).expect("sub");
        let scalars = [lr, bc1, bc2].map(|v| self.scalar_tensor(block, v, loc));
        let (p, g, m, v) = (ins[0], ins[1], ins[2], ins[3]);
        // m' = β1·m + (1 − β1)·g
        let nm = self.map_f32(block, &[m, g], &[], &dims, out_ty, loc, move |s, a| {
            let one = s.f32(1.0);
            let k = s.elementwise(&Op::Sub, &[one, s.f32(beta1)]).expect("sub");
            let x = s.elementwise(&Op::Mul, &[s.f32(beta1), a[0]]).expect("mul");
            let y = s.elementwise(&Op::Mul, &[k, a[1]]).expect("mul");
            s.elementwise(&Op::Add, &[x, y]).expect("add")
        });
        // v' = β2·v + (1 − β2)·g·g
        let nv = self.map_f32(block, &[v, g], &[], &dims, out_ty, loc, move |s, a| {
            let one = s.f32(1.0);
            let k = s.elementwise(&Op::Sub, &[one, s.f32(beta2)]).expect("sub");
            let x = s.elementwise(&Op::Mul, &[s.f32(beta2), a[0]]).expect("mul");
            let y = s.elementwise(&Op::Mul, &[k, a[1]]).expect("mul");
            let y = s.elementwise(&Op::Mul, &[y, a[1]]).expect("mul");
            s.elementwise(&Op::Add, &[x, y]).expect("add")
        });
        // p' = (p − lr·wd·p) − (lr·m̂) / (√v̂ + ε)
        let np = self.map_f32(
            block,
            &[p, nm, nv],
            &scalars,
            &dims,
            out_ty,
            loc,
            move |s, a| {
                let mul = |x, y| s.elementwise(&Op::Mul, &[x, y]).expect("mul");
                let div = |x, y| s.elementwise(&Op::Div, &[x, y]).expect("div");
                let (lr, bc1, bc2) = (a[3], a[4], a[5]);
                let decay = mul(mul(lr, s.f32(weight_decay)), a[0]);
                let pd = s.elementwise(&Op::Sub, &[a[0], decay]).expect("sub");
                let (mhat, vhat) = (div(a[1], bc1), div(a[2], bc2));
                let sq = s.elementwise(&Op::Sqrt, &[vhat]).expect("sqrt");
                let den = s.elementwise(&Op::Add, &[sq, s.f32(epsilon)]).expect("add");
                let step = div(mul(lr, mhat), den);
                s.elementwise(&Op::Sub, &[pd, step]).expect("sub")
            },
        );
        Ok(vec![np, nm, nv])
    }

    /// `sgd_update(param, grad, buf, lr)` on f32 tensors: `[param', buf']`, fp8c-eval's f32
    /// formulas in their order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sgd<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (momentum, weight_decay, nesterov): (f32, f32, bool),
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        for k in 0..4 {
            self.f32_operand(node, k, "updated")?;
        }
        let dims = self.dims(node.inputs()[0], node)?;
        let (p, g, buf, lr) = (ins[0], ins[1], ins[2], ins[3]);
        // g' = grad + wd·p
        fn decayed<'c, 'b>(
            s: &Scalar<'c, 'b>,
            wd: f32,
            g: Value<'c, 'b>,
            p: Value<'c, 'b>,
        ) -> Value<'c, 'b> {
            let d = s.elementwise(&Op::Mul, &[s.f32(wd), p]).expect("mul");
            s.elementwise(&Op::Add, &[g, d]).expect("add")
        }
        // buf' = momentum = 0 ? g' : momentum·buf + g'
        let nb = self.map_f32(block, &[p, g, buf], &[], &dims, out_ty, loc, move |s, a| {
            let gg = decayed(s, weight_decay, a[1], a[0]);
            if momentum == 0.0 {
                gg
            } else {
                let m = s
                    .elementwise(&Op::Mul, &[s.f32(momentum), a[2]])
                    .expect("mul");
                s.elementwise(&Op::Add, &[m, gg]).expect("add")
            }
        });
        // p' = p − lr·(nesterov ? g' + momentum·buf' : buf')
        let np = self.map_f32(
            block,
            &[p, g, nb],
            &[lr],
            &dims,
            out_ty,
            loc,
            move |s, a| {
                let step = if nesterov {
                    let gg = decayed(s, weight_decay, a[1], a[0]);
                    let m = s
                        .elementwise(&Op::Mul, &[s.f32(momentum), a[2]])
                        .expect("mul");
                    s.elementwise(&Op::Add, &[gg, m]).expect("add")
                } else {
                    a[2]
                };
                let d = s.elementwise(&Op::Mul, &[a[3], step]).expect("mul");
                s.elementwise(&Op::Sub, &[a[0], d]).expect("sub")
            },
        );
        Ok(vec![np, nb])
    }

    /// An elementwise map over tensors of `dims` (`ins`, same shape) and 0-d `scalars`
    /// (read after them), into `out_ty`.
    #[allow(clippy::too_many_arguments)]
    fn map_f32<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        scalars: &[Value<'c, 'a>],
        dims: &[u64],
        out_ty: Type<'c>,
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&Scalar<'c, 'b>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let mut maps = vec![self.map_attr(AffineMap::multi_dim_identity(self.ctx, r)); ins.len()];
        maps.extend(scalars.iter().map(|_| self.broadcast_map(&[], dims)));
        let mut operands = ins.to_vec();
        operands.extend_from_slice(scalars);
        let ctx = self.ctx;
        self.generic(
            block,
            &operands,
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| body(&Scalar { ctx, block: b, loc }, a),
        )
    }

    /// `all_finite(x…)`: true when no element of any (f32) input is ±inf or NaN.
    pub(super) fn all_finite<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let i1: Type = IntegerType::new(self.ctx, 1).into();
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let empty = self.empty(block, out_ty, loc);
        let mut acc = self.fill(block, s.bool_const(true), empty, out_ty, i1, loc);
        for (k, &x) in ins.iter().enumerate() {
            self.f32_operand(node, k, "checked")?;
            let dims = self.dims(node.inputs()[k], node)?;
            let r = dims.len();
            let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
            let out_map = self.map_attr(AffineMap::new(self.ctx, r, 0, &[]));
            let ctx = self.ctx;
            acc = self.generic_with_out_map(
                block,
                &[x],
                vec![id],
                out_map,
                &vec!["reduction"; r],
                out_ty,
                acc,
                loc,
                move |b, a| {
                    let s = Scalar { ctx, block: b, loc };
                    let abs = s.abs_bits(a[0]);
                    let finite = s.cmpi(I::Ult, abs, s.i32(0x7f80_0000));
                    s.and(a[1], finite)
                },
            );
        }
        Ok(acc)
    }
}

/// A label (i64/i32 element) as `(label as i64, 0 ≤ label < classes, label == −100)`.
fn label_class<'c, 'b>(
    s: &Scalar<'c, 'b>,
    v: Value<'c, '_>,
    classes: u64,
) -> (Value<'c, 'b>, Value<'c, 'b>, Value<'c, 'b>) {
    let l = s.named_pub("arith.extsi_or_self", v, IntegerType::new(s.ctx, 64).into());
    let lo = s.cmpi(I::Sge, l, s.i64c(0));
    let hi = s.cmpi(I::Slt, l, s.i64c(classes as i64));
    let in_range = s.and(lo, hi);
    let ignored = s.cmpi(I::Eq, l, s.i64c(fp8c_ir::IGNORE_INDEX));
    (l, in_range, ignored)
}
