//! The closed set of IR operations.
//!
//! One table ([`define_ops!`]) declares every op: its family, its variant, its text name, its
//! typed attributes and its properties ([`Props`]). The macro derives the name, the family,
//! the properties, a borrowed per-family view ([`OpView`], for exhaustive dispatch), an
//! example instance of every op, the attribute list (for the printer) and the constructor from
//! attributes (for the parser). ARCHITECTURE.md, "Adding an op", lists the one function per
//! family module that every crate then asks for; a missing one is a compile error.
//!
//! Conventions shared by every op:
//! - Inputs are positional. Ops whose ONNX form has optional inputs get them filled in by the
//!   importer (e.g. `clip` always has 3 inputs, `slice` always 5), so no op has holes.
//! - Axes attributes may be negative (counted from the end), as in ONNX.
//! - FP8 ops follow TransformerEngine's convention: `scale` multiplies before the cast
//!   (`q = cast(x * scale)`), `scale_inv = 1 / scale` multiplies after decoding.

use crate::attr::{AttrMap, AttrValue, word_enum};
use crate::{Attr, DType, EwExpr, Tensor};
use serde::{Deserialize, Serialize};

word_enum!(
    /// GELU variant (ONNX `Gelu.approximate`).
    GeluApprox { None => "none", Tanh => "tanh" }
);
word_enum!(
    /// ONNX `auto_pad` for convolutions and pooling.
    AutoPad { NotSet => "notset", SameUpper => "same_upper", SameLower => "same_lower", Valid => "valid" }
);
word_enum!(
    /// ONNX `Pad.mode`.
    PadMode { Constant => "constant", Reflect => "reflect", Edge => "edge", Wrap => "wrap" }
);
word_enum!(
    /// ONNX `ScatterElements.reduction` / `ScatterND.reduction`: how an update combines with
    /// the value already there (`none` overwrites).
    ScatterReduction { None => "none", Add => "add", Mul => "mul", Max => "max", Min => "min" }
);
word_enum!(
    /// ONNX Cast's `round_mode` (opset 24) for FLOAT8E8M0 targets: the power of two at or
    /// above (`up`, ONNX's default and `cast`'s), at or below, or nearest.
    E8m0Round { Up => "up", Down => "down", Nearest => "nearest" }
);
word_enum!(
    /// How `block_quantize` turns a tile's amax into its scale (issue #16): `fp32`: TE's
    /// `fmt_max / amax`; `pow2`: that rounded down to a power of two (TE's `power_2_scale`,
    /// DeepSeek-V3, TE `Float8BlockScaling`); `e8m0`: the OCP MX v1.0 shared exponent
    /// `floor(log2 amax) − emax_elem`, a scale an E8M0 code holds (TE `MXFP8BlockScaling`).
    BlockScaling { Fp32 => "fp32", Pow2 => "pow2", E8m0 => "e8m0" }
);
word_enum!(
    /// Where `compute_scale` takes its amax from.
    AmaxSource {
        /// Maximum over the whole amax history (delayed scaling, TE `max`).
        HistoryMax => "history_max",
        /// The most recent history entry (delayed scaling, TE `most_recent`).
        HistoryMostRecent => "history_most_recent",
        /// The amax of the tensor itself, given as a scalar (current scaling).
        Current => "current",
    }
);

/// Properties of an op that passes and backends ask about (one place, not per-pass lists).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Props {
    /// A view: reinterprets its first input without moving data (free in the cost model; a
    /// parameter read through it is still the parameter).
    pub view: bool,
    /// GEMM-like: the precision policy may put it in FP8.
    pub gemm: bool,
    /// FP8 scaling machinery: it reads or maintains scaling state, so constant folding keeps it.
    pub scaling: bool,
    /// Emitted by the autodiff pass only (gradients, losses, optimizer steps).
    pub training: bool,
}

impl Props {
    /// No property.
    pub const NONE: Props = Props {
        view: false,
        gemm: false,
        scaling: false,
        training: false,
    };
}

macro_rules! define_ops {
    ($( $(#[$fdoc:meta])* family $fam:ident($famty:ident) $fname:literal {
        $( $(#[$doc:meta])* $variant:ident $({ $($field:ident : $fty:ty),* $(,)? })? => $text:literal $([$($prop:ident),*])?, )*
    } )*) => {
        /// An IR operation with its attributes.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum Op {
            $( $( $(#[$doc])* #[serde(rename = $text)] $variant $({ $($field: $fty),* })?, )* )*
        }

        /// The op families. Every crate that dispatches on ops has one module per family, with
        /// these names, and matches exhaustively inside it (see [`OpView`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Family {
            $( $(#[$fdoc])* $fam, )*
        }

        impl Family {
            /// Every family, in table order.
            pub const ALL: &'static [Family] = &[$(Family::$fam),*];

            /// The family's module name (`elementwise`, `linalg`, ...).
            pub fn name(self) -> &'static str {
                match self { $( Family::$fam => $fname, )* }
            }
        }

        $(
            $(#[$fdoc])*
            ///
            /// A borrowed view of one [`Op`] of this family (from [`Op::view`]): matching on it
            /// is exhaustive, so adding an op to the family fails to compile wherever the family
            /// is handled. The hidden variant is uninhabited and never needs an arm.
            #[derive(Clone, Copy, Debug, PartialEq)]
            pub enum $famty<'a> {
                $( $(#[$doc])* $variant $({ $($field: &'a $fty),* })?, )*
                #[doc(hidden)]
                __Lifetime(std::convert::Infallible, std::marker::PhantomData<&'a ()>),
            }
        )*

        /// An op seen through its family: `match op.view() { OpView::Linalg(l) => ..., }`.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum OpView<'a> {
            $( $(#[$fdoc])* $fam($famty<'a>), )*
        }

        impl Op {
            /// Every op's text name, in table order.
            pub const NAMES: &'static [&'static str] = &[$($($text),*),*];

            /// The op's text name (`matmul`, `scaled_matmul`, ...).
            pub fn name(&self) -> &'static str {
                match self { $( $( Op::$variant { .. } => $text, )* )* }
            }

            /// The op's family.
            pub fn family(&self) -> Family {
                match self { $( $( Op::$variant { .. } => Family::$fam, )* )* }
            }

            /// The op's properties (the table's `[...]` flags).
            pub fn props(&self) -> Props {
                match self { $( $( Op::$variant { .. } => Props { $($($prop: true,)*)? ..Props::NONE }, )* )* }
            }

            /// The op seen through its family, for exhaustive per-family dispatch.
            pub fn view(&self) -> OpView<'_> {
                match self {
                    $( $( Op::$variant $({ $($field),* })? => OpView::$fam($famty::$variant $({ $($field),* })?), )* )*
                }
            }

            /// One instance of every op, in table order, with example attribute values (what
            /// coverage tests walk).
            pub fn examples() -> Vec<Op> {
                vec![$( $( Op::$variant $({ $($field: <$fty as AttrValue>::example()),* })?, )* )*]
            }

            /// The attributes in their fixed (declaration) order.
            pub fn attrs(&self) -> Vec<(&'static str, Attr)> {
                match self {
                    $( $( Op::$variant $({ $($field),* })? => vec![$($( (stringify!($field), AttrValue::to_attr($field)) ),*)?], )* )*
                }
            }

            /// Builds an op from its text name and attributes (the parser's entry point).
            pub fn from_parts(name: &str, mut attrs: AttrMap) -> Result<Op, String> {
                let op = match name {
                    $( $( $text => Op::$variant $({ $($field: attrs.take(stringify!($field))?),* })?, )* )*
                    _ => return Err(format!("unknown op `{name}`")),
                };
                attrs.finish(name)?;
                Ok(op)
            }
        }
    };
}

define_ops! {
    /// The graph interface (no inputs): values fed by the caller or held by the graph.
    family Interface(InterfaceOp) "interface" {
        /// A graph input, fed by the caller.
        Input { name: String } => "input",
        /// A parameter (an FP32 master weight or other initializer); data lives in `Graph::weights`.
        Param { name: String } => "param",
        /// A piece of persistent state (amax history, scale, optimizer moment), read at step start.
        State { name: String } => "state",
        /// A constant tensor held inline.
        Constant { value: Tensor } => "constant",
    }
    /// Elementwise ops: unary math, broadcasting binary arithmetic, comparisons and logic, `where`, `clip`, `cast`, and the GELU gradient (one row each in `elementwise.rs`).
    family Elementwise(ElementwiseOp) "elementwise" {
        /// Returns its input unchanged.
        Identity => "identity" [view],
        Neg => "neg",
        Abs => "abs",
        Sqrt => "sqrt",
        Reciprocal => "reciprocal",
        Exp => "exp",
        Log => "log",
        Erf => "erf",
        Tanh => "tanh",
        Sigmoid => "sigmoid",
        Relu => "relu",
        Floor => "floor",
        Ceil => "ceil",
        Round => "round",
        Sin => "sin",
        Cos => "cos",
        /// ONNX Sign: −1, 0 or 1 (NaN stays NaN); floats.
        Sign => "sign",
        /// ONNX Gelu (opset 20). The importer does not recognise decomposed erf-GELU; fusion folds
        /// such chains into one `elementwise_quantize` program instead.
        Gelu { approximate: GeluApprox } => "gelu",
        LeakyRelu { alpha: f32 } => "leaky_relu",
        Not => "not",
        IsNaN => "is_nan",
        IsInf { detect_negative: bool, detect_positive: bool } => "is_inf",
        Add => "add",
        Sub => "sub",
        Mul => "mul",
        Div => "div",
        Pow => "pow",
        Max => "max",
        Min => "min",
        Mod { fmod: bool } => "mod",
        Equal => "equal",
        Less => "less",
        LessOrEqual => "less_or_equal",
        Greater => "greater",
        GreaterOrEqual => "greater_or_equal",
        And => "and",
        Or => "or",
        Xor => "xor",
        /// `where(cond, a, b)`.
        Where => "where",
        /// `clip(x, min, max)`; the importer fills absent bounds with the type's extremes.
        Clip => "clip",
        /// Element type conversion; `saturate` as in ONNX Cast (only matters for FP8 targets).
        Cast { to: DType, saturate: bool } => "cast",
        /// Gradient of `gelu { approximate }`: inputs x and dy; output dx.
        GeluGrad { approximate: GeluApprox } => "gelu_grad",
    }
    /// Matrix products: numpy matmul, ONNX Gemm, and the FP8 GEMM.
    family Linalg(LinalgOp) "linalg" {
        /// numpy matmul semantics (batched, broadcasting).
        MatMul => "matmul" [gemm],
        /// `alpha * op(A) * op(B) + beta * C` with 2 or 3 inputs.
        Gemm { alpha: f32, beta: f32, trans_a: bool, trans_b: bool } => "gemm" [gemm],
        /// FP8 matmul: inputs qa, qb, scale_inv_a, scale_inv_b; numpy matmul shape rules;
        /// output type `out`. `fast_accum`: Hopper's fast accumulation (partial sums kept in
        /// the tensor cores' narrow accumulator, cuBLASLt `FAST_ACCUM`, TE's forward GEMM);
        /// false: f32 accumulation (TE's `use_split_accumulator`, its dgrad and wgrad).
        ScaledMatMul { out: DType, fast_accum: bool } => "scaled_matmul" [scaling],
        /// Block-scaled FP8 matmul (issue #16; DeepSeek-V3's promotion): inputs qa [M, K], qb
        /// [K, N] (FP8), scale_inv_a [ceil(M/a_rows), KB] and scale_inv_b [KB, ceil(N/b_cols)]
        /// with KB = ceil(K/k_block) (0: the whole axis, one block). Each K block's products
        /// are summed in f32 in order, the partial sum multiplied by A's then B's scale_inv of
        /// that block, and the blocks summed in order; every step rounded to f32, the result
        /// to `out`.
        BlockScaledMatMul { out: DType, k_block: i64, a_rows: i64, b_cols: i64 } => "block_scaled_matmul" [scaling],
    }
    /// Convolutions and their gradients (window geometry in `window.rs`).
    family Conv(ConvOp) "conv" {
        /// N-d convolution, NCHW; inputs x, w and an optional bias.
        Conv { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, group: i64, auto_pad: AutoPad } => "conv" [gemm],
        /// Gradient of `conv` w.r.t. x (dgrad, a transposed convolution): inputs dy and w; the
        /// conv's attributes (kernel_shape filled in) and x's shape.
        ConvGradInput { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, group: i64, auto_pad: AutoPad, input_shape: Vec<i64> } => "conv_grad_input" [training],
        /// Gradient of `conv` w.r.t. w (wgrad): inputs x and dy; output `[M, C/group, kernel..]`.
        ConvGradWeight { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, group: i64, auto_pad: AutoPad } => "conv_grad_weight" [training],
    }
    /// Pooling and its gradients.
    family Pool(PoolOp) "pool" {
        MaxPool { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, ceil_mode: bool, auto_pad: AutoPad } => "max_pool",
        AveragePool { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, ceil_mode: bool, count_include_pad: bool, auto_pad: AutoPad } => "average_pool",
        GlobalAveragePool => "global_average_pool",
        GlobalMaxPool => "global_max_pool",
        /// Gradient of `max_pool`: inputs x and dy; each window's dy goes to its (first) maximum.
        MaxPoolGrad { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, ceil_mode: bool, auto_pad: AutoPad } => "max_pool_grad" [training],
        /// Gradient of `average_pool`: inputs x (for its shape) and dy.
        AveragePoolGrad { kernel_shape: Vec<i64>, strides: Vec<i64>, pads: Vec<i64>, dilations: Vec<i64>, ceil_mode: bool, count_include_pad: bool, auto_pad: AutoPad } => "average_pool_grad" [training],
    }
    /// Normalisations and softmax, and their gradients.
    family Normalize(NormalizeOp) "normalize" {
        /// Inference-mode batch norm; inputs x, scale, bias, mean, var.
        BatchNormalization { epsilon: f32 } => "batch_norm",
        /// Inputs x, scale and an optional bias; normalises over axes `axis..rank`.
        LayerNormalization { axis: i64, epsilon: f32 } => "layer_norm",
        Softmax { axis: i64 } => "softmax",
        LogSoftmax { axis: i64 } => "log_softmax",
        /// Gradient of `layer_norm { axis, epsilon }`: inputs x, scale, dy; outputs dx, dscale,
        /// dbias (the last two shaped like scale).
        LayerNormGrad { axis: i64, epsilon: f32 } => "layer_norm_grad" [training],
        /// Gradient of `softmax { axis }` (`log_softmax` when `log`): inputs the forward output y
        /// and dy; output dx (`y·(dy − Σdy·y)`, or `dy − exp(y)·Σdy`).
        SoftmaxGrad { axis: i64, log: bool } => "softmax_grad" [training],
        /// ONNX RMSNormalization (opset 23): inputs x and scale; over axes `axis..rank`,
        /// `y = x / √(mean(x²) + epsilon) · scale` (accumulated in f64, rounded once).
        RmsNormalization { axis: i64, epsilon: f32 } => "rms_norm",
    }
    /// Reductions (axes None = all axes, as ONNX) and the finiteness check.
    family Reduce(ReduceOp) "reduce" {
        ReduceMean { axes: Option<Vec<i64>>, keepdims: bool } => "reduce_mean",
        ReduceSum { axes: Option<Vec<i64>>, keepdims: bool } => "reduce_sum",
        ReduceMax { axes: Option<Vec<i64>>, keepdims: bool } => "reduce_max",
        ReduceMin { axes: Option<Vec<i64>>, keepdims: bool } => "reduce_min",
        ReduceProd { axes: Option<Vec<i64>>, keepdims: bool } => "reduce_prod",
        /// bool[]: true when every element of every (float) input is finite.
        AllFinite => "all_finite" [training],
        /// ONNX CumSum: inputs x and axis (an i64/i32 scalar or one-element 1-D tensor); running
        /// sums along the axis, in order (floats accumulate in f32 — f64 in f64 — and round
        /// once per output; integers wrap), excluding the current element when `exclusive`,
        /// from the end when `reverse`.
        CumSum { exclusive: bool, reverse: bool } => "cum_sum",
        /// ONNX ArgMax: the i64 index of the largest element along `axis` (the first one, or
        /// the last with `select_last_index`); the axis is kept as 1 with `keepdims`.
        ArgMax { axis: i64, keepdims: bool, select_last_index: bool } => "arg_max",
        /// ONNX ArgMin: as `arg_max`, for the smallest element.
        ArgMin { axis: i64, keepdims: bool, select_last_index: bool } => "arg_min",
        /// ONNX TopK: inputs x and k (a non-negative i64 scalar or one-element 1-D tensor);
        /// outputs the k largest (smallest unless `largest`) elements along `axis` and their i64
        /// indices, the axis becoming k. Always sorted (largest first, or smallest first), equal
        /// elements in index order; NaN counts as larger than every number (numpy's order).
        /// `sorted` false lets ONNX return any order: fp8c sorts anyway.
        TopK { axis: i64, largest: bool, sorted: bool } => "top_k",
    }
    /// Shape arithmetic and data movement.
    family Movement(MovementOp) "movement" {
        /// The shape of its input as i64[rank], sliced to `start..end`.
        Shape { start: i64, end: Option<i64> } => "shape",
        /// Inputs data and a shape tensor (i64[n]); 0 copies the input dim unless allowzero.
        Reshape { allowzero: bool } => "reshape" [view],
        Transpose { perm: Vec<i64> } => "transpose",
        Unsqueeze { axes: Vec<i64> } => "unsqueeze" [view],
        /// `axes` None removes every size-1 axis.
        Squeeze { axes: Option<Vec<i64>> } => "squeeze" [view],
        Flatten { axis: i64 } => "flatten" [view],
        Concat { axis: i64 } => "concat",
        /// Splits into `split.len()` outputs along `axis`; a `split` of n entries all -1 is
        /// ONNX's `num_outputs = n` (equal parts, see `infer::split_sizes`).
        Split { axis: i64, split: Vec<i64> } => "split",
        /// Inputs data, starts, ends, axes, steps (the importer fills absent axes/steps).
        Slice => "slice",
        Gather { axis: i64 } => "gather",
        /// ONNX GatherND: inputs data (rank r) and indices (i64, rank q, last dim k ≤ r −
        /// batch_dims); output `indices.shape[..q-1] ++ data.shape[batch_dims + k..]`, each
        /// index tuple picking a slice (negative indices count from the end).
        GatherNd { batch_dims: i64 } => "gather_nd",
        /// Inputs data and a target shape (i64[n]), numpy broadcasting.
        Expand => "expand",
        /// Input: shape (i64[n]); output filled with `value` (a one-element tensor).
        ConstantOfShape { value: Tensor } => "constant_of_shape",
        /// Inputs start, limit, delta (scalars).
        Range => "range",
        /// Inputs data, pads (i64[2*rank]), constant value (scalar).
        Pad { mode: PadMode } => "pad",
        /// Inputs data, repeats.
        Tile => "tile",
        /// Gradient of `gather { axis }` w.r.t. its data (an embedding's scatter-add): inputs dy
        /// and indices; output the data's shape (axis dim `size`), zero except that each gathered
        /// slice of dy is added back where it came from (repeated indices accumulate).
        GatherGrad { axis: i64, size: i64 } => "gather_grad" [training],
        /// ONNX Trilu: inputs x (rank ≥ 2) and k (an i64 scalar, the diagonal offset); keeps the
        /// upper (`upper`: column − row ≥ k) or lower (column − row ≤ k) triangle of each matrix
        /// of the last two axes, zeros elsewhere.
        Trilu { upper: bool } => "trilu",
        /// ONNX GatherElements: inputs data and indices (i64/i32) of the same rank; output
        /// shaped like indices, `out[..., i_axis, ...] = data[..., indices[...], ...]` along
        /// `axis` (negative indices count from the end).
        GatherElements { axis: i64 } => "gather_elements",
        /// ONNX ScatterElements: inputs data, indices (i64/i32) and updates (indices' shape,
        /// data's dtype); a copy of data where each `updates[i..]` lands at `i..` with
        /// `i_axis = indices[i..]`, combined per `reduction`, updates applied in row-major order.
        ScatterElements { axis: i64, reduction: ScatterReduction } => "scatter_elements",
        /// ONNX ScatterND: inputs data (rank r), indices (i64, rank q, last dim k ≤ r) and
        /// updates (`indices.shape[..q-1] ++ data.shape[k..]`); a copy of data where each index
        /// tuple's slice receives its update, combined per `reduction`, in row-major order.
        ScatterNd { reduction: ScatterReduction } => "scatter_nd",
        /// Input 0 itself, computed only once input 1 exists: an ordering edge the autodiff
        /// pass adds where a value is recomputed in backward, or kept for backward in another
        /// dtype (`passes/src/autodiff/memory/`), so that neither the step order nor fusion's
        /// sharing of equal expressions moves that work back into the forward pass. Input 1
        /// is only waited for, never read. A view: the CPU shares input 0's storage.
        After => "after" [view],
    }
    /// Quantization: ONNX's Q/DQ and fp8c's FP8 scaling ops (inserted by the scaling pass).
    family Fp8(Fp8Op) "fp8" {
        /// ONNX QuantizeLinear: inputs x, y_scale, y_zero_point; `to` is the quantized type.
        /// `block_size` 0: a per-tensor or per-axis scale; > 0 (opset 21's blocked form): the
        /// scale has x's rank, `ceil(dim / block_size)` entries along `axis`, x's dims elsewhere.
        QuantizeLinear { axis: i64, saturate: bool, to: DType, block_size: i64 } => "quantize_linear",
        /// ONNX DequantizeLinear: inputs x, x_scale, x_zero_point; output has the scale's type;
        /// `block_size` as in `quantize_linear`.
        DequantizeLinear { axis: i64, block_size: i64 } => "dequantize_linear",
        /// Max of |x| over the whole tensor: f32[] (NaN propagates).
        Amax => "amax" [scaling],
        /// Inputs: the amax source and the previous scale f32[]; outputs scale and scale_inv
        /// (both f32[]). The source is the recorded history f32[L] (first output of
        /// `amax_history_update`) for `history_max` / `history_most_recent` (most recent = slot 0,
        /// as TE), or this step's amax f32[] for `current` (then `max(amax, epsilon)`, and the
        /// scale rounded down to a power of two if `power_2`). TE's rules: amax 0, inf or NaN keeps
        /// the previous scale; an infinite result becomes f32::MAX; `scale = fmt_max / amax / 2^margin`.
        ComputeScale { fmt: DType, margin: f32, source: AmaxSource, epsilon: f32, power_2: bool } => "compute_scale" [scaling],
        /// Inputs history f32[L] and this step's amax f32[]; two outputs, both f32[L]:
        /// `recorded` = history with slot 0 set to amax (what the scale is computed from), and
        /// `next` = TE's roll of `recorded` (shift left by one, the old slot 0 moves to the end,
        /// then slot 0 zeroed), which becomes the state for the next step.
        AmaxHistoryUpdate => "amax_history_update" [scaling],
        /// `cast(x * scale)` to an FP8 type; inputs x and scale f32[].
        Quantize { to: DType, saturate: bool } => "quantize" [scaling],
        /// `f32(q) * scale_inv` to `to`; inputs q and scale_inv f32[].
        Dequantize { to: DType } => "dequantize" [scaling],
        /// ONNX Cast/CastLike to FLOAT8E8M0 with a `round_mode` (`cast` rounds up, ONNX's
        /// default): input a float tensor, output its e8m0 codes (fp8c-core `encode_e8m0`).
        CastE8m0 { round: E8m0Round, saturate: bool } => "cast_e8m0",
        /// Current scaling per tile (issue #16): x [..., R, C] (float, rank ≥ 2) cut into tiles
        /// of `rows` × `cols` (0: the whole axis; edge tiles may be short), each scaled from its
        /// own amax (`scaling`; `epsilon` floors the amax for `fp32` / `pow2`; amax 0 or
        /// non-finite gives scale 1) and quantized like `quantize`. Outputs q (x's shape, `to`)
        /// and scale_inv f32 [..., ceil(R/rows), ceil(C/cols)]. 1×128 / 128×128 tiles are
        /// DeepSeek-V3's and TE's block recipe, 1×0 rowwise (torchao), 1×32 with `e8m0` MXFP8.
        BlockQuantize { to: DType, saturate: bool, rows: i64, cols: i64, scaling: BlockScaling, epsilon: f32 } => "block_quantize" [scaling],
        /// `f32(q) · scale_inv` of each element's tile (`rows` × `cols` as in
        /// `block_quantize`), rounded once to `to`; inputs q and scale_inv.
        BlockDequantize { to: DType, rows: i64, cols: i64 } => "block_dequantize" [scaling],
    }
    /// Losses and their gradients (the autodiff pass emits them).
    family Loss(LossOp) "loss" {
        /// Mean softmax cross-entropy over the last axis with integer labels: inputs logits
        /// `[.., C]` and labels (i64/i32) `[..]`; outputs the loss (a scalar of the logits' type,
        /// the mean over the labels that count) and the log-probabilities. A label equal to
        /// [`IGNORE_INDEX`] (−100, PyTorch's default) does not count (NaN when none does); any
        /// other label outside `[0, C)` is an evaluation error naming it.
        SoftmaxCrossEntropy => "softmax_cross_entropy" [training],
        /// Gradient of `softmax_cross_entropy` w.r.t. the logits: inputs log_probs, labels and
        /// dloss (scalar); output `(softmax − onehot(labels)) · dloss / N` over the N labels
        /// that count, 0 on rows whose label is [`IGNORE_INDEX`].
        SoftmaxCrossEntropyGrad => "softmax_cross_entropy_grad" [training],
    }
    /// Optimizer steps on FP32 master weights (the autodiff pass emits them).
    family Optim(OptimOp) "optim" {
        /// PyTorch's SGD step: inputs param, grad, momentum buffer, lr (f32[]); outputs the new
        /// param and buffer. `g = grad + wd·param; buf = momentum·buf + g; param −= lr·(nesterov ?
        /// g + momentum·buf : buf)` (with momentum 0 the buffer is g).
        SgdUpdate { momentum: f32, weight_decay: f32, nesterov: bool } => "sgd_update" [training],
        /// PyTorch's AdamW step: inputs param, grad, m, v, lr (f32[]) and t (f32[], the 1-based
        /// count of applied updates); outputs the new param, m and v. `param −= lr·wd·param;
        /// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²; param −= lr·m̂ / (√v̂ + ε)` with the bias
        /// corrections `m̂ = m/(1−β1^t)`, `v̂ = v/(1−β2^t)`.
        AdamwUpdate { beta1: f32, beta2: f32, epsilon: f32, weight_decay: f32 } => "adamw_update" [training],
    }
    /// Fused ops (the fusion pass makes them). Each computes bit for bit what the unfused ops it replaces compute (its doc says which); an output nobody reads is not written. `expr` is an elementwise program (`fused.rs`).
    family Fused(FusedOp) "fused" {
        /// `quantize(x, scale)` and `amax(x)` in one read of x: inputs x, scale; outputs q, amax.
        QuantizeAmax { to: DType, saturate: bool } => "quantize_amax",
        /// TE's cast+transpose: inputs x, scale; outputs `q = quantize(x, scale)`,
        /// `transpose(q, perm)` and `amax(x)`.
        CastTranspose { perm: Vec<i64>, to: DType, saturate: bool } => "cast_transpose",
        /// LayerNorm emitting FP8: inputs x, scale, gamma and an optional beta; outputs
        /// `y = layer_norm(x, gamma, beta)`, `quantize(y, scale)` and `amax(y)`.
        LayerNormQuantize { axis: i64, epsilon: f32, to: DType, saturate: bool } => "layer_norm_quantize",
        /// LayerNorm over the last axis emitting per-tile FP8 (issue #16): inputs x, gamma and an
        /// optional beta; outputs `y = layer_norm(x, gamma, beta)` (f32) and the codes and
        /// per-tile `scale_inv` of `block_quantize { rows: 1, cols, scaling, epsilon:
        /// amax_epsilon }(y)` (TE's LayerNorm feeding a block-scaled Linear).
        LayerNormBlockQuantize { axis: i64, epsilon: f32, to: DType, saturate: bool, cols: i64, scaling: BlockScaling, amax_epsilon: f32 } => "layer_norm_block_quantize",
        /// Elementwise ops emitting FP8: inputs a0..a(n-1) and scale; outputs `y = expr(a..)`,
        /// `quantize(y, scale)` and `amax(y)`.
        ElementwiseQuantize { expr: EwExpr, to: DType, saturate: bool } => "elementwise_quantize",
        /// Elementwise ops emitting per-tile FP8 (issue #16): inputs a0..a(n-1); outputs
        /// `y = expr(a..)` (f32) and the codes and per-tile `scale_inv` of
        /// `block_quantize { rows: 1, cols }(y)`: tiles of one row and `cols` columns of the
        /// last axis (0: the whole row), an activation's or gradient's tiles along a GEMM's K
        /// (1×128, 1×32, rowwise).
        ElementwiseBlockQuantize { expr: EwExpr, to: DType, saturate: bool, cols: i64, scaling: BlockScaling, epsilon: f32 } => "elementwise_block_quantize",
        /// `scaled_matmul` with an elementwise epilogue, and optionally cuBLASLt's D scale and amax
        /// of D: inputs qa, qb, scale_inv_a, scale_inv_b, the epilogue's extra inputs, then (when
        /// `to` is set) the D scale. `expr` reads the product as `a0` and the extras as `a1..`.
        /// Outputs `d = expr(scaled_matmul(..), extras..)`, and with `to`: `quantize(d, d_scale)`
        /// and `amax(d)`.
        ScaledMatMulEpilogue { out: DType, fast_accum: bool, expr: EwExpr, to: Option<DType>, saturate: bool } => "scaled_matmul_epilogue",
        /// Every delayed-scaling update of a step in one kernel: inputs (history, amax, scale) per
        /// tensor; outputs (next history, scale, scale_inv) per tensor, each the result of
        /// `amax_history_update` then `compute_scale` with these attributes.
        BatchedScaleUpdate { fmt: DType, margin: f32, source: AmaxSource, epsilon: f32, power_2: bool } => "batched_scale_update" [scaling],
    }
    /// Fused scaled dot-product attention and its gradient (canonicalize recognises it in
    /// exports; `fp8c_ir::attention` states the shapes and the semantics both share).
    family Attention(AttentionOp) "attention" {
        /// `softmax(scale·Q·Kᵀ + mask)·V` per head, never materialising the scores: inputs q
        /// `[B, H, Tq, D]`, k `[B, Hkv, Tk, D]`, v `[B, Hkv, Tk, Dv]` (H a multiple of Hkv;
        /// query head h reads KV head `h / (H/Hkv)`) and an optional additive float mask
        /// broadcasting to `[B, H, Tq, Tk]`. `causal` hides key j from query i when
        /// `j > i + Tk − Tq`. Outputs o `[B, H, Tq, Dv]` and the row log-sum-exp
        /// `[B, H, Tq]` (f32; f64 for f64 inputs). A row with every key hidden (by `causal`
        /// or by −∞ in the mask) gives o = 0 and lse = −∞.
        Attention { scale: f64, causal: bool } => "attention",
        /// Gradient of `attention { scale, causal }` (FlashAttention-2's backward, the
        /// probabilities recomputed from q, k and lse): inputs q, k, v, o, lse, do and the
        /// forward's mask if it had one; outputs dq, dk, dv (dk and dv summed over each KV
        /// head's query heads). The mask gets no gradient.
        AttentionGrad { scale: f64, causal: bool } => "attention_grad" [training],
    }
}

/// The label `softmax_cross_entropy` skips (a padding position): PyTorch's `ignore_index`
/// default.
pub const IGNORE_INDEX: i64 = -100;

/// Whether a backend, the evaluator or a pass handles an op; `No` carries the stated reason
/// (coverage tests walk every op and read it; users see the reason in errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Handled.
    Yes,
    /// Not handled, and why (for autodiff: why the op has no gradient).
    No(&'static str),
}

impl Op {
    /// True for ops that read no inputs and define the graph's interface (`input`, `param`,
    /// `state`; a `constant` is in the interface family but not in the interface).
    pub fn is_interface(&self) -> bool {
        matches!(self, Op::Input { .. } | Op::Param { .. } | Op::State { .. })
    }

    /// True for elementwise ops with one input and one output of the same shape.
    pub fn is_elementwise_unary(&self) -> bool {
        use crate::elementwise::{Kind, Own};
        crate::elementwise::row_of(self)
            .is_some_and(|r| matches!(r.kind, Kind::Unary | Kind::Predicate | Kind::Own(Own::Not)))
    }

    /// True for broadcasting binary elementwise ops (arithmetic, comparisons, logic).
    pub fn is_elementwise_binary(&self) -> bool {
        use crate::elementwise::{Kind, Own};
        crate::elementwise::row_of(self).is_some_and(|r| {
            matches!(
                r.kind,
                Kind::Binary
                    | Kind::Variadic
                    | Kind::Compare
                    | Kind::Logic
                    | Kind::Own(Own::Pow | Own::Mod { .. })
            )
        })
    }

    /// True for GEMM-like ops the precision policy may put in FP8 (the table's `gemm` flag).
    pub fn is_gemm_like(&self) -> bool {
        self.props().gemm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_has_one_name_family_and_view() {
        let ex = Op::examples();
        assert_eq!(ex.len(), Op::NAMES.len());
        for (op, name) in ex.iter().zip(Op::NAMES) {
            assert_eq!(op.name(), *name);
            // The view and the family agree.
            let fam = match op.view() {
                OpView::Interface(_) => Family::Interface,
                OpView::Elementwise(_) => Family::Elementwise,
                OpView::Linalg(_) => Family::Linalg,
                OpView::Conv(_) => Family::Conv,
                OpView::Pool(_) => Family::Pool,
                OpView::Normalize(_) => Family::Normalize,
                OpView::Reduce(_) => Family::Reduce,
                OpView::Movement(_) => Family::Movement,
                OpView::Fp8(_) => Family::Fp8,
                OpView::Loss(_) => Family::Loss,
                OpView::Optim(_) => Family::Optim,
                OpView::Fused(_) => Family::Fused,
                OpView::Attention(_) => Family::Attention,
            };
            assert_eq!(op.family(), fam, "{name}");
            // Text form round trip of the example.
            let attrs = AttrMap(
                op.attrs()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            );
            assert_eq!(&Op::from_parts(name, attrs).unwrap(), op);
        }
    }
}
