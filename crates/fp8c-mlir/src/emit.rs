//! The melior builder behind `fp8c_mlir::emit` (feature `mlir`): see the crate docs for the
//! module's shape and the ops covered.

use crate::Error;
use fp8c_ir::{DType, Graph, Node, Op, Tensor, Value as IrValue};
use melior::{
    Context,
    dialect::{DialectRegistry, arith, func},
    ir::{
        AffineExpr, AffineMap, Attribute, Block, BlockLike, Identifier, Location, Module, Region,
        RegionLike, Type, Value, ValueLike,
        attribute::{
            ArrayAttribute, DenseElementsAttribute, DenseI32ArrayAttribute, FloatAttribute,
            StringAttribute, TypeAttribute,
        },
        operation::{OperationBuilder, OperationLike, OperationPrintingFlags},
        r#type::{FunctionType, RankedTensorType, ShapedTypeLike},
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
            results.push(env[&out.value]);
            result_types.push(self.tensor(out.value, g.node(out.value.node))?);
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
        block
            .append_operation(
                OperationBuilder::new("tensor.empty", loc)
                    .add_results(&[ty])
                    .build()
                    .expect("tensor.empty"),
            )
            .result(0)
            .expect("result")
            .into()
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
        let rank = out_dims.len();
        let parallel = vec!["parallel"; rank];
        let in_maps = |s: &Self| -> Result<Vec<Attribute<'c>>, Error> {
            node.inputs()
                .iter()
                .map(|&v| Ok(s.broadcast_map(&s.dims(v, node)?, &out_dims)))
                .collect()
        };
        let float = self.graph.value_type(out_v).dtype.is_float();
        if !float && !matches!(node.op, Op::Constant { .. }) {
            return Err(unsupported(node, "only float results are emitted yet"));
        }
        Ok(vec![match &node.op {
            Op::Constant { value } => self.constant(block, value, out_ty, node, loc)?,
            Op::Identity => ins[0],
            Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Max | Op::Min => {
                if ins.len() != 2 {
                    return Err(unsupported(node, "only two operands are emitted yet"));
                }
                let op = node.op.clone();
                self.generic(
                    block,
                    &ins,
                    in_maps(self)?,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    |b, a| {
                        let o = match op {
                            Op::Add => arith::addf(a[0], a[1], loc),
                            Op::Sub => arith::subf(a[0], a[1], loc),
                            Op::Mul => arith::mulf(a[0], a[1], loc),
                            Op::Div => arith::divf(a[0], a[1], loc),
                            // NaN-propagating, as fp8c's fmax_nan / fmin_nan.
                            Op::Max => OperationBuilder::new("arith.maximumf", loc)
                                .add_operands(&[a[0], a[1]])
                                .enable_result_type_inference()
                                .build()
                                .expect("arith.maximumf"),
                            _ => arith::minimumf(a[0], a[1], loc),
                        };
                        b.append_operation(o).result(0).expect("result").into()
                    },
                )
            }
            Op::Relu | Op::Neg | Op::Exp | Op::Tanh => {
                let op = node.op.clone();
                let elem = self.elem(self.graph.value_type(out_v).dtype, node)?;
                self.generic(
                    block,
                    &ins,
                    in_maps(self)?,
                    &parallel,
                    out_ty,
                    None,
                    loc,
                    |b, a| {
                        let unary = |name: &str| {
                            OperationBuilder::new(name, loc)
                                .add_operands(&[a[0]])
                                .enable_result_type_inference()
                                .build()
                                .expect("unary")
                        };
                        let o = match op {
                            Op::Neg => arith::negf(a[0], loc),
                            Op::Exp => unary("math.exp"),
                            Op::Tanh => unary("math.tanh"),
                            _ => {
                                // relu: x < 0 ? 0 : x (NaN stays NaN, as the CPU's relu).
                                let zero: Value = b
                                    .append_operation(arith::constant(
                                        self.ctx,
                                        FloatAttribute::new(self.ctx, elem, 0.0).into(),
                                        loc,
                                    ))
                                    .result(0)
                                    .expect("result")
                                    .into();
                                let lt: Value = b
                                    .append_operation(arith::cmpf(
                                        self.ctx,
                                        arith::CmpfPredicate::Olt,
                                        a[0],
                                        zero,
                                        loc,
                                    ))
                                    .result(0)
                                    .expect("result")
                                    .into();
                                arith::select(lt, zero, a[0], loc)
                            }
                        };
                        b.append_operation(o).result(0).expect("result").into()
                    },
                )
            }
            Op::MatMul | Op::Gemm { .. } => self.gemm(block, node, &ins, out_ty, &out_dims, loc)?,
            other => {
                return Err(unsupported(
                    node,
                    format!("`{}` is not emitted to MLIR yet", other.name()),
                ));
            }
        }])
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
        let elem = RankedTensorType::try_from(out_ty)
            .map(|r| r.element())
            .map_err(|_| unsupported(node, "the result is not a ranked tensor"))?;
        let d = |i| AffineExpr::dim(self.ctx, i);
        // (m, n, k)
        let a_map = if ta { [d(2), d(0)] } else { [d(0), d(2)] };
        let b_map = if tb { [d(1), d(2)] } else { [d(2), d(1)] };
        let maps = vec![
            self.map_attr(AffineMap::new(self.ctx, 3, 0, &a_map)),
            self.map_attr(AffineMap::new(self.ctx, 3, 0, &b_map)),
        ];
        // The accumulator: zeros, then the product added in K order.
        let zero: Value = block
            .append_operation(arith::constant(
                self.ctx,
                FloatAttribute::new(self.ctx, elem, 0.0).into(),
                loc,
            ))
            .result(0)
            .expect("result")
            .into();
        let empty = self.empty(block, out_ty, loc);
        let filled: Value = block
            .append_operation(
                OperationBuilder::new("linalg.fill", loc)
                    .add_operands(&[zero, empty])
                    .add_results(&[out_ty])
                    .add_attributes(&[(
                        Identifier::new(self.ctx, "operandSegmentSizes"),
                        DenseI32ArrayAttribute::new(self.ctx, &[1, 1]).into(),
                    )])
                    .add_regions([fill_region(self.ctx, elem, loc)])
                    .build()
                    .expect("linalg.fill"),
            )
            .result(0)
            .expect("result")
            .into();
        // generic's output map is (m, n, k) -> (m, n): build it by hand (not the identity).
        let out_map = self.map_attr(AffineMap::new(self.ctx, 3, 0, &[d(0), d(1)]));
        let product = self.generic_with_out_map(
            block,
            &ins[..2],
            maps,
            out_map,
            &["parallel", "parallel", "reduction"],
            out_ty,
            filled,
            loc,
            |b, a| {
                let p: Value = b
                    .append_operation(arith::mulf(a[0], a[1], loc))
                    .result(0)
                    .expect("result")
                    .into();
                b.append_operation(arith::addf(a[2], p, loc))
                    .result(0)
                    .expect("result")
                    .into()
            },
        );
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
                    b.append_operation(arith::constant(
                        ctx,
                        FloatAttribute::new(ctx, elem, f64::from(v)).into(),
                        loc,
                    ))
                    .result(0)
                    .expect("result")
                    .into()
                };
                let mut y = a[0];
                if al != 1.0 {
                    let c = k(al);
                    y = b
                        .append_operation(arith::mulf(c, y, loc))
                        .result(0)
                        .expect("r")
                        .into();
                }
                if with_c {
                    let mut c = a[1];
                    if be != 1.0 {
                        let s = k(be);
                        c = b
                            .append_operation(arith::mulf(s, c, loc))
                            .result(0)
                            .expect("r")
                            .into();
                    }
                    y = b
                        .append_operation(arith::addf(y, c, loc))
                        .result(0)
                        .expect("r")
                        .into();
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
        block
            .append_operation(
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
            .result(0)
            .expect("result")
            .into()
    }

    fn constant<'a>(
        &self,
        block: &'a Block<'c>,
        value: &Tensor,
        ty: Type<'c>,
        node: &Node,
        loc: Location<'c>,
    ) -> Result<Value<'c, 'a>, Error> {
        if value.dtype() != DType::F32 {
            return Err(unsupported(node, "only f32 constants are emitted yet"));
        }
        let elem = Type::float32(self.ctx);
        let vals: Vec<Attribute> = value
            .to_f64_vec()
            .map_err(|e| unsupported(node, e))?
            .into_iter()
            .map(|v| FloatAttribute::new(self.ctx, elem, v).into())
            .collect();
        let dense =
            DenseElementsAttribute::new(ty, &vals).map_err(|e| unsupported(node, e.to_string()))?;
        Ok(block
            .append_operation(arith::constant(self.ctx, dense.into(), loc))
            .result(0)
            .expect("result")
            .into())
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
