//! The MLIR builders the op emitters share: `linalg.generic` (and its elementwise form),
//! `linalg.fill`, `tensor.empty`, indexing maps and iterator attributes, 0-d tensors,
//! constants, the FP8 producers' `[y, q, amax]`, transposes and Q/DQ scale maps.

use super::*;

impl<'c> Emitter<'c, '_> {
    /// [`Self::generic`] with every iterator parallel over `out_ty`'s dims into a fresh tensor:
    /// an elementwise map of `ins` (read through `maps`).
    pub(super) fn per_element<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        maps: Vec<Attribute<'c>>,
        out_ty: Type<'c>,
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&'b Block<'c>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let rank = RankedTensorType::try_from(out_ty).map_or(0, |r| r.rank());
        self.generic(
            block,
            ins,
            maps,
            &vec!["parallel"; rank],
            out_ty,
            None,
            loc,
            body,
        )
    }

    /// `transpose { perm }` of `x` into `out_ty` (an empty perm reverses the dims, ONNX's
    /// default).
    pub(super) fn transpose<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        perm: &[i64],
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        // out[i] = in[j] with j[perm[k]] = i[k]: the input reads dim k at perm[k].
        let r = RankedTensorType::try_from(out_ty).map_or(0, |t| t.rank());
        let mut exprs = vec![AffineExpr::dim(self.ctx, 0); r];
        let reversed: Vec<i64> = (0..r as i64).rev().collect();
        let perm = if perm.is_empty() { &reversed[..] } else { perm };
        for (k, &p) in perm.iter().enumerate() {
            exprs[p as usize] = AffineExpr::dim(self.ctx, k);
        }
        let maps = vec![self.map_attr(AffineMap::new(self.ctx, r, 0, &exprs))];
        self.generic(
            block,
            &[x],
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            |_, a| a[0],
        )
    }

    /// `[y, quantize(y, scale), amax(y)]`: what the fused FP8-emitting producers output.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quantized<'a>(
        &self,
        block: &'a Block<'c>,
        y: Value<'c, 'a>,
        scale: Value<'c, 'a>,
        dims: &[u64],
        to: DType,
        saturate: bool,
        loc: Location<'c>,
    ) -> Vec<Value<'c, 'a>> {
        let q = self.quantize(block, (y, scale), dims, to, saturate, loc);
        let amax = self.amax(block, y, dims, loc);
        vec![y, q, amax]
    }

    /// An error unless input `k` of `node` is f32 (`what`: what is done to it).
    pub(super) fn f32_operand(&self, node: &Node, k: usize, what: &str) -> Result<(), Error> {
        let d = self.graph.value_type(node.inputs()[k]).dtype;
        if d == DType::F32 {
            Ok(())
        } else {
            Err(unsupported(
                node,
                format!("only f32 inputs are {what} yet, got {d}"),
            ))
        }
    }

    /// An error unless input `k` of `node` is f32, f16, bf16 or f64: a tensor the CPU reads
    /// as f32 (`Scalar::to_f32`) before doing `what` to it.
    pub(super) fn float_operand(&self, node: &Node, k: usize, what: &str) -> Result<(), Error> {
        let d = self.graph.value_type(node.inputs()[k]).dtype;
        if matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
            Ok(())
        } else {
            Err(unsupported(
                node,
                format!("only float inputs are {what} yet, got {d}"),
            ))
        }
    }

    /// How an element of a Q/DQ node's output reads its f32 scale: one scale (per tensor), or
    /// one per index of `axis` (per axis). Blocked scales are not emitted yet.
    pub(super) fn qdq_scale_map(
        &self,
        node: &Node,
        axis: i64,
        block_size: i64,
        out_dims: &[u64],
    ) -> Result<Attribute<'c>, Error> {
        self.f32_operand(node, 1, "read as the scale")?;
        let sd = self.dims(node.inputs()[1], node)?;
        let r = out_dims.len();
        let n: u64 = sd.iter().product();
        if block_size == 0 && n == 1 {
            return Ok(self.map_attr(AffineMap::new(
                self.ctx,
                r,
                0,
                &vec![AffineExpr::constant(self.ctx, 0); sd.len()],
            )));
        }
        let ax = if axis < 0 { axis + r as i64 } else { axis } as usize;
        if block_size == 0 && sd.len() == 1 && ax < r && sd[0] == out_dims[ax] {
            return Ok(self.map_attr(AffineMap::new(
                self.ctx,
                r,
                0,
                &[AffineExpr::dim(self.ctx, ax)],
            )));
        }
        Err(unsupported(
            node,
            "only per-tensor and per-axis Q/DQ scales are emitted yet",
        ))
    }

    /// How an element of a Q/DQ node's output reads its zero point (input 2): as the scale
    /// (`smap`), or its one element when it has one (a shape the scale's may differ from).
    pub(super) fn qdq_zero_point_map(
        &self,
        node: &Node,
        smap: Attribute<'c>,
        out_dims: &[u64],
    ) -> Result<Attribute<'c>, Error> {
        let zd = self.dims(node.inputs()[2], node)?;
        let sd = self.dims(node.inputs()[1], node)?;
        if zd.iter().product::<u64>() == 1 {
            let zeros = vec![AffineExpr::constant(self.ctx, 0); zd.len()];
            return Ok(self.map_attr(AffineMap::new(self.ctx, out_dims.len(), 0, &zeros)));
        }
        if zd == sd {
            return Ok(smap);
        }
        Err(unsupported(
            node,
            format!("a zero point of shape {zd:?} for a scale of {sd:?} is not emitted"),
        ))
    }

    /// The values of `v` when a constant node of integers makes it.
    pub(super) fn constant_ints(&self, v: IrValue) -> Option<Vec<i64>> {
        match &self.graph.node(v.node).op {
            Op::Constant { value } => value.to_i64_vec().ok(),
            _ => None,
        }
    }

    /// A zero of `d`, whose MLIR element type is `elem`.
    pub(super) fn zero_of<'a>(
        &self,
        block: &'a Block<'c>,
        elem: Type<'c>,
        d: DType,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let attr: Attribute = if d.is_float() || d.is_fp8() {
            FloatAttribute::new(self.ctx, elem, 0.0).into()
        } else {
            IntegerAttribute::new(elem, 0).into()
        };
        push(block, arith::constant(self.ctx, attr, loc))
    }

    /// `tensor.empty` of `ty`.
    pub(super) fn empty<'a>(
        &self,
        block: &'a Block<'c>,
        ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        push(
            block,
            OperationBuilder::new("tensor.empty", loc)
                .add_results(&[ty])
                .build()
                .expect("tensor.empty"),
        )
    }

    /// The indexing map that reads an operand of `dims` broadcast to an output of rank `rank`
    /// (numpy rules: trailing alignment, size-1 dims read index 0).
    pub(super) fn broadcast_map(&self, dims: &[u64], out: &[u64]) -> Attribute<'c> {
        let rank = out.len();
        let exprs: Vec<AffineExpr> = dims
            .iter()
            .enumerate()
            .map(|(k, &d)| {
                let o = rank - dims.len() + k;
                if d == 1 && out[o] != 1 {
                    AffineExpr::constant(self.ctx, 0)
                } else {
                    AffineExpr::dim(self.ctx, o)
                }
            })
            .collect();
        self.map_attr(AffineMap::new(self.ctx, rank, 0, &exprs))
    }

    pub(super) fn map_attr(&self, map: AffineMap<'c>) -> Attribute<'c> {
        // SAFETY: mlirAffineMapAttrGet takes a valid map of this context and returns an
        // attribute owned by the context.
        unsafe { Attribute::from_raw(mlir_sys::mlirAffineMapAttrGet(map.to_raw())) }
    }

    pub(super) fn iterators(&self, kinds: &[&str]) -> Attribute<'c> {
        let attrs: Vec<Attribute> = kinds
            .iter()
            .map(|k| {
                Attribute::parse(self.ctx, &format!("#linalg.iterator_type<{k}>"))
                    .expect("iterator type")
            })
            .collect();
        ArrayAttribute::new(self.ctx, &attrs).into()
    }

    /// `linalg.generic` over `ins` (with their maps) into a fresh tensor of `out_ty`
    /// (identity map), its body built by `body` from the scalar block arguments.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn generic<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        maps: Vec<Attribute<'c>>,
        iterators: &[&str],
        out_ty: Type<'c>,
        init: Option<Value<'c, 'a>>,
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&'b Block<'c>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let out = init.unwrap_or_else(|| self.empty(block, out_ty, loc));
        let rank = RankedTensorType::try_from(out_ty).map_or(0, |r| r.rank());
        let out_map = self.map_attr(AffineMap::multi_dim_identity(self.ctx, rank));
        self.generic_with_out_map(block, ins, maps, out_map, iterators, out_ty, out, loc, body)
    }

    /// A 0-d tensor's element.
    pub(super) fn extract<'a>(
        &self,
        block: &'a Block<'c>,
        t: Value<'c, 'a>,
        elem: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        simple_op(block, "tensor.extract", &[t], &[elem], loc)
    }

    /// A 0-d tensor holding `v`.
    pub(super) fn scalar_tensor<'a>(
        &self,
        block: &'a Block<'c>,
        v: Value<'c, 'a>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let ty = RankedTensorType::new(&[], v.r#type(), None).into();
        simple_op(block, "tensor.from_elements", &[v], &[ty], loc)
    }

    /// `linalg.fill` of `value` into `into`.
    pub(super) fn fill<'a>(
        &self,
        block: &'a Block<'c>,
        value: Value<'c, 'a>,
        into: Value<'c, 'a>,
        ty: Type<'c>,
        elem: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        push(
            block,
            OperationBuilder::new("linalg.fill", loc)
                .add_operands(&[value, into])
                .add_results(&[ty])
                .add_attributes(&[(
                    Identifier::new(self.ctx, "operandSegmentSizes"),
                    DenseI32ArrayAttribute::new(self.ctx, &[1, 1]).into(),
                )])
                .add_regions([fill_region(self.ctx, elem, loc)])
                .build()
                .expect("linalg.fill"),
        )
    }

    /// [`Self::generic`] with an explicit output map and accumulator.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn generic_with_out_map<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        maps: Vec<Attribute<'c>>,
        out_map: Attribute<'c>,
        iterators: &[&str],
        out_ty: Type<'c>,
        init: Value<'c, 'a>,
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&'b Block<'c>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let elem = |t: Type<'c>| -> Type<'c> {
            RankedTensorType::try_from(t)
                .map(|r| r.element())
                .unwrap_or(t)
        };
        let mut scalar_args: Vec<(Type, Location)> =
            ins.iter().map(|v| (elem(v.r#type()), loc)).collect();
        scalar_args.push((elem(out_ty), loc));
        let inner = Block::new(&scalar_args);
        let args: Vec<Value> = (0..scalar_args.len())
            .map(|i| inner.argument(i).expect("argument").into())
            .collect();
        let y = body(&inner, &args);
        inner.append_operation(
            OperationBuilder::new("linalg.yield", loc)
                .add_operands(&[y])
                .build()
                .expect("linalg.yield"),
        );
        let region = Region::new();
        region.append_block(inner);
        let mut all_maps = maps;
        all_maps.push(out_map);
        let mut operands: Vec<Value> = ins.to_vec();
        operands.push(init);
        push(
            block,
            OperationBuilder::new("linalg.generic", loc)
                .add_operands(&operands)
                .add_results(&[out_ty])
                .add_attributes(&[
                    (
                        Identifier::new(self.ctx, "indexing_maps"),
                        ArrayAttribute::new(self.ctx, &all_maps).into(),
                    ),
                    (
                        Identifier::new(self.ctx, "iterator_types"),
                        self.iterators(iterators),
                    ),
                    (
                        Identifier::new(self.ctx, "operandSegmentSizes"),
                        DenseI32ArrayAttribute::new(self.ctx, &[ins.len() as i32, 1]).into(),
                    ),
                ])
                .add_regions([region])
                .build()
                .expect("linalg.generic"),
        )
    }

    pub(super) fn constant<'a>(
        &self,
        block: &'a Block<'c>,
        value: &Tensor,
        ty: Type<'c>,
        node: &Node,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let elem = self.elem(value.dtype(), node)?;
        let vals: Vec<Attribute> = match value.dtype() {
            // f32 values are exact in f64, and FloatAttribute rounds nothing back.
            DType::F32 | DType::F64 => value
                .to_f64_vec()
                .map_err(|e| unsupported(node, e))?
                .into_iter()
                .map(|v| FloatAttribute::new(self.ctx, elem, v).into())
                .collect(),
            d if d.is_int() || d == DType::Bool => value
                .to_i64_vec()
                .map_err(|e| unsupported(node, e))?
                .into_iter()
                .map(|v| IntegerAttribute::new(elem, v).into())
                .collect(),
            d if d.is_fp8() => {
                // The codes as an i8 constant, each bitcast to the FP8 type.
                let i8t: Type = IntegerType::new(self.ctx, 8).into();
                let dims = value.shape().to_vec();
                let codes_ty: Type = RankedTensorType::new(&dims, i8t, None).into();
                let vals: Vec<Attribute> = value
                    .bytes()
                    .iter()
                    .map(|&b| IntegerAttribute::new(i8t, i64::from(b as i8)).into())
                    .collect();
                let dense = DenseElementsAttribute::new(codes_ty, &vals)
                    .map_err(|e| unsupported(node, e.to_string()))?;
                let codes = push(block, arith::constant(self.ctx, dense.into(), loc));
                let r = dims.len();
                let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
                let ctx = self.ctx;
                return Ok(self.generic(
                    block,
                    &[codes],
                    vec![id],
                    &vec!["parallel"; r],
                    ty,
                    None,
                    loc,
                    move |b, a| Scalar { ctx, block: b, loc }.bitcast(a[0], elem),
                ));
            }
            other => {
                return Err(unsupported(
                    node,
                    format!("{other} constants are not emitted yet"),
                ));
            }
        };
        let dense =
            DenseElementsAttribute::new(ty, &vals).map_err(|e| unsupported(node, e.to_string()))?;
        Ok(push(block, arith::constant(self.ctx, dense.into(), loc)))
    }
}

/// The body of `linalg.fill`: yield the fill value.
fn fill_region<'c>(_ctx: &'c Context, elem: Type<'c>, loc: Location<'c>) -> Region<'c> {
    let b = Block::new(&[(elem, loc), (elem, loc)]);
    let v: Value = b.argument(0).expect("argument").into();
    b.append_operation(
        OperationBuilder::new("linalg.yield", loc)
            .add_operands(&[v])
            .build()
            .expect("linalg.yield"),
    );
    let r = Region::new();
    r.append_block(b);
    r
}

/// Appends `op` to `block` and returns its (first) result.
pub(super) fn push<'c, 'a>(block: &'a Block<'c>, op: melior::ir::Operation<'c>) -> Value<'c, 'a> {
    block
        .append_operation(op)
        .result(0)
        .expect("an operation with a result")
        .into()
}

/// `name` with `operands` and `results`, no attributes or regions, appended to `block`;
/// returns its first result.
pub(super) fn simple_op<'c, 'a>(
    block: &'a Block<'c>,
    name: &str,
    operands: &[Value<'c, '_>],
    results: &[Type<'c>],
    loc: Location<'c>,
) -> Value<'c, 'a> {
    push(
        block,
        OperationBuilder::new(name, loc)
            .add_operands(operands)
            .add_results(results)
            .build()
            .expect("a valid operation"),
    )
}
