//! Index-picking ops in the MLIR emitter, dispatched from `Emitter::op`: arg_max/arg_min,
//! top_k, cum_sum and gather_elements (their loops live in reduce.rs and movement.rs).

use super::*;

impl<'c> Emitter<'c, '_> {
    pub(super) fn arg_extreme_op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        _id: fp8c_ir::NodeId,
        ins: &[Value<'c, 'a>],
        (out_ty, _out_dims, _out_dtype): (Type<'c>, &[u64], DType),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let (Op::ArgMax {
            axis,
            keepdims,
            select_last_index,
        }
        | Op::ArgMin {
            axis,
            keepdims,
            select_last_index,
        }) = &node.op
        else {
            return Err(unsupported(node, "not arg_max or arg_min"));
        };
        Ok({
            let xd = self.dims(node.inputs()[0], node)?;
            let d = self.graph.value_type(node.inputs()[0]).dtype;
            let keys = match d {
                DType::F32 | DType::F64 | DType::F16 | DType::BF16 => crate::scalar::ArgKeys::Float,
                DType::U64 => crate::scalar::ArgKeys::U64AsF64,
                DType::U8 | DType::U16 | DType::U32 => crate::scalar::ArgKeys::Int(true),
                DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
                    crate::scalar::ArgKeys::Int(false)
                }
                other => {
                    return Err(unsupported(
                        node,
                        format!("arg_max/arg_min of {other} tensors is not emitted yet"),
                    ));
                }
            };
            let r = xd.len() as i64;
            let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
            if xd.is_empty() || xd[ax] == 0 {
                // The CPU fails such a run; the JIT code must not read an empty axis.
                return Err(unsupported(node, "an empty or rank-0 input has no extreme"));
            }
            let max = matches!(node.op, Op::ArgMax { .. });
            vec![self.arg_extreme(
                block,
                ins[0],
                &xd,
                ax,
                (*keepdims, *select_last_index, max),
                keys,
                (self.elem(d, node)?, out_ty),
                loc,
            )]
        })
    }

    pub(super) fn top_k_op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        id: fp8c_ir::NodeId,
        ins: &[Value<'c, 'a>],
        (out_ty, out_dims, _out_dtype): (Type<'c>, &[u64], DType),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let Op::TopK { axis, largest, .. } = &node.op else {
            return Err(unsupported(node, "not top_k"));
        };
        Ok({
            let xd = self.dims(node.inputs()[0], node)?;
            let d = self.graph.value_type(node.inputs()[0]).dtype;
            let keys = match d {
                DType::F32 | DType::F64 | DType::F16 | DType::BF16 => crate::scalar::ArgKeys::Float,
                DType::U8 | DType::U16 | DType::U32 | DType::U64 => {
                    crate::scalar::ArgKeys::Int(true)
                }
                DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
                    crate::scalar::ArgKeys::Int(false)
                }
                other => {
                    return Err(unsupported(
                        node,
                        format!("top_k of {other} tensors is not emitted yet"),
                    ));
                }
            };
            let r = xd.len() as i64;
            if !(-r..r).contains(axis) {
                return Err(unsupported(node, format!("axis {axis} is out of range")));
            }
            let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
            let k = self
                .constant_ints(node.inputs()[1])
                .filter(|k| k.len() == 1)
                .ok_or_else(|| {
                    unsupported(node, "a k that is not a constant is not emitted yet")
                })?[0];
            if k < 0 || k as u64 > xd[ax] || out_dims.get(ax) != Some(&(k as u64)) {
                return Err(unsupported(
                    node,
                    format!("k = {k} does not fit axis {ax} of {xd:?}"),
                ));
            }
            let idx_ty = self.tensor(IrValue::new(id, 1), node)?;
            self.top_k(
                block,
                ins[0],
                &xd,
                ax,
                *largest,
                keys,
                (self.elem(d, node)?, (out_ty, idx_ty), out_dims),
                loc,
            )
        })
    }

    pub(super) fn cum_sum_op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        _id: fp8c_ir::NodeId,
        ins: &[Value<'c, 'a>],
        (out_ty, _out_dims, out_dtype): (Type<'c>, &[u64], DType),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let ctx = self.ctx;
        let Op::CumSum { exclusive, reverse } = &node.op else {
            return Err(unsupported(node, "not cum_sum"));
        };
        Ok({
            let xd = self.dims(node.inputs()[0], node)?;
            let axis = self
                .constant_ints(node.inputs()[1])
                .filter(|a| a.len() == 1)
                .ok_or_else(|| {
                    unsupported(node, "an axis that is not a constant is not emitted yet")
                })?[0];
            let r = xd.len() as i64;
            if !(-r..r).contains(&axis) {
                return Err(unsupported(node, format!("axis {axis} is out of range")));
            }
            let ax = (if axis < 0 { axis + r } else { axis }) as usize;
            // f16 / bf16 sum in f32 and round once (the CPU's compute type).
            let (acc_elem, float) = match out_dtype {
                DType::F32 | DType::F64 => (self.elem(out_dtype, node)?, true),
                DType::F16 | DType::BF16 => (Type::float32(ctx), true),
                d if d.is_int() => (self.elem(out_dtype, node)?, false),
                d => {
                    return Err(unsupported(
                        node,
                        format!("cum_sum of {d} tensors is not emitted yet"),
                    ));
                }
            };
            let acc = self.cum_sum(
                block,
                ins[0],
                &xd,
                ax,
                (*exclusive, *reverse),
                (acc_elem, float),
                loc,
            );
            if acc_elem == self.elem(out_dtype, node)? {
                vec![acc]
            } else {
                let id = self.map_attr(AffineMap::multi_dim_identity(ctx, xd.len()));
                let t = self.elem(out_dtype, node)?;
                vec![
                    self.per_element(block, &[acc], vec![id], out_ty, loc, move |b, a| {
                        Scalar { ctx, block: b, loc }.named_pub("arith.truncf", a[0], t)
                    }),
                ]
            }
        })
    }

    pub(super) fn gather_elements_op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        _id: fp8c_ir::NodeId,
        ins: &[Value<'c, 'a>],
        (out_ty, out_dims, out_dtype): (Type<'c>, &[u64], DType),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let Op::GatherElements { axis } = &node.op else {
            return Err(unsupported(node, "not gather_elements"));
        };
        Ok({
            let dd = self.dims(node.inputs()[0], node)?;
            let idd = self.dims(node.inputs()[1], node)?;
            let r = dd.len() as i64;
            let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
            // The CPU checks these shapes; the JIT code must not read outside data.
            let fits = dd.len() == idd.len()
                && ax < dd.len()
                && dd[ax] > 0
                && (0..dd.len()).all(|k| k == ax || idd[k] <= dd[k]);
            if !fits {
                return Err(unsupported(
                    node,
                    format!("indices {idd:?} do not fit data {dd:?} along axis {axis}"),
                ));
            }
            let elem = self.elem(out_dtype, node)?;
            vec![self.gather_elements(
                block,
                (ins[0], ins[1]),
                dd[ax],
                ax,
                (out_ty, elem),
                out_dims,
                loc,
            )]
        })
    }
}
