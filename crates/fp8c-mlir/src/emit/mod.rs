//! The melior builder behind `fp8c_mlir::emit` (feature `mlir`): see the crate docs for the
//! module's shape and the ops covered.

mod block;
mod builders;
mod cast;
mod fast_accum;
mod fp8;
mod grad;
mod linalg;
mod movement;
mod qdq_int;
mod reduce;
mod scaling;
mod select;
mod train;

use crate::Error;
use crate::scalar::Scalar;
use builders::{push, simple_op};
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

/// How an elementwise op computes on its element type.
#[derive(Clone, Copy)]
enum Num<'c> {
    /// In the element type's own arithmetic: f32, or f64 for the ops whose f64 form is the
    /// same operations.
    F32,
    /// f16 / bf16 (this MLIR type): widened to f32, rounded once.
    Narrow(Type<'c>),
    /// An integer type, unsigned or not.
    Int(bool),
}

/// The function's results in order: the graph's outputs (by output name), then the update
/// of each state entry that has one, in the graph's state order (by state name).
pub(crate) fn result_values(g: &Graph) -> Vec<(&str, IrValue)> {
    let outputs = g.outputs().iter().map(|o| (o.name.as_str(), o.value));
    let updates = g.state().iter().filter_map(|(id, _)| {
        let name = fp8c_ir::interface_name(&g.node(*id).op);
        g.state_updates().get(name).map(|&v| (name, v))
    });
    outputs.chain(updates).collect()
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
            .chain(g.state().iter().map(|(id, _)| id))
            .map(|&id| IrValue::new(id, 0))
            .collect();
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
            if node.op.is_interface() {
                continue;
            }
            let outs = self.op(&block, node, id, &env)?;
            for (slot, v) in outs.into_iter().enumerate() {
                env.insert(IrValue::new(id, slot as u32), v);
            }
        }
        let mut results = Vec::new();
        let mut result_types = Vec::new();
        for (name, value) in result_values(g) {
            let node = g.node(value.node);
            let ty = self.tensor(value, node)?;
            let mut v = env[&value];
            // A result that is an argument (an input passed through, a state entry left as
            // it was) gets a buffer of its own: the caller frees every result, and
            // bufferization cannot return an argument.
            if node.op.is_interface() {
                let rank = self.dims(value, node)?.len();
                let id = self.map_attr(AffineMap::multi_dim_identity(self.ctx, rank));
                let loc = self.loc(name);
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
        // f32, or f16 / bf16 computed in f32 and rounded as the CPU stores it.
        let float_result = |what: &str| -> Result<(), Error> {
            if matches!(out_dtype, DType::F16 | DType::BF16) {
                Ok(())
            } else {
                f32_only(what)
            }
        };
        // A matmul's result: f32, f64 (in f64, fma in K order) or an integer (wrapping).
        let matmul_result = || -> Result<(), Error> {
            if out_dtype == DType::F64 || out_dtype.is_int() {
                Ok(())
            } else {
                f32_only("a matmul")
            }
        };
        Ok(match &node.op {
            Op::Constant { value } => vec![self.constant(block, value, out_ty, node, loc)?],
            Op::Identity => vec![ins[0]],
            op if Scalar::covers(op) => {
                // Every operand of the result's type (the CPU's rule); f16/bf16 computed in
                // f32 and rounded once, integers wrapping (Scalar::int_elementwise).
                if let Some(&v) = node
                    .inputs()
                    .iter()
                    .find(|&&v| self.graph.value_type(v).dtype != out_dtype)
                {
                    let t = self.graph.value_type(v).dtype;
                    return Err(unsupported(
                        node,
                        format!("an elementwise op on a {t} operand is not emitted yet"),
                    ));
                }
                let kind = match out_dtype {
                    DType::F32 => Num::F32,
                    // f64 computes in f64 as the CPU; only the correctly rounded ops (whose
                    // result no library choice can change) are emitted.
                    DType::F64
                        if matches!(
                            op,
                            Op::Add
                                | Op::Sub
                                | Op::Mul
                                | Op::Div
                                | Op::Max
                                | Op::Min
                                | Op::Neg
                                | Op::Abs
                                | Op::Sqrt
                                | Op::Floor
                                | Op::Ceil
                                | Op::Round
                        ) =>
                    {
                        Num::F32
                    }
                    DType::F16 | DType::BF16 => Num::Narrow(self.elem(out_dtype, node)?),
                    d if d.is_int() && Scalar::covers_int(op) => Num::Int(matches!(
                        d,
                        DType::U8 | DType::U16 | DType::U32 | DType::U64
                    )),
                    d => {
                        return Err(unsupported(
                            node,
                            format!("an elementwise op with a {d} result is not emitted yet"),
                        ));
                    }
                };
                let (op, n) = (op.clone(), ins.len());
                vec![
                    self.per_element(block, &ins, in_maps(self)?, out_ty, loc, move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        match kind {
                            Num::F32 => s.variadic(&op, &a[..n]),
                            Num::Narrow(t) => {
                                let f32t = Type::float32(ctx);
                                let w: Vec<Value> = a[..n]
                                    .iter()
                                    .map(|&v| s.named_pub("arith.extf", v, f32t))
                                    .collect();
                                s.named_pub("arith.truncf", s.variadic(&op, &w), t)
                            }
                            Num::Int(unsigned) => s.int_elementwise(&op, &a[..n], unsigned),
                        }
                    }),
                ]
            }
            Op::MatMul if out_dims.len() > 2 => {
                matmul_result()?;
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
            Op::MatMul => {
                matmul_result()?;
                vec![self.gemm(block, node, &ins, out_ty, &out_dims, loc)?]
            }
            Op::Gemm { .. } => {
                f32_only("a matmul")?;
                vec![self.gemm(block, node, &ins, out_ty, &out_dims, loc)?]
            }
            Op::Transpose { perm } => vec![self.transpose(block, ins[0], perm, out_ty, loc)],
            // An ordering edge: the step order of the emitted function already follows it.
            Op::After => vec![ins[0]],
            Op::Reshape { .. } | Op::Unsqueeze { .. } | Op::Squeeze { .. } | Op::Flatten { .. } => {
                vec![self.reshape(block, ins[0], out_ty, &out_dims, loc)?]
            }
            Op::GlobalAveragePool | Op::GlobalMaxPool => {
                // The CPU's global pools are these reductions over every axis past N and C.
                f32_only("a global pool")?;
                use reduce::Fold;
                let in_dims = self.dims(node.inputs()[0], node)?;
                let axes: Vec<usize> = (2..in_dims.len()).collect();
                let fold = if matches!(node.op, Op::GlobalMaxPool) {
                    Fold::Max
                } else {
                    Fold::Mean
                };
                vec![self.reduce_f64(block, ins[0], &in_dims, &axes, true, fold, out_ty, loc)]
            }
            Op::ReduceMean { .. }
            | Op::ReduceSum { .. }
            | Op::ReduceProd { .. }
            | Op::ReduceMax { .. }
            | Op::ReduceMin { .. } => vec![self.reduce_op(block, node, ins[0], out_ty, loc)?],
            Op::ArgMax { .. } | Op::ArgMin { .. } => {
                self.arg_extreme_op(block, node, id, &ins, (out_ty, &out_dims, out_dtype), loc)?
            }
            Op::TopK { .. } => {
                self.top_k_op(block, node, id, &ins, (out_ty, &out_dims, out_dtype), loc)?
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
            Op::RmsNormalization { axis, epsilon } => {
                f32_only("rms_norm")?;
                self.f32_operand(node, 1, "read as the scale")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let sd = self.dims(node.inputs()[1], node)?;
                vec![self.rms_norm(
                    block,
                    (ins[0], ins[1]),
                    &sd,
                    &out_dims,
                    ax,
                    *epsilon,
                    out_ty,
                    loc,
                )]
            }
            Op::Where | Op::Expand => {
                // where: select on an i1 condition, broadcasting; expand: a broadcast copy.
                let n = if matches!(node.op, Op::Where) { 3 } else { 1 };
                let maps = in_maps(self)?[..n].to_vec();
                let is_where = n == 3;
                vec![
                    self.per_element(block, &ins[..n], maps, out_ty, loc, move |b, a| {
                        if is_where {
                            Scalar { ctx, block: b, loc }.select(a[0], a[1], a[2])
                        } else {
                            a[0]
                        }
                    }),
                ]
            }
            Op::And | Op::Or | Op::Xor | Op::Not => {
                let maps = in_maps(self)?;
                let op = node.op.clone();
                vec![
                    self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
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
                    }),
                ]
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
                vec![
                    self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        if float {
                            s.cmpf(fp, a[0], a[1])
                        } else {
                            s.cmpi(ip, a[0], a[1])
                        }
                    }),
                ]
            }
            Op::Clip => {
                // y = x; if y < lo { y = lo }; if y > hi { y = hi } (NaN passes), as the CPU;
                // f32 and f64 compared as floats, integers by their signedness.
                let int = out_dtype.is_int().then_some(matches!(
                    out_dtype,
                    DType::U8 | DType::U16 | DType::U32 | DType::U64
                ));
                if int.is_none() && out_dtype != DType::F64 {
                    f32_only("clip")?;
                }
                let maps = in_maps(self)?;
                let n = ins.len();
                vec![
                    self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
                        use melior::dialect::arith::{CmpfPredicate as F, CmpiPredicate as I};
                        let s = Scalar { ctx, block: b, loc };
                        let beyond = |lower: bool, y, bound| match int {
                            Some(u) => {
                                let p = match (lower, u) {
                                    (true, true) => I::Ult,
                                    (true, false) => I::Slt,
                                    (false, true) => I::Ugt,
                                    (false, false) => I::Sgt,
                                };
                                s.cmpi(p, y, bound)
                            }
                            None => s.cmpf(if lower { F::Olt } else { F::Ogt }, y, bound),
                        };
                        let mut y = a[0];
                        if n > 1 {
                            y = s.select(beyond(true, y, a[1]), a[1], y);
                        }
                        if n > 2 {
                            y = s.select(beyond(false, y, a[2]), a[2], y);
                        }
                        y
                    }),
                ]
            }
            Op::IsInf {
                detect_negative,
                detect_positive,
            } => {
                self.f32_operand(node, 0, "classified")?;
                let maps = in_maps(self)?;
                let (neg, pos) = (*detect_negative, *detect_positive);
                vec![
                    self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
                        use melior::dialect::arith::CmpfPredicate as F;
                        let s = Scalar { ctx, block: b, loc };
                        let p = s.cmpf(F::Oeq, a[0], s.f32(f32::INFINITY));
                        let n = s.cmpf(F::Oeq, a[0], s.f32(f32::NEG_INFINITY));
                        let (p, n) = (s.and(p, s.bool_const(pos)), s.and(n, s.bool_const(neg)));
                        s.or(p, n)
                    }),
                ]
            }
            Op::Mod { fmod } => {
                let d = out_dtype;
                if node
                    .inputs()
                    .iter()
                    .any(|&v| self.graph.value_type(v).dtype != d)
                {
                    return Err(unsupported(node, "mod of mixed types is not emitted yet"));
                }
                let unsigned = matches!(d, DType::U8 | DType::U16 | DType::U32 | DType::U64);
                let (float, fmod) = (d == DType::F32, *fmod);
                if !(float && fmod || d.is_int()) {
                    return Err(unsupported(
                        node,
                        format!("mod on {d} (fmod={fmod}) is not emitted yet"),
                    ));
                }
                let maps = in_maps(self)?;
                vec![
                    self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        if float {
                            s.int("arith.remf", a[0], a[1])
                        } else {
                            s.int_rem(a[0], a[1], unsigned, fmod)
                        }
                    }),
                ]
            }
            Op::Shape { start, end } => {
                // Static shapes: the dims as an i64 constant (ONNX's clamped start / end).
                let xd = self.dims(node.inputs()[0], node)?;
                let r = xd.len() as i64;
                let norm = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (a, b) = (norm(*start), norm(end.unwrap_or(r)));
                let dims: Vec<i64> = xd[a..b.max(a)].iter().map(|&d| d as i64).collect();
                let t = Tensor::from_i64(vec![dims.len() as u64], &dims);
                vec![self.constant(block, &t, out_ty, node, loc)?]
            }
            Op::Tile => {
                // out[i] = x[i mod dims] on every axis.
                let xd = self.dims(node.inputs()[0], node)?;
                let r = xd.len();
                let exprs: Vec<AffineExpr> = (0..r)
                    .map(|k| {
                        AffineExpr::modulo(
                            AffineExpr::dim(ctx, k),
                            AffineExpr::constant(ctx, xd[k].max(1) as i64),
                        )
                    })
                    .collect();
                let map = self.map_attr(AffineMap::new(ctx, r, 0, &exprs));
                vec![self.per_element(block, &ins[..1], vec![map], out_ty, loc, |_, a| a[0])]
            }
            Op::IsNaN => {
                let maps = in_maps(self)?;
                vec![self.per_element(block, &ins, maps, out_ty, loc, |b, a| {
                    let s = Scalar { ctx, block: b, loc };
                    s.cmpf(melior::dialect::arith::CmpfPredicate::Uno, a[0], a[0])
                })]
            }
            Op::Concat { axis } => {
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let mut dest = self.empty(block, out_ty, loc);
                let mut at = 0u64;
                for (k, &v) in node.inputs().iter().enumerate() {
                    let d = self.dims(v, node)?;
                    if d[ax] == 0 {
                        // An empty operand adds nothing (and an insert at the end is out of
                        // bounds for MLIR's verifier).
                        continue;
                    }
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
            Op::Cast { .. } => self.cast_op(block, node, &ins, (out_ty, &out_dims), loc)?,
            Op::CumSum { .. } => {
                self.cum_sum_op(block, node, id, &ins, (out_ty, &out_dims, out_dtype), loc)?
            }
            Op::GatherElements { .. } => {
                self.gather_elements_op(block, node, id, &ins, (out_ty, &out_dims, out_dtype), loc)?
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
                if out_dtype != DType::F64 {
                    f32_only("conv")?;
                }
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
                if out_dims.len() != 4 {
                    return Err(unsupported(node, "only 2-D pooling is emitted yet"));
                }
                let kind = match node.op {
                    Op::AveragePool {
                        count_include_pad, ..
                    } => (false, count_include_pad),
                    _ => (true, false),
                };
                vec![self.pool2d(block, node, ins[0], &geo, kind, out_ty, &out_dims, loc)?]
            }
            Op::Softmax { axis } | Op::LogSoftmax { axis } => {
                f32_only("softmax")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let log = matches!(node.op, Op::LogSoftmax { .. });
                vec![self.softmax(block, ins[0], &out_dims, ax, log, out_ty, loc)]
            }
            Op::Amax => {
                let d = self.graph.value_type(node.inputs()[0]).dtype;
                if !matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
                    return Err(unsupported(
                        node,
                        format!("the amax of {d} tensors is not emitted yet"),
                    ));
                }
                let dims = self.dims(node.inputs()[0], node)?;
                vec![self.amax(block, ins[0], &dims, loc)]
            }
            Op::AmaxHistoryUpdate => {
                self.amax_history_update(block, node, (ins[0], ins[1]), loc)?
            }
            Op::BatchedScaleUpdate {
                fmt,
                margin,
                source,
                epsilon,
                power_2,
            } => self.batched_scale_update(
                block,
                node,
                &ins,
                (*fmt, *margin, *source, *epsilon, *power_2),
                loc,
            )?,
            Op::ComputeScale {
                fmt,
                margin,
                source,
                epsilon,
                power_2,
            } => {
                let amax = if *source == fp8c_ir::AmaxSource::Current {
                    ins[0]
                } else {
                    self.history_len(node, node.inputs()[0])?;
                    self.history_amax(block, ins[0], *source, loc)
                };
                self.compute_scale(
                    block,
                    (amax, ins[1]),
                    *fmt,
                    *margin,
                    *epsilon,
                    *power_2,
                    loc,
                )
            }
            Op::Quantize { to, saturate } => {
                self.float_operand(node, 0, "quantized")?;
                vec![self.quantize(block, (ins[0], ins[1]), &out_dims, *to, *saturate, loc)]
            }
            Op::Dequantize { .. } => {
                // The f32 product, rounded once to an f16 / bf16 result (the CPU's store).
                let narrow = match out_dtype {
                    DType::F32 => None,
                    DType::F16 | DType::BF16 => Some(self.elem(out_dtype, node)?),
                    _ => f32_only("dequantize").map(|_| None)?,
                };
                let fmt = self.graph.value_type(node.inputs()[0]).dtype;
                let q_dims = self.dims(node.inputs()[0], node)?;
                let maps = vec![
                    self.broadcast_map(&q_dims, &out_dims),
                    self.broadcast_map(&[], &out_dims),
                ];
                vec![
                    self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        let y = s.dequantize(fmt, a[0], a[1]);
                        match narrow {
                            Some(t) => s.named_pub("arith.truncf", y, t),
                            None => y,
                        }
                    }),
                ]
            }
            Op::ScaledMatMul { .. } => {
                float_result("scaled_matmul")?;
                vec![self.scaled_matmul(block, node, &ins, None, out_ty, &out_dims, loc)?]
            }
            Op::ScaledMatMulEpilogue {
                expr, to, saturate, ..
            } => {
                float_result("scaled_matmul_epilogue")?;
                let d =
                    self.scaled_matmul(block, node, &ins, Some(expr), out_ty, &out_dims, loc)?;
                match to {
                    // cuBLASLt's D scale: D quantized, and its amax.
                    Some(to) => {
                        self.quantized(block, d, ins[ins.len() - 1], &out_dims, *to, *saturate, loc)
                    }
                    None => vec![d],
                }
            }
            Op::QuantizeAmax { to, saturate } => {
                self.float_operand(node, 0, "quantized")?;
                let q = self.quantize(block, (ins[0], ins[1]), &out_dims, *to, *saturate, loc);
                vec![q, self.amax(block, ins[0], &out_dims, loc)]
            }
            Op::CastTranspose { perm, to, saturate } => {
                self.float_operand(node, 0, "quantized")?;
                let q = self.quantize(block, (ins[0], ins[1]), &out_dims, *to, *saturate, loc);
                let t_ty = self.tensor(IrValue::new(id, 1), node)?;
                let t = self.transpose(block, q, perm, t_ty, loc);
                vec![q, t, self.amax(block, ins[0], &out_dims, loc)]
            }
            Op::ElementwiseQuantize { expr, to, saturate } => {
                f32_only("elementwise_quantize")?;
                let insts = expr.insts().to_vec();
                self.check_program(node, &insts)?;
                let n = ins.len() - 1;
                let maps = in_maps(self)?[..n].to_vec();
                let y = self.per_element(block, &ins[..n], maps, out_ty, loc, move |b, a| {
                    Scalar { ctx, block: b, loc }.program(&insts, |i| a[i as usize])
                });
                self.quantized(block, y, ins[n], &out_dims, *to, *saturate, loc)
            }
            Op::LayerNormQuantize {
                axis,
                epsilon,
                to,
                saturate,
            } => {
                f32_only("layer_norm_quantize")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let mut ln_ins = vec![ins[0]];
                ln_ins.extend_from_slice(&ins[2..]);
                let mut pdims = Vec::new();
                for &v in &node.inputs()[2..] {
                    pdims.push(self.dims(v, node)?);
                }
                let y =
                    self.layer_norm(block, &ln_ins, &pdims, &out_dims, ax, *epsilon, out_ty, loc);
                self.quantized(block, y, ins[1], &out_dims, *to, *saturate, loc)
            }
            Op::LayerNormBlockQuantize {
                axis,
                epsilon,
                to,
                saturate,
                cols,
                scaling,
                amax_epsilon,
            } => {
                f32_only("layer_norm_block_quantize")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                let mut pdims = Vec::new();
                for &v in &node.inputs()[1..] {
                    pdims.push(self.dims(v, node)?);
                }
                let y = self.layer_norm(block, &ins, &pdims, &out_dims, ax, *epsilon, out_ty, loc);
                let mut outs = vec![y];
                outs.extend(self.block_quantize(
                    block,
                    node,
                    (y, IrValue::new(id, 0)),
                    (*to, *saturate, 1, *cols, *scaling, *amax_epsilon),
                    loc,
                )?);
                outs
            }
            Op::Pad { mode } => {
                // Constant mode with constant, non-negative pads (what canonicalize leaves of
                // an export's Pad and what --pad-to-16 inserts).
                if *mode != fp8c_ir::PadMode::Constant {
                    return Err(unsupported(
                        node,
                        format!("{} padding is not emitted yet", mode.word()),
                    ));
                }
                let xd = self.dims(node.inputs()[0], node)?;
                let pads = self
                    .constant_ints(node.inputs()[1])
                    .filter(|p| p.len() == 2 * xd.len() && p.iter().all(|&v| v >= 0))
                    .ok_or_else(|| {
                        unsupported(node, "only constant, non-negative pads are emitted yet")
                    })?;
                let (low, high) = pads.split_at(xd.len());
                let elem = self.elem(out_dtype, node)?;
                let value = match ins.get(2) {
                    Some(&v) => {
                        let s = Scalar { ctx, block, loc };
                        let zeros =
                            vec![s.index_const(0); self.dims(node.inputs()[2], node)?.len()];
                        s.extract(v, &zeros, elem)
                    }
                    None => self.zero_of(block, elem, out_dtype, loc),
                };
                vec![self.pad(block, ins[0], &xd, (low, high), value, loc)]
            }
            Op::BlockQuantize {
                to,
                saturate,
                rows,
                cols,
                scaling,
                epsilon,
            } => {
                self.f32_operand(node, 0, "quantized")?;
                self.block_quantize(
                    block,
                    node,
                    (ins[0], node.inputs()[0]),
                    (*to, *saturate, *rows, *cols, *scaling, *epsilon),
                    loc,
                )?
            }
            Op::ElementwiseBlockQuantize {
                expr,
                to,
                saturate,
                cols,
                scaling,
                epsilon,
            } => {
                // y = the program (f32 by the op's typing), then its one-row tiles.
                let insts = expr.insts().to_vec();
                self.check_program(node, &insts)?;
                let maps = in_maps(self)?;
                let y = self.per_element(block, &ins, maps, out_ty, loc, move |b, a| {
                    Scalar { ctx, block: b, loc }.program(&insts, |i| a[i as usize])
                });
                let mut outs = vec![y];
                outs.extend(self.block_quantize(
                    block,
                    node,
                    (y, IrValue::new(id, 0)),
                    (*to, *saturate, 1, *cols, *scaling, *epsilon),
                    loc,
                )?);
                outs
            }
            Op::BlockDequantize { rows, cols, .. } => {
                f32_only("block_dequantize")?;
                vec![self.block_dequantize(
                    block,
                    node,
                    (ins[0], ins[1]),
                    (*rows, *cols),
                    out_ty,
                    loc,
                )?]
            }
            Op::BlockScaledMatMul {
                k_block,
                a_rows,
                b_cols,
                ..
            } => {
                f32_only("block_scaled_matmul")?;
                vec![self.block_scaled_matmul(
                    block,
                    node,
                    &ins,
                    (*k_block, *a_rows, *b_cols),
                    out_ty,
                    loc,
                )?]
            }
            Op::GeluGrad { approximate } => {
                f32_only("gelu_grad")?;
                for k in 0..2 {
                    self.f32_operand(node, k, "differentiated")?;
                }
                vec![self.gelu_grad(
                    block,
                    (ins[0], ins[1]),
                    &out_dims,
                    *approximate,
                    out_ty,
                    loc,
                )]
            }
            Op::SoftmaxGrad { axis, log } => {
                f32_only("softmax_grad")?;
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                vec![self.softmax_grad(block, (ins[0], ins[1]), &out_dims, ax, *log, out_ty, loc)]
            }
            Op::LayerNormGrad { axis, epsilon } => {
                f32_only("layer_norm_grad")?;
                for k in 0..3 {
                    self.f32_operand(node, k, "differentiated")?;
                }
                let r = out_dims.len() as i64;
                let ax = (if *axis < 0 { axis + r } else { *axis }) as usize;
                self.layer_norm_grad(block, node, &ins, &out_dims, (ax, *epsilon), out_ty, loc)?
            }
            Op::GatherGrad { axis, size } => {
                f32_only("gather_grad")?;
                vec![self.gather_grad(
                    block,
                    node,
                    (ins[0], ins[1]),
                    *axis,
                    *size,
                    (out_ty, &out_dims),
                    loc,
                )?]
            }
            Op::QuantizeLinear {
                axis,
                saturate,
                to,
                block_size,
            } if to.is_fp8() => {
                // ONNX's FP8 QuantizeLinear: x / y_scale (in f64, rounded to f32, as the CPU),
                // then the Cast's encoding; the zero point is 0 (the CPU checks it).
                self.f32_operand(node, 0, "quantized")?;
                let smap = self.qdq_scale_map(node, *axis, *block_size, &out_dims)?;
                let (to, sat, f8) = (*to, *saturate, self.elem(*to, node)?);
                let maps = vec![self.broadcast_map(&out_dims, &out_dims), smap];
                vec![
                    self.per_element(block, &ins[..2], maps, out_ty, loc, move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        let q = s.truncf(s.divf64(s.extf(a[0]), s.extf(a[1])));
                        s.cast_to_fp8(to, sat, q, f8)
                    }),
                ]
            }
            Op::DequantizeLinear { axis, block_size }
                if self.graph.value_type(node.inputs()[0]).dtype.is_fp8() =>
            {
                // ONNX's FP8 DequantizeLinear: code × x_scale (exact in f64, rounded once:
                // the f32 product).
                f32_only("dequantize_linear")?;
                let fmt = self.graph.value_type(node.inputs()[0]).dtype;
                let smap = self.qdq_scale_map(node, *axis, *block_size, &out_dims)?;
                let maps = vec![self.broadcast_map(&out_dims, &out_dims), smap];
                vec![
                    self.per_element(block, &ins[..2], maps, out_ty, loc, move |b, a| {
                        let s = Scalar { ctx, block: b, loc };
                        s.elementwise(&Op::Mul, &[s.decode(fmt, a[0]), a[1]])
                            .expect("mul")
                    }),
                ]
            }
            Op::QuantizeLinear {
                axis,
                to,
                block_size,
                ..
            } => vec![self.quantize_linear(
                block,
                node,
                &ins,
                (*axis, *to, *block_size),
                &out_dims,
                out_ty,
                loc,
            )?],
            Op::DequantizeLinear { axis, block_size } => {
                f32_only("dequantize_linear")?;
                vec![self.dequantize_linear(
                    block,
                    node,
                    &ins,
                    (*axis, *block_size),
                    &out_dims,
                    out_ty,
                    loc,
                )?]
            }
            Op::SoftmaxCrossEntropy => self.cross_entropy(block, node, (ins[0], ins[1]), loc)?,
            Op::SoftmaxCrossEntropyGrad => {
                f32_only("softmax_cross_entropy_grad")?;
                vec![self.cross_entropy_grad(block, node, &ins, out_ty, loc)?]
            }
            Op::AdamwUpdate {
                beta1,
                beta2,
                epsilon,
                weight_decay,
            } => self.adamw(
                block,
                node,
                &ins,
                (*beta1, *beta2, *epsilon, *weight_decay),
                out_ty,
                loc,
            )?,
            Op::SgdUpdate {
                momentum,
                weight_decay,
                nesterov,
            } => self.sgd(
                block,
                node,
                &ins,
                (*momentum, *weight_decay, *nesterov),
                out_ty,
                loc,
            )?,
            Op::AllFinite => vec![self.all_finite(block, node, &ins, out_ty, loc)?],
            other => {
                return Err(unsupported(
                    node,
                    format!("`{}` is not emitted to MLIR yet", other.name()),
                ));
            }
        })
    }
}
