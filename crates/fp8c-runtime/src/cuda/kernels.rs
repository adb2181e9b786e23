//! The kernel sources of `kernels/`, embedded in the binary, and the names of their entry
//! points.
//!
//! One `.cu` file per kernel family; `common.cuh` is handed to NVRTC as a header. Adding a
//! kernel file means adding it to [`FILES`] (the CI test fails on a `kernels/` file that is not
//! listed here, so none can be forgotten).

use fp8c_ir::DType;

/// A kernel source file.
#[derive(Clone, Copy, Debug)]
pub struct KernelFile {
    /// Its file name in `kernels/`.
    pub name: &'static str,
    /// Its text.
    pub source: &'static str,
}

macro_rules! kernel_file {
    ($name:literal) => {
        KernelFile {
            name: $name,
            source: include_str!(concat!("../../../../kernels/", $name)),
        }
    };
}

/// Headers every kernel file may include.
pub const HEADERS: &[KernelFile] = &[kernel_file!("common.cuh")];

/// The name of the header the runtime generates for `elementwise.cu` (see [`super::codegen`]).
pub const GENERATED_EW_HEADER: &str = "ew_expr.cuh";

/// Kernel families, one file each.
pub const QUANTIZE: KernelFile = kernel_file!("quantize.cu");
/// TE's cast + transpose.
pub const CAST_TRANSPOSE: KernelFile = kernel_file!("cast_transpose.cu");
/// Delayed-scaling updates.
pub const SCALE_UPDATE: KernelFile = kernel_file!("scale_update.cu");
/// Elementwise programs (needs the generated `ew_expr.cuh`).
pub const ELEMENTWISE: KernelFile = kernel_file!("elementwise.cu");
/// LayerNorm forward (+quantize) and backward.
pub const LAYERNORM: KernelFile = kernel_file!("layernorm.cu");
/// Softmax, log-softmax and their backward.
pub const SOFTMAX: KernelFile = kernel_file!("softmax.cu");
/// Reductions and the all-finite check.
pub const REDUCE: KernelFile = kernel_file!("reduce.cu");
/// Strided copies, fills and transposes.
pub const MOVEMENT: KernelFile = kernel_file!("movement.cu");
/// Gather and its gradient.
pub const GATHER: KernelFile = kernel_file!("gather.cu");
/// Softmax cross-entropy and its gradient.
pub const LOSSES: KernelFile = kernel_file!("losses.cu");
/// SGD and AdamW steps.
pub const OPTIMIZER: KernelFile = kernel_file!("optimizer.cu");
/// im2col, pooling windows and batch norm.
pub const CONV: KernelFile = kernel_file!("conv.cu");
/// Fine-grained FP8 scaling: per-tile quantize and dequantize, the exact block-scaled GEMM.
pub const BLOCK_SCALING: KernelFile = kernel_file!("block_scaling.cu");
/// Fused attention (FlashAttention-2): forward, and the backward's dot pre-pass, dq and dk/dv.
pub const ATTENTION: KernelFile = kernel_file!("attention.cu");

/// Every kernel file.
pub const FILES: &[KernelFile] = &[
    QUANTIZE,
    CAST_TRANSPOSE,
    SCALE_UPDATE,
    ELEMENTWISE,
    LAYERNORM,
    SOFTMAX,
    REDUCE,
    MOVEMENT,
    GATHER,
    LOSSES,
    OPTIMIZER,
    CONV,
    BLOCK_SCALING,
    ATTENTION,
];

/// The headers NVRTC gets for a fixed (not generated) kernel file.
pub fn fixed_headers() -> Vec<(&'static str, &'static str)> {
    HEADERS.iter().map(|h| (h.name, h.source)).collect()
}

/// The kernel-name spelling of a float dtype (`f32`, `bf16`, `f16`), FP8 (`e4m3`, `e5m2`),
/// bool, i64 or i32; `None` for the rest.
pub fn dtype_word(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::F32 => "f32",
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        DType::F8E4M3 => "e4m3",
        DType::F8E5M2 => "e5m2",
        DType::Bool => "bool",
        DType::I64 => "i64",
        DType::I32 => "i32",
        _ => return None,
    })
}

/// The storage kind code of `common.cuh` (`KIND_F32` ...) for a dtype kernels can read.
pub fn kind_code(d: DType) -> Option<u32> {
    Some(match d {
        DType::F32 => 0,
        DType::BF16 => 1,
        DType::F16 => 2,
        DType::Bool | DType::U8 => 3,
        DType::F8E4M3 => 4,
        DType::F8E5M2 => 5,
        _ => return None,
    })
}

/// True for the float dtypes the arithmetic kernels take (f32, bf16, f16).
pub fn is_kernel_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::BF16 | DType::F16)
}
