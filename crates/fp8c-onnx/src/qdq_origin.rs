//! Which ONNX node an FP8 GEMM of the compiled graph is, for the Q/DQ export: the export puts
//! Q/DQ on the inputs of ONNX nodes, and the precision policy names IR GEMMs.
//!
//! A GEMM imported from a MatMul, Gemm or Conv has its ONNX node's name. A GEMM the importer
//! built inside another op is a helper named `{onnx node}.{what}{n}` (`ops/mod.rs`
//! `add_helper`); of those only an Einsum's product maps back soundly, and only when its two
//! operands reach the product unchanged up to transposes, reshapes and broadcasting (no
//! repeated label taking a diagonal, no label summed out before the product). Quantizing
//! elementwise with one per-tensor scale commutes with moving elements, so Q/DQ on the
//! Einsum's inputs then computes exactly the FP8 product fp8c computes. Per-tile scales also
//! depend on where K lies, so with tiles the Einsum must be shaped as a MatMul: one contracted
//! label, the last axis of operand 0, and a 2-D operand 1.
//! Everything else stays in high precision in the exported file, with a note saying why.

use crate::proto::NodeProto;

/// The index of the ONNX node whose inputs are GEMM `gemm`'s operands (`names[i]` is node
/// `i`'s name as the importer gives it), or why there is none. `per_tile`: the operands get
/// per-tile scales, not one per tensor.
pub(crate) fn gemm_node(
    names: &[String],
    nodes: &[NodeProto],
    gemm: &str,
    per_tile: bool,
) -> Result<usize, String> {
    if let Some(k) = names.iter().position(|n| n == gemm) {
        return Ok(k);
    }
    // The helper's ONNX node: the longest node name that prefixes `gemm` up to a '.'.
    let Some(k) = names
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            gemm.strip_prefix(n.as_str())
                .is_some_and(|rest| rest.starts_with('.'))
        })
        .max_by_key(|(_, n)| n.len())
        .map(|(k, _)| k)
    else {
        return Err(format!(
            "GEMM \"{gemm}\" comes from no ONNX node (the importer made it), so its operands are not ONNX values"
        ));
    };
    let (name, op) = (&names[k], nodes[k].op_type());
    if op != "Einsum" {
        return Err(format!(
            "GEMM \"{gemm}\" is a helper of node \"{name}\" ({op}), whose inputs are not its operands"
        ));
    }
    let pair = EinsumPair::of(&nodes[k]).map_err(|why| {
        format!("GEMM \"{gemm}\" is the product inside Einsum \"{name}\", whose inputs are not its operands: {why}")
    })?;
    if per_tile && pair.matmul_k_axes().is_none() {
        return Err(format!(
            "GEMM \"{gemm}\" is the product inside Einsum \"{name}\" (\"{}\"), which is not shaped as a MatMul (one contracted label, last in operand 0; operand 1 2-D), as per-tile scales along K need",
            pair.equation
        ));
    }
    Ok(k)
}

/// A two-operand Einsum whose operands are its product's operands, rearranged.
pub(crate) struct EinsumPair {
    equation: String,
    a: Vec<char>,
    b: Vec<char>,
}

impl EinsumPair {
    /// Reads `n`'s equation; an error says why its product's operands are not its inputs.
    pub(crate) fn of(n: &NodeProto) -> Result<Self, String> {
        let eq = n
            .attribute
            .iter()
            .find(|a| a.name() == "equation")
            .and_then(|a| a.s.as_deref())
            .and_then(|s| std::str::from_utf8(s).ok())
            .ok_or("it has no equation")?;
        let equation: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, out) = match equation.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (equation.as_str(), None),
        };
        let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
        let [a, b] = &terms[..] else {
            return Err(format!("\"{eq}\" has {} operands, not two", terms.len()));
        };
        if !equation
            .chars()
            .all(|c| c.is_ascii_alphabetic() || ",->".contains(c))
        {
            return Err(format!("\"{eq}\" has an ellipsis"));
        }
        let out: Vec<char> = match out {
            Some(o) => o.chars().collect(),
            // Implicit output: the labels used once.
            None => a
                .iter()
                .chain(b)
                .copied()
                .filter(|l| a.iter().chain(b).filter(|m| *m == l).count() == 1)
                .collect(),
        };
        for (t, other) in [(a, b), (b, a)] {
            for (i, l) in t.iter().enumerate() {
                if t[..i].contains(l) {
                    return Err(format!("\"{eq}\" takes a diagonal (label '{l}' repeats)"));
                }
                if !other.contains(l) && !out.contains(l) {
                    return Err(format!(
                        "\"{eq}\" sums label '{l}' out of one operand before the product"
                    ));
                }
            }
        }
        Ok(EinsumPair {
            equation: eq.to_string(),
            a: a.clone(),
            b: b.clone(),
        })
    }

    /// The reduction axis of operands 0 and 1 when the Einsum is shaped as a MatMul: one
    /// contracted label (in both operands, not in the output), the last axis of operand 0,
    /// and a 2-D operand 1.
    pub(crate) fn matmul_k_axes(&self) -> Option<(usize, usize)> {
        let shared: Vec<char> = self
            .a
            .iter()
            .copied()
            .filter(|l| self.b.contains(l))
            .collect();
        let [c] = shared[..] else { return None };
        let ka = self.a.iter().position(|&l| l == c)?;
        let kb = self.b.iter().position(|&l| l == c)?;
        (ka + 1 == self.a.len() && self.b.len() == 2).then_some((ka, kb))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::AttributeProto;

    fn einsum(name: &str, eq: &str) -> NodeProto {
        NodeProto {
            op_type: Some("Einsum".into()),
            name: Some(name.into()),
            attribute: vec![AttributeProto {
                name: Some("equation".into()),
                s: Some(eq.as_bytes().to_vec()),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn node_of(eq: &str, gemm: &str, per_tile: bool) -> Result<usize, String> {
        let nodes = [
            NodeProto {
                op_type: Some("MatMul".into()),
                name: Some("/l".into()),
                ..Default::default()
            },
            einsum("/l.e", eq),
        ];
        let names = ["/l".to_string(), "/l.e".to_string()];
        gemm_node(&names, &nodes, gemm, per_tile)
    }

    #[test]
    fn names_map_to_their_node_or_say_why_not() {
        assert_eq!(node_of("btd,de->bte", "/l", false), Ok(0));
        // The longest prefix wins: "/l.e.matmul3" is the Einsum's helper, not the MatMul's.
        assert_eq!(node_of("btd,de->bte", "/l.e.matmul3", true), Ok(1));
        assert_eq!(node_of("btd,ed->bte", "/l.e.matmul3", true), Ok(1));
        assert_eq!(node_of("bhqd,bhkd->bhqk", "/l.e.matmul3", false), Ok(1));
        assert_eq!(node_of("ij,jk", "/l.e.matmul1", false), Ok(1));
        let why = |eq, gemm, tiles| node_of(eq, gemm, tiles).unwrap_err();
        assert!(why("btd,de->bte", "/x.matmul1", false).contains("no ONNX node"));
        assert!(why("btd,de->bte", "/l.matmul1", false).contains("(MatMul)"));
        assert!(why("bii,ij->bj", "/l.e.matmul3", false).contains("diagonal"));
        assert!(why("btd,de->be", "/l.e.matmul3", false).contains("sums label 't'"));
        assert!(why("...d,de->...e", "/l.e.matmul3", false).contains("ellipsis"));
        assert!(why("ij,jk,kl->il", "/l.e.matmul3", false).contains("3 operands"));
        assert!(why("bdt,de->bte", "/l.e.matmul3", true).contains("not shaped as a MatMul"));
        assert!(why("bhqd,bhkd->bhqk", "/l.e.matmul3", true).contains("MatMul"));
    }
}
