//! FP8 rules: quantize and dequantize pass the gradient straight through, the FP8 GEMM's
//! rule quantizes the incoming gradient (E5M2 under HYBRID) for its two backward GEMMs
//! (`crate::autodiff::fp8`, which owns the gradient quantizer); the scaling bookkeeping
//! (amax, scales, histories) carries no gradient.

use super::{At, Grads, R};
use crate::autodiff::emit::Emit;
use crate::autodiff::fp8::GradQuantizer;
use fp8c_ir::{Fp8Op, Support};

/// Quantize, dequantize and the scaling bookkeeping have rules; ONNX Q/DQ has none.
pub(super) fn support(o: Fp8Op<'_>) -> Support {
    match o {
        Fp8Op::Quantize { .. }
        | Fp8Op::Dequantize { .. }
        | Fp8Op::Amax
        | Fp8Op::ComputeScale { .. }
        | Fp8Op::AmaxHistoryUpdate
        | Fp8Op::BlockQuantize { .. }
        | Fp8Op::BlockDequantize { .. } => Support::Yes,
        Fp8Op::CastE8m0 { .. } => {
            Support::No("a cast to FLOAT8E8M0 (a power-of-two scale code) has no gradient")
        }
        Fp8Op::QuantizeLinear { .. } | Fp8Op::DequantizeLinear { .. } => Support::No(
            "ONNX QuantizeLinear/DequantizeLinear are not trained through (fp8c's own quantize is)",
        ),
        Fp8Op::__Lifetime(never, _) => match never {},
    }
}

/// The FP8 family's (and `scaled_matmul`'s) rules.
pub(super) fn vjp(e: &mut Emit<'_>, q: &mut GradQuantizer, at: &At<'_>) -> R<Option<Grads>> {
    match at.op {
        // Scaling bookkeeping carries no gradient (quantize's scale input is not differentiated).
        fp8c_ir::Op::Amax | fp8c_ir::Op::ComputeScale { .. } | fp8c_ir::Op::AmaxHistoryUpdate => {
            Ok(Some(vec![None; at.ins.len()]))
        }
        _ => crate::autodiff::fp8::vjp(e, q, at),
    }
}
