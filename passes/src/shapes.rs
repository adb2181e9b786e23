//! Binding concrete input shapes (`--input-shape input_ids=2x64`) to a graph.
//!
//! Given shapes replace the declared dims of those inputs; every symbolic dim they bind
//! (`batch` = 2, `sequence` = 64) is then substituted in the other inputs too, so giving the
//! shape of `input_ids` also fixes `attention_mask [batch, sequence]`. Types are then
//! re-inferred by canonicalize.

use fp8c_ir::{Dim, Graph, IrError, Op, TensorType, interface_name};
use std::collections::{BTreeMap, HashMap};

/// Largest single dimension `--input-shape` accepts.
pub const MAX_DIM: u64 = 1 << 31;

/// Sets the given input shapes and propagates the symbols they bind to the other inputs.
pub fn bind_input_shapes(
    g: &mut Graph,
    shapes: &BTreeMap<String, Vec<u64>>,
) -> Result<(), IrError> {
    let mut bound: HashMap<String, u64> = HashMap::new();
    for (name, dims) in shapes {
        let id = g
            .inputs()
            .iter()
            .copied()
            .find(|&id| interface_name(&g.node(id).op) == name)
            .ok_or_else(|| {
                let known: Vec<&str> = g
                    .inputs()
                    .iter()
                    .map(|&id| interface_name(&g.node(id).op))
                    .collect();
                IrError::Other(format!(
                    "--input-shape: no graph input named \"{name}\" (inputs are: {})",
                    known.join(", ")
                ))
            })?;
        let old = g.node(id).outputs[0].clone();
        if old.rank() != dims.len() {
            return Err(IrError::Other(format!(
                "--input-shape {name}: gives {} dims but the input has rank {} ({old})",
                dims.len(),
                old.rank()
            )));
        }
        for (axis, (d, &n)) in old.shape.iter().zip(dims).enumerate() {
            if n > MAX_DIM {
                return Err(IrError::Other(format!(
                    "--input-shape {name}: dim {axis} = {n} is too large (max {MAX_DIM})"
                )));
            }
            match d {
                Dim::Known(k) if *k != n => {
                    return Err(IrError::Other(format!(
                        "--input-shape {name}: dim {axis} is fixed to {k} in the model, cannot be {n}"
                    )));
                }
                Dim::Sym(s) => match bound.insert(s.clone(), n) {
                    Some(prev) if prev != n => {
                        return Err(IrError::Other(format!(
                            "--input-shape: symbol `{s}` bound to both {prev} and {n}"
                        )));
                    }
                    _ => {}
                },
                _ => {}
            }
        }
        fp8c_ir::checked_numel(dims).ok_or_else(|| {
            IrError::Other(format!(
                "--input-shape {name}: {dims:?} has too many elements"
            ))
        })?;
        g.set_interface_type(id, TensorType::fixed(old.dtype, dims))?;
    }
    for id in g.inputs().to_vec() {
        if let Op::Input { name } = &g.node(id).op
            && shapes.contains_key(name)
        {
            continue;
        }
        let ty = g.node(id).outputs[0].clone();
        let shape = ty
            .shape
            .iter()
            .map(|d| match d {
                Dim::Sym(s) => bound.get(s).map_or(d.clone(), |&n| Dim::Known(n)),
                other => other.clone(),
            })
            .collect();
        g.set_interface_type(id, TensorType::new(ty.dtype, shape))?;
    }
    Ok(())
}

/// Parses `NAME=2x64` (also `NAME=2,64`; `NAME=` for a scalar) into a name and dims,
/// rejecting negative, non-numeric or absurd sizes with a message naming the input.
pub fn parse_input_shape(spec: &str) -> Result<(String, Vec<u64>), String> {
    let (name, dims) = spec.split_once('=').ok_or_else(|| {
        format!("--input-shape `{spec}`: expected NAME=DIMS, e.g. input_ids=2x64")
    })?;
    if name.is_empty() {
        return Err(format!("--input-shape `{spec}`: the input name is empty"));
    }
    let mut out = Vec::new();
    for part in dims.split(['x', ',']).filter(|p| !p.is_empty()) {
        let n: i128 = part
            .trim()
            .parse()
            .map_err(|_| format!("--input-shape {name}: `{part}` is not a number"))?;
        if n < 0 {
            return Err(format!("--input-shape {name}: negative dimension {n}"));
        }
        if n > MAX_DIM as i128 {
            return Err(format!(
                "--input-shape {name}: dimension {n} is too large (max {MAX_DIM})"
            ));
        }
        out.push(n as u64);
    }
    if fp8c_ir::checked_numel(&out).is_none() {
        return Err(format!(
            "--input-shape {name}: {out:?} has too many elements"
        ));
    }
    Ok((name.to_string(), out))
}
