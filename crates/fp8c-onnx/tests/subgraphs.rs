//! Size, and the import checks of If/Scan/Loop bodies: a body gets the main graph's checks
//! (one definition per value, pruning, order, every op supported, all unsupported ops listed
//! at once with their full subgraph path), and `inspect` walks the bodies.

mod common;

use common::{import, import_err, import_with, op_names};
use fp8c_ir::{DType, Dim};
use fp8c_onnx::builder::{ModelBuilder, dim};
use fp8c_onnx::{ImportOptions, inspect_bytes};

/// A branch reading the outer `x`: `out = x · Size(x)`, then the `extra` (op, name) nodes one
/// after the other (unsupported ones, for the tests).
fn branch(out: &str, extra: &[(&str, &str)]) -> ModelBuilder {
    let mut b = ModelBuilder::new()
        .node("Size", &["x"], &[&format!("{out}_n")])
        .name(&format!("{out}_size"))
        .node("Cast", &[&format!("{out}_n")], &[&format!("{out}_f")])
        .attr_int("to", 1)
        .node("Mul", &["x", &format!("{out}_f")], &[&format!("{out}_m")]);
    let mut last = format!("{out}_m");
    for (i, (op, name)) in extra.iter().enumerate() {
        let next = format!("{out}_e{i}");
        b = b.node(op, &[&last], &[&next]).name(name);
        last = next;
    }
    b.node("Identity", &[&last], &[out])
        .output(out, DType::F32, &[Dim::Unknown])
}

/// `y = If(cond, then, else)` over `x: f32[n]`, cond a graph input.
fn if_model(then_b: ModelBuilder, else_b: ModelBuilder) -> ModelBuilder {
    ModelBuilder::new()
        .input("x", DType::F32, &[dim("n")])
        .input("cond", DType::Bool, &[])
        .node("If", &["cond"], &["y"])
        .name("choose")
        .attr_graph("then_branch", then_b)
        .attr_graph("else_branch", else_b)
        .output("y", DType::F32, &[dim("n")])
}

#[test]
fn size_is_the_product_of_the_shape_and_folds_when_it_is_known() {
    let m = |shape: &[Dim]| {
        ModelBuilder::new()
            .input("x", DType::F32, shape)
            .node("Size", &["x"], &["n"])
            .name("size")
            .output("n", DType::I64, &[])
    };
    // Static dims: a constant at import.
    let imp = import(m(&[3.into(), 5.into()]));
    let id = imp.graph.find_node("size").unwrap();
    let t = imp
        .graph
        .constant_value(fp8c_ir::Value::new(id, 0))
        .unwrap();
    assert_eq!((t.shape(), t.to_i64_vec().unwrap()), (&[][..], vec![15]));
    // A rank-0 input has one element.
    let imp = import(m(&[]));
    let id = imp.graph.find_node("size").unwrap();
    let t = imp
        .graph
        .constant_value(fp8c_ir::Value::new(id, 0))
        .unwrap();
    assert_eq!(t.to_i64_vec().unwrap(), vec![1]);
    // A symbolic dim: reduce_prod(shape(x)), an i64 scalar, until the shape is bound.
    let imp = import(m(&[dim("batch"), 4.into()]));
    assert_eq!(op_names(&imp.graph), ["shape", "reduce_prod"]);
    assert_eq!(
        common::output_type(&imp, "n"),
        fp8c_ir::TensorType::scalar(DType::I64)
    );
    let bound = ImportOptions {
        input_shapes: [("x".to_string(), vec![6, 4])].into(),
        ..Default::default()
    };
    let imp = import_with(m(&[dim("batch"), 4.into()]), &bound).unwrap();
    assert!(
        op_names(&imp.graph).is_empty(),
        "{:?}",
        op_names(&imp.graph)
    );
}

#[test]
fn size_inside_both_branches_imports_and_selects() {
    let imp = import(if_model(branch("t", &[]), branch("e", &[])));
    let ops = op_names(&imp.graph);
    // Both branches' Size (shape → reduce_prod) and the select of a runtime condition.
    assert_eq!(
        ops.iter().filter(|o| **o == "reduce_prod").count(),
        2,
        "{ops:?}"
    );
    assert!(ops.contains(&"where"), "{ops:?}");
    assert!(imp.graph.find_node("choose.then.t_size").is_some());
    assert!(imp.graph.find_node("choose.else.e_size").is_some());
}

#[test]
fn unsupported_ops_in_bodies_are_listed_at_once_with_their_path() {
    // Two unsupported ops in the then branch, one in the else branch and one in a Scan
    // body: one error naming all four by path.
    let then_b = branch("t", &[("Unique", "uniq"), ("Hardmax", "hard")]);
    let else_b = branch("e", &[("Det", "det")]);
    let scan_body = ModelBuilder::new()
        .input("s_in", DType::F32, &[])
        .input("s_x", DType::F32, &[])
        .node("Add", &["s_in", "s_x"], &["s_sum"])
        .node("CumProd", &["s_sum"], &["s_out"])
        .name("odd")
        .output("s_out", DType::F32, &[])
        .output("s_sum", DType::F32, &[]);
    let b = if_model(then_b, else_b)
        .input("init", DType::F32, &[])
        .node("Scan", &["init", "x"], &["last", "all"])
        .name("loop")
        .attr_int("num_scan_inputs", 1)
        .attr_graph("body", scan_body)
        .output("all", DType::F32, &[dim("n")]);
    let err = import_err(b);
    assert_eq!(
        err,
        "unsupported ONNX ops (4): \"choose.then.uniq\" (Unique), \"choose.then.hard\" (Hardmax), \
         \"choose.else.det\" (Det), \"loop.body.odd\" (CumProd)",
    );
}

#[test]
fn a_nested_body_is_checked_too_and_unused_body_nodes_are_pruned() {
    // The then branch holds an If whose then branch has a NonZero; the else branch has an
    // unsupported op on a node feeding no branch output (pruned, as in the main graph).
    let inner = ModelBuilder::new()
        .node("If", &["cond"], &["t_out"])
        .name("inner")
        .attr_graph("then_branch", branch("a", &[("NonZero", "nz")]))
        .attr_graph("else_branch", branch("b", &[]))
        .output("t_out", DType::F32, &[Dim::Unknown]);
    let else_b = branch("e", &[])
        .node("Unique", &["x"], &["dead"])
        .name("dead_unique");
    let err = import_err(if_model(inner, else_b));
    assert_eq!(
        err,
        "unsupported ONNX ops (1): \"choose.then.inner.then.nz\" (NonZero)"
    );
}

#[test]
fn a_body_value_defined_twice_is_an_error_naming_it() {
    let then_b = branch("t", &[]).node("Neg", &["x"], &["t_f"]).name("again");
    let err = import_err(if_model(then_b, branch("e", &[])));
    assert_eq!(
        err,
        "value \"t_f\": is defined twice: by node \"choose.then.Cast_1\" and by node \
         \"choose.then.again\""
    );
}

#[test]
fn inspect_counts_and_lists_the_ops_of_every_body() {
    let then_b = branch("t", &[("Unique", "uniq")]);
    let info = inspect_bytes(&if_model(then_b, branch("e", &[])).to_bytes()).unwrap();
    assert_eq!(info.node_count, 1);
    // Each branch: Size, Cast, Mul, Identity (+ Unique in then).
    assert_eq!(info.node_count_with_subgraphs, 1 + 5 + 4);
    assert_eq!(info.op_histogram.get("Size"), None);
    assert_eq!(info.op_histogram_with_subgraphs["Size"], 2);
    let subs: Vec<(&str, usize)> = info
        .subgraphs
        .iter()
        .map(|s| (s.path.as_str(), s.node_count))
        .collect();
    assert_eq!(subs, [("choose.then", 5), ("choose.else", 4)]);
    assert_eq!(info.unsupported_ops, ["Unique"]);
    assert_eq!(info.unsupported_nodes[0].path, "choose.then.uniq");
    let json = serde_json::to_value(&info).unwrap();
    assert_eq!(json["unsupported_nodes"][0]["path"], "choose.then.uniq");
    assert_eq!(json["op_histogram_with_subgraphs"]["Size"], 2);
    let text = info.to_string();
    assert!(
        text.contains("(1 nodes; 10 with its 2 subgraphs)"),
        "{text}"
    );
    assert!(text.contains("\"choose.then.uniq\" (Unique)"), "{text}");
}
