//! Data movement in the MLIR emitter: view ops as `tensor.reshape`, slices, concat pieces,
//! gather, gather_elements and gather_nd.

use super::*;

impl<'c> Emitter<'c, '_> {
    /// `tensor.reshape` to the static `dims` (row-major, like every view op).
    pub(super) fn reshape<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        out_ty: Type<'c>,
        dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let i64t: Type = melior::ir::r#type::IntegerType::new(self.ctx, 64).into();
        let shape_ty: Type = RankedTensorType::new(&[dims.len() as u64], i64t, None).into();
        let vals: Vec<Attribute> = dims
            .iter()
            .map(|&d| melior::ir::attribute::IntegerAttribute::new(i64t, d as i64).into())
            .collect();
        let dense = DenseElementsAttribute::new(shape_ty, &vals)
            .map_err(|e| Error::Invalid(e.to_string()))?;
        let shape: Value = push(block, arith::constant(self.ctx, dense.into(), loc));
        Ok(simple_op(
            block,
            "tensor.reshape",
            &[x, shape],
            &[out_ty],
            loc,
        ))
    }

    /// `gather(data, indices, axis)`: out[o…, i…, r…] = data[o…, idx[i…], r…], a negative
    /// index counting from the end. The index is clamped into range: the CPU reference fails
    /// the run on an out-of-range index, the JIT code cannot (yet), and must not read outside.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather<'a>(
        &self,
        block: &'a Block<'c>,
        (data, idx): (Value<'c, 'a>, Value<'c, 'a>),
        (dd, idd): (&[u64], &[u64]),
        axis: usize,
        (out_ty, elem): (Type<'c>, Type<'c>),
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = out_dims.len();
        let ir = idd.len();
        let idx_map = self.map_attr(AffineMap::new(
            self.ctx,
            r,
            0,
            &(axis..axis + ir)
                .map(|k| AffineExpr::dim(self.ctx, k))
                .collect::<Vec<_>>(),
        ));
        let ctx = self.ctx;
        let axis_len = dd[axis] as i64;
        let data_rank = dd.len();
        self.generic(
            block,
            &[idx],
            vec![idx_map],
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let k = s.axis_index(a[0], axis_len);
                let coords: Vec<Value> = (0..data_rank)
                    .map(|dpos| {
                        if dpos == axis {
                            k
                        } else {
                            let o = if dpos < axis { dpos } else { dpos + ir - 1 };
                            s.linalg_index(o)
                        }
                    })
                    .collect();
                s.extract(data, &coords, elem)
            },
        )
    }

    /// ONNX GatherElements: `out[i…] = data[i…]` with index `axis` replaced by `idx[i…]`
    /// (out shaped like the indices); negative indices count from the end, out-of-range ones
    /// are clamped (see `gather`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather_elements<'a>(
        &self,
        block: &'a Block<'c>,
        (data, idx): (Value<'c, 'a>, Value<'c, 'a>),
        axis_len: u64,
        axis: usize,
        (out_ty, elem): (Type<'c>, Type<'c>),
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = out_dims.len();
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let ctx = self.ctx;
        self.per_element(block, &[idx], vec![id], out_ty, loc, move |b, a| {
            let s = Scalar { ctx, block: b, loc };
            let coords: Vec<Value> = (0..r)
                .map(|k| {
                    if k == axis {
                        s.axis_index(a[0], axis_len as i64)
                    } else {
                        s.linalg_index(k)
                    }
                })
                .collect();
            s.extract(data, &coords, elem)
        })
    }

    /// ONNX GatherND: indices [B…, I…, k] pick data[B…, idx…] slices (B = `batch_dims`);
    /// negative indices count from the end, out-of-range ones are clamped (see `gather`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather_nd<'a>(
        &self,
        block: &'a Block<'c>,
        (data, idx): (Value<'c, 'a>, Value<'c, 'a>),
        (dd, idd): (&[u64], &[u64]),
        b: usize,
        (out_ty, elem): (Type<'c>, Type<'c>),
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let k = *idd.last().unwrap_or(&0) as usize;
        let p = idd.len() - 1; // the out dims that index into `indices`
        let ctx = self.ctx;
        let r = out_dims.len();
        let idx_elem = RankedTensorType::try_from(idx.r#type())
            .map(|t| t.element())
            .map_err(|_| Error::Invalid("indices are not a ranked tensor".into()))?;
        let dd = dd.to_vec();
        let out = self.empty(block, out_ty, loc);
        let out_map = self.map_attr(AffineMap::multi_dim_identity(ctx, r));
        Ok(self.generic_with_out_map(
            block,
            &[],
            vec![],
            out_map,
            &vec!["parallel"; r],
            out_ty,
            out,
            loc,
            move |blk, _| {
                let s = Scalar {
                    ctx,
                    block: blk,
                    loc,
                };
                let outs: Vec<Value> = (0..r).map(|d| s.linalg_index(d)).collect();
                let mut coords: Vec<Value> = outs[..b].to_vec();
                for j in 0..k {
                    let mut at: Vec<Value> = outs[..p].to_vec();
                    at.push(s.index_const(j as i64));
                    let v = s.extract(idx, &at, idx_elem);
                    coords.push(s.axis_index(v, dd[b + j] as i64));
                }
                coords.extend_from_slice(&outs[p..]);
                s.extract(data, &coords, elem)
            },
        ))
    }

    /// `tensor.insert_slice` of `src` (dims `sizes`) into `dest` at `offsets`, unit strides.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn insert_slice<'a>(
        &self,
        block: &'a Block<'c>,
        src: Value<'c, 'a>,
        dest: Value<'c, 'a>,
        offsets: &[i64],
        sizes: &[u64],
        dest_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let sizes: Vec<i64> = sizes.iter().map(|&d| d as i64).collect();
        let ones = vec![1i64; sizes.len()];
        push(
            block,
            OperationBuilder::new("tensor.insert_slice", loc)
                .add_operands(&[src, dest])
                .add_results(&[dest_ty])
                .add_attributes(&self.slice_attrs(offsets, &sizes, &ones, &[1, 1, 0, 0, 0]))
                .build()
                .expect("tensor.insert_slice"),
        )
    }

    pub(super) fn slice_attrs(
        &self,
        offsets: &[i64],
        sizes: &[i64],
        strides: &[i64],
        segments: &[i32],
    ) -> Vec<(Identifier<'c>, Attribute<'c>)> {
        let arr = |v: &[i64]| -> Attribute<'c> {
            melior::ir::attribute::DenseI64ArrayAttribute::new(self.ctx, v).into()
        };
        vec![
            (Identifier::new(self.ctx, "static_offsets"), arr(offsets)),
            (Identifier::new(self.ctx, "static_sizes"), arr(sizes)),
            (Identifier::new(self.ctx, "static_strides"), arr(strides)),
            (
                Identifier::new(self.ctx, "operandSegmentSizes"),
                DenseI32ArrayAttribute::new(self.ctx, segments).into(),
            ),
        ]
    }

    /// `slice` with constant starts / ends / axes / steps (ONNX clamping), positive steps, as
    /// `tensor.extract_slice`.
    pub(super) fn slice<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        x: Value<'c, 'a>,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        let dims = self.dims(node.inputs()[0], node)?;
        let konst = |i: usize| -> Result<Vec<i64>, Error> {
            let v = node
                .inputs()
                .get(i)
                .and_then(|&v| self.graph.constant_value(v))
                .ok_or_else(|| {
                    unsupported(
                        node,
                        "slice bounds that are not constants are not emitted yet",
                    )
                })?;
            v.to_i64_vec().map_err(|e| unsupported(node, e))
        };
        let (starts, ends, axes, steps) = (konst(1)?, konst(2)?, konst(3)?, konst(4)?);
        let r = dims.len();
        let mut offsets = vec![0i64; r];
        let mut sizes: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        let mut strides = vec![1i64; r];
        for (k, &a) in axes.iter().enumerate() {
            let ax = (if a < 0 { a + r as i64 } else { a }) as usize;
            let d = dims[ax] as i64;
            let step = steps[k];
            if step <= 0 {
                return Err(unsupported(
                    node,
                    "slices with negative steps are not emitted yet",
                ));
            }
            let clamp = |v: i64| if v < 0 { (v + d).max(0) } else { v.min(d) };
            let (st, en) = (clamp(starts[k]), clamp(ends[k]));
            offsets[ax] = st;
            sizes[ax] = if en > st {
                (en - st + step - 1) / step
            } else {
                0
            };
            strides[ax] = step;
        }
        Ok(self.extract_slice(block, x, out_ty, &offsets, &sizes, &strides, loc))
    }

    /// `tensor.extract_slice` with static offsets, sizes and strides.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn extract_slice<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        ty: Type<'c>,
        offsets: &[i64],
        sizes: &[i64],
        strides: &[i64],
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        push(
            block,
            OperationBuilder::new("tensor.extract_slice", loc)
                .add_operands(&[x])
                .add_results(&[ty])
                .add_attributes(&self.slice_attrs(offsets, sizes, strides, &[1, 0, 0, 0]))
                .build()
                .expect("tensor.extract_slice"),
        )
    }
}
