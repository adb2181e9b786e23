//! fp8c's graph IR.
//!
//! A [`Graph`] holds nodes (an [`Op`] over input [`Value`]s with typed outputs) and an
//! interface of inputs, parameters (FP32 master weights), state (amax histories, scales) and
//! outputs. State is threaded functionally: `state` nodes read it at the start of a step and
//! `state_updates` say what it becomes at the end, so every pass is a pure graph rewrite.

pub mod attention;
mod attr;
mod dtype;
pub mod elementwise;
mod error;
pub mod fmath;
pub mod formula;
pub mod fused;
mod graph;
pub mod infer;
pub mod memory;
mod op;
pub mod safetensors_codec;
mod shape;
mod storage;
mod tensor;
pub mod text;
mod verify;
pub mod window;

pub use attr::{Attr, AttrMap, AttrValue};
pub use dtype::DType;
pub use error::{IrError, Result};
pub use fused::{EwArg, EwExpr, EwInst};
pub use graph::{Graph, GraphDef, Node, NodeDef, NodeId, Output, Value, ValueRef, interface_name};
pub use op::{
    AmaxSource, AttentionOp, AutoPad, BlockScaling, ConvOp, E8m0Round, ElementwiseOp, Family,
    Fp8Op, FusedOp, GeluApprox, InterfaceOp, LinalgOp, LossOp, MovementOp, NormalizeOp, Op, OpView,
    OptimOp, PadMode, PoolOp, Props, ReduceOp, Support,
};
pub use op::{IGNORE_INDEX, ScatterReduction};
pub use shape::{Dim, Shape, TensorType, shape_of};
pub use storage::{Storage, StorageHandle};
pub use tensor::{MAX_ELEMENTS, Tensor, checked_numel};
pub use text::{
    from_json, parse, print, read_weights, to_json, to_json_with_weights, write_weights,
};
pub use verify::verify;
