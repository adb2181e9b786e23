//! Hopper's FP8 fast accumulation in the MLIR emitter: fp8c-eval's model
//! (`fp8c_eval::fast_accum`, the CPU reference's `scaled_matmul { fast_accum }`) emitted
//! per output element, so the JIT code reproduces the CPU's bits.
//!
//! Per output element, K is walked in blocks of 32 products; each block's products (exact in
//! f32) and the running sum are aligned to the largest biased exponent `e` among them and
//! truncated toward zero to multiples of `2^(max(e, 1) − 127 − 13)`, then added exactly. Here
//! the scaled terms are summed in f64 (exact: integers below 2^20) and the sum rounded once to
//! f32, which is what the model's f32 path computes. A block with an infinite or NaN product
//! adds in plain f32, in K order; a block of zeros onto a zero sum leaves the sum as it was.

use super::*;
use fp8c_eval::{FAST_ACCUM_BITS as BITS, FAST_ACCUM_BLOCK as BLOCK};
use melior::dialect::arith::{CmpfPredicate as F, CmpiPredicate as I};

impl<'c> Emitter<'c, '_> {
    /// The accumulated products of a `scaled_matmul { fast_accum }`'s FP8 operands
    /// (`[.., M, K] · [.., K, N]`, batch dims broadcast), before the scales, as f32 `out_ty`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fast_accum_matmul<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        (qa, qb): (Value<'c, 'a>, Value<'c, 'a>),
        (fa, fb): (DType, DType),
        out_ty: Type<'c>,
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let (ad, bd) = (
            self.dims(node.inputs()[0], node)?,
            self.dims(node.inputs()[1], node)?,
        );
        let r = out_dims.len();
        if ad.len() < 2 || bd.len() < 2 || r < 2 {
            return Err(unsupported(node, "a 1-D matmul operand is not emitted yet"));
        }
        let k = ad[ad.len() - 1] as i64;
        let nb = r - 2;
        // Which output dim each batch dim of an operand reads (None: broadcast, index 0).
        let batch = |dims: &[u64]| -> Vec<Option<usize>> {
            let own = dims.len() - 2;
            (0..own)
                .map(|d| {
                    let o = nb - own + d;
                    (!(dims[d] == 1 && out_dims[o] != 1)).then_some(o)
                })
                .collect()
        };
        let (a_batch, b_batch) = (batch(&ad), batch(&bd));
        let (f8a, f8b) = (self.elem(fa, node)?, self.elem(fb, node)?);
        let ctx = self.ctx;
        let blocks = (k as usize).div_ceil(BLOCK) as i64;
        Ok(self.generic(
            block,
            &[],
            vec![],
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, _| {
                let s = Scalar { ctx, block: b, loc };
                let idx: Vec<Value> = (0..r).map(|d| s.linalg_index(d)).collect();
                let zero = s.index_const(0);
                let coords = |sel: &[Option<usize>]| -> Vec<Value> {
                    sel.iter().map(|o| o.map_or(zero, |o| idx[o])).collect()
                };
                let ops = Operands {
                    a: (qa, fa, f8a, coords(&a_batch)),
                    b: (qb, fb, f8b, coords(&b_batch)),
                    m: idx[nb],
                    n: idx[nb + 1],
                };
                let acc0 = s.f32(0.0);
                let out = scf_for(
                    &s,
                    (s.index_const(0), s.index_const(blocks)),
                    &[acc0],
                    |s, kb, it| {
                        let acc = it[0];
                        let lo = s.int("arith.muli", kb, s.index_const(BLOCK as i64));
                        let hi = s.int("arith.addi", lo, s.index_const(BLOCK as i64));
                        let hi = s.int("arith.minsi", hi, s.index_const(k));
                        // Pass 1: the largest exponent field, and whether any product is nonzero.
                        let e0 = field(s, acc);
                        let scan = scf_for(s, (lo, hi), &[e0, s.i32(0)], |s, j, it| {
                            let p = ops.product(s, j);
                            let e = s.int("arith.maxui", it[0], field(s, p));
                            let nz = s.or(it[1], s.and(s.bits(p), s.i32(0x7fff_ffff)));
                            vec![e, nz]
                        });
                        let (e, nz) = (scan[0], scan[1]);
                        // The quantum 2^q and its inverse, q = max(e, 1) − 127 − (BITS − 1).
                        let i64t: Type = IntegerType::new(s.ctx, 64).into();
                        let f64t = Type::float64(s.ctx);
                        let e64 =
                            s.named_pub("arith.extui", s.int("arith.maxui", e, s.i32(1)), i64t);
                        let q = s.int("arith.subi", e64, s.i64c(127 + i64::from(BITS) - 1));
                        let pow2 = |x: Value<'c, '_>| {
                            let biased = s.int("arith.addi", x, s.i64c(1023));
                            s.bitcast(s.int("arith.shli", biased, s.i64c(52)), f64t)
                        };
                        let inv = pow2(s.int("arith.subi", s.i64c(0), q));
                        // Pass 2: the truncated terms in f64 and, for a non-finite block, the
                        // plain f32 sum.
                        let sums = scf_for(
                            s,
                            (lo, hi),
                            &[scaled_trunc(s, acc, inv), acc],
                            |s, j, it| {
                                let p = ops.product(s, j);
                                vec![
                                    s.addf64(it[0], scaled_trunc(s, p, inv)),
                                    s.elementwise(&Op::Add, &[it[1], p]).expect("add"),
                                ]
                            },
                        );
                        let aligned = s.truncf(s.divf64(sums[0], inv));
                        let nonfinite = s.cmpi(I::Eq, e, s.i32(255));
                        let zero_block = s.and(
                            s.and(s.cmpi(I::Eq, e, s.i32(0)), s.cmpi(I::Eq, nz, s.i32(0))),
                            s.cmpf(F::Oeq, acc, s.f32(0.0)),
                        );
                        let next = s.select(nonfinite, sums[1], aligned);
                        vec![s.select(zero_block, acc, next)]
                    },
                );
                out[0]
            },
        ))
    }
}

/// The operands of a fast-accumulation GEMM as one output element reads them: each FP8
/// tensor with its format, MLIR type and batch coordinates, and the element's row and column.
pub(super) struct Operands<'c, 'v> {
    pub(super) a: (Value<'c, 'v>, DType, Type<'c>, Vec<Value<'c, 'v>>),
    pub(super) b: (Value<'c, 'v>, DType, Type<'c>, Vec<Value<'c, 'v>>),
    pub(super) m: Value<'c, 'v>,
    pub(super) n: Value<'c, 'v>,
}

impl<'c> Operands<'c, '_> {
    /// `a[.., m, j] · b[.., j, n]`, decoded (exact in f32).
    pub(super) fn product<'x>(&self, s: &Scalar<'c, 'x>, j: Value<'c, '_>) -> Value<'c, 'x> {
        let (qa, fa, ta, pa) = &self.a;
        let (qb, fb, tb, pb) = &self.b;
        let mut ac = pa.clone();
        ac.extend([self.m, j]);
        let mut bc = pb.clone();
        bc.extend([j, self.n]);
        let x = s.decode(*fa, s.extract(*qa, &ac, *ta));
        let y = s.decode(*fb, s.extract(*qb, &bc, *tb));
        s.elementwise(&Op::Mul, &[x, y]).expect("mul")
    }
}

/// `trunc(f64(v) · inv)`: a term scaled to units of the quantum, truncated toward zero.
fn scaled_trunc<'c, 'x>(s: &Scalar<'c, 'x>, v: Value<'c, '_>, inv: Value<'c, '_>) -> Value<'c, 'x> {
    s.trunc(s.mulf64(s.extf(v), inv))
}

/// The biased exponent field of an f32 (an i32 in 0..=255).
fn field<'c, 'b>(s: &Scalar<'c, 'b>, v: Value<'c, '_>) -> Value<'c, 'b> {
    let sh = s.int("arith.shrui", s.bits(v), s.i32(23));
    s.and(sh, s.i32(0xff))
}

/// `scf.for` from `lb` to `ub` (step 1) carrying `inits`; `body(s, iv, carried)` returns the
/// next carried values. Returns the final ones.
pub(super) fn scf_for<'c, 'b>(
    s: &Scalar<'c, 'b>,
    (lb, ub): (Value<'c, '_>, Value<'c, '_>),
    inits: &[Value<'c, '_>],
    body: impl for<'x> FnOnce(&Scalar<'c, 'x>, Value<'c, 'x>, &[Value<'c, 'x>]) -> Vec<Value<'c, 'x>>,
) -> Vec<Value<'c, 'b>> {
    let loc = s.loc;
    let types: Vec<Type<'c>> = inits.iter().map(|v| v.r#type()).collect();
    let mut args = vec![(Type::index(s.ctx), loc)];
    args.extend(types.iter().map(|&t| (t, loc)));
    let inner = Block::new(&args);
    let iv: Value = inner.argument(0).expect("iv").into();
    let carried: Vec<Value> = (1..args.len())
        .map(|i| inner.argument(i).expect("carried").into())
        .collect();
    let ys = body(
        &Scalar {
            ctx: s.ctx,
            block: &inner,
            loc,
        },
        iv,
        &carried,
    );
    inner.append_operation(
        OperationBuilder::new("scf.yield", loc)
            .add_operands(&ys)
            .build()
            .expect("scf.yield"),
    );
    let region = Region::new();
    region.append_block(inner);
    let step = s.index_const(1);
    let mut operands = vec![lb, ub, step];
    operands.extend_from_slice(inits);
    let op = s.block.append_operation(
        OperationBuilder::new("scf.for", loc)
            .add_operands(&operands)
            .add_results(&types)
            .add_regions([region])
            .build()
            .expect("scf.for"),
    );
    (0..types.len())
        .map(|i| op.result(i).expect("result").into())
        .collect()
}
