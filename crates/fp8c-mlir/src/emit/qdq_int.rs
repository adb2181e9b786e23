//! ONNX's integer QuantizeLinear and DequantizeLinear in the MLIR emitter (int8/uint8/int16/
//! uint16, per tensor, per axis or blocked), computed as the CPU reference computes them.

use super::*;

impl<'c> Emitter<'c, '_> {
    /// quantize_linear to an integer `to`: x / y_scale in f64 rounded to the f32 scale's
    /// precision, rounded half to even, plus the zero point, clamped to the type's range (NaN
    /// gives its low end).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quantize_linear<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (axis, to, block_size): (i64, DType, i64),
        out_dims: &[u64],
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let ctx = self.ctx;
        let xt = self.graph.value_type(node.inputs()[0]).dtype;
        let (lo, hi, unsigned) = match to {
            DType::I8 => (-128.0, 127.0, false),
            DType::U8 => (0.0, 255.0, true),
            DType::I16 => (-32768.0, 32767.0, false),
            DType::U16 => (0.0, 65535.0, true),
            d => {
                return Err(unsupported(
                    node,
                    format!("quantize_linear to {d} is not emitted yet"),
                ));
            }
        };
        if !matches!(
            xt,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::I32
        ) {
            return Err(unsupported(
                node,
                format!("quantize_linear of {xt} is not emitted yet"),
            ));
        }
        let smap = self.qdq_scale_map(node, axis, block_size, out_dims)?;
        let mut maps = vec![self.broadcast_map(out_dims, out_dims), smap];
        if node.inputs().len() > 2 {
            maps.push(self.qdq_zero_point_map(node, smap, out_dims)?);
        }
        let n = maps.len();
        let te = self.elem(to, node)?;
        Ok(
            self.per_element(block, &ins[..n], maps, out_ty, loc, move |b, a| {
                use melior::dialect::arith::CmpfPredicate as F;
                let s = Scalar { ctx, block: b, loc };
                let f64t = Type::float64(ctx);
                let x = s.float_or_int_to_f64(a[0], xt == DType::I32);
                let q = s.extf(s.truncf(s.divf64(x, s.extf(a[1]))));
                let mut r = s.inferred("math.roundeven", &[q]);
                if n > 2 {
                    let cvt = if unsigned {
                        "arith.uitofp"
                    } else {
                        "arith.sitofp"
                    };
                    r = s.addf64(r, s.named_pub(cvt, a[2], f64t));
                }
                let nan = s.cmpf(F::Uno, r, r);
                let r = s.inferred("arith.maximumf", &[r, s.f64c(lo)]);
                let r = s.inferred("arith.minimumf", &[r, s.f64c(hi)]);
                let r = s.select(nan, s.f64c(lo), r);
                let cvt = if unsigned {
                    "arith.fptoui"
                } else {
                    "arith.fptosi"
                };
                s.named_pub(cvt, r, te)
            }),
        )
    }

    /// dequantize_linear of an integer x: (x − zero point) · x_scale in f64, rounded once to
    /// the f32 scale's type.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dequantize_linear<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (axis, block_size): (i64, i64),
        out_dims: &[u64],
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let ctx = self.ctx;
        let xt = self.graph.value_type(node.inputs()[0]).dtype;
        let unsigned = match xt {
            DType::I8 | DType::I16 | DType::I32 => false,
            DType::U8 | DType::U16 => true,
            d => {
                return Err(unsupported(
                    node,
                    format!("dequantize_linear of {d} is not emitted yet"),
                ));
            }
        };
        let smap = self.qdq_scale_map(node, axis, block_size, out_dims)?;
        let mut maps = vec![self.broadcast_map(out_dims, out_dims), smap];
        if node.inputs().len() > 2 {
            maps.push(self.qdq_zero_point_map(node, smap, out_dims)?);
        }
        let n = maps.len();
        Ok(
            self.per_element(block, &ins[..n], maps, out_ty, loc, move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let f64t = Type::float64(ctx);
                let cvt = if unsigned {
                    "arith.uitofp"
                } else {
                    "arith.sitofp"
                };
                let mut x = s.named_pub(cvt, a[0], f64t);
                if n > 2 {
                    x = s.subf64(x, s.named_pub(cvt, a[2], f64t));
                }
                s.truncf(s.mulf64(x, s.extf(a[1])))
            }),
        )
    }
}
