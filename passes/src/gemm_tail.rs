//! ONNX Gemm's tail, `alpha · y + beta · C`, rebuilt around the product `y` a scaling pass
//! made from a Gemm (per-tensor `scaled_matmul` in `scaling.rs`, blocks in
//! `block_scaling.rs`): both passes read it from here, so neither calls back into the other.

use fp8c_ir::{DType, Graph, IrError, Op, Tensor, Value};

/// ONNX Gemm's `alpha · y + beta · C` around an FP8 product `y` (either scaling).
pub(crate) fn gemm_tail(
    g: &mut Graph,
    nm: &str,
    mut y: Value,
    (alpha, beta): (f32, f32),
    c: Option<Value>,
) -> Result<Value, IrError> {
    let dt = g.value_type(y).dtype;
    if alpha != 1.0 {
        let a = g.add_node(
            &format!("{nm}.alpha"),
            Op::Constant {
                value: scalar_of(dt, alpha as f64)?,
            },
            &[],
        )?[0];
        y = g.add_node(&format!("{nm}.scaled"), Op::Mul, &[y, a])?[0];
    }
    if let Some(c) = c {
        let c = if beta != 1.0 {
            let b = g.add_node(
                &format!("{nm}.beta"),
                Op::Constant {
                    value: scalar_of(g.value_type(c).dtype, beta as f64)?,
                },
                &[],
            )?[0];
            g.add_node(&format!("{nm}.bias.scaled"), Op::Mul, &[c, b])?[0]
        } else {
            c
        };
        y = g.add_node(&format!("{nm}.bias"), Op::Add, &[y, c])?[0];
    }
    Ok(y)
}

fn scalar_of(dt: DType, v: f64) -> Result<Tensor, IrError> {
    Tensor::from_f64_as(dt, vec![], &[v]).map_err(IrError::Other)
}
