//! The op registry: one small builder function per ONNX op, split by family.
//!
//! A builder reads its node's inputs and attributes (with the ONNX defaults) through
//! [`NodeCx`] and adds IR nodes with [`NodeCx::add`], which runs type inference. It returns
//! the IR values of the node's leading outputs; an output it does not return must not be
//! used by the rest of the graph (the importer checks that).
//!
//! To add an op: write its builder in the family file and add one line to [`registry!`]
//! below, with the number of inputs it accepts.

mod attention;
pub(crate) mod contrib;
mod contrib_attention;
mod contrib_fused;
mod contrib_gather;
mod contrib_gqa;
mod contrib_graph;
mod contrib_qlinear;
mod depth_space;
mod einsum;
mod instance_norm;
mod integer;
mod math;
pub(crate) mod ml;
mod nn;
pub(crate) mod old_forms;
mod pool_indices;
mod quant;
mod reduce;
mod resize;
mod resize_coords;
mod resize_kernel;
mod rnn;
pub(crate) mod schema;
mod schema_table;
mod shape;

use crate::OnnxError;
use crate::proto::{AttributeProto, NodeProto};
use crate::tensor::tensor_from_proto;
use fp8c_ir::{DType, Graph, IrError, Op, Shape, Tensor, TensorType, Value};
use std::ops::RangeInclusive;
use std::path::Path;

/// A builder: maps one ONNX node to IR nodes and returns its leading outputs.
pub(crate) type Build = fn(&mut NodeCx<'_>) -> Result<Vec<Value>, OnnxError>;

/// More inputs than any real node has; the bound of variadic ops.
const MANY: usize = usize::MAX;

/// Defines a domain's sorted list of op types (`$ops`) and its lookup function (`$lookup`).
macro_rules! registry {
    ($(#[$doc:meta])* $ops:ident, $lookup:ident; $($name:literal $arity:expr => $build:expr,)*) => {
        $(#[$doc])*
        pub const $ops: &[&str] = &[$($name),*];

        /// The builder and accepted input count of an op type of this domain.
        pub(crate) fn $lookup(op_type: &str) -> Option<(Build, RangeInclusive<usize>)> {
            match op_type {
                $($name => { let b: Build = $build; Some((b, $arity)) })*
                _ => None,
            }
        }
    };
}

pub(crate) use registry;

registry! {
    /// Every ONNX op type (default domain) the importer maps, sorted.
    SUPPORTED_OPS, lookup;
    "Abs" 1..=1 => |cx| math::unary(cx, Op::Abs),
    "Add" 2..=2 => |cx| math::binary(cx, Op::Add),
    "And" 2..=2 => |cx| math::binary(cx, Op::And),
    "ArgMax" 1..=1 => |cx| reduce::arg_extreme(cx, true),
    "ArgMin" 1..=1 => |cx| reduce::arg_extreme(cx, false),
    "Attention" 3..=7 => attention::attention,
    "AveragePool" 1..=1 => nn::average_pool,
    "BatchNormalization" 5..=5 => nn::batch_norm,
    "Cast" 1..=1 => math::cast,
    "CastLike" 2..=2 => math::cast_like,
    "Ceil" 1..=1 => |cx| math::unary(cx, Op::Ceil),
    "Clip" 1..=3 => math::clip,
    "Concat" 1..=MANY => shape::concat,
    "Constant" 0..=0 => shape::constant,
    "ConstantOfShape" 1..=1 => shape::constant_of_shape,
    "Conv" 2..=3 => nn::conv,
    "ConvInteger" 2..=4 => integer::conv_integer,
    "ConvTranspose" 2..=3 => nn::conv_transpose,
    "Cos" 1..=1 => |cx| math::unary(cx, Op::Cos),
    "CumSum" 2..=2 => reduce::cum_sum,
    "DepthToSpace" 1..=1 => depth_space::depth_to_space,
    "DequantizeLinear" 2..=3 => quant::dequantize_linear,
    "Div" 2..=2 => |cx| math::binary(cx, Op::Div),
    "Dropout" 1..=3 => nn::dropout,
    "DynamicQuantizeLinear" 1..=1 => integer::dynamic_quantize_linear,
    "Einsum" 1..=MANY => einsum::einsum,
    "Equal" 2..=2 => |cx| math::binary(cx, Op::Equal),
    "Erf" 1..=1 => |cx| math::unary(cx, Op::Erf),
    "Exp" 1..=1 => |cx| math::unary(cx, Op::Exp),
    "Expand" 2..=2 => |cx| math::plain(cx, Op::Expand),
    "Flatten" 1..=1 => shape::flatten,
    "Floor" 1..=1 => |cx| math::unary(cx, Op::Floor),
    "GRU" 3..=6 => |cx| rnn::recurrent(cx, rnn::Cell::Gru),
    "Gather" 2..=2 => shape::gather,
    "GatherElements" 2..=2 => shape::gather_elements,
    "GatherND" 2..=2 => shape::gather_nd,
    "Gelu" 1..=1 => nn::gelu,
    "Gemm" 2..=3 => math::gemm,
    "GlobalAveragePool" 1..=1 => |cx| math::unary(cx, Op::GlobalAveragePool),
    "GlobalMaxPool" 1..=1 => |cx| math::unary(cx, Op::GlobalMaxPool),
    "Greater" 2..=2 => |cx| math::binary(cx, Op::Greater),
    "GreaterOrEqual" 2..=2 => |cx| math::binary(cx, Op::GreaterOrEqual),
    "GroupNormalization" 3..=3 => instance_norm::group_norm,
    "HardSigmoid" 1..=1 => nn::hard_sigmoid,
    "HardSwish" 1..=1 => nn::hard_swish,
    "Identity" 1..=1 => |cx| math::unary(cx, Op::Identity),
    "InstanceNormalization" 3..=3 => instance_norm::instance_norm,
    "IsInf" 1..=1 => math::is_inf,
    "IsNaN" 1..=1 => |cx| math::unary(cx, Op::IsNaN),
    "LSTM" 3..=8 => |cx| rnn::recurrent(cx, rnn::Cell::Lstm),
    "LayerNormalization" 2..=3 => nn::layer_norm,
    "LeakyRelu" 1..=1 => nn::leaky_relu,
    "Less" 2..=2 => |cx| math::binary(cx, Op::Less),
    "LessOrEqual" 2..=2 => |cx| math::binary(cx, Op::LessOrEqual),
    "Log" 1..=1 => |cx| math::unary(cx, Op::Log),
    "LogSoftmax" 1..=1 => |cx| nn::softmax(cx, |axis| Op::LogSoftmax { axis }),
    "MatMul" 2..=2 => |cx| math::binary(cx, Op::MatMul),
    "MatMulInteger" 2..=4 => integer::matmul_integer,
    "Max" 1..=MANY => |cx| math::variadic(cx, Op::Max),
    "MaxPool" 1..=1 => nn::max_pool,
    "Mean" 1..=MANY => math::mean,
    "Min" 1..=MANY => |cx| math::variadic(cx, Op::Min),
    "Mod" 2..=2 => math::modulo,
    "Mul" 2..=2 => |cx| math::binary(cx, Op::Mul),
    "Neg" 1..=1 => |cx| math::unary(cx, Op::Neg),
    "Not" 1..=1 => |cx| math::unary(cx, Op::Not),
    "Or" 2..=2 => |cx| math::binary(cx, Op::Or),
    "Pad" 1..=4 => shape::pad,
    "Pow" 2..=2 => |cx| math::binary(cx, Op::Pow),
    "QLinearConv" 8..=9 => integer::qlinear_conv,
    "QLinearMatMul" 8..=8 => integer::qlinear_matmul,
    "QuantizeLinear" 2..=3 => quant::quantize_linear,
    "RMSNormalization" 2..=2 => nn::rms_norm,
    "RNN" 3..=6 => |cx| rnn::recurrent(cx, rnn::Cell::Rnn),
    "Range" 3..=3 => math::range,
    "Reciprocal" 1..=1 => |cx| math::unary(cx, Op::Reciprocal),
    "ReduceL1" 1..=2 => |cx| reduce::reduce_sum_of(cx, reduce::SumKind::L1),
    "ReduceL2" 1..=2 => |cx| reduce::reduce_sum_of(cx, reduce::SumKind::L2),
    "ReduceLogSum" 1..=2 => |cx| reduce::reduce_sum_of(cx, reduce::SumKind::LogSum),
    "ReduceLogSumExp" 1..=2 => |cx| reduce::reduce_sum_of(cx, reduce::SumKind::LogSumExp),
    "ReduceMax" 1..=2 => |cx| reduce::reduce(cx, 18, |axes, keepdims| Op::ReduceMax { axes, keepdims }),
    "ReduceMean" 1..=2 => |cx| reduce::reduce(cx, 18, |axes, keepdims| Op::ReduceMean { axes, keepdims }),
    "ReduceMin" 1..=2 => |cx| reduce::reduce(cx, 18, |axes, keepdims| Op::ReduceMin { axes, keepdims }),
    "ReduceProd" 1..=2 => |cx| reduce::reduce(cx, 18, |axes, keepdims| Op::ReduceProd { axes, keepdims }),
    "ReduceSum" 1..=2 => |cx| reduce::reduce(cx, 13, |axes, keepdims| Op::ReduceSum { axes, keepdims }),
    "ReduceSumSquare" 1..=2 => |cx| reduce::reduce_sum_of(cx, reduce::SumKind::SumSquare),
    "Relu" 1..=1 => |cx| math::unary(cx, Op::Relu),
    "Reshape" 2..=2 => shape::reshape,
    "Resize" 1..=4 => resize::resize,
    "RotaryEmbedding" 3..=4 => attention::rotary_embedding,
    "Round" 1..=1 => |cx| math::unary(cx, Op::Round),
    "ScatterElements" 3..=3 => shape::scatter_elements,
    "ScatterND" 3..=3 => shape::scatter_nd,
    "Shape" 1..=1 => shape::shape,
    "Sigmoid" 1..=1 => |cx| math::unary(cx, Op::Sigmoid),
    "Sign" 1..=1 => math::sign,
    "SimplifiedLayerNormalization" 2..=2 => nn::simplified_layer_norm,
    "Sin" 1..=1 => |cx| math::unary(cx, Op::Sin),
    "Size" 1..=1 => shape::size,
    "Slice" 1..=5 => shape::slice,
    "Softmax" 1..=1 => |cx| nn::softmax(cx, |axis| Op::Softmax { axis }),
    "SpaceToDepth" 1..=1 => depth_space::space_to_depth,
    "Split" 1..=2 => shape::split,
    "Sqrt" 1..=1 => |cx| math::unary(cx, Op::Sqrt),
    "Squeeze" 1..=2 => shape::squeeze,
    "Sub" 2..=2 => |cx| math::binary(cx, Op::Sub),
    "Sum" 1..=MANY => |cx| math::variadic(cx, Op::Add),
    "Tanh" 1..=1 => |cx| math::unary(cx, Op::Tanh),
    "Tile" 2..=2 => |cx| math::plain(cx, Op::Tile),
    "TopK" 1..=2 => reduce::top_k,
    "Transpose" 1..=1 => shape::transpose,
    "Trilu" 1..=2 => shape::trilu,
    "Unsqueeze" 1..=2 => shape::unsqueeze,
    "Upsample" 1..=2 => resize::upsample,
    "Where" 3..=3 => |cx| math::plain(cx, Op::Where),
    "Xor" 2..=2 => |cx| math::binary(cx, Op::Xor),
}

/// The builder of a node of `domain` (the default one, ai.onnx.ml: [`ml`], or
/// com.microsoft: [`contrib`]).
pub(crate) fn lookup_node(domain: &str, op_type: &str) -> Option<(Build, RangeInclusive<usize>)> {
    match domain {
        "" | "ai.onnx" => lookup(op_type),
        ml::DOMAIN => ml::lookup(op_type),
        contrib::DOMAIN => contrib::lookup(op_type),
        _ => None,
    }
}

/// What a builder sees of its node: inputs, attributes, the graph being built.
pub(crate) struct NodeCx<'a> {
    /// The graph under construction.
    g: &'a mut Graph,
    /// The ONNX node.
    node: &'a NodeProto,
    /// The node's name (never empty).
    pub name: &'a str,
    /// The ONNX op type.
    pub op_type: &'a str,
    /// The model's ai.onnx opset version.
    pub opset: i64,
    /// The node's inputs; `None` where an optional input is given as "".
    inputs: Vec<Option<Value>>,
    /// Which outputs the rest of the graph reads.
    used_outputs: Vec<bool>,
    /// Where external data of `Constant` values lives.
    base_dir: Option<&'a Path>,
    /// String labels of outputs given as indices into them ([`NodeCx::string_labels`]).
    pub(crate) labels: Vec<(usize, Vec<String>)>,
    /// Per input: the string table of an input that holds strings (`crate::strings`).
    pub(crate) input_tables: Vec<Option<Vec<String>>>,
    /// Per input: whether it is an initializer stored as ONNX INT4 / UINT4 (held as I8 /
    /// U8 with the same values; a UINT4 and a packed UINT8 table differ only there).
    pub(crate) four_bit_inputs: Vec<bool>,
}

impl<'a> NodeCx<'a> {
    pub(crate) fn new(
        g: &'a mut Graph,
        node: &'a NodeProto,
        name: &'a str,
        opset: i64,
        inputs: Vec<Option<Value>>,
        used_outputs: Vec<bool>,
        base_dir: Option<&'a Path>,
    ) -> Self {
        NodeCx {
            g,
            node,
            name,
            op_type: node.op_type(),
            opset,
            inputs,
            used_outputs,
            base_dir,
            labels: Vec::new(),
            input_tables: Vec::new(),
            four_bit_inputs: Vec::new(),
        }
    }

    /// An error about this node.
    pub fn err(&self, msg: impl Into<String>) -> OnnxError {
        OnnxError::node(self.name, self.op_type, msg)
    }

    fn ir_err(&self, e: IrError) -> OnnxError {
        OnnxError::NodeIr {
            node: self.name.to_string(),
            op_type: self.op_type.to_string(),
            source: e,
        }
    }

    // ------------------------------------------------------------------ inputs

    /// Number of inputs given (trailing omitted ones not counted).
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Input `i`, which must be present.
    pub fn input(&self, i: usize) -> Result<Value, OnnxError> {
        self.opt_input(i)
            .ok_or_else(|| self.err(format!("input {i} is required but not given")))
    }

    /// Input `i` if given.
    pub fn opt_input(&self, i: usize) -> Option<Value> {
        self.inputs.get(i).copied().flatten()
    }

    /// Every input, each of which must be present.
    pub fn all_inputs(&self) -> Result<Vec<Value>, OnnxError> {
        (0..self.num_inputs()).map(|i| self.input(i)).collect()
    }

    /// The ONNX name of input `i` (for messages).
    pub fn input_name(&self, i: usize) -> &str {
        self.node.input.get(i).map_or("", String::as_str)
    }

    /// The type of a value.
    pub fn ty(&self, v: Value) -> &TensorType {
        self.g.value_type(v)
    }

    /// The constant data of a value, if a `constant` node produces it (shape arithmetic on
    /// constants and static shapes is folded as it is built, see [`NodeCx::add_multi`]).
    pub fn constant_of(&self, v: Value) -> Option<&Tensor> {
        self.g.constant_value(v)
    }

    /// The data of a value known at import: a constant's, or a float initializer's (a param
    /// whose weight the graph holds).
    pub fn known_value(&self, v: Value) -> Option<&Tensor> {
        self.constant_of(v)
            .or_else(|| match &self.g.node(v.node).op {
                Op::Param { name } if v.slot == 0 => self.g.weights().get(name),
                _ => None,
            })
    }

    /// Optional input `i` as constant integers: `None` if absent; an error if it is present
    /// but not a constant (the IR takes it as an attribute).
    pub fn const_ints_input(&self, i: usize, what: &str) -> Result<Option<Vec<i64>>, OnnxError> {
        let Some(v) = self.opt_input(i) else {
            return Ok(None);
        };
        let t = self.constant_of(v).ok_or_else(|| {
            self.err(format!(
                "input {i} (`{what}`, value \"{}\") must be a constant: the IR takes {what} as an attribute",
                self.input_name(i)
            ))
        })?;
        t.to_i64_vec()
            .map(Some)
            .map_err(|e| self.err(format!("input {i} (`{what}`): {e}")))
    }

    /// True if the rest of the graph reads output `i`.
    pub fn output_used(&self, i: usize) -> bool {
        self.used_outputs.get(i).copied().unwrap_or(false)
    }

    /// The strings input `i` holds, if it holds strings: it is then i64 indices into them.
    pub fn input_strings(&self, i: usize) -> Option<&[String]> {
        self.input_tables.get(i).and_then(|t| t.as_deref())
    }

    /// Says that output `i` holds strings, as i64 indices into `labels` (see `crate::strings`).
    pub fn string_labels(&mut self, i: usize, labels: Vec<String>) {
        self.labels.push((i, labels));
    }

    /// Number of outputs the node declares.
    pub fn num_outputs(&self) -> usize {
        self.node.output.len()
    }

    /// Errors if any output from `first` on is used (for outputs the IR has no equivalent of).
    pub fn reject_used_outputs(&self, first: usize, why: &str) -> Result<(), OnnxError> {
        match (first..self.num_outputs()).find(|&i| self.output_used(i)) {
            Some(i) => Err(self.err(format!(
                "output {i} (\"{}\") is used, but {why}",
                self.node.output[i]
            ))),
            None => Ok(()),
        }
    }

    // ------------------------------------------------------------------ attributes

    /// The attribute called `name`, if present.
    pub fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.node.attribute.iter().find(|a| a.name() == name)
    }

    /// An int attribute, or `default` if absent.
    pub fn attr_int(&self, name: &str, default: i64) -> Result<i64, OnnxError> {
        Ok(self.attr_int_opt(name)?.unwrap_or(default))
    }

    /// An int attribute if present.
    pub fn attr_int_opt(&self, name: &str) -> Result<Option<i64>, OnnxError> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) => {
                a.i.map(Some)
                    .ok_or_else(|| self.err(format!("attribute `{name}` must be an int")))
            }
        }
    }

    /// A bool (int 0/1) attribute, or `default` if absent.
    pub fn attr_bool(&self, name: &str, default: bool) -> Result<bool, OnnxError> {
        Ok(self.attr_int(name, default as i64)? != 0)
    }

    /// A float attribute, or `default` if absent.
    pub fn attr_float(&self, name: &str, default: f32) -> Result<f32, OnnxError> {
        Ok(self.attr_float_opt(name)?.unwrap_or(default))
    }

    /// A float attribute if present (an int is accepted too).
    pub fn attr_float_opt(&self, name: &str) -> Result<Option<f32>, OnnxError> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) => match (a.f, a.i) {
                (Some(f), _) => Ok(Some(f)),
                (None, Some(i)) => Ok(Some(i as f32)),
                (None, None) => Err(self.err(format!("attribute `{name}` must be a float"))),
            },
        }
    }

    /// An ints attribute if present.
    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attr(name).map(|a| a.ints.clone())
    }

    /// A floats attribute if present.
    pub fn attr_floats(&self, name: &str) -> Option<Vec<f32>> {
        self.attr(name).map(|a| a.floats.clone())
    }

    /// A string attribute, or `default` if absent.
    pub fn attr_string(&self, name: &str, default: &str) -> Result<String, OnnxError> {
        match self.attr(name) {
            None => Ok(default.to_string()),
            Some(a) => {
                let s =
                    a.s.as_deref()
                        .ok_or_else(|| self.err(format!("attribute `{name}` must be a string")))?;
                String::from_utf8(s.to_vec())
                    .map_err(|_| self.err(format!("attribute `{name}` is not UTF-8")))
            }
        }
    }

    /// A tensor attribute, decoded, if present.
    pub fn attr_tensor(&self, name: &str) -> Result<Option<Tensor>, OnnxError> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) => {
                let t =
                    a.t.as_ref()
                        .ok_or_else(|| self.err(format!("attribute `{name}` must be a tensor")))?;
                tensor_from_proto(t, self.base_dir)
                    .map(Some)
                    .map_err(|e| self.err(format!("attribute `{name}`: {e}")))
            }
        }
    }

    // ------------------------------------------------------------------ building

    /// Adds the node's (main) IR node, named after the ONNX node; returns its first output.
    pub fn add(&mut self, op: Op, inputs: &[Value]) -> Result<Value, OnnxError> {
        let name = self.name;
        Ok(self.add_multi(name, op, inputs)?[0])
    }

    /// Adds a helper IR node named `{node}.{suffix}`; returns its first output.
    pub fn add_helper(
        &mut self,
        suffix: &str,
        op: Op,
        inputs: &[Value],
    ) -> Result<Value, OnnxError> {
        let name = format!("{}.{suffix}", self.name);
        Ok(self.add_multi(&name, op, inputs)?[0])
    }

    /// Adds `op` as the ONNX node's own IR node when `last` (the step that gives its result),
    /// else as a helper `{node}.{suffix}`; returns its first output.
    pub fn add_step(
        &mut self,
        last: bool,
        suffix: &str,
        op: Op,
        inputs: &[Value],
    ) -> Result<Value, OnnxError> {
        if last {
            self.add(op, inputs)
        } else {
            self.add_helper(suffix, op, inputs)
        }
    }

    /// Adds an IR node called `name` (made unique) and returns all its outputs; an op that
    /// [`fold`] computes now becomes constant nodes (`name`, `name.1`, ..) instead.
    pub fn add_multi(
        &mut self,
        name: &str,
        op: Op,
        inputs: &[Value],
    ) -> Result<Vec<Value>, OnnxError> {
        if let Some(values) = fold(self.g, name, &op, inputs) {
            let mut outs = Vec::with_capacity(values.len());
            for (i, value) in values.into_iter().enumerate() {
                let n = if i == 0 {
                    name.to_string()
                } else {
                    format!("{name}.{i}")
                };
                let v = self.g.add_node(&n, Op::Constant { value }, &[]);
                outs.push(v.map_err(|e| self.ir_err(e))?[0]);
            }
            return Ok(outs);
        }
        let outs = self
            .g
            .add_node(name, op, inputs)
            .map_err(|e| self.ir_err(e))?;
        if outs.is_empty() {
            return Err(self.err("the IR node has no outputs"));
        }
        Ok(outs)
    }

    /// Adds a constant helper node `{node}.{suffix}`.
    pub fn constant(&mut self, suffix: &str, value: Tensor) -> Result<Value, OnnxError> {
        self.add_helper(suffix, Op::Constant { value }, &[])
    }

    /// Adds a trainable parameter `{node}.{suffix}` holding `value` (a weight the node keeps in
    /// attributes, such as a linear model's coefficients).
    pub fn param(&mut self, suffix: &str, value: Tensor) -> Result<Value, OnnxError> {
        let name = format!("{}.{suffix}", self.name);
        let ty = TensorType::new(
            value.dtype(),
            value.shape().iter().map(|&d| d.into()).collect(),
        );
        self.g
            .add_param(&name, ty, Some(value))
            .map_err(|e| self.ir_err(e))
    }

    /// The strings of a strings attribute, if present.
    pub fn attr_strings(&self, name: &str) -> Result<Option<Vec<String>>, OnnxError> {
        let Some(a) = self.attr(name) else {
            return Ok(None);
        };
        a.strings
            .iter()
            .map(|s| {
                String::from_utf8(s.to_vec())
                    .map_err(|_| self.err(format!("attribute `{name}` is not UTF-8")))
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// Adds a scalar constant of `dtype` holding `v`.
    pub fn scalar(&mut self, suffix: &str, dtype: DType, v: f64) -> Result<Value, OnnxError> {
        let t = Tensor::from_f64_as(dtype, vec![], &[v])
            .map_err(|e| self.err(format!("{suffix}: {e}")))?;
        self.constant(suffix, t)
    }
}

/// Most elements an op's output may have to be folded at import time (shape arithmetic is a
/// few integers; large constant tensors are left to canonicalize).
const MAX_FOLD_ELEMS: u64 = 4096;

/// The outputs of `op` on `inputs` if the importer computes them now: `shape` of a value with
/// static dims, or any deterministic op whose inputs are all constants and whose outputs are
/// small integer or bool tensors (float data is left to canonicalize's folding), evaluated by the CPU reference evaluator (so folding cannot disagree with a run).
/// Folding as the graph is built makes an export's shape arithmetic (`Concat(Shape(x)[3:4],
/// Sub(..))` feeding a Split, a Pad, a Reshape) constant for the ops that need it so.
fn fold(g: &Graph, name: &str, op: &Op, inputs: &[Value]) -> Option<Vec<Tensor>> {
    if let Op::Shape { start, end } = op {
        let x = g.value_type(*inputs.first()?);
        let dims = known_dims(&x.shape)?;
        let r = dims.len() as i64;
        let clamp = |i: i64| (if i < 0 { i + r } else { i }).clamp(0, r) as usize;
        let (s, e) = (clamp(*start), clamp(end.unwrap_or(r)));
        let part: Vec<i64> = dims[s..e.max(s)].iter().map(|&d| d as i64).collect();
        return Some(vec![Tensor::from_i64(vec![part.len() as u64], &part)]);
    }
    let props = op.props();
    if inputs.is_empty() || op.is_interface() || props.scaling || props.training {
        return None;
    }
    let values: Vec<&Tensor> = inputs
        .iter()
        .map(|&v| g.constant_value(v))
        .collect::<Option<_>>()?;
    let types = g.infer_node(name, op, inputs).ok()?;
    for t in &types {
        if t.dtype.is_float() || t.dtype.is_fp8() || t.dtype.is_narrow_float() {
            return None;
        }
        let dims = known_dims(&t.shape)?;
        if fp8c_ir::checked_numel(&dims).is_none_or(|n| n > MAX_FOLD_ELEMS) {
            return None;
        }
    }
    fp8c_eval::eval_op(op, &values).ok()
}

/// `axis` counted from the front, if it is within `-rank..rank`.
pub(crate) fn normalize_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

/// The static dims of `shape` if every one is known.
pub(crate) fn known_dims(shape: &Shape) -> Option<Vec<u64>> {
    shape.iter().map(|d| d.known()).collect()
}
