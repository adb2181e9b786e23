//! The verifier: a well-formed graph verifies; every problem is reported; declared types may
//! refine inference but not contradict it.

use super::*;

/// x → fc (matmul) → relu, with FP8 scaling of x and state for its amax history.
fn small_graph() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.add_input("x", ty("f32[batch,256]")).unwrap();
    let w = g
        .add_param(
            "w",
            ty("f32[256,512]"),
            Some(Tensor::zeros(DType::F32, vec![256, 512]).unwrap()),
        )
        .unwrap();
    let h = g.add_state("x.h", ty("f32[16]"), 0.0).unwrap();
    let prev = g.add_state("x.s", ty("f32[]"), 1.0).unwrap();
    let amax = g.add_node("x.amax", Op::Amax, &[x]).unwrap()[0];
    let upd = g
        .add_node("x.hist", Op::AmaxHistoryUpdate, &[h, amax])
        .unwrap();
    let cs = Op::ComputeScale {
        fmt: DType::F8E4M3,
        margin: 0.0,
        source: AmaxSource::HistoryMax,
        epsilon: 0.0,
        power_2: false,
    };
    let scale = g.add_node("x.scale", cs, &[upd[0], prev]).unwrap();
    let q = g
        .add_node(
            "x.q",
            Op::Quantize {
                to: DType::F8E4M3,
                saturate: true,
            },
            &[x, scale[0]],
        )
        .unwrap()[0];
    let dq = g
        .add_node("x.dq", Op::Dequantize { to: DType::F32 }, &[q, scale[1]])
        .unwrap()[0];
    let fc = g.add_node("fc", Op::MatMul, &[dq, w]).unwrap()[0];
    let y = g.add_node("relu", Op::Relu, &[fc]).unwrap()[0];
    g.set_output("y", y).unwrap();
    g.set_state_update("x.h", upd[1]).unwrap();
    g.set_state_update("x.s", scale[0]).unwrap();
    g
}

fn verify_errors(g: &Graph) -> Vec<String> {
    match verify(g) {
        Ok(()) => vec![],
        Err(IrError::Verify(errs)) => errs.iter().map(ToString::to_string).collect(),
        Err(other) => panic!("verify must return IrError::Verify, got {other}"),
    }
}

#[track_caller]
fn assert_has(errors: &[String], needle: &str) {
    assert!(
        errors.iter().any(|e| e.contains(needle)),
        "no error contains {needle:?}; errors:\n{}",
        errors.join("\n")
    );
}

#[test]
fn a_well_formed_graph_verifies() {
    assert_eq!(verify(&small_graph()), Ok(()));
    let mut g = Graph::new("empty");
    g.add_input("x", ty("f32[2]")).unwrap();
    assert_eq!(verify(&g), Ok(()));
}

/// Output 0 of a node.
fn out0(id: NodeId) -> Value {
    Value::new(id, 0)
}

#[test]
fn verifier_reports_every_problem() {
    let mut g = small_graph();
    let x = out0(g.find_interface("x").unwrap());
    // 1. A node whose declared type disagrees with inference.
    g.add_node_typed("bad_relu", Op::Relu, &[x], vec![ty("f16[batch,256]")])
        .unwrap();
    // 2. A node whose inference fails.
    let z = g.add_input("z", ty("f32[3,4]")).unwrap();
    g.add_node_typed("bad_mm", Op::MatMul, &[z, z], vec![ty("f32[3,4]")])
        .unwrap();
    // 3. A state update of the wrong type.
    let amax = out0(g.find_node("x.amax").unwrap());
    g.set_state_update("x.h", amax).unwrap();
    // 4. A weight whose type no longer matches its param.
    let v = g
        .add_param(
            "v",
            ty("f32[2]"),
            Some(Tensor::from_f32(vec![2], &[1.0, 2.0])),
        )
        .unwrap();
    g.set_interface_type(v.node, ty("f32[3]")).unwrap();
    // 5. A cycle: relu reads itself through a second relu.
    let relu = g.find_node("relu").unwrap();
    let again = g.add_node("again", Op::Relu, &[out0(relu)]).unwrap()[0];
    g.set_input(relu, 0, again).unwrap();
    // 6. An input referring to an output slot that no longer exists.
    let split = g
        .add_node(
            "split",
            Op::Split {
                axis: 1,
                split: vec![128, 128],
            },
            &[x],
        )
        .unwrap();
    g.add_node("use_second", Op::Relu, &[split[1]]).unwrap();
    g.set_op(
        split[0].node,
        Op::Split {
            axis: 1,
            split: vec![256],
        },
        vec![ty("f32[batch,256]")],
    );
    // 7. An output count that disagrees with the op.
    g.set_op(amax.node, Op::Amax, vec![ty("f32[]"), ty("f32[]")]);

    let errors = verify_errors(&g);
    assert_has(
        &errors,
        "node \"bad_relu\" (relu): output 0 is declared f16[batch,256], but inference gives f32[batch,256]",
    );
    assert_has(
        &errors,
        "node \"bad_mm\" (matmul): input 1 (B) has shape f32[3,4], its first dim (3) must equal input 0's last dim (4)",
    );
    assert_has(
        &errors,
        "node \"x.h\" (state): its update has type f32[], but the state is declared f32[16]",
    );
    assert_has(
        &errors,
        "node \"v\" (param): its weight data has type f32[2], but the param is declared f32[3]",
    );
    assert_has(&errors, "graph has a cycle through nodes: again, relu");
    assert_has(
        &errors,
        "node \"use_second\" (relu): input 0 refers to output 1 of node \"split\", which has 1 output(s)",
    );
    assert_has(
        &errors,
        "node \"x.amax\" (amax): declares 2 output(s), but the op gives 1",
    );
    assert_eq!(errors.len(), 7, "{errors:#?}");
    // The whole error prints as one list.
    let all = verify(&g).unwrap_err().to_string();
    assert!(
        all.starts_with("verification failed with 7 error(s):\n  - node"),
        "{all}"
    );
}

#[test]
fn verifier_checks_the_interface_lists() {
    let g = small_graph();
    let mut def = g.to_def();
    // Drop the input and the second state from their lists.
    def.inputs.clear();
    let xs = def.nodes.iter().position(|n| n.name == "x.s").unwrap();
    def.state.retain(|&(i, _)| i != xs);
    def.state_updates.remove("x.s");
    let g2 = Graph::from_def(&def).unwrap();
    let errors = verify_errors(&g2);
    assert_has(
        &errors,
        "node \"x\" (input): is not listed among the graph's inputs",
    );
    assert_has(
        &errors,
        "node \"x.s\" (state): is not listed among the graph's states",
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");

    // A param listed as an input, and a param listed twice.
    let mut def = g.to_def();
    let w = def.nodes.iter().position(|n| n.name == "w").unwrap();
    def.inputs.push(w);
    def.params.push(w);
    let errors = verify_errors(&Graph::from_def(&def).unwrap());
    assert_has(
        &errors,
        "node \"w\" (param): is listed among the graph's inputs but is a param node",
    );
    assert_has(
        &errors,
        "node \"w\" (param): is listed more than once among the graph's params",
    );
}

#[test]
fn declared_types_may_refine_but_not_contradict_inference() {
    let mut g = Graph::new("t");
    let x = g.add_input("x", ty("f32[6]")).unwrap();
    let s = g.add_input("s", ty("i64[2]")).unwrap();
    // Inference gives f32[?,?] (the shape is not a constant): declaring [2,3] refines it.
    let r = g
        .add_node_typed(
            "r",
            Op::Reshape { allowzero: false },
            &[x, s],
            vec![ty("f32[2,3]")],
        )
        .unwrap()[0];
    g.set_output("r", r).unwrap();
    assert_eq!(verify(&g), Ok(()));
    // A known size or a symbol must be kept as inferred.
    g.add_node_typed("n", Op::Relu, &[x], vec![ty("f32[?]")])
        .unwrap();
    g.add_node_typed("m", Op::Relu, &[r], vec![ty("f32[2,?,1]")])
        .unwrap();
    let errors = verify_errors(&g);
    assert_has(
        &errors,
        "node \"n\" (relu): output 0 is declared f32[?], but inference gives f32[6]",
    );
    assert_has(
        &errors,
        "node \"m\" (relu): output 0 is declared f32[2,?,1], but inference gives f32[2,3]",
    );
    assert_eq!(errors.len(), 2);
}

/// The verifier is linear in the number of nodes: a 200,000-node chain verifies in well under
/// a second even in a debug build. The bound is generous, so the test fails only if some
/// check became quadratic (a per-node walk over all nodes or uses).
#[test]
fn a_long_chain_verifies_in_linear_time() {
    const N: usize = 200_000;
    let mut g = Graph::new("chain");
    let mut v = g.add_input("x", ty("f32[batch,4]")).unwrap();
    for i in 0..N {
        let op = if i % 2 == 0 { Op::Relu } else { Op::Neg };
        v = g.add_node(&format!("n{i}"), op, &[v]).unwrap()[0];
    }
    g.set_output("y", v).unwrap();
    assert_eq!(g.node_count(), N + 1);
    let start = std::time::Instant::now();
    assert_eq!(verify(&g), Ok(()));
    let took = start.elapsed();
    assert!(
        took < std::time::Duration::from_secs(20),
        "verify took {took:?} for a chain of {N} nodes"
    );
}

/// A training-style interface: every param has weights and an update (updates may target
/// params as well as state), every state entry an update; all are found by name.
#[test]
fn updates_and_weights_find_their_params_and_state_by_name() {
    const N: usize = 500;
    let mut g = Graph::new("wide");
    let x = g.add_input("x", ty("f32[4]")).unwrap();
    let mut acc = x;
    for i in 0..N {
        let w = g
            .add_param(
                &format!("w{i}"),
                ty("f32[4]"),
                Some(Tensor::zeros(DType::F32, vec![4]).unwrap()),
            )
            .unwrap();
        let s = g.add_state(&format!("s{i}"), ty("f32[4]"), 0.0).unwrap();
        acc = g.add_node(&format!("add{i}"), Op::Add, &[acc, w]).unwrap()[0];
        let upd = g.add_node(&format!("upd{i}"), Op::Add, &[s, w]).unwrap()[0];
        g.set_state_update(&format!("w{i}"), acc).unwrap();
        g.set_state_update(&format!("s{i}"), upd).unwrap();
    }
    g.set_output("y", acc).unwrap();
    assert_eq!(verify(&g), Ok(()));
    // The last param's declared type changes: its weight and its update no longer fit.
    let last = g.find_interface(&format!("w{}", N - 1)).unwrap();
    g.set_interface_type(last, ty("f32[5]")).unwrap();
    let errors = verify_errors(&g);
    assert_has(
        &errors,
        &format!(
            "node \"w{}\" (param): its weight data has type f32[4]",
            N - 1
        ),
    );
    assert_has(
        &errors,
        &format!("node \"w{}\" (state): its update has type f32[4]", N - 1),
    );
}
