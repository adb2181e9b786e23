//! Hand-written text: the canonical MLP prints back identically; conveniences (comments, blank
//! lines, optional parts) are accepted.

use super::*;

#[test]
fn mlp_text_prints_back_identically() {
    let g = parse(MLP).unwrap();
    assert_eq!(print(&g), MLP);
    assert_eq!(g.name(), "mlp");
    assert_eq!(g.inputs().len(), 1);
    assert_eq!(g.params().len(), 2);
    assert_eq!(g.state().len(), 4);
    assert_eq!(g.state()[1].1, 1.0);
    assert_eq!(
        g.outputs()
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["probs", "logits"]
    );
    assert_eq!(g.state_updates().len(), 4);
    let fc1 = g.find_node("fc1").unwrap();
    assert_eq!(
        g.node(fc1).op,
        Op::ScaledMatMul {
            out: DType::F32,
            fast_accum: true
        }
    );
    assert_eq!(g.node(fc1).inputs()[2].slot, 1);
    let scale = g.find_node("fc1.x.scale").unwrap();
    assert_eq!(
        g.node(scale).op,
        Op::ComputeScale {
            fmt: DType::F8E4M3,
            margin: 0.0,
            source: AmaxSource::HistoryMax,
            epsilon: 0.0,
            power_2: false
        }
    );
    let sym = &g.node(g.inputs()[0]).outputs[0].shape[0];
    assert_eq!(*sym, Dim::Sym("batch".into()));
    assert!(g.weights().is_empty());
    assert_round_trip(&g);
}

#[test]
fn hand_written_conveniences_are_accepted() {
    // Comment lines, blank lines, a multi-line header, sparse numbering, unnamed nodes,
    // integer literals for float attributes.
    let text = r#"
// a comment before the graph
graph @g(
    %x: f32[4],
    %y: f32[4]
) {
  // a comment inside
  %10: f32[4] = add %x, %y

  %20: f32[4] = leaky_relu %10 alpha=1
  %30: f32[4] = add %20, %10  # add
  return %30 as "out"
}
// trailing comment
"#;
    let g = parse(text).unwrap();
    let names: Vec<String> = g
        .node_ids()
        .iter()
        .map(|&id| g.node(id).name.clone())
        .collect();
    assert_eq!(names, ["x", "y", "add.1", "leaky_relu", "add"]);
    assert_eq!(
        g.node(g.find_node("leaky_relu").unwrap()).op,
        Op::LeakyRelu { alpha: 1.0 }
    );
    let canonical = print(&g);
    assert!(
        canonical.contains("%0: f32[4] = add %x, %y  # add.1\n"),
        "{canonical}"
    );
    assert!(canonical.contains("alpha=1.0"), "{canonical}");
    assert_round_trip(&g);
}
