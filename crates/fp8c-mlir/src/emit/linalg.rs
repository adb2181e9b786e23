//! GEMMs and windows in the MLIR emitter: the one (batched, transposable, FP8-decoding)
//! matmul builder behind matmul, gemm and the scaled GEMMs; 2-D convolution and pooling.

use super::*;

impl<'c> Emitter<'c, '_> {
    /// `matmul` (2-D) and `gemm` (alpha·op(A)·op(B) + beta·C, C broadcast) as one
    /// `linalg.generic` with a reduction over K into a zero-filled (or C-filled) accumulator.
    pub(super) fn gemm<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        out_ty: Type<'c>,
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let (alpha, beta, ta, tb) = match node.op {
            Op::Gemm {
                alpha,
                beta,
                trans_a,
                trans_b,
            } => (alpha, beta, trans_a, trans_b),
            _ => (1.0, 0.0, false, false),
        };
        if out_dims.len() != 2 || ins.len() < 2 {
            return Err(unsupported(node, "only 2-D matmuls are emitted yet"));
        }
        let elem = Type::float32(self.ctx);
        let product =
            self.batched_matmul(block, node, ins, (ta, tb), None, out_ty, out_dims, loc)?;
        if alpha == 1.0 && (ins.len() < 3 || beta == 0.0) {
            return Ok(product);
        }
        // y = alpha·p + beta·C (C broadcast), elementwise.
        let mut ops = vec![product];
        let mut maps = vec![self.map_attr(AffineMap::multi_dim_identity(self.ctx, 2))];
        let with_c = ins.len() >= 3 && beta != 0.0;
        if with_c {
            let c_dims = self.dims(node.inputs()[2], node)?;
            ops.push(ins[2]);
            maps.push(self.broadcast_map(&c_dims, out_dims));
        }
        let (ctx, al, be) = (self.ctx, alpha, beta);
        Ok(self.generic(
            block,
            &ops,
            maps,
            &["parallel", "parallel"],
            out_ty,
            None,
            loc,
            |b, a| {
                let k = |v: f32| -> Value {
                    push(
                        b,
                        arith::constant(
                            ctx,
                            FloatAttribute::new(ctx, elem, f64::from(v)).into(),
                            loc,
                        ),
                    )
                };
                let mut y = a[0];
                if al != 1.0 {
                    let c = k(al);
                    y = push(b, arith::mulf(c, y, loc));
                }
                if with_c {
                    let mut c = a[1];
                    if be != 1.0 {
                        let s = k(be);
                        c = push(b, arith::mulf(s, c, loc));
                    }
                    y = push(b, arith::addf(y, c, loc));
                }
                y
            },
        ))
    }

    /// A (batched) matmul of op(A)·op(B) (`ta`/`tb`: transposed operands; numpy rules: the
    /// batch dims broadcast, size 1 reads index 0) as one `linalg.generic` over
    /// (batch…, m, n, k) into a zero-filled accumulator, f32 (f64) in K order, integers
    /// wrapping; FP8 operands (`fp8`:
    /// their formats) are decoded exactly first. Matmul, gemm and the scaled GEMMs share it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn batched_matmul<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (ta, tb): (bool, bool),
        fp8: Option<(DType, DType)>,
        out_ty: Type<'c>,
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let r = out_dims.len();
        let nb = r - 2;
        let (ad, bd) = (
            self.dims(node.inputs()[0], node)?,
            self.dims(node.inputs()[1], node)?,
        );
        if ad.len() < 2 || bd.len() < 2 {
            return Err(unsupported(node, "a 1-D matmul operand is not emitted yet"));
        }
        let d = |i| AffineExpr::dim(self.ctx, i);
        let batch_exprs = |dims: &[u64]| -> Vec<AffineExpr> {
            let own = dims.len() - 2;
            (0..own)
                .map(|k| {
                    let o = nb - own + k;
                    if dims[k] == 1 && out_dims[o] != 1 {
                        AffineExpr::constant(self.ctx, 0)
                    } else {
                        d(o)
                    }
                })
                .collect()
        };
        let (m, n, k) = (nb, nb + 1, nb + 2);
        let mut a_e = batch_exprs(&ad);
        a_e.extend(if ta { [d(k), d(m)] } else { [d(m), d(k)] });
        let mut b_e = batch_exprs(&bd);
        b_e.extend(if tb { [d(n), d(k)] } else { [d(k), d(n)] });
        let mut o_e: Vec<AffineExpr> = (0..nb).map(d).collect();
        o_e.extend([d(m), d(n)]);
        let dims_n = r + 1;
        let maps = vec![
            self.map_attr(AffineMap::new(self.ctx, dims_n, 0, &a_e)),
            self.map_attr(AffineMap::new(self.ctx, dims_n, 0, &b_e)),
        ];
        let out_map = self.map_attr(AffineMap::new(self.ctx, dims_n, 0, &o_e));
        // f32 (or f64) accumulates with fma in K order; integers wrap in their own width,
        // which equals the CPU's wrapping i64 sum cast back to the type.
        let elem = RankedTensorType::try_from(out_ty)
            .map(|t| t.element())
            .map_err(|_| Error::Invalid("a matmul result that is not a ranked tensor".into()))?;
        let int = melior::ir::r#type::TypeLike::is_integer(&elem);
        let zero = if int {
            push(
                block,
                arith::constant(self.ctx, IntegerAttribute::new(elem, 0).into(), loc),
            )
        } else {
            push(
                block,
                arith::constant(
                    self.ctx,
                    FloatAttribute::new(self.ctx, elem, 0.0).into(),
                    loc,
                ),
            )
        };
        let empty = self.empty(block, out_ty, loc);
        let filled = self.fill(block, zero, empty, out_ty, elem, loc);
        let mut iters = vec!["parallel"; r];
        iters.push("reduction");
        let ctx = self.ctx;
        Ok(self.generic_with_out_map(
            block,
            &ins[..2],
            maps,
            out_map,
            &iters,
            out_ty,
            filled,
            loc,
            |b, v| {
                let s = Scalar { ctx, block: b, loc };
                let (x, y) = match fp8 {
                    Some((fa, fb)) => (s.decode(fa, v[0]), s.decode(fb, v[1])),
                    None => (v[0], v[1]),
                };
                if int {
                    s.int("arith.addi", v[2], s.int("arith.muli", x, y))
                } else {
                    s.fma(x, y, v[2])
                }
            },
        ))
    }

    /// The resolved geometry of `node`'s two spatial axes (fp8c-ir's window rules, auto_pad
    /// included), from its input's dims.
    pub(super) fn window(
        &self,
        node: &Node,
        kernel: &[i64],
        w: &WindowAttrs<'_>,
    ) -> Result<Vec<Axis>, Error> {
        let xd = self.dims(node.inputs()[0], node)?;
        let spatial: Vec<usize> = xd
            .get(2..)
            .unwrap_or(&[])
            .iter()
            .map(|&d| d as usize)
            .collect();
        let kernel: Vec<usize> = kernel.iter().map(|&k| k.max(1) as usize).collect();
        let axes =
            window::axes(&spatial, &kernel, w).map_err(|e| unsupported(node, e.to_string()))?;
        if axes.len() != 2 {
            return Err(unsupported(node, "only 2-D windows are emitted yet"));
        }
        Ok(axes)
    }

    /// `x` [N, C, H, W] padded by `low` / `high` elements on H and W with `value` (an f32).
    #[allow(clippy::too_many_arguments)]
    fn pad2d<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        xd: &[u64],
        low: [usize; 2],
        high: [usize; 2],
        value: Value<'c, 'a>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let (low, high) = (
            [0, 0, low[0] as i64, low[1] as i64],
            [0, 0, high[0] as i64, high[1] as i64],
        );
        self.pad(block, x, xd, (&low, &high), value, loc)
    }

    /// `x` of dims `xd` padded by `low[k]` / `high[k]` (≥ 0) elements on each axis with the
    /// scalar `value` (`tensor.pad`).
    pub(super) fn pad<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        xd: &[u64],
        (low, high): (&[i64], &[i64]),
        value: Value<'c, 'a>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let pd: Vec<u64> = (0..xd.len())
            .map(|k| xd[k] + (low[k] + high[k]) as u64)
            .collect();
        let pty: Type = RankedTensorType::new(&pd, value.r#type(), None).into();
        let arr = |v: &[i64]| -> Attribute<'c> {
            melior::ir::attribute::DenseI64ArrayAttribute::new(self.ctx, v).into()
        };
        let index_t = Type::index(self.ctx);
        let body = Block::new(&vec![(index_t, loc); xd.len()]);
        body.append_operation(
            OperationBuilder::new("tensor.yield", loc)
                .add_operands(&[value])
                .build()
                .expect("tensor.yield"),
        );
        let region = Region::new();
        region.append_block(body);
        push(
            block,
            OperationBuilder::new("tensor.pad", loc)
                .add_operands(&[x])
                .add_results(&[pty])
                .add_attributes(&[
                    (Identifier::new(self.ctx, "static_low"), arr(low)),
                    (Identifier::new(self.ctx, "static_high"), arr(high)),
                    (
                        Identifier::new(self.ctx, "operandSegmentSizes"),
                        DenseI32ArrayAttribute::new(self.ctx, &[1, 0, 0]).into(),
                    ),
                ])
                .add_regions([region])
                .build()
                .expect("tensor.pad"),
        )
    }

    /// NCHW 2-D convolution: the input zero-padded (`tensor.pad`), then one `linalg.generic`
    /// over (n, f, oh, ow, c, kh, kw) summing in (c, kh, kw) order (the CPU's im2col order),
    /// groups through the input-channel map, the bias added after.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv2d<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        g: &[Axis],
        groups: u64,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let xd = self.dims(node.inputs()[0], node)?;
        let wd = self.dims(node.inputs()[1], node)?;
        // f32, or f64 (QOperator convolutions' exact integer sums) in its own arithmetic.
        let elem = RankedTensorType::try_from(out_ty)
            .map(|t| t.element())
            .map_err(|_| Error::Invalid("a conv result that is not a ranked tensor".into()))?;
        let zero = push(
            block,
            arith::constant(
                self.ctx,
                FloatAttribute::new(self.ctx, elem, 0.0).into(),
                loc,
            ),
        );
        let padded = if g.iter().any(|a| a.pad_begin + a.pad_end != 0) {
            let low = [g[0].pad_begin, g[1].pad_begin];
            self.pad2d(
                block,
                ins[0],
                &xd,
                low,
                [g[0].pad_end, g[1].pad_end],
                zero,
                loc,
            )
        } else {
            ins[0]
        };
        let d = |i| AffineExpr::dim(self.ctx, i);
        let c = |v: i64| AffineExpr::constant(self.ctx, v);
        let (fper, cper) = ((wd[0] / groups) as i64, wd[1] as i64);
        // (n=0, f=1, oh=2, ow=3, c=4, kh=5, kw=6)
        let in_c = AffineExpr::floor_div(d(1), c(fper)) * c(cper) + d(4);
        let x_map = [
            d(0),
            in_c,
            d(2) * c(g[0].stride as i64) + d(5) * c(g[0].dilation as i64),
            d(3) * c(g[1].stride as i64) + d(6) * c(g[1].dilation as i64),
        ];
        let maps = vec![
            self.map_attr(AffineMap::new(self.ctx, 7, 0, &x_map)),
            self.map_attr(AffineMap::new(self.ctx, 7, 0, &[d(1), d(4), d(5), d(6)])),
        ];
        let out_map = self.map_attr(AffineMap::new(self.ctx, 7, 0, &[d(0), d(1), d(2), d(3)]));
        let empty = self.empty(block, out_ty, loc);
        let filled = self.fill(block, zero, empty, out_ty, elem, loc);
        let ctx = self.ctx;
        let iters = [
            "parallel",
            "parallel",
            "parallel",
            "parallel",
            "reduction",
            "reduction",
            "reduction",
        ];
        let y = self.generic_with_out_map(
            block,
            &[padded, ins[1]],
            maps,
            out_map,
            &iters,
            out_ty,
            filled,
            loc,
            |b, v| {
                let s = Scalar { ctx, block: b, loc };
                let p = s.elementwise(&Op::Mul, &[v[0], v[1]]).expect("mul");
                s.elementwise(&Op::Add, &[v[2], p]).expect("add")
            },
        );
        if ins.len() < 3 {
            return Ok(y);
        }
        let maps = vec![
            self.map_attr(AffineMap::multi_dim_identity(self.ctx, 4)),
            self.map_attr(AffineMap::new(self.ctx, 4, 0, &[d(1)])),
        ];
        Ok(self.generic(
            block,
            &[y, ins[2]],
            maps,
            &["parallel"; 4],
            out_ty,
            None,
            loc,
            |b, a| {
                Scalar { ctx, block: b, loc }
                    .elementwise(&Op::Add, &[a[0], a[1]])
                    .expect("add")
            },
        ))
    }

    /// 2-D max or average pooling, as the CPU computes it: the input padded (max: −inf, so
    /// padding never wins; average: 0) to cover the declared pads and ceil mode's overhang,
    /// the window folded in f64 (max with NaN winning), then, where padded, the maximum
    /// floored at f32::MIN for a window with no input element, or the sum divided by each
    /// window's count (input elements, plus the declared padding with `include_pad`; never
    /// the overhang), one rounding to f32.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pool2d<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        x: Value<'c, 'a>,
        g: &[Axis],
        (max, include_pad): (bool, bool),
        out_ty: Type<'c>,
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let d = |i| AffineExpr::dim(self.ctx, i);
        let c = |v: i64| AffineExpr::constant(self.ctx, v);
        // Elements past the input end that some window reads (declared pads or overhang).
        let high: Vec<usize> = g
            .iter()
            .map(|a| {
                let last = (a.out.max(1) - 1) * a.stride + (a.kernel - 1) * a.dilation + 1;
                last.saturating_sub(a.input + a.pad_begin).max(a.pad_end)
            })
            .collect();
        let padded = g.iter().zip(&high).any(|(a, h)| a.pad_begin + h != 0);
        let x = if padded {
            let xd = self.dims(node.inputs()[0], node)?;
            let s = Scalar {
                ctx: self.ctx,
                block,
                loc,
            };
            let fill = s.f32(if max { f32::NEG_INFINITY } else { 0.0 });
            let low = [g[0].pad_begin, g[1].pad_begin];
            self.pad2d(block, x, &xd, low, [high[0], high[1]], fill, loc)
        } else {
            x
        };
        let x_map = [
            d(0),
            d(1),
            d(2) * c(g[0].stride as i64) + d(4) * c(g[0].dilation as i64),
            d(3) * c(g[1].stride as i64) + d(5) * c(g[1].dilation as i64),
        ];
        // The window itself is an operand only through its shape: iterate kh, kw by a dummy
        // map-free reduction over the accumulator.
        let acc_t = Type::float64(self.ctx);
        let acc_ty: Type = RankedTensorType::new(out_dims, acc_t, None).into();
        let init = if max { f64::NEG_INFINITY } else { 0.0 };
        let init_v: Value = push(
            block,
            arith::constant(
                self.ctx,
                FloatAttribute::new(self.ctx, acc_t, init).into(),
                loc,
            ),
        );
        let empty = self.empty(block, acc_ty, loc);
        let filled = self.fill(block, init_v, empty, acc_ty, acc_t, loc);
        // A kh×kw tensor gives the reduction dims their extent (linalg needs an operand there).
        let win_ty: Type =
            RankedTensorType::new(&[g[0].kernel as u64, g[1].kernel as u64], acc_t, None).into();
        let win = self.empty(block, win_ty, loc);
        let maps = vec![
            self.map_attr(AffineMap::new(self.ctx, 6, 0, &x_map)),
            self.map_attr(AffineMap::new(self.ctx, 6, 0, &[d(4), d(5)])),
        ];
        let out_map = self.map_attr(AffineMap::new(self.ctx, 6, 0, &[d(0), d(1), d(2), d(3)]));
        let ctx = self.ctx;
        let iters = [
            "parallel",
            "parallel",
            "parallel",
            "parallel",
            "reduction",
            "reduction",
        ];
        let acc = self.generic_with_out_map(
            block,
            &[x, win],
            maps,
            out_map,
            &iters,
            acc_ty,
            filled,
            loc,
            move |b, v| {
                let s = Scalar { ctx, block: b, loc };
                let xe = s.extf(v[0]);
                if max {
                    s.maxf64(v[2], xe)
                } else {
                    s.addf64(v[2], xe)
                }
            },
        );
        // Per output position: the divisor (average) or the floor (max), separable by axis.
        let counted = |a: &Axis, o: usize, with_pad: bool| {
            (0..a.kernel)
                .filter(|&k| match a.tap(o, k) {
                    fp8c_ir::window::Tap::In(_) => true,
                    fp8c_ir::window::Tap::Pad => with_pad,
                    fp8c_ir::window::Tap::Out => false,
                })
                .count()
        };
        let mut per = Vec::with_capacity(g[0].out * g[1].out);
        for oh in 0..g[0].out {
            for ow in 0..g[1].out {
                per.push(if max {
                    let any = counted(&g[0], oh, false) * counted(&g[1], ow, false) > 0;
                    if any {
                        f64::NEG_INFINITY
                    } else {
                        f64::from(f32::MIN)
                    }
                } else if padded {
                    (counted(&g[0], oh, include_pad) * counted(&g[1], ow, include_pad)) as f64
                } else {
                    (g[0].kernel * g[1].kernel) as f64
                });
            }
        }
        // Counts and floors are exact in f32 (the emitter's constants are f32).
        let per: Vec<f32> = per.iter().map(|&v| v as f32).collect();
        let plane = [g[0].out as u64, g[1].out as u64];
        let table = Tensor::from_f32(plane.to_vec(), &per);
        let table_ty: Type = RankedTensorType::new(&plane, Type::float32(self.ctx), None).into();
        let table = self.constant(block, &table, table_ty, node, loc)?;
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, 4));
        let plane_map = self.map_attr(AffineMap::new(self.ctx, 4, 0, &[d(2), d(3)]));
        Ok(self.generic(
            block,
            &[acc, table],
            vec![id, plane_map],
            &["parallel"; 4],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let t = s.extf(a[1]);
                let v = if max {
                    s.maxf64(a[0], t)
                } else {
                    s.divf64(a[0], t)
                };
                s.truncf(v)
            },
        ))
    }
}
