//! `cast` in the MLIR emitter, dispatched from `Emitter::op`: between any two element types
//! `Scalar::cast` knows, and between f32 and FP8 by the exact encode and decode that
//! quantize and dequantize use.

use super::*;

impl<'c> Emitter<'c, '_> {
    pub(super) fn cast_op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (out_ty, out_dims): (Type<'c>, &[u64]),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let Op::Cast { to, saturate } = &node.op else {
            return Err(unsupported(node, "not a cast"));
        };
        let ctx = self.ctx;
        Ok({
            let from = self.graph.value_type(node.inputs()[0]).dtype;
            if from == *to {
                vec![ins[0]]
            } else {
                let (fe, te) = (self.elem(from, node)?, self.elem(*to, node)?);
                let x_dims = self.dims(node.inputs()[0], node)?;
                let maps = vec![self.broadcast_map(&x_dims, out_dims)];
                let (from, to, sat) = (from, *to, *saturate);
                if from.is_fp8() || to.is_fp8() {
                    // The exact encode and decode quantize and dequantize use, with no
                    // scale: f32 to FP8 and back (other source types are refused).
                    if !matches!((from, to), (DType::F32, t) | (t, DType::F32) if t.is_fp8()) {
                        return Err(unsupported(
                            node,
                            "casts between FP8 and types other than f32 are not emitted yet",
                        ));
                    }
                    return Ok(vec![self.per_element(
                        block,
                        ins,
                        maps,
                        out_ty,
                        loc,
                        move |b, a| {
                            let s = Scalar { ctx, block: b, loc };
                            if to.is_fp8() {
                                s.cast_to_fp8(to, sat, a[0], te)
                            } else {
                                s.decode(from, a[0])
                            }
                        },
                    )]);
                }
                vec![
                    self.per_element(block, ins, maps, out_ty, loc, move |b, a| {
                        Scalar { ctx, block: b, loc }.cast(a[0], from, to, fe, te)
                    }),
                ]
            }
        })
    }
}
