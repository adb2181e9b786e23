//! Delayed scaling in the MLIR emitter: the amax history's update (record this step's amax in
//! slot 0, TE's roll) and the amax a scale is computed from (the history's max or its most
//! recent slot), as fp8c-core's `history_amax` / `roll_history` and the CPU's
//! `amax_history_update` compute them. The histories are function arguments and results
//! (state), so a step of the JIT code leaves them as the CPU leaves its state.

use super::*;
use fp8c_ir::AmaxSource;

impl<'c> Emitter<'c, '_> {
    /// `history` f32[len] with slot 0 set to the 0-d `amax`: the recorded history.
    pub(super) fn record_amax<'a>(
        &self,
        block: &'a Block<'c>,
        history: Value<'c, 'a>,
        amax: Value<'c, 'a>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let f32t = Type::float32(self.ctx);
        let a = self.extract(block, amax, f32t, loc);
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let zero = s.index_const(0);
        simple_op(
            block,
            "tensor.insert",
            &[a, history, zero],
            &[history.r#type()],
            loc,
        )
    }

    /// TE's roll of a recorded history f32[len]: `next[i] = recorded[(i + 1) % len]`, then
    /// `next[0] = 0` (fp8c-core `roll_history`).
    pub(super) fn roll_history<'a>(
        &self,
        block: &'a Block<'c>,
        recorded: Value<'c, 'a>,
        len: u64,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let ty = recorded.r#type();
        let ctx = self.ctx;
        let f32t = Type::float32(ctx);
        self.generic(
            block,
            &[],
            vec![],
            &["parallel"],
            ty,
            None,
            loc,
            move |b, _| {
                let s = Scalar { ctx, block: b, loc };
                let i = s.linalg_index(0);
                let one = s.index_const(1);
                let next = s.int(
                    "arith.remui",
                    s.int("arith.addi", i, one),
                    s.index_const(len as i64),
                );
                let v = s.extract(recorded, &[next], f32t);
                let first = s.cmpi(
                    melior::dialect::arith::CmpiPredicate::Eq,
                    i,
                    s.index_const(0),
                );
                s.select(first, s.f32(0.0), v)
            },
        )
    }

    /// The amax delayed scaling reads from a recorded history f32[len], as a 0-d tensor: the
    /// max over every slot with NaN winning (`history_max`), or slot 0
    /// (`history_most_recent`).
    pub(super) fn history_amax<'a>(
        &self,
        block: &'a Block<'c>,
        recorded: Value<'c, 'a>,
        source: AmaxSource,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let f32t = Type::float32(self.ctx);
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        if source == AmaxSource::HistoryMostRecent {
            let zero = s.index_const(0);
            let v = s.extract(recorded, &[zero], f32t);
            return self.scalar_tensor(block, v, loc);
        }
        // maximumf propagates NaN; from −inf, the fold equals fp8c-core's fold from slot 0.
        let acc_ty: Type = RankedTensorType::new(&[], f32t, None).into();
        let empty = self.empty(block, acc_ty, loc);
        let init = self.fill(block, s.f32(f32::NEG_INFINITY), empty, acc_ty, f32t, loc);
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, 1));
        let out_map = self.map_attr(AffineMap::new(self.ctx, 1, 0, &[]));
        let ctx = self.ctx;
        self.generic_with_out_map(
            block,
            &[recorded],
            vec![id],
            out_map,
            &["reduction"],
            acc_ty,
            init,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                s.elementwise(&Op::Max, &[a[1], a[0]]).expect("max")
            },
        )
    }

    /// `amax_history_update(history, amax)`: `[recorded, next]`.
    pub(super) fn amax_history_update<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        (history, amax): (Value<'c, 'a>, Value<'c, 'a>),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let len = self.history_len(node, node.inputs()[0])?;
        let recorded = self.record_amax(block, history, amax, loc);
        let next = self.roll_history(block, recorded, len, loc);
        Ok(vec![recorded, next])
    }

    /// `batched_scale_update`: per (history, amax, scale) triple, the next history, scale and
    /// scale_inv (`amax_history_update`, then `compute_scale` from the recorded history).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn batched_scale_update<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        ins: &[Value<'c, 'a>],
        (fmt, margin, source, epsilon, power_2): (DType, f32, AmaxSource, f32, bool),
        loc: Location<'c>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        if source == AmaxSource::Current || ins.is_empty() || !ins.len().is_multiple_of(3) {
            return Err(unsupported(
                node,
                "needs a history source and (history, amax, scale) triples",
            ));
        }
        let mut outs = Vec::with_capacity(ins.len());
        for (k, t) in ins.chunks(3).enumerate() {
            let len = self.history_len(node, node.inputs()[3 * k])?;
            let recorded = self.record_amax(block, t[0], t[1], loc);
            let amax = self.history_amax(block, recorded, source, loc);
            let scales =
                self.compute_scale(block, (amax, t[2]), fmt, margin, epsilon, power_2, loc);
            outs.push(self.roll_history(block, recorded, len, loc));
            outs.extend(scales);
        }
        Ok(outs)
    }

    /// The length of the history `v` (f32[L], L ≥ 1).
    pub(super) fn history_len(&self, node: &Node, v: IrValue) -> Result<u64, Error> {
        match self.dims(v, node)?.as_slice() {
            [l] if *l >= 1 && self.graph.value_type(v).dtype == DType::F32 => Ok(*l),
            _ => Err(unsupported(
                node,
                format!(
                    "an amax history must be a non-empty f32[L], got {}",
                    self.graph.value_type(v)
                ),
            )),
        }
    }
}
