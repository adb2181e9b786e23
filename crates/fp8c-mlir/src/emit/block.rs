//! Fine-grained FP8 scaling in the MLIR emitter (issue #16's ops): `block_quantize` (per-tile
//! amax, the tile's scale as FP32, power-of-2 or E8M0, the scaled quantize),
//! `block_dequantize` and `block_scaled_matmul` (DeepSeek-V3's promotion: each K block's
//! partial sum scaled by its tiles' scale_invs and added in order), as `fp8c_eval`'s block
//! module computes them. Tiles follow `fp8c_eval::BlockTiles`; an element reads its tile's
//! scale through `floordiv` indexing maps.

use super::fast_accum::{Operands, scf_for};
use super::*;
use fp8c_eval::BlockTiles;
use fp8c_ir::BlockScaling;

impl<'c> Emitter<'c, '_> {
    /// The tiling of `v` by `rows` × `cols`, or an error naming `node`.
    fn tiles(&self, node: &Node, v: IrValue, rows: i64, cols: i64) -> Result<BlockTiles, Error> {
        let dims = self.dims(v, node)?;
        BlockTiles::of(&dims, rows, cols).map_err(|m| unsupported(node, m))
    }

    /// The map from a [..., R, C] tensor's iteration dims to its tile grid
    /// [..., i floordiv tr, j floordiv tc].
    fn tile_map(&self, rank: usize, t: &BlockTiles) -> Attribute<'c> {
        let d = |k| AffineExpr::dim(self.ctx, k);
        let c = |v: usize| AffineExpr::constant(self.ctx, v as i64);
        let mut e: Vec<AffineExpr> = (0..rank - 2).map(d).collect();
        e.push(AffineExpr::floor_div(d(rank - 2), c(t.tr)));
        e.push(AffineExpr::floor_div(d(rank - 1), c(t.tc)));
        self.map_attr(AffineMap::new(self.ctx, rank, 0, &e))
    }

    /// The tile grid's shape: the leading dims, then tiles per axis.
    fn grid(dims: &[u64], t: &BlockTiles) -> Vec<u64> {
        let mut g = dims[..dims.len() - 2].to_vec();
        g.extend([t.nr as u64, t.nc as u64]);
        g
    }

    /// `block_quantize`: `[q, scale_inv]`.
    #[allow(clippy::too_many_arguments)]
    /// `block_quantize` of `x`, whose IR value (for its shape) is `src`: an input of `node`
    /// (block_quantize) or its output 0 (elementwise_block_quantize); the caller checks that
    /// it is f32.
    pub(super) fn block_quantize<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        (x, src): (Value<'c, 'a>, IrValue),
        (to, saturate, rows, cols, scaling, epsilon): (DType, bool, i64, i64, BlockScaling, f32),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let dims = self.dims(src, node)?;
        let t = self.tiles(node, src, rows, cols)?;
        let r = dims.len();
        let grid = Self::grid(&dims, &t);
        let f32t = Type::float32(self.ctx);
        let i32t: Type = IntegerType::new(self.ctx, 32).into();
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        // Each tile's amax: an unsigned max over |x|'s bits (NaN above every finite value).
        let bits_ty: Type = RankedTensorType::new(&grid, i32t, None).into();
        let empty = self.empty(block, bits_ty, loc);
        let init = self.fill(block, s.i32(0), empty, bits_ty, i32t, loc);
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let mut iters = vec!["parallel"; r - 2];
        iters.extend(["reduction", "reduction"]);
        let ctx = self.ctx;
        let bits = self.generic_with_out_map(
            block,
            &[x],
            vec![id],
            self.tile_map(r, &t),
            &iters,
            bits_ty,
            init,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let abs = s.abs_bits(a[0]);
                s.int("arith.maxui", abs, a[1])
            },
        );
        // The tile's scale, then its reciprocal.
        let scale_ty: Type = RankedTensorType::new(&grid, f32t, None).into();
        let gid = self.map_attr(AffineMap::multi_dim_identity(self.ctx, grid.len()));
        let gpar = vec!["parallel"; grid.len()];
        let scale = self.generic(
            block,
            &[bits],
            vec![gid],
            &gpar,
            scale_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                tile_scale(&s, a[0], to, scaling, epsilon)
            },
        );
        let gid = self.map_attr(AffineMap::multi_dim_identity(self.ctx, grid.len()));
        let inv = self.generic(
            block,
            &[scale],
            vec![gid],
            &gpar,
            scale_ty,
            None,
            loc,
            move |b, a| {
                Scalar { ctx, block: b, loc }
                    .elementwise(&Op::Reciprocal, &[a[0]])
                    .expect("1/x")
            },
        );
        let f8 = self.elem(to, node)?;
        let q_ty: Type = RankedTensorType::new(&dims, f8, None).into();
        let maps = vec![
            self.map_attr(AffineMap::multi_dim_identity(self.ctx, r)),
            self.tile_map(r, &t),
        ];
        let q = self.generic(
            block,
            &[x, scale],
            maps,
            &vec!["parallel"; r],
            q_ty,
            None,
            loc,
            move |b, a| Scalar { ctx, block: b, loc }.quantize(to, saturate, a[0], a[1], f8),
        );
        Ok(vec![q, inv])
    }

    /// `block_dequantize`: each code times its tile's scale_inv.
    pub(super) fn block_dequantize<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        (q, scale_inv): (Value<'c, 'a>, Value<'c, 'a>),
        (rows, cols): (i64, i64),
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let dims = self.dims(node.inputs()[0], node)?;
        let t = self.tiles(node, node.inputs()[0], rows, cols)?;
        self.check_grid(node, 1, &Self::grid(&dims, &t))?;
        let r = dims.len();
        let fmt = self.graph.value_type(node.inputs()[0]).dtype;
        let maps = vec![
            self.map_attr(AffineMap::multi_dim_identity(self.ctx, r)),
            self.tile_map(r, &t),
        ];
        let ctx = self.ctx;
        Ok(self.generic(
            block,
            &[q, scale_inv],
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| Scalar { ctx, block: b, loc }.dequantize(fmt, a[0], a[1]),
        ))
    }

    /// `block_scaled_matmul { k_block, a_rows, b_cols }(qa [M, K], qb [K, N], sa, sb)`: per
    /// output element, each K block's exact products summed in f32 in order, that sum times
    /// A's then B's scale_inv (in f64 where the first product overflows), the blocks added in
    /// order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_scaled_matmul<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (k_block, a_rows, b_cols): (i64, i64, i64),
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let (ad, bd) = (
            self.dims(node.inputs()[0], node)?,
            self.dims(node.inputs()[1], node)?,
        );
        if ad.len() != 2 || bd.len() != 2 || ad[1] != bd[0] {
            return Err(unsupported(node, "needs qa [M, K] and qb [K, N] matrices"));
        }
        let ta = self.tiles(node, node.inputs()[0], a_rows, k_block)?;
        let tb = self.tiles(node, node.inputs()[1], k_block, b_cols)?;
        self.check_grid(node, 2, &Self::grid(&ad, &ta))?;
        self.check_grid(node, 3, &Self::grid(&bd, &tb))?;
        let (fa, fb) = (
            self.graph.value_type(node.inputs()[0]).dtype,
            self.graph.value_type(node.inputs()[1]).dtype,
        );
        let (f8a, f8b) = (self.elem(fa, node)?, self.elem(fb, node)?);
        let (qa, qb, sa, sb) = (ins[0], ins[1], ins[2], ins[3]);
        let k = ad[1] as i64;
        let (kt, nblocks) = (ta.tc as i64, ta.nc as i64);
        let (tr, tc) = (ta.tr as i64, tb.tc as i64);
        let ctx = self.ctx;
        let f32t = Type::float32(ctx);
        Ok(self.generic(
            block,
            &[],
            vec![],
            &["parallel", "parallel"],
            out_ty,
            None,
            loc,
            move |b, _| {
                let s = Scalar { ctx, block: b, loc };
                let (m, n) = (s.linalg_index(0), s.linalg_index(1));
                let ops = Operands {
                    a: (qa, fa, f8a, vec![]),
                    b: (qb, fb, f8b, vec![]),
                    m,
                    n,
                };
                let a_row = s.int("arith.divui", m, s.index_const(tr));
                let b_col = s.int("arith.divui", n, s.index_const(tc));
                let zero = s.f32(0.0);
                let out = scf_for(
                    &s,
                    (s.index_const(0), s.index_const(nblocks)),
                    &[zero],
                    |s, blk, it| {
                        let lo = s.int("arith.muli", blk, s.index_const(kt));
                        let hi = s.int("arith.addi", lo, s.index_const(kt));
                        let hi = s.int("arith.minsi", hi, s.index_const(k));
                        let p = scf_for(s, (lo, hi), &[s.f32(0.0)], |s, kk, it| {
                            let x = ops.product(s, kk);
                            vec![s.elementwise(&Op::Add, &[it[0], x]).expect("add")]
                        });
                        let sa_v = s.extract(sa, &[a_row, blk], f32t);
                        let sb_v = s.extract(sb, &[blk, b_col], f32t);
                        let mul = |x, y| s.elementwise(&Op::Mul, &[x, y]).expect("mul");
                        // fp8c_eval's `promote`: where p · sa overflows, p · sa · sb in f64.
                        let t = mul(p[0], sa_v);
                        let inf = |v: f32| {
                            s.cmpf(melior::dialect::arith::CmpfPredicate::Oeq, t, s.f32(v))
                        };
                        let overflow = s.or(inf(f32::INFINITY), inf(f32::NEG_INFINITY));
                        let wide = s.mulf64(s.mulf64(s.extf(p[0]), s.extf(sa_v)), s.extf(sb_v));
                        let scaled = s.select(overflow, s.truncf(wide), mul(t, sb_v));
                        vec![s.elementwise(&Op::Add, &[it[0], scaled]).expect("add")]
                    },
                );
                out[0]
            },
        ))
    }

    /// An error unless input `k` of `node` is an f32 scale grid of `want`'s shape.
    fn check_grid(&self, node: &Node, k: usize, want: &[u64]) -> Result<(), Error> {
        let ty = self.graph.value_type(node.inputs()[k]);
        if ty.dtype == DType::F32 && ty.known_dims().as_deref() == Some(want) {
            Ok(())
        } else {
            Err(unsupported(
                node,
                format!("input {k} must be f32{want:?} (one scale per tile), got {ty}"),
            ))
        }
    }
}

/// A tile's scale from the bits of its amax (`fp8c_eval`'s block `tile_scale`).
fn tile_scale<'c, 'b>(
    s: &Scalar<'c, 'b>,
    bits: Value<'c, '_>,
    fmt: DType,
    scaling: BlockScaling,
    epsilon: f32,
) -> Value<'c, 'b> {
    use melior::dialect::arith::CmpiPredicate as I;
    match scaling {
        BlockScaling::Fp32 | BlockScaling::Pow2 => {
            // NaN (bits above inf's) as the CPU's amax gives it.
            let nan = s.cmpi(I::Ugt, bits, s.i32(0x7f80_0000));
            let amax = s.float(s.select(nan, s.i32(0x7fc0_0000), bits));
            let one = s.f32(1.0);
            s.scale_from_amax(amax, one, fmt, 0.0, epsilon, scaling == BlockScaling::Pow2)
        }
        BlockScaling::E8m0 => {
            // 2^-(floor(log2 amax) − emax_elem), the exponent clamped to [−127, 127]; amax
            // 0 or non-finite: 1.
            let i64t: Type = IntegerType::new(s.ctx, 64).into();
            let exp = s.int("arith.shrui", bits, s.i32(23));
            let mant = s.and(bits, s.i32(0x7f_ffff));
            // A subnormal's top mantissa bit: 31 − clz − 149.
            let clz = s.named_pub("math.ctlz", mant, IntegerType::new(s.ctx, 32).into());
            let sub = s.int("arith.subi", s.i32((31i32 - 149) as u32), clz);
            let normal = s.int("arith.subi", exp, s.i32(127));
            let is_sub = s.cmpi(I::Eq, exp, s.i32(0));
            let floor_log2 = s.select(is_sub, sub, normal);
            let emax = if fmt == DType::F8E4M3 { 8 } else { 15 };
            let shared = s.int("arith.subi", floor_log2, s.i32(emax));
            let shared = s.int("arith.maxsi", shared, s.i32((-127i32) as u32));
            let shared = s.int("arith.minsi", shared, s.i32(127));
            // 2^-shared as an f64 (exact), rounded once to f32 (2^-127 is an f32 subnormal).
            let e = s.named_pub("arith.extsi", shared, i64t);
            let biased = s.int("arith.subi", s.i64c(1023), e);
            let p = s.bitcast(
                s.int("arith.shli", biased, s.i64c(52)),
                Type::float64(s.ctx),
            );
            let scale = s.truncf(p);
            let usable = s.and(
                s.cmpi(I::Ult, bits, s.i32(0x7f80_0000)),
                s.cmpi(I::Ne, bits, s.i32(0)),
            );
            s.select(usable, scale, s.f32(1.0))
        }
    }
}
