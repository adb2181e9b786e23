//! The backward ops of normalisations and embeddings in the MLIR emitter, as
//! `fp8c_eval` computes them (f64, sums in index order, one rounding): `softmax_grad`,
//! `layer_norm_grad` (dx, dscale, dbias) and `gather_grad` (an embedding's scatter-add).

use super::*;

impl<'c> Emitter<'c, '_> {
    /// `softmax_grad { axis, log }(y, dy)`: `y·(dy − Σ dy·y)`, or `dy − exp(y)·Σ dy`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn softmax_grad<'a>(
        &self,
        block: &'a Block<'c>,
        (y, dy): (Value<'c, 'a>, Value<'c, 'a>),
        dims: &[u64],
        axis: usize,
        log: bool,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &[axis], true);
        let sum = self.accumulate(
            block,
            &[y, dy],
            vec![id(), id()],
            dims,
            &[axis],
            0.0,
            loc,
            move |s, a| {
                let d = s.extf(a[1]);
                let t = if log { d } else { s.mulf64(d, s.extf(a[0])) };
                s.addf64(a[2], t)
            },
        );
        let ctx = self.ctx;
        self.generic(
            block,
            &[y, dy, sum],
            vec![id(), id(), kept()],
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let (yv, dv) = (s.extf(a[0]), s.extf(a[1]));
                let v = if log {
                    let e = s.elementwise(&Op::Exp, &[yv]).expect("exp");
                    s.subf64(dv, s.mulf64(e, a[2]))
                } else {
                    s.mulf64(yv, s.subf64(dv, a[2]))
                };
                s.truncf(v)
            },
        )
    }

    /// `gelu_grad { approximate }(x, dy)`: `dy · gelu'(x)` in f64 (fp8c-eval's formulas,
    /// operation for operation; `erf` and `tanh` are the C library's), rounded once.
    pub(super) fn gelu_grad<'a>(
        &self,
        block: &'a Block<'c>,
        (x, dy): (Value<'c, 'a>, Value<'c, 'a>),
        dims: &[u64],
        approximate: fp8c_ir::GeluApprox,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        use fp8c_ir::elementwise::{INV_SQRT_2PI, SQRT_2_OVER_PI};
        let r = dims.len();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let ctx = self.ctx;
        self.generic(
            block,
            &[x, dy],
            vec![id(), id()],
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let (x, g) = (s.extf(a[0]), s.extf(a[1]));
                let (c, mul, add) = (
                    |v: f64| s.f64c(v),
                    |p, q| s.mulf64(p, q),
                    |p, q| s.addf64(p, q),
                );
                let half_one_plus = |t| mul(c(0.5), add(c(1.0), t));
                let d = match approximate {
                    fp8c_ir::GeluApprox::None => {
                        let e = s
                            .elementwise(&Op::Erf, &[mul(x, c(std::f64::consts::FRAC_1_SQRT_2))])
                            .expect("erf");
                        let p = s
                            .elementwise(&Op::Exp, &[mul(mul(c(-0.5), x), x)])
                            .expect("exp");
                        add(half_one_plus(e), mul(mul(x, c(INV_SQRT_2PI)), p))
                    }
                    fp8c_ir::GeluApprox::Tanh => {
                        let cube = mul(mul(mul(c(0.044715), x), x), x);
                        let t = s
                            .elementwise(&Op::Tanh, &[mul(c(SQRT_2_OVER_PI), add(x, cube))])
                            .expect("tanh");
                        let one_minus = s.subf64(c(1.0), mul(t, t));
                        let slope = add(c(1.0), mul(mul(c(3.0 * 0.044715), x), x));
                        let tail = mul(
                            mul(mul(mul(c(0.5), x), one_minus), c(SQRT_2_OVER_PI)),
                            slope,
                        );
                        add(half_one_plus(t), tail)
                    }
                };
                s.truncf(mul(g, d))
            },
        )
    }

    /// `layer_norm_grad { axis, epsilon }(x, scale, dy)`: `[dx, dscale, dbias]`, with the
    /// forward's statistics (mean, `1/√(var + ε)`) recomputed as `layer_norm` computes them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer_norm_grad<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        dims: &[u64],
        (axis, epsilon): (usize, f32),
        dx_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let (x, scale, dy) = (ins[0], ins[1], ins[2]);
        let r = dims.len();
        let axes: Vec<usize> = (axis..r).collect();
        let lead: Vec<usize> = (0..axis).collect();
        let nf = dims[axis..].iter().product::<u64>() as f64;
        let eps = f64::from(epsilon);
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let row = || self.reduced_map(r, &axes, true);
        let col = || self.reduced_map(r, &lead, false);
        let (sum, var) = self.row_stats(block, x, dims, &axes, loc);
        // Σ dy·scale and Σ dy·scale·(x − mean)·inv per row.
        let sg = self.accumulate(
            block,
            &[dy, scale],
            vec![id(), col()],
            dims,
            &axes,
            0.0,
            loc,
            |s, a| s.addf64(a[2], s.mulf64(s.extf(a[0]), s.extf(a[1]))),
        );
        let sgx = self.accumulate(
            block,
            &[x, dy, scale, sum, var],
            vec![id(), id(), col(), row(), row()],
            dims,
            &axes,
            0.0,
            loc,
            move |s, a| {
                let (mean, inv) = s.mean_inv(a[3], a[4], nf, eps);
                let g = s.mulf64(s.extf(a[1]), s.extf(a[2]));
                let t = s.mulf64(s.mulf64(g, s.subf64(s.extf(a[0]), mean)), inv);
                s.addf64(a[5], t)
            },
        );
        let ctx = self.ctx;
        let dx = self.generic(
            block,
            &[x, dy, scale, sum, var, sg, sgx],
            vec![id(), id(), col(), row(), row(), row(), row()],
            &vec!["parallel"; r],
            dx_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let (mean, inv) = s.mean_inv(a[3], a[4], nf, eps);
                let (mg, mgx) = (s.divf64(a[5], s.f64c(nf)), s.divf64(a[6], s.f64c(nf)));
                let xhat = s.mulf64(s.subf64(s.extf(a[0]), mean), inv);
                let g = s.mulf64(s.extf(a[1]), s.extf(a[2]));
                let v = s.subf64(s.subf64(g, mg), s.mulf64(xhat, mgx));
                s.truncf(s.mulf64(inv, v))
            },
        );
        // dscale and dbias: sums over the rows, in row order.
        let ds = self.accumulate(
            block,
            &[x, dy, sum, var],
            vec![id(), id(), row(), row()],
            dims,
            &lead,
            0.0,
            loc,
            move |s, a| {
                let (mean, inv) = s.mean_inv(a[2], a[3], nf, eps);
                let t = s.mulf64(s.mulf64(s.extf(a[1]), s.subf64(s.extf(a[0]), mean)), inv);
                s.addf64(a[4], t)
            },
        );
        let db = self.accumulate(block, &[dy], vec![id()], dims, &lead, 0.0, loc, |s, a| {
            s.addf64(a[1], s.extf(a[0]))
        });
        let p_ty = self.tensor(node.inputs()[1], node)?;
        let round = |acc| {
            let in_map = self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
            let out_map = self.reduced_map(r, &lead, false);
            let empty = self.empty(block, p_ty, loc);
            self.generic_with_out_map(
                block,
                &[acc],
                vec![in_map],
                out_map,
                &vec!["parallel"; r],
                p_ty,
                empty,
                loc,
                |b, a| Scalar { ctx, block: b, loc }.truncf(a[0]),
            )
        };
        Ok(vec![dx, round(ds), round(db)])
    }

    /// `gather_grad { axis, size }(dy, indices)`: zeros of the data's shape with each gathered
    /// slice of dy added back at its index (negative indices from the end), repeated indices
    /// accumulating in index order, in f64. An index out of range adds nowhere (the CPU
    /// reference fails the run on it).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather_grad<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        (dy, indices): (Value<'c, 'a>, Value<'c, 'a>),
        axis: i64,
        size: i64,
        (out_ty, out_dims): (Type<'c>, &[u64]),
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let dd = self.dims(node.inputs()[0], node)?;
        let id_dims = self.dims(node.inputs()[1], node)?;
        let ri = id_dims.len();
        let data_rank = (dd.len() + 1)
            .checked_sub(ri)
            .filter(|&r| r >= 1)
            .ok_or_else(|| unsupported(node, "dy has too few dims for the indices"))?;
        let ax = (if axis < 0 {
            axis + data_rank as i64
        } else {
            axis
        }) as usize;
        if ax >= data_rank || dd[ax..ax + ri] != id_dims[..] || size < 0 {
            return Err(unsupported(
                node,
                "dy does not hold the indices at the axis",
            ));
        }
        let inner = dd.len() - ax - ri;
        // Iteration: out dims (ax outer, 1 index, inner), then the index dims (reduction).
        let out_rank = ax + 1 + inner;
        let n = out_rank + ri;
        let d = |k| AffineExpr::dim(self.ctx, k);
        let mut dy_e: Vec<AffineExpr> = (0..ax).map(d).collect();
        dy_e.extend((0..ri).map(|k| d(out_rank + k)));
        dy_e.extend((0..inner).map(|k| d(ax + 1 + k)));
        let idx_e: Vec<AffineExpr> = (0..ri).map(|k| d(out_rank + k)).collect();
        let out_e: Vec<AffineExpr> = (0..out_rank).map(d).collect();
        let f64t = Type::float64(self.ctx);
        let acc_ty: Type = RankedTensorType::new(out_dims, f64t, None).into();
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let empty = self.empty(block, acc_ty, loc);
        let zero = s.f64c(0.0);
        let init = self.fill(block, zero, empty, acc_ty, f64t, loc);
        let mut iters = vec!["parallel"; out_rank];
        iters.extend(vec!["reduction"; ri]);
        let ctx = self.ctx;
        let acc = self.generic_with_out_map(
            block,
            &[dy, indices],
            vec![
                self.map_attr(AffineMap::new(self.ctx, n, 0, &dy_e)),
                self.map_attr(AffineMap::new(self.ctx, n, 0, &idx_e)),
            ],
            self.map_attr(AffineMap::new(self.ctx, n, 0, &out_e)),
            &iters,
            acc_ty,
            init,
            loc,
            move |b, a| {
                use melior::dialect::arith::CmpiPredicate as I;
                let s = Scalar { ctx, block: b, loc };
                let i64t: Type = IntegerType::new(ctx, 64).into();
                let i = s.named_pub("arith.extsi_or_self", a[1], i64t);
                let neg = s.cmpi(I::Slt, i, s.i64c(0));
                let i = s.select(neg, s.int("arith.addi", i, s.i64c(size)), i);
                let k = s.named_pub("arith.index_cast", s.linalg_index(ax), i64t);
                let hit = s.cmpi(I::Eq, i, k);
                let added = s.addf64(a[2], s.extf(a[0]));
                s.select(hit, added, a[2])
            },
        );
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, out_rank));
        Ok(self.generic(
            block,
            &[acc],
            vec![id],
            &vec!["parallel"; out_rank],
            out_ty,
            None,
            loc,
            move |b, a| Scalar { ctx, block: b, loc }.truncf(a[0]),
        ))
    }
}
