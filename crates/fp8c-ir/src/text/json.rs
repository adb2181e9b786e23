//! The JSON form: the serde serialisation of a graph's canonical [`GraphDef`].
//!
//! Limits of JSON itself: non-finite floats (an `inf` attribute, a NaN state initial value)
//! serialise as `null` and do not read back; tensor data (constants and, on request,
//! weights) is written as arrays of bytes.

use crate::{Attr, Graph, GraphDef, IrError, Result, Tensor};

/// The graph as JSON, without weights.
pub fn to_json(g: &Graph) -> String {
    let mut def = g.to_def();
    def.weights.clear();
    write(&def)
}

/// The graph as JSON, weights included (as byte arrays: large).
pub fn to_json_with_weights(g: &Graph) -> String {
    write(&g.to_def())
}

fn write(def: &GraphDef) -> String {
    // Plain data with string map keys: serialising to a String cannot fail.
    serde_json::to_string(def).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// Reads a graph from JSON written by [`to_json`] or [`to_json_with_weights`]. References
/// and tensor sizes are checked; types are not (run the verifier).
pub fn from_json(text: &str) -> Result<Graph> {
    let def: GraphDef = serde_json::from_str(text).map_err(|e| IrError::Parse {
        line: e.line(),
        col: e.column(),
        msg: format!("JSON: {e}"),
    })?;
    // Tensor's fields are deserialised directly: re-check the byte count against the shape.
    let check = |t: &Tensor, what: &str| -> Result<()> {
        let want =
            crate::checked_numel(t.shape()).and_then(|n| n.checked_mul(t.dtype().size() as u64));
        if want == Some(t.bytes().len() as u64) {
            return Ok(());
        }
        Err(IrError::Other(format!(
            "JSON: {what}: a {} tensor of shape {:?} cannot hold {} bytes",
            t.dtype(),
            t.shape(),
            t.bytes().len()
        )))
    };
    for n in &def.nodes {
        for (key, a) in n.op.attrs() {
            if let Attr::Tensor(t) = a {
                check(&t, &format!("node {:?}, attribute `{key}`", n.name))?;
            }
        }
    }
    for (name, t) in &def.weights {
        check(t, &format!("weight {name:?}"))?;
    }
    Graph::from_def(&def)
}
