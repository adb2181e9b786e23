//! FP8 in the MLIR emitter: amax over |x|'s bits, compute_scale (TE's rules, current
//! scaling), and the scaled GEMMs with their epilogue programs.

use super::*;

impl<'c> Emitter<'c, '_> {
    /// fp8c-core `amax_f32`: an unsigned max over `|x|`'s bits (NaN wins), then the f32. An
    /// f16 / bf16 `x` is widened to f32 (exact), an f64 one rounded to f32 (monotone), as the
    /// CPU's `amax` reads them.
    pub(super) fn amax<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let i32t: Type = melior::ir::r#type::IntegerType::new(self.ctx, 32).into();
        let acc_ty: Type = RankedTensorType::new(&[], i32t, None).into();
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let zero = s.i32(0);
        let empty = self.empty(block, acc_ty, loc);
        let init = self.fill(block, zero, empty, acc_ty, i32t, loc);
        let rank = dims.len();
        let maps = vec![self.map_attr(AffineMap::multi_dim_identity(self.ctx, rank))];
        let out_map = self.map_attr(AffineMap::new(self.ctx, rank, 0, &[]));
        let ctx = self.ctx;
        let bits = self.generic_with_out_map(
            block,
            &[x],
            maps,
            out_map,
            &vec!["reduction"; rank],
            acc_ty,
            init,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let abs = s.abs_bits(s.to_f32(a[0]));
                s.int("arith.maxui", abs, a[1])
            },
        );
        let m = self.extract(block, bits, i32t, loc);
        let nan = s.cmpi(
            melior::dialect::arith::CmpiPredicate::Ugt,
            m,
            s.i32(0x7f80_0000),
        );
        let v = s.select(nan, s.i32(0x7fc0_0000), m);
        self.scalar_tensor(block, s.float(v), loc)
    }

    /// `quantize { to, saturate }(x, scale)` of a float `x` of `dims` (fp8c-core `quantize`
    /// of `x` read as f32).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quantize<'a>(
        &self,
        block: &'a Block<'c>,
        (x, scale): (Value<'c, 'a>, Value<'c, 'a>),
        dims: &[u64],
        to: DType,
        saturate: bool,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let f8 = if to == DType::F8E4M3 {
            Type::float8_e4m3fn(self.ctx)
        } else {
            Type::float8_e5m2(self.ctx)
        };
        let out_ty: Type = RankedTensorType::new(dims, f8, None).into();
        let maps = vec![
            self.broadcast_map(dims, dims),
            self.broadcast_map(&[], dims),
        ];
        let ctx = self.ctx;
        self.generic(
            block,
            &[x, scale],
            maps,
            &vec!["parallel"; dims.len()],
            out_ty,
            None,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                s.quantize(to, saturate, s.to_f32(a[0]), a[1], f8)
            },
        )
    }

    /// An error unless every instruction of an elementwise program is emitted.
    pub(super) fn check_program(
        &self,
        node: &Node,
        insts: &[fp8c_ir::EwInst],
    ) -> Result<(), Error> {
        match insts.iter().find(|i| !Scalar::covers_program(&i.op)) {
            Some(inst) => Err(unsupported(
                node,
                format!(
                    "`{}` in the elementwise program is not emitted to MLIR yet",
                    inst.op.name()
                ),
            )),
            None => Ok(()),
        }
    }

    /// `compute_scale` from this step's amax (fp8c-core `compute_scale`, TE's rules) and its
    /// reciprocal, as 0-d tensors.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn compute_scale<'a>(
        &self,
        block: &'a Block<'c>,
        (amax_t, prev_t): (Value<'c, 'a>, Value<'c, 'a>),
        fmt: DType,
        margin: f32,
        epsilon: f32,
        power_2: bool,
        loc: Location<'c>,
    ) -> Vec<Value<'c, 'a>> {
        let f32t = Type::float32(self.ctx);
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let amax = self.extract(block, amax_t, f32t, loc);
        let prev = self.extract(block, prev_t, f32t, loc);
        let scale = s.scale_from_amax(amax, prev, fmt, margin, epsilon, power_2);
        let inv: Value = push(block, melior::dialect::arith::divf(s.f32(1.0), scale, loc));
        vec![
            self.scalar_tensor(block, scale, loc),
            self.scalar_tensor(block, inv, loc),
        ]
    }

    /// `scaled_matmul`: the decoded product times `scale_inv_a · scale_inv_b`, then the
    /// epilogue program (its `a0` the product, `a1…` the extra operands, broadcast). The
    /// accumulation is f32 in K order, or for a `fast_accum` GEMM the CPU reference's model of
    /// Hopper's tensor-core accumulation (`fast_accum.rs`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scaled_matmul<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        expr: Option<&fp8c_ir::EwExpr>,
        out_ty: Type<'c>,
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let fa = self.graph.value_type(node.inputs()[0]).dtype;
        let fb = self.graph.value_type(node.inputs()[1]).dtype;
        let r = out_dims.len();
        // An f16 / bf16 result: the f32 product is rounded to it, then each instruction of
        // the program computes in f32 and rounds (the CPU's store, then its elementwise ops).
        let f32t = Type::float32(self.ctx);
        let out_elem = RankedTensorType::try_from(out_ty).map_or(f32t, |t| t.element());
        let narrow = (out_elem != f32t).then_some(out_elem);
        let out_ty_f32: Type = RankedTensorType::new(out_dims, f32t, None).into();
        let fast = matches!(
            node.op,
            Op::ScaledMatMul {
                fast_accum: true,
                ..
            } | Op::ScaledMatMulEpilogue {
                fast_accum: true,
                ..
            }
        );
        let product = if fast {
            self.fast_accum_matmul(
                block,
                node,
                (ins[0], ins[1]),
                (fa, fb),
                out_ty_f32,
                out_dims,
                loc,
            )?
        } else {
            self.batched_matmul(
                block,
                node,
                ins,
                (false, false),
                Some((fa, fb)),
                out_ty_f32,
                out_dims,
                loc,
            )?
        };
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let sa = self.extract(block, ins[2], f32t, loc);
        let sb = self.extract(block, ins[3], f32t, loc);
        let alpha = s.elementwise(&Op::Mul, &[sa, sb]).expect("mul");
        let alpha = self.scalar_tensor(block, alpha, loc);
        let mut ops = vec![product, alpha];
        let mut maps = vec![
            self.map_attr(AffineMap::multi_dim_identity(self.ctx, r)),
            self.broadcast_map(&[], out_dims),
        ];
        let insts: Vec<fp8c_ir::EwInst> = expr.map(|e| e.insts().to_vec()).unwrap_or_default();
        // The epilogue's extra operands (a D scale after them is not the program's).
        let extras = expr.map_or(0, |e| e.num_inputs().saturating_sub(1));
        for (k, &v) in node.inputs().iter().enumerate().skip(4).take(extras) {
            ops.push(ins[k]);
            maps.push(self.broadcast_map(&self.dims(v, node)?, out_dims));
        }
        self.check_program(node, &insts)?;
        let ctx = self.ctx;
        Ok(self.generic(
            block,
            &ops,
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let y = s.elementwise(&Op::Mul, &[a[0], a[1]]).expect("mul");
                // a0 is the scaled product, a1… the extra operands (after the alpha slot).
                match narrow {
                    None => s.program(&insts, |i| if i == 0 { y } else { a[i as usize + 1] }),
                    Some(t) => {
                        let y = s.round_through(y, t);
                        let extra: Vec<Value> =
                            a[2..a.len() - 1].iter().map(|&v| s.to_f32(v)).collect();
                        let v = s.program_rounded(&insts, t, |i| {
                            if i == 0 { y } else { extra[i as usize - 1] }
                        });
                        s.named_pub("arith.truncf", v, t)
                    }
                }
            },
        ))
    }
}
