//! Readers of ONNX protos' small facts that the importer and its helpers (inspect, strings,
//! shape inputs, errors) share: whether a domain is ONNX's default one, and a value info's
//! element type and shape. A leaf: it calls nothing else of the crate, so no helper has to
//! reach back into the import driver for them.

use crate::proto::ValueInfoProto;
use crate::proto::tensor_shape_proto::dimension;
use crate::proto::type_proto;
use fp8c_ir::{Dim, Shape};

/// Whether `domain` names ONNX's default operator set (empty or `ai.onnx`).
pub(crate) fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

fn dim_from_proto(d: &crate::proto::tensor_shape_proto::Dimension) -> Dim {
    match &d.value {
        Some(dimension::Value::DimValue(v)) if *v >= 0 => Dim::Known(*v as u64),
        // "?" is how some exporters spell an unnamed dimension.
        Some(dimension::Value::DimParam(p)) if !p.is_empty() && p != "?" => Dim::Sym(p.clone()),
        _ => Dim::Unknown,
    }
}

/// The tensor element type and shape of a value info, if it has them.
pub(crate) fn value_info_parts(vi: &ValueInfoProto) -> Result<(i32, Option<Shape>), &'static str> {
    let tp = vi.r#type.as_ref().ok_or("has no type")?;
    match &tp.value {
        Some(type_proto::Value::TensorType(tt)) => Ok((
            tt.elem_type(),
            tt.shape
                .as_ref()
                .map(|s| s.dim.iter().map(dim_from_proto).collect()),
        )),
        Some(_) => {
            Err("is not a tensor (sequence, map, optional and sparse values are not supported)")
        }
        None => Err("has no type"),
    }
}
