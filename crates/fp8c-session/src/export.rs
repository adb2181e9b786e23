//! Saving a trained model as ONNX: the trained weights written into a copy of the source
//! model ([`fp8c_onnx::export::with_weights`]), saved atomically.

use crate::error::{Context, Error, Result};
use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes `weights` into a copy of the ONNX model at `src` and saves it to `dst`. Returns the
/// names found neither as an initializer nor as a `Constant` (their values are not saved).
/// Errors are prefixed with `src`.
pub fn save_onnx(
    src: &Path,
    dst: &Path,
    weights: &BTreeMap<String, Tensor>,
) -> Result<Vec<String>> {
    let bytes = std::fs::read(src)
        .map_err(|e| Error::io(format_args!("{}: cannot read", src.display()), e))?;
    let (out, missing) =
        fp8c_onnx::export::with_weights(&bytes, weights).with_context(|| src.display())?;
    crate::files::write_bytes_atomic(dst, &out)?;
    Ok(missing)
}
