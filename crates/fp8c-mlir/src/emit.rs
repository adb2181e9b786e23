//! The melior builder behind `fp8c_mlir::emit` (feature `mlir`): see the crate docs for the
//! module's shape and the ops covered.

use crate::Error;
use crate::scalar::Scalar;
use fp8c_ir::window::{self, Axis, WindowAttrs};
use fp8c_ir::{DType, Graph, Node, Op, Tensor, Value as IrValue};
use melior::{
    Context,
    dialect::{DialectRegistry, arith, func},
    ir::{
        AffineExpr, AffineMap, Attribute, Block, BlockLike, Identifier, Location, Module, Region,
        RegionLike, Type, Value, ValueLike,
        attribute::{
            ArrayAttribute, DenseElementsAttribute, DenseI32ArrayAttribute, FloatAttribute,
            IntegerAttribute, StringAttribute, TypeAttribute,
        },
        operation::{OperationBuilder, OperationLike, OperationPrintingFlags},
        r#type::{FunctionType, IntegerType, RankedTensorType, ShapedTypeLike},
    },
    utility::register_all_dialects,
};
use std::collections::HashMap;

/// A context with every dialect registered and loaded.
pub(crate) fn context() -> Context {
    let registry = DialectRegistry::new();
    register_all_dialects(&registry);
    let ctx = Context::new();
    ctx.append_dialect_registry(&registry);
    ctx.load_all_available_dialects();
    ctx
}

/// The verified module of `graph` in `ctx`, and its function's symbol.
pub(crate) fn build<'c>(ctx: &'c Context, graph: &Graph) -> Result<(Module<'c>, String), Error> {
    let module = Module::new(Location::unknown(ctx));
    let e = Emitter { ctx, graph };
    let (func, symbol) = e.function()?;
    module.body().append_operation(func);
    if !module.as_operation().verify() {
        return Err(Error::Invalid(format!(
            "the module of graph \"{}\" does not verify",
            graph.name()
        )));
    }
    Ok((module, symbol))
}

/// Builds, verifies and prints the module of `graph`, with each operation's location (the
/// fp8c node it comes from).
pub(crate) fn module_text(graph: &Graph) -> Result<String, Error> {
    let ctx = context();
    let (module, _) = build(&ctx, graph)?;
    module
        .as_operation()
        .to_string_with_flags(OperationPrintingFlags::new().enable_debug_info(true, false))
        .map_err(|e| Error::Invalid(e.to_string()))
}

struct Emitter<'c, 'g> {
    ctx: &'c Context,
    graph: &'g Graph,
}

/// An error for `node`.
fn unsupported(node: &Node, why: impl Into<String>) -> Error {
    Error::Unsupported {
        node: node.name.clone(),
        op: node.op.name().to_string(),
        why: why.into(),
    }
}

impl<'c> Emitter<'c, '_> {
    fn loc(&self, name: &str) -> Location<'c> {
        Location::name(self.ctx, name, Location::unknown(self.ctx))
    }

    fn elem(&self, d: DType, node: &Node) -> Result<Type<'c>, Error> {
        Ok(match d {
            DType::F32 => Type::float32(self.ctx),
            DType::F64 => Type::float64(self.ctx),
            DType::BF16 => Type::bfloat16(self.ctx),
            DType::F16 => Type::float16(self.ctx),
            DType::F8E4M3 => Type::float8_e4m3fn(self.ctx),
            DType::F8E5M2 => Type::float8_e5m2(self.ctx),
            // Signless integers (MLIR's convention); bool is i1 (a byte per element in
            // memory, 0 or 1, as fp8c stores it).
            DType::I64 | DType::U64 => IntegerType::new(self.ctx, 64).into(),
            DType::I32 | DType::U32 => IntegerType::new(self.ctx, 32).into(),
            DType::I16 | DType::U16 => IntegerType::new(self.ctx, 16).into(),
            DType::I8 | DType::U8 => IntegerType::new(self.ctx, 8).into(),
            DType::Bool => IntegerType::new(self.ctx, 1).into(),
            other => {
                return Err(unsupported(
                    node,
                    format!("{other} tensors are not emitted yet"),
                ));
            }
        })
    }

    /// The static dims of `v`, or an error asking for `--input-shape`.
    fn dims(&self, v: IrValue, node: &Node) -> Result<Vec<u64>, Error> {
        self.graph.value_type(v).known_dims().ok_or_else(|| {
            unsupported(
                node,
                format!(
                    "type {} is not static: MLIR emission needs every shape (give --input-shape)",
                    self.graph.value_type(v)
                ),
            )
        })
    }

    fn tensor(&self, v: IrValue, node: &Node) -> Result<Type<'c>, Error> {
        let elem = self.elem(self.graph.value_type(v).dtype, node)?;
        Ok(RankedTensorType::new(&self.dims(v, node)?, elem, None).into())
    }

    fn function(&self) -> Result<(melior::ir::Operation<'c>, String), Error> {
        let g = self.graph;
        let order = g.topo_order().map_err(|e| Error::Invalid(e.to_string()))?;
        let args: Vec<IrValue> = g
            .inputs()
            .iter()
            .chain(g.params())
            .map(|&id| IrValue::new(id, 0))
            .collect();
        if !g.state().is_empty() {
            let id = g.state()[0].0;
            return Err(unsupported(
                g.node(id),
                "scaling state (delayed scaling) is not emitted yet: use current scaling",
            ));
        }
        let mut arg_types = Vec::new();
        for &v in &args {
            let node = g.node(v.node);
            arg_types.push((self.tensor(v, node)?, self.loc(&node.name)));
        }
        let block = Block::new(&arg_types);
        let mut env: HashMap<IrValue, Value<'c, '_>> = HashMap::new();
        for (i, &v) in args.iter().enumerate() {
            env.insert(v, block.argument(i).expect("argument").into());
        }
        for id in order {
            let node = g.node(id);
            if g.inputs().contains(&id) || g.params().contains(&id) {
                continue;
            }
            let outs = self.op(&block, node, id, &env)?;
            for (slot, v) in outs.into_iter().enumerate() {
                env.insert(IrValue::new(id, slot as u32), v);
            }
        }
        let mut results = Vec::new();
        let mut result_types = Vec::new();
        for out in g.outputs() {
            let node = g.node(out.value.node);
            let ty = self.tensor(out.value, node)?;
            let mut v = env[&out.value];
            // A result that is an argument (an input passed through) gets a buffer of its own:
            // the caller frees every result, and bufferization cannot return an argument.
            if g.inputs().contains(&out.value.node) || g.params().contains(&out.value.node) {
                let rank = self.dims(out.value, node)?.len();
                let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, rank));
                let loc = self.loc(&out.name);
                v = self.generic(
                    &block,
                    &[v],
                    vec![id],
                    &vec!["parallel"; rank],
                    ty,
                    None,
                    loc,
                    |_, a| a[0],
                );
            }
            results.push(v);
            result_types.push(ty);
        }
        block.append_operation(func::r#return(&results, Location::unknown(self.ctx)));
        let region = Region::new();
        region.append_block(block);
        let arg_tys: Vec<Type> = arg_types.iter().map(|(t, _)| *t).collect();
        let mut name = g
            .name()
            .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
        if name.is_empty() {
            name = "main".into();
        }
        let op = func::func(
            self.ctx,
            StringAttribute::new(self.ctx, &name),
            TypeAttribute::new(FunctionType::new(self.ctx, &arg_tys, &result_types).into()),
            region,
            &[(
                Identifier::new(self.ctx, "llvm.emit_c_interface"),
                Attribute::unit(self.ctx),
            )],
            self.loc(g.name()),
        );
        Ok((op, name))
    }

    /// `tensor.empty` of `ty`.
    fn empty<'a>(&self, block: &'a Block<'c>, ty: Type<'c>, loc: Location<'c>) -> Value<'c, 'a> {
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
    fn broadcast_map(&self, dims: &[u64], out: &[u64]) -> Attribute<'c> {
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

    fn map_attr(&self, map: AffineMap<'c>) -> Attribute<'c> {
        // SAFETY: mlirAffineMapAttrGet takes a valid map of this context and returns an
        // attribute owned by the context.
        unsafe { Attribute::from_raw(mlir_sys::mlirAffineMapAttrGet(map.to_raw())) }
    }

    fn iterators(&self, kinds: &[&str]) -> Attribute<'c> {
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
    fn generic<'a>(
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

    fn op<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        id: fp8c_ir::NodeId,
        env: &HashMap<IrValue, Value<'c, 'a>>,
    ) -> Result<Vec<Value<'c, 'a>>, Error> {
        let loc = self.loc(&node.name);
        let ins: Vec<Value> = node.inputs().iter().map(|v| env[v]).collect();
        let out_v = IrValue::new(id, 0);
        let out_ty = self.tensor(out_v, node)?;
        let out_dims = self.dims(out_v, node)?;
        let out_dtype = self.graph.value_type(out_v).dtype;
        let parallel = vec!["parallel"; out_dims.len()];
        let in_maps = |s: &Self| -> Result<Vec<Attribute<'c>>, Error> {
            node.inputs()
                .iter()
                .map(|&v| Ok(s.broadcast_map(&s.dims(v, node)?, &out_dims)))
                .collect()
        };
        let ctx = self.ctx;
        let f32_only = |what: &str| -> Result<(), Error> {
            if out_dtype == DType::F32 {
                Ok(())
            } else {
                Err(unsupported(
                    node,
                    format!("{what} with a {out_dtype} result is not emitted yet"),
                ))
            }
        };
        Ok(match &node.op {
            Op::Constant { value } => vec![self.constant(block, value, out_ty, node, loc)?],
            Op::Identity => vec![ins[0]],
            op if Scalar::covers(op) => {
                f32_only("an elementwise op")?;
                let op = op.clone();
                vec![self.generic(
                    block,
                    &ins,
                    in_maps(self)?,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        s.elementwise(&op, a).expect("covered")
                    },
                )]
            }
            Op::MatMul if out_dims.len() > 2 => {
                f32_only("a matmul")?;
                vec![self.batched_matmul(
                    block,
                    node,
                    &ins,
                    (false, false),
                    None,
                    out_ty,
                    &out_dims,
                    loc,
                )?]
            }
            Op::MatMul | Op::Gemm { .. } => {
                f32_only("a matmul")?;
                vec![self.gemm(block, node, &ins, out_ty, &out_dims, loc)?]
            }
            Op::Transpose { perm } => {
                // out[i] = in[j] with j[perm[k]] = i[k]: the input reads dim k at perm[k].
                let r = out_dims.len();
                let mut exprs = vec![AffineExpr::dim(ctx, 0); r];
                for (k, &p) in perm.iter().enumerate() {
                    exprs[p as usize] = AffineExpr::dim(ctx, k);
                }
                let maps = vec![self.map_attr(AffineMap::new(ctx, r, 0, &exprs))];
                vec![self.generic(
                    block,
                    &ins[..1],
                    maps,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    |_, a| a[0],
                )]
            }
            Op::Reshape { .. } | Op::Unsqueeze { .. } | Op::Squeeze { .. } | Op::Flatten { .. } => {
                vec![self.reshape(block, ins[0], out_ty, &out_dims, loc)?]
            }
            Op::ReduceMean { axes, keepdims } | Op::ReduceSum { axes, keepdims } => {
                f32_only("a reduction")?;
                let mean = matches!(node.op, Op::ReduceMean { .. });
                let in_dims = self.dims(node.inputs()[0], node)?;
                let r = in_dims.len() as i64;
                let axes: Vec<usize> = match axes {
                    Some(a) => a
                        .iter()
                        .map(|&x| (if x < 0 { x + r } else { x }) as usize)
                        .collect(),
                    None => (0..in_dims.len()).collect(),
                };
                vec![self.reduce_f64(block, ins[0], &in_dims, &axes, *keepdims, mean, out_ty, loc)]
            }
            Op::Gather { axis } => {
                let dd = self.dims(node.inputs()[0], node)?;
                let idd = self.dims(node.inputs()[1], node)?;
                let ax = (if *axis < 0 {
                    axis + dd.len() as i64
                } else {
                    *axis
                }) as usize;
                let elem = self.elem(out_dtype, node)?;
                vec![self.gather(
                    block,
                    (ins[0], ins[1]),
                    (&dd, &idd),
                    ax,
                    (out_ty, elem),
                    &out_dims,
                    loc,
                )]
            }
            Op::LayerNormalization { axis, epsilon } => {
                f32_only("layer_norm")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let mut pdims = Vec::new();
                for &v in &node.inputs()[1..] {
                    pdims.push(self.dims(v, node)?);
                }
                vec![self.layer_norm(block, &ins, &pdims, &out_dims, ax, *epsilon, out_ty, loc)]
            }
            Op::Where | Op::Expand => {
                // where: select on an i1 condition, broadcasting; expand: a broadcast copy.
                let n = if matches!(node.op, Op::Where) { 3 } else { 1 };
                let maps = in_maps(self)?[..n].to_vec();
                let is_where = n == 3;
                vec![self.generic(
                    block,
                    &ins[..n],
                    maps,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    move |b, a| {
                        if is_where {
                            Scalar { ctx, block: b, loc }.select(a[0], a[1], a[2])
                        } else {
                            a[0]
                        }
                    },
                )]
            }
            Op::And | Op::Or | Op::Xor | Op::Not => {
                let maps = in_maps(self)?;
                let op = node.op.clone();
                vec![self.generic(
                    block,
                    &ins,
                    maps,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        match op {
                            Op::And => s.and(a[0], a[1]),
                            Op::Or => s.or(a[0], a[1]),
                            Op::Xor => s.int("arith.xori", a[0], a[1]),
                            _ => {
                                let one = s.bool_const(true);
                                s.int("arith.xori", a[0], one)
                            }
                        }
                    },
                )]
            }
            Op::Equal | Op::Less | Op::LessOrEqual | Op::Greater | Op::GreaterOrEqual => {
                use melior::dialect::arith::{CmpfPredicate as F, CmpiPredicate as I};
                let d = self.graph.value_type(node.inputs()[0]).dtype;
                let float = matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
                let unsigned = matches!(
                    d,
                    DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::Bool
                );
                if d.is_fp8() {
                    return Err(unsupported(
                        node,
                        "comparisons of FP8 tensors are not emitted yet",
                    ));
                }
                let (fp, ip) = match node.op {
                    Op::Equal => (F::Oeq, I::Eq),
                    Op::Less => (F::Olt, if unsigned { I::Ult } else { I::Slt }),
                    Op::LessOrEqual => (F::Ole, if unsigned { I::Ule } else { I::Sle }),
                    Op::Greater => (F::Ogt, if unsigned { I::Ugt } else { I::Sgt }),
                    _ => (F::Oge, if unsigned { I::Uge } else { I::Sge }),
                };
                let maps = in_maps(self)?;
                vec![self.generic(
                    block,
                    &ins,
                    maps,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        if float {
                            s.cmpf(fp, a[0], a[1])
                        } else {
                            s.cmpi(ip, a[0], a[1])
                        }
                    },
                )]
            }
            Op::Clip => {
                // y = x; if y < lo { y = lo }; if y > hi { y = hi } (NaN passes), as the CPU.
                f32_only("clip")?;
                let maps = in_maps(self)?;
                let n = ins.len();
                vec![self.generic(
                    block,
                    &ins,
                    maps,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    move |b, a| {
                        use melior::dialect::arith::CmpfPredicate as F;
                        let s = Scalar { ctx, block: b, loc };
                        let mut y = a[0];
                        if n > 1 {
                            let lt = s.cmpf(F::Olt, y, a[1]);
                            y = s.select(lt, a[1], y);
                        }
                        if n > 2 {
                            let gt = s.cmpf(F::Ogt, y, a[2]);
                            y = s.select(gt, a[2], y);
                        }
                        y
                    },
                )]
            }
            Op::IsNaN => {
                let maps = in_maps(self)?;
                vec![
                    self.generic(block, &ins, maps, &parallel, out_ty, None, loc, |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        s.cmpf(melior::dialect::arith::CmpfPredicate::Uno, a[0], a[0])
                    }),
                ]
            }
            Op::Concat { axis } => {
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let mut dest = self.empty(block, out_ty, loc);
                let mut at = 0u64;
                for (k, &v) in node.inputs().iter().enumerate() {
                    let d = self.dims(v, node)?;
                    let mut offsets = vec![0i64; d.len()];
                    offsets[ax] = at as i64;
                    dest = self.insert_slice(block, ins[k], dest, &offsets, &d, out_ty, loc);
                    at += d[ax];
                }
                vec![dest]
            }
            Op::Slice => vec![self.slice(block, node, ins[0], out_ty, loc)?],
            Op::Split { axis, .. } => {
                let in_dims = self.dims(node.inputs()[0], node)?;
                let r = in_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let mut at = 0i64;
                let mut outs = Vec::new();
                for (k, t) in node.outputs.iter().enumerate() {
                    let d = self.dims(IrValue::new(id, k as u32), node)?;
                    let ty = self.tensor(IrValue::new(id, k as u32), node)?;
                    let mut offsets = vec![0i64; d.len()];
                    offsets[ax] = at;
                    at += d[ax] as i64;
                    let sizes: Vec<i64> = d.iter().map(|&x| x as i64).collect();
                    let _ = t;
                    outs.push(self.extract_slice(
                        block,
                        ins[0],
                        ty,
                        &offsets,
                        &sizes,
                        &vec![1; d.len()],
                        loc,
                    ));
                }
                outs
            }
            Op::Cast { to, .. } => {
                let from = self.graph.value_type(node.inputs()[0]).dtype;
                if from == *to {
                    vec![ins[0]]
                } else {
                    let (fe, te) = (self.elem(from, node)?, self.elem(*to, node)?);
                    if from.is_fp8() || to.is_fp8() {
                        return Err(unsupported(
                            node,
                            "casts to and from FP8 are not emitted yet (quantize is)",
                        ));
                    }
                    let x_dims = self.dims(node.inputs()[0], node)?;
                    let maps = vec![self.broadcast_map(&x_dims, &out_dims)];
                    let (from, to) = (from, *to);
                    vec![self.generic(
                        block,
                        &ins,
                        maps,
                        &parallel,
                        out_ty,
                        None,
                        loc,
                        move |b, a| Scalar { ctx, block: b, loc }.cast(a[0], from, to, fe, te),
                    )]
                }
            }
            Op::GatherNd { batch_dims } => {
                let dd = self.dims(node.inputs()[0], node)?;
                let idd = self.dims(node.inputs()[1], node)?;
                let elem = self.elem(out_dtype, node)?;
                vec![self.gather_nd(
                    block,
                    (ins[0], ins[1]),
                    (&dd, &idd),
                    *batch_dims as usize,
                    (out_ty, elem),
                    &out_dims,
                    loc,
                )?]
            }
            Op::Conv {
                kernel_shape,
                strides,
                pads,
                dilations,
                group,
                auto_pad,
            } => {
                f32_only("conv")?;
                let wd = self.dims(node.inputs()[1], node)?;
                if out_dims.len() != 4 || wd.len() != 4 {
                    return Err(unsupported(node, "only 2-D convolutions are emitted yet"));
                }
                let kernel: Vec<i64> = if kernel_shape.is_empty() {
                    wd[2..].iter().map(|&k| k as i64).collect()
                } else {
                    kernel_shape.clone()
                };
                let w = WindowAttrs {
                    strides,
                    pads,
                    dilations,
                    auto_pad: *auto_pad,
                    ceil_mode: false,
                };
                let geo = self.window(node, &kernel, &w)?;
                vec![self.conv2d(block, node, &ins, &geo, *group as u64, out_ty, loc)?]
            }
            Op::MaxPool {
                kernel_shape,
                strides,
                pads,
                dilations,
                ceil_mode,
                auto_pad,
            }
            | Op::AveragePool {
                kernel_shape,
                strides,
                pads,
                dilations,
                ceil_mode,
                auto_pad,
                ..
            } => {
                f32_only("pooling")?;
                let w = WindowAttrs {
                    strides,
                    pads,
                    dilations,
                    auto_pad: *auto_pad,
                    ceil_mode: *ceil_mode,
                };
                let geo = self.window(node, kernel_shape, &w)?;
                if out_dims.len() != 4 || geo.iter().any(|a| a.pad_begin + a.pad_end != 0) {
                    return Err(unsupported(
                        node,
                        "only unpadded 2-D pooling is emitted yet",
                    ));
                }
                let max = matches!(node.op, Op::MaxPool { .. });
                vec![self.pool2d(block, ins[0], &geo, max, out_ty, &out_dims, loc)]
            }
            Op::Softmax { axis } => {
                f32_only("softmax")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                vec![self.softmax(block, ins[0], &out_dims, ax, out_ty, loc)]
            }
            Op::Amax => vec![self.amax(block, node, ins[0], loc)?],
            Op::ComputeScale {
                fmt,
                margin,
                source,
                epsilon,
                power_2,
            } => {
                if *source != fp8c_ir::AmaxSource::Current {
                    return Err(unsupported(
                        node,
                        "delayed scaling (amax histories) is not emitted yet: use --recipe current",
                    ));
                }
                self.compute_scale(
                    block,
                    (ins[0], ins[1]),
                    *fmt,
                    *margin,
                    *epsilon,
                    *power_2,
                    loc,
                )
            }
            Op::Quantize { to, saturate } => {
                let (to, sat, f8) = (*to, *saturate, self.elem(out_dtype, node)?);
                let x_dims = self.dims(node.inputs()[0], node)?;
                if self.graph.value_type(node.inputs()[0]).dtype != DType::F32 {
                    return Err(unsupported(node, "only f32 inputs are quantized yet"));
                }
                let maps = vec![
                    self.broadcast_map(&x_dims, &out_dims),
                    self.broadcast_map(&[], &out_dims),
                ];
                vec![
                    self.generic(block, &ins, maps, &parallel, out_ty, None, loc, |b, a| {
                        Scalar { ctx, block: b, loc }.quantize(to, sat, a[0], a[1], f8)
                    }),
                ]
            }
            Op::Dequantize { .. } => {
                f32_only("dequantize")?;
                let fmt = self.graph.value_type(node.inputs()[0]).dtype;
                let q_dims = self.dims(node.inputs()[0], node)?;
                let maps = vec![
                    self.broadcast_map(&q_dims, &out_dims),
                    self.broadcast_map(&[], &out_dims),
                ];
                vec![
                    self.generic(block, &ins, maps, &parallel, out_ty, None, loc, |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        let v = s.decode(fmt, a[0]);
                        s.mul_keep_nan(v, a[1])
                    }),
                ]
            }
            Op::ScaledMatMul { out, .. } => {
                f32_only("scaled_matmul")?;
                let _ = out;
                vec![self.scaled_matmul(block, node, &ins, None, out_ty, &out_dims, loc)?]
            }
            Op::ScaledMatMulEpilogue { expr, to, .. } => {
                f32_only("scaled_matmul_epilogue")?;
                if to.is_some() {
                    return Err(unsupported(
                        node,
                        "an FP8 epilogue output is not emitted yet",
                    ));
                }
                vec![self.scaled_matmul(block, node, &ins, Some(expr), out_ty, &out_dims, loc)?]
            }
            other => {
                return Err(unsupported(
                    node,
                    format!("`{}` is not emitted to MLIR yet", other.name()),
                ));
            }
        })
    }

    /// A 0-d tensor's element.
    fn extract<'a>(
        &self,
        block: &'a Block<'c>,
        t: Value<'c, 'a>,
        elem: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        simple_op(block, "tensor.extract", &[t], &[elem], loc)
    }

    /// A 0-d tensor holding `v`.
    fn scalar_tensor<'a>(
        &self,
        block: &'a Block<'c>,
        v: Value<'c, 'a>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let ty = RankedTensorType::new(&[], v.r#type(), None).into();
        simple_op(block, "tensor.from_elements", &[v], &[ty], loc)
    }

    /// fp8c-core `amax_f32`: an unsigned max over `|x|`'s bits (NaN wins), then the f32.
    fn amax<'a>(
        &self,
        block: &'a Block<'c>,
        node: &Node,
        x: Value<'c, 'a>,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        if self.graph.value_type(node.inputs()[0]).dtype != DType::F32 {
            return Err(unsupported(
                node,
                "only the amax of f32 tensors is emitted yet",
            ));
        }
        let dims = self.dims(node.inputs()[0], node)?;
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
                let abs = s.and(s.bits(a[0]), s.i32(0x7fff_ffff));
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
        Ok(self.scalar_tensor(block, s.float(v), loc))
    }

    /// `compute_scale` from this step's amax (fp8c-core `compute_scale`, TE's rules) and its
    /// reciprocal, as 0-d tensors.
    #[allow(clippy::too_many_arguments)]
    fn compute_scale<'a>(
        &self,
        block: &'a Block<'c>,
        (amax_t, prev_t): (Value<'c, 'a>, Value<'c, 'a>),
        fmt: DType,
        margin: f32,
        epsilon: f32,
        power_2: bool,
        loc: Location<'c>,
    ) -> Vec<Value<'c, 'a>> {
        use melior::dialect::arith::{CmpfPredicate as F, CmpiPredicate as I};
        let f32t = Type::float32(self.ctx);
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let amax = self.extract(block, amax_t, f32t, loc);
        let prev = self.extract(block, prev_t, f32t, loc);
        // max(amax, epsilon): NaN stays NaN.
        let eps = s.f32(epsilon);
        let below = s.cmpf(F::Olt, amax, eps);
        let amax = s.select(below, eps, amax);
        let fmax = s.f32(if fmt == DType::F8E4M3 { 448.0 } else { 57344.0 });
        let pow2_margin = s.f32(2f64.powf(f64::from(margin)) as f32);
        let sf = s.float(s.bits(push(block, melior::dialect::arith::divf(fmax, amax, loc))));
        let sf: Value = push(block, melior::dialect::arith::divf(sf, pow2_margin, loc));
        // amax > 0 and finite, else the previous scale; an infinite scale becomes f32::MAX.
        let positive = s.cmpf(F::Ogt, amax, s.f32(0.0));
        let finite = s.cmpf(F::One, amax, s.f32(f32::INFINITY));
        let ok = s.and(positive, finite);
        let sf = s.select(ok, sf, prev);
        let abs = s.and(s.bits(sf), s.i32(0x7fff_ffff));
        let inf = s.cmpi(I::Eq, abs, s.i32(0x7f80_0000));
        let mut scale = s.select(inf, s.f32(f32::MAX), sf);
        if power_2 {
            scale = s.float(s.and(s.bits(scale), s.i32(0xff80_0000)));
        }
        let inv: Value = push(block, melior::dialect::arith::divf(s.f32(1.0), scale, loc));
        vec![
            self.scalar_tensor(block, scale, loc),
            self.scalar_tensor(block, inv, loc),
        ]
    }

    /// `linalg.fill` of `value` into `into`.
    fn fill<'a>(
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

    /// `scaled_matmul` (2-D): the decoded product times `scale_inv_a · scale_inv_b`, then the
    /// epilogue program (its `a0` the product, `a1…` the extra operands, broadcast). The
    /// accumulation is f32 in K order: a `fast_accum` GEMM (Hopper's tensor-core truncation,
    /// which the CPU reference models) is emitted with f32 accumulation too.
    #[allow(clippy::too_many_arguments)]
    fn scaled_matmul<'a>(
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
        let product = self.batched_matmul(
            block,
            node,
            ins,
            (false, false),
            Some((fa, fb)),
            out_ty,
            out_dims,
            loc,
        )?;
        let f32t = Type::float32(self.ctx);
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
        for (k, &v) in node.inputs().iter().enumerate().skip(4) {
            ops.push(ins[k]);
            maps.push(self.broadcast_map(&self.dims(v, node)?, out_dims));
        }
        for inst in &insts {
            if !Scalar::covers(&inst.op) {
                return Err(unsupported(
                    node,
                    format!(
                        "`{}` in the epilogue is not emitted to MLIR yet",
                        inst.op.name()
                    ),
                ));
            }
        }
        let ctx = self.ctx;
        Ok(self.generic(
            block,
            &ops,
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let y = s.elementwise(&Op::Mul, &[a[0], a[1]]).expect("mul");
                // a0 is the scaled product, a1… the extra operands (after the alpha slot).
                let operand = |i: u32| if i == 0 { y } else { a[i as usize + 1] };
                let mut temps: Vec<Value> = Vec::new();
                for inst in &insts {
                    let args: Vec<Value> = inst
                        .args
                        .iter()
                        .map(|arg| match arg {
                            fp8c_ir::EwArg::Input(i) => operand(*i),
                            fp8c_ir::EwArg::Temp(t) => temps[*t as usize],
                        })
                        .collect();
                    temps.push(s.elementwise(&inst.op, &args).expect("covered"));
                }
                temps.last().copied().unwrap_or(y)
            },
        ))
    }

    /// `matmul` (2-D) and `gemm` (alpha·op(A)·op(B) + beta·C, C broadcast) as one
    /// `linalg.generic` with a reduction over K into a zero-filled (or C-filled) accumulator.
    fn gemm<'a>(
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

    /// [`Self::generic`] with an explicit output map and accumulator.
    #[allow(clippy::too_many_arguments)]
    fn generic_with_out_map<'a>(
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

    /// `tensor.reshape` to the static `dims` (row-major, like every view op).
    fn reshape<'a>(
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

    /// The map from `rank` iteration dims to a tensor that keeps the dims not in `axes`
    /// (`keepdims`: reduced dims read index 0).
    fn reduced_map(&self, rank: usize, axes: &[usize], keepdims: bool) -> Attribute<'c> {
        let exprs: Vec<AffineExpr> = (0..rank)
            .filter_map(|k| match (axes.contains(&k), keepdims) {
                (true, true) => Some(AffineExpr::constant(self.ctx, 0)),
                (true, false) => None,
                (false, _) => Some(AffineExpr::dim(self.ctx, k)),
            })
            .collect();
        self.map_attr(AffineMap::new(self.ctx, rank, 0, &exprs))
    }

    /// An f64 accumulator over `axes` of `x` (index order, as the CPU's reductions), with
    /// `body(acc, x_f64) -> acc` from `init`; dims kept with size 1.
    #[allow(clippy::too_many_arguments)]
    fn accumulate<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        in_maps: Vec<Attribute<'c>>,
        dims: &[u64],
        axes: &[usize],
        init: f64,
        loc: Location<'c>,
        body: impl for<'b> FnOnce(&Scalar<'c, 'b>, &[Value<'c, 'b>]) -> Value<'c, 'b>,
    ) -> Value<'c, 'a> {
        let f64t = Type::float64(self.ctx);
        let kept: Vec<u64> = dims
            .iter()
            .enumerate()
            .map(|(k, &d)| if axes.contains(&k) { 1 } else { d })
            .collect();
        let acc_ty: Type = RankedTensorType::new(&kept, f64t, None).into();
        let init_v: Value = push(
            block,
            arith::constant(
                self.ctx,
                FloatAttribute::new(self.ctx, f64t, init).into(),
                loc,
            ),
        );
        let empty = self.empty(block, acc_ty, loc);
        let filled = self.fill(block, init_v, empty, acc_ty, f64t, loc);
        let iters: Vec<&str> = (0..dims.len())
            .map(|k| {
                if axes.contains(&k) {
                    "reduction"
                } else {
                    "parallel"
                }
            })
            .collect();
        let out_map = self.reduced_map(dims.len(), axes, true);
        let ctx = self.ctx;
        self.generic_with_out_map(
            block,
            ins,
            in_maps,
            out_map,
            &iters,
            acc_ty,
            filled,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                body(&s, a)
            },
        )
    }

    /// reduce_sum / reduce_mean: f64 accumulation in index order, one rounding to f32.
    #[allow(clippy::too_many_arguments)]
    fn reduce_f64<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axes: &[usize],
        keepdims: bool,
        mean: bool,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, dims.len()));
        let acc = self.accumulate(block, &[x], vec![id], dims, axes, 0.0, loc, |s, a| {
            let xe = s.extf(a[0]);
            s.addf64(a[1], xe)
        });
        let count: u64 = axes.iter().map(|&k| dims[k]).product();
        // Iterate over the kept accumulator (the input's rank, reduced dims of size 1) and
        // write the output through a map that drops those dims unless keepdims.
        let kept_rank = dims.len();
        let in_map = self.map_attr(AffineMap::multi_dim_identity(self.ctx, kept_rank));
        let out_map = self.reduced_map(kept_rank, axes, keepdims);
        let empty = self.empty(block, out_ty, loc);
        let ctx = self.ctx;
        let iters = vec!["parallel"; kept_rank];
        // The iteration space is the accumulator's: reduced dims have size 1, so the output
        // map's constant-0 / dropped dims are consistent.
        self.generic_with_out_map(
            block,
            &[acc],
            vec![in_map],
            out_map,
            &iters,
            out_ty,
            empty,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let v = if mean {
                    s.divf64(a[0], s.f64c(count as f64))
                } else {
                    a[0]
                };
                s.truncf(v)
            },
        )
    }

    /// softmax over `axis` in f64 (the CPU's): max, Σ exp(x − max), exp(x − max) / Σ.
    fn softmax<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        dims: &[u64],
        axis: usize,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &[axis], true);
        let max = self.accumulate(
            block,
            &[x],
            vec![id()],
            dims,
            &[axis],
            f64::NEG_INFINITY,
            loc,
            |s, a| {
                let xe = s.extf(a[0]);
                s.maxf64(a[1], xe)
            },
        );
        let sum = self.accumulate(
            block,
            &[x, max],
            vec![id(), kept()],
            dims,
            &[axis],
            0.0,
            loc,
            |s, a| {
                let e = s.exp_diff(a[0], a[1]);
                s.addf64(a[2], e)
            },
        );
        let ctx = self.ctx;
        self.generic(
            block,
            &[x, max, sum],
            vec![id(), kept(), kept()],
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let e = s.exp_diff(a[0], a[1]);
                s.truncf(s.divf64(e, a[2]))
            },
        )
    }

    /// A (batched) matmul of op(A)·op(B) (`ta`/`tb`: transposed operands; numpy rules: the
    /// batch dims broadcast, size 1 reads index 0) as one `linalg.generic` over
    /// (batch…, m, n, k) into a zero-filled accumulator, f32 in K order; FP8 operands (`fp8`:
    /// their formats) are decoded exactly first. Matmul, gemm and the scaled GEMMs share it.
    #[allow(clippy::too_many_arguments)]
    fn batched_matmul<'a>(
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
        let f32t = Type::float32(self.ctx);
        let zero = Scalar {
            ctx: self.ctx,
            block,
            loc,
        }
        .f32(0.0);
        let empty = self.empty(block, out_ty, loc);
        let filled = self.fill(block, zero, empty, out_ty, f32t, loc);
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
                let p = s.elementwise(&Op::Mul, &[x, y]).expect("mul");
                s.elementwise(&Op::Add, &[v[2], p]).expect("add")
            },
        ))
    }

    /// `gather(data, indices, axis)`: out[o…, i…, r…] = data[o…, idx[i…], r…], a negative
    /// index counting from the end. The index is clamped into range: the CPU reference fails
    /// the run on an out-of-range index, the JIT code cannot (yet), and must not read outside.
    #[allow(clippy::too_many_arguments)]
    fn gather<'a>(
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

    /// `tensor.insert_slice` of `src` (dims `sizes`) into `dest` at `offsets`, unit strides.
    #[allow(clippy::too_many_arguments)]
    fn insert_slice<'a>(
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

    fn slice_attrs(
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
    fn slice<'a>(
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

    /// layer_norm over axes `axis..` in f64 (the CPU's): mean, variance about the mean,
    /// `(x − mean) · inv · scale (+ bias)`, one rounding.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm<'a>(
        &self,
        block: &'a Block<'c>,
        ins: &[Value<'c, 'a>],
        pdims: &[Vec<u64>],
        dims: &[u64],
        axis: usize,
        epsilon: f32,
        out_ty: Type<'c>,
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let r = dims.len();
        let axes: Vec<usize> = (axis..r).collect();
        let n: u64 = dims[axis..].iter().product();
        let id = || self.map_attr(AffineMap::multi_dim_identity(self.ctx, r));
        let kept = || self.reduced_map(r, &axes, true);
        let sum = self.accumulate(
            block,
            &ins[..1],
            vec![id()],
            dims,
            &axes,
            0.0,
            loc,
            |s, a| {
                let xe = s.extf(a[0]);
                s.addf64(a[1], xe)
            },
        );
        let nf = n as f64;
        let var = self.accumulate(
            block,
            &[ins[0], sum],
            vec![id(), kept()],
            dims,
            &axes,
            0.0,
            loc,
            move |s, a| {
                let mean = s.divf64(a[1], s.f64c(nf));
                let d = s.subf64(s.extf(a[0]), mean);
                let sq = s.mulf64(d, d);
                s.addf64(a[2], sq)
            },
        );
        let mut ops = vec![ins[0], sum, var];
        let mut maps = vec![id(), kept(), kept()];
        for (k, pd) in pdims.iter().enumerate() {
            ops.push(ins[1 + k]);
            maps.push(self.broadcast_map(pd, dims));
        }
        let has_bias = pdims.len() > 1;
        let ctx = self.ctx;
        let eps = f64::from(epsilon);
        self.generic(
            block,
            &ops,
            maps,
            &vec!["parallel"; r],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let mean = s.divf64(a[1], s.f64c(nf));
                let var = s.divf64(a[2], s.f64c(nf));
                let sd = s.sqrtf64(s.addf64(var, s.f64c(eps)));
                let inv = s.divf64(s.f64c(1.0), sd);
                let t = s.mulf64(s.mulf64(s.subf64(s.extf(a[0]), mean), inv), s.extf(a[3]));
                let y = if has_bias {
                    s.addf64(t, s.extf(a[4]))
                } else {
                    t
                };
                s.truncf(y)
            },
        )
    }

    /// `tensor.extract_slice` with static offsets, sizes and strides.
    #[allow(clippy::too_many_arguments)]
    fn extract_slice<'a>(
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

    /// ONNX GatherND: indices [B…, I…, k] pick data[B…, idx…] slices (B = `batch_dims`);
    /// negative indices count from the end, out-of-range ones are clamped (see `gather`).
    #[allow(clippy::too_many_arguments)]
    fn gather_nd<'a>(
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

    /// The resolved geometry of `node`'s two spatial axes (fp8c-ir's window rules, auto_pad
    /// included), from its input's dims.
    fn window(&self, node: &Node, kernel: &[i64], w: &WindowAttrs<'_>) -> Result<Vec<Axis>, Error> {
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

    /// NCHW 2-D convolution: the input zero-padded (`tensor.pad`), then one `linalg.generic`
    /// over (n, f, oh, ow, c, kh, kw) summing in (c, kh, kw) order (the CPU's im2col order),
    /// groups through the input-channel map, the bias added after.
    #[allow(clippy::too_many_arguments)]
    fn conv2d<'a>(
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
        let f32t = Type::float32(self.ctx);
        let s = Scalar {
            ctx: self.ctx,
            block,
            loc,
        };
        let zero = s.f32(0.0);
        let padded = if g.iter().any(|a| a.pad_begin + a.pad_end != 0) {
            let pd = [
                xd[0],
                xd[1],
                xd[2] + (g[0].pad_begin + g[0].pad_end) as u64,
                xd[3] + (g[1].pad_begin + g[1].pad_end) as u64,
            ];
            let pty: Type = RankedTensorType::new(&pd, f32t, None).into();
            let arr = |v: &[i64]| -> Attribute<'c> {
                melior::ir::attribute::DenseI64ArrayAttribute::new(self.ctx, v).into()
            };
            let index_t = Type::index(self.ctx);
            let body = Block::new(&[(index_t, loc); 4]);
            body.append_operation(
                OperationBuilder::new("tensor.yield", loc)
                    .add_operands(&[zero])
                    .build()
                    .expect("tensor.yield"),
            );
            let region = Region::new();
            region.append_block(body);
            push(
                block,
                OperationBuilder::new("tensor.pad", loc)
                    .add_operands(&[ins[0]])
                    .add_results(&[pty])
                    .add_attributes(&[
                        (
                            Identifier::new(self.ctx, "static_low"),
                            arr(&[0, 0, g[0].pad_begin as i64, g[1].pad_begin as i64]),
                        ),
                        (
                            Identifier::new(self.ctx, "static_high"),
                            arr(&[0, 0, g[0].pad_end as i64, g[1].pad_end as i64]),
                        ),
                        (
                            Identifier::new(self.ctx, "operandSegmentSizes"),
                            DenseI32ArrayAttribute::new(self.ctx, &[1, 0, 0]).into(),
                        ),
                    ])
                    .add_regions([region])
                    .build()
                    .expect("tensor.pad"),
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
        let filled = self.fill(block, zero, empty, out_ty, f32t, loc);
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

    /// Unpadded 2-D max / average pooling: one `linalg.generic` over (n, c, oh, ow, kh, kw);
    /// the average sums in f64 and divides once, as the CPU.
    #[allow(clippy::too_many_arguments)]
    fn pool2d<'a>(
        &self,
        block: &'a Block<'c>,
        x: Value<'c, 'a>,
        g: &[Axis],
        max: bool,
        out_ty: Type<'c>,
        out_dims: &[u64],
        loc: Location<'c>,
    ) -> Value<'c, 'a> {
        let d = |i| AffineExpr::dim(self.ctx, i);
        let c = |v: i64| AffineExpr::constant(self.ctx, v);
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
        let count = (g[0].kernel * g[1].kernel) as f64;
        let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, 4));
        self.generic(
            block,
            &[acc],
            vec![id],
            &["parallel"; 4],
            out_ty,
            None,
            loc,
            move |b, a| {
                let s = Scalar { ctx, block: b, loc };
                let v = if max {
                    a[0]
                } else {
                    s.divf64(a[0], s.f64c(count))
                };
                s.truncf(v)
            },
        )
    }

    fn constant<'a>(
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
            DType::F32 => value
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
fn push<'c, 'a>(block: &'a Block<'c>, op: melior::ir::Operation<'c>) -> Value<'c, 'a> {
    block
        .append_operation(op)
        .result(0)
        .expect("an operation with a result")
        .into()
}

/// `name` with `operands` and `results`, no attributes or regions, appended to `block`;
/// returns its first result.
fn simple_op<'c, 'a>(
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
