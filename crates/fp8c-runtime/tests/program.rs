//! Lowering, the memory plan and the CPU backend: graphs built by hand go through `lower`,
//! the plan is checked (no two live buffers share a byte, reuse actually happens), and
//! `CpuBackend` runs them: results, input validation, observers, persistent scaling state,
//! `compare` and `fp8_stats`.

use fp8c_ir::{AmaxSource, DType, Graph, Op, Tensor, TensorType, Value};
use fp8c_runtime::{
    Backend, BufferKind, CpuBackend, Executable, RuntimeError, compare, fp8_stats, lower,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn f32t(dims: &[u64]) -> TensorType {
    TensorType::fixed(DType::F32, dims)
}

fn inputs(pairs: &[(&str, Tensor)]) -> BTreeMap<String, Tensor> {
    pairs
        .iter()
        .map(|(k, t)| (k.to_string(), t.clone()))
        .collect()
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_f32_vec().unwrap()
}

/// y = relu(x · w) + b, with w a param and b a constant.
fn mlp() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.add_input("x", f32t(&[2, 3])).unwrap();
    let w = g
        .add_param(
            "w",
            f32t(&[3, 2]),
            Some(Tensor::from_f32(vec![3, 2], &[1., 0., 0., 1., 1., -1.])),
        )
        .unwrap();
    let b = g
        .add_node(
            "b",
            Op::Constant {
                value: Tensor::from_f32(vec![2], &[0.5, -0.5]),
            },
            &[],
        )
        .unwrap()[0];
    let m = g.add_node("fc", Op::MatMul, &[x, w]).unwrap()[0];
    let r = g.add_node("act", Op::Relu, &[m]).unwrap()[0];
    let y = g.add_node("bias", Op::Add, &[r, b]).unwrap()[0];
    g.set_output("y", y).unwrap();
    g
}

fn prepare(g: &Graph) -> Box<dyn Executable> {
    let p = lower(g).unwrap();
    CpuBackend.prepare(&p, g.weights()).unwrap()
}

#[test]
fn lowers_and_runs_a_small_graph() {
    let g = mlp();
    let p = lower(&g).unwrap();
    let ops: Vec<&str> = p.steps().iter().map(|s| s.op.name()).collect();
    assert_eq!(ops, ["matmul", "relu", "add"]);
    assert_eq!(p.inputs().len(), 1);
    assert_eq!(p.params().len(), 1);
    assert!(
        p.buffers()
            .iter()
            .any(|b| matches!(b.kind, BufferKind::Constant(_)))
    );
    // x (24 B), fc (16 B), act, bias: each rounds to 256 B; x and fc are live together at
    // step 0, fc and act at step 1, act and the output at step 2, so two slots suffice.
    assert_eq!(p.peak_bytes(), 512);
    p.validate().unwrap();
    let text = p.dump();
    assert!(text.contains("matmul(b0, b1)"), "{text}");

    let mut exe = CpuBackend.prepare(&p, g.weights()).unwrap();
    let x = Tensor::from_f32(vec![2, 3], &[1., 2., 3., -1., -2., -3.]);
    let out = exe.run(&inputs(&[("x", x)])).unwrap();
    // row 0: [1+3, 2-3] = [4, -1] → relu [4, 0] → [4.5, -0.5]; row 1: [-4, 1] → [0, 1] → [0.5, 0.5]
    assert_eq!(values(&out["y"]), [4.5, -0.5, 0.5, 0.5]);
}

#[test]
fn a_chain_reuses_two_buffers() {
    let mut g = Graph::new("chain");
    let mut v = g.add_input("x", f32t(&[1024])).unwrap();
    for i in 0..20 {
        let op = if i % 2 == 0 { Op::Neg } else { Op::Abs };
        v = g.add_node(&format!("n{i}"), op, &[v]).unwrap()[0];
    }
    g.set_output("y", v).unwrap();
    let p = lower(&g).unwrap();
    let plan = p.plan();
    assert_eq!(plan.no_reuse_bytes, 21 * 4096);
    assert_eq!(plan.live_peak_bytes, 2 * 4096);
    assert_eq!(p.peak_bytes(), 2 * 4096, "{}", p.dump());
}

#[test]
fn outputs_and_unread_results_are_planned() {
    let mut g = Graph::new("split");
    let x = g.add_input("x", f32t(&[4])).unwrap();
    let parts = g
        .add_node(
            "split",
            Op::Split {
                axis: 0,
                split: vec![2, 2],
            },
            &[x],
        )
        .unwrap();
    let y = g.add_node("neg", Op::Neg, &[parts[0]]).unwrap()[0];
    let z = g.add_node("abs", Op::Abs, &[y]).unwrap()[0];
    g.set_output("early", y).unwrap();
    g.set_output("late", z).unwrap();
    g.set_output("input_too", x).unwrap();
    let p = lower(&g).unwrap();
    let live = |name: &str| p.buffers().iter().find(|b| b.name == name).unwrap().live;
    assert_eq!(
        live("split:1"),
        Some((0, 0)),
        "an unread result lives in its step"
    );
    assert_eq!(live("neg"), Some((1, 2)), "an output lives to the end");
    assert_eq!(
        live("x"),
        Some((0, 2)),
        "an input returned as output lives to the end"
    );
    let mut exe = CpuBackend.prepare(&p, g.weights()).unwrap();
    let out = exe
        .run(&inputs(&[(
            "x",
            Tensor::from_f32(vec![4], &[1., -2., 3., 4.]),
        )]))
        .unwrap();
    assert_eq!(values(&out["early"]), [-1., 2.]);
    assert_eq!(values(&out["late"]), [1., 2.]);
    assert_eq!(values(&out["input_too"]), [1., -2., 3., 4.]);
}

#[test]
fn symbolic_shapes_are_refused_with_the_node_name() {
    let mut g = Graph::new("sym");
    let ty = TensorType::new(
        DType::F32,
        vec![fp8c_ir::Dim::Sym("batch".into()), fp8c_ir::Dim::Known(3)],
    );
    let x = g.add_input("x", ty).unwrap();
    let y = g.add_node("act", Op::Relu, &[x]).unwrap()[0];
    g.set_output("y", y).unwrap();
    let e = lower(&g).unwrap_err().to_string();
    assert!(e.contains("\"x\"") && e.contains("not static"), "{e}");
}

#[test]
fn bad_inputs_are_errors_naming_the_input() {
    let g = mlp();
    let mut exe = prepare(&g);
    let good = Tensor::from_f32(vec![2, 3], &[0.; 6]);
    let cases = [
        (inputs(&[]), "input \"x\": is missing"),
        (
            inputs(&[("x", Tensor::from_f64(vec![2, 3], &[0.; 6]))]),
            "input \"x\": has dtype f64",
        ),
        (
            inputs(&[("x", Tensor::from_f32(vec![6], &[0.; 6]))]),
            "input \"x\": has shape [6]",
        ),
        (
            inputs(&[("x", good.clone()), ("extra", good.clone())]),
            "input \"extra\": is not an input of the graph (its inputs are: x)",
        ),
    ];
    for (ins, want) in cases {
        let e = exe.run(&ins).unwrap_err().to_string();
        assert!(e.starts_with(want), "{e}");
    }
    let p = lower(&g).unwrap();
    let e = CpuBackend.prepare(&p, &BTreeMap::new()).err().unwrap();
    assert!(
        matches!(e, RuntimeError::Param { ref name, .. } if name == "w"),
        "{e}"
    );
}

#[test]
fn nan_and_inf_inputs_propagate() {
    let mut exe = prepare(&mlp());
    let x = Tensor::from_f32(vec![2, 3], &[f32::NAN, 0., 0., f32::INFINITY, 0., 0.]);
    let y = values(&exe.run(&inputs(&[("x", x)])).unwrap()["y"]);
    assert!(y[0].is_nan() && y[1].is_nan(), "{y:?}");
    assert_eq!(y[2], f32::INFINITY);
}

#[test]
fn a_failing_step_names_its_node() {
    let mut g = Graph::new("gather");
    let x = g.add_input("x", f32t(&[3])).unwrap();
    let i = g
        .add_input("i", TensorType::fixed(DType::I64, &[1]))
        .unwrap();
    let y = g
        .add_node("lookup", Op::Gather { axis: 0 }, &[x, i])
        .unwrap()[0];
    g.set_output("y", y).unwrap();
    let mut exe = prepare(&g);
    let e = exe
        .run(&inputs(&[
            ("x", Tensor::from_f32(vec![3], &[1., 2., 3.])),
            ("i", Tensor::from_i64(vec![1], &[7])),
        ]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("node \"lookup\" (gather): "), "{e}");
}

#[test]
fn the_observer_sees_every_step_in_order() {
    let mut exe = prepare(&mlp());
    let mut seen = Vec::new();
    let x = Tensor::from_f32(vec![2, 3], &[1.; 6]);
    exe.run_observed(&inputs(&[("x", x)]), &mut |s, ins, outs| {
        seen.push((s.node.clone(), ins.len(), outs.len()))
    })
    .unwrap();
    let want = [("fc", 2, 1), ("act", 1, 1), ("bias", 2, 1)];
    let want: Vec<(String, usize, usize)> = want
        .iter()
        .map(|(n, i, o)| (n.to_string(), *i, *o))
        .collect();
    assert_eq!(seen, want);
}

/// `y = x · ((w · 2) + w)`: the weight's two steps read params and constants alone, so the
/// CPU backend computes them once at prepare and keeps only what a run reads (the sum; the
/// product, read by the sum alone, is dropped). An observer still sees both, first and with
/// their values (the product computed again for it), a profile counts them with no time,
/// and every run gives the same result as direct evaluation.
#[test]
fn weight_only_steps_are_precomputed_and_still_observed() {
    let mut g = Graph::new("prep");
    let x = g.add_input("x", f32t(&[2, 3])).unwrap();
    let wv = [1., -2., 0.5, 3., 0.25, -1., 2., 4., -0.5];
    let w = g
        .add_param("w", f32t(&[3, 3]), Some(Tensor::from_f32(vec![3, 3], &wv)))
        .unwrap();
    let two = g
        .add_node(
            "two",
            Op::Constant {
                value: Tensor::from_f32(vec![], &[2.0]),
            },
            &[],
        )
        .unwrap()[0];
    let scaled = g.add_node("w.scaled", Op::Mul, &[w, two]).unwrap()[0];
    let sum = g.add_node("w.sum", Op::Add, &[scaled, w]).unwrap()[0];
    let y = g.add_node("mm", Op::MatMul, &[x, sum]).unwrap()[0];
    g.set_output("y", y).unwrap();
    let mut exe = prepare(&g);
    let pre: Vec<String> = exe.precomputed_steps().into_iter().collect();
    assert_eq!(pre, ["w.scaled", "w.sum"]);
    let xv = [1., 2., 3., -1., 0.5, 2.];
    let feed = inputs(&[("x", Tensor::from_f32(vec![2, 3], &xv))]);
    // 3·w, then x · 3w.
    let want: Vec<f32> = (0..2)
        .flat_map(|i| (0..3).map(move |j| (i, j)))
        .map(|(i, j)| (0..3).map(|k| xv[i * 3 + k] * 3.0 * wv[k * 3 + j]).sum())
        .collect();
    let mut seen: Vec<(String, Vec<Vec<f32>>, Vec<f32>)> = Vec::new();
    let mut profile = fp8c_runtime::Profile::new();
    for _ in 0..2 {
        seen.clear();
        let mut timer = profile.start_skipping(exe.precomputed_steps());
        let out = exe
            .run_observed(&feed, &mut |s, ins, outs| {
                timer.observe(s, ins, outs);
                seen.push((
                    s.node.clone(),
                    ins.iter().map(|t| values(t)).collect(),
                    values(&outs[0]),
                ));
            })
            .unwrap();
        timer.finish();
        assert_eq!(values(&out["y"]), want);
        assert_eq!(values(&exe.run(&feed).unwrap()["y"]), want);
        let names: Vec<&str> = seen.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["w.scaled", "w.sum", "mm"]);
        let twice: Vec<f32> = wv.iter().map(|v| v * 2.0).collect();
        assert_eq!(seen[0].1, [wv.to_vec(), vec![2.0]]);
        assert_eq!(seen[0].2, twice, "the dropped product, computed again");
        assert_eq!(seen[1].1, [twice.clone(), wv.to_vec()]);
        assert_eq!(seen[1].2, wv.iter().map(|v| v * 3.0).collect::<Vec<f32>>());
    }
    let rows = profile.by_node();
    for node in ["w.scaled", "w.sum"] {
        let row = rows
            .iter()
            .find(|r| r.name == node)
            .expect("a row per step");
        assert_eq!(
            (row.time, row.calls),
            (std::time::Duration::ZERO, 2),
            "{node}"
        );
    }
}

/// Delayed scaling for one tensor, wired as the scaling pass wires it.
fn delayed(len: u64) -> Graph {
    let mut g = Graph::new("delayed");
    let x = g.add_input("x", f32t(&[4])).unwrap();
    let h = g.add_state("t.amax_history", f32t(&[len]), 0.0).unwrap();
    let sc = g
        .add_state("t.scale", TensorType::scalar(DType::F32), 1.0)
        .unwrap();
    let si = g
        .add_state("t.scale_inv", TensorType::scalar(DType::F32), 1.0)
        .unwrap();
    let q = g
        .add_node(
            "t.q",
            Op::Quantize {
                to: DType::F8E4M3,
                saturate: true,
            },
            &[x, sc],
        )
        .unwrap()[0];
    let a = g.add_node("t.amax", Op::Amax, &[x]).unwrap()[0];
    let hist = g
        .add_node("t.history", Op::AmaxHistoryUpdate, &[h, a])
        .unwrap();
    let cs = Op::ComputeScale {
        fmt: DType::F8E4M3,
        margin: 0.0,
        source: AmaxSource::HistoryMax,
        epsilon: 0.0,
        power_2: false,
    };
    let s = g.add_node("t.scale", cs, &[hist[0], sc]).unwrap();
    let dq = g
        .add_node("t.dq", Op::Dequantize { to: DType::F32 }, &[q, si])
        .unwrap()[0];
    g.set_state_update("t.amax_history", hist[1]).unwrap();
    g.set_state_update("t.scale", s[0]).unwrap();
    g.set_state_update("t.scale_inv", s[1]).unwrap();
    g.set_output("y", dq).unwrap();
    g
}

fn scalar(t: &Tensor) -> f32 {
    values(t)[0]
}

#[test]
fn scaling_state_persists_across_runs() {
    let g = delayed(4);
    let p = lower(&g).unwrap();
    assert_eq!(p.state().iter().filter(|s| s.update.is_some()).count(), 3);
    let mut exe = CpuBackend.prepare(&p, g.weights()).unwrap();
    assert_eq!(scalar(&exe.state()["t.scale"]), 1.0);
    let x = inputs(&[("x", Tensor::from_f32(vec![4], &[1000., 1., -2., 0.5]))]);
    // Run 1 quantizes with scale 1: 1000 saturates to 448.
    let y = values(&exe.run(&x).unwrap()["y"]);
    assert_eq!(y, [448., 1., -2., 0.5]);
    let st = exe.state();
    assert_eq!(scalar(&st["t.scale"]), 448.0 / 1000.0);
    assert_eq!(values(&st["t.amax_history"]), [0., 0., 0., 1000.]);
    // Run 2 uses run 1's scale: 1000 · 0.448 rounds to 448, dequantized with 1 / 0.448.
    let y = values(&exe.run(&x).unwrap()["y"]);
    assert_eq!(y[0], 448.0 * (1.0 / (448.0f32 / 1000.0)));
    // set_state checks the type and replaces the value.
    exe.set_state("t.scale", Tensor::scalar_f32(2.0)).unwrap();
    assert_eq!(scalar(&exe.state()["t.scale"]), 2.0);
    let e = exe
        .set_state("t.scale", Tensor::from_f32(vec![1], &[2.0]))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("state \"t.scale\""), "{e}");
    assert!(exe.set_state("nope", Tensor::scalar_f32(1.0)).is_err());
}

#[test]
fn fp8_stats_report_scale_underflow_overflow_and_sqnr() {
    let g = delayed(1);
    let mut exe = prepare(&g);
    let mut stats = Vec::new();
    // scale 1: 1000 saturates (overflow 1/4); 1e-4 flushes to zero (underflow 1 of 3 non-zero).
    let x = Tensor::from_f32(vec![4], &[1000., 1e-4, 2., 0.]);
    exe.run_observed(&inputs(&[("x", x)]), &mut |s, i, o| {
        stats.extend(fp8_stats(s, i, o))
    })
    .unwrap();
    assert_eq!(stats.len(), 1);
    let s = &stats[0];
    assert_eq!(
        (s.tensor.as_str(), s.node.as_str(), s.format),
        ("t", "t.q", "e4m3")
    );
    assert_eq!(
        (s.amax, s.scale, s.scale_inv, s.numel),
        (1000.0, 1.0, 1.0, 4)
    );
    assert_eq!(s.overflow, 0.25);
    assert!((s.underflow - 1.0 / 3.0).abs() < 1e-12);
    // noise: (1000−448)² + 1e-8; signal: 1000² + 1e-8 + 4.
    let want = 10.0 * ((1e6 + 4.0 + 1e-8f64) / (552.0f64.powi(2) + 1e-8)).log10();
    assert!((s.sqnr_db - want).abs() < 1e-6, "{} vs {want}", s.sqnr_db);
}

#[test]
fn compare_gives_rel_l2_max_abs_and_cosine() {
    let a = Tensor::from_f32(vec![3], &[1., 2., f32::NAN]);
    let b = Tensor::from_f32(vec![3], &[1., 0., f32::NAN]);
    let c = compare(&a, &b).unwrap();
    assert_eq!((c.max_abs, c.numel), (2.0, 2));
    assert_eq!(c.rel_l2, 2.0);
    assert!((c.cosine - 1.0 / 5f64.sqrt()).abs() < 1e-12);
    let same = compare(&b, &b).unwrap();
    assert_eq!((same.rel_l2, same.max_abs, same.cosine), (0.0, 0.0, 1.0));
    assert!(compare(&a, &Tensor::from_f32(vec![1], &[0.])).is_err());
}

// ------------------------------------------------------------------ random graphs

/// A random DAG of elementwise and shape-preserving ops over [3, n] tensors (and a row `r`
/// of n subtracted from some), outputs chosen among the values. The plan must validate and
/// the run must equal a direct evaluation of every node, with or without an observer (the
/// CPU backend overwrites dying values in place only without one).
fn random_graph(len: u64, picks: &[(u8, usize, usize)], outs: &[usize]) -> Graph {
    let mut g = Graph::new("random");
    let r = g.add_input("r", f32t(&[len])).unwrap();
    let mut vals: Vec<Value> = vec![
        g.add_input("a", f32t(&[3, len])).unwrap(),
        g.add_input("b", f32t(&[3, len])).unwrap(),
    ];
    for (i, &(op, x, y)) in picks.iter().enumerate() {
        let (x, y) = (vals[x % vals.len()], vals[y % vals.len()]);
        let name = format!("n{i}");
        let v = match op % 6 {
            0 => g.add_node(&name, Op::Add, &[x, y]),
            1 => g.add_node(&name, Op::Mul, &[x, y]),
            2 => g.add_node(&name, Op::Neg, &[x]),
            3 => g.add_node(&name, Op::Max, &[x, y]),
            4 => g.add_node(&name, Op::Sub, &[r, x]),
            _ => g.add_node(&name, Op::Tanh, &[x]),
        }
        .unwrap()[0];
        vals.push(v);
    }
    for (k, &o) in outs.iter().enumerate() {
        g.set_output(&format!("out{k}"), vals[o % vals.len()])
            .unwrap();
    }
    g
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_dags_plan_and_run(
        len in 1u64..200,
        picks in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..40),
        outs in prop::collection::vec(any::<usize>(), 1..4),
    ) {
        let g = random_graph(len, &picks, &outs);
        let p = lower(&g).unwrap();
        p.validate().unwrap();
        prop_assert!(p.plan().live_peak_bytes <= p.peak_bytes());
        prop_assert!(p.peak_bytes() <= p.plan().no_reuse_bytes);
        // Direct evaluation in topological order, every value kept.
        let a = Tensor::from_f32(vec![3, len], &(0..3 * len).map(|i| i as f32 * 0.1 - 3.0).collect::<Vec<_>>());
        let b = Tensor::from_f32(vec![3, len], &(0..3 * len).map(|i| 1.0 - i as f32 * 0.05).collect::<Vec<_>>());
        let r = Tensor::from_f32(vec![len], &(0..len).map(|i| (i % 7) as f32 - 2.5).collect::<Vec<_>>());
        let mut env: BTreeMap<fp8c_ir::NodeId, Tensor> = BTreeMap::new();
        for id in g.topo_order().unwrap() {
            let n = g.node(id);
            let t = match &n.op {
                Op::Input { name } => match name.as_str() {
                    "a" => a.clone(),
                    "b" => b.clone(),
                    _ => r.clone(),
                },
                op => {
                    let ins: Vec<&Tensor> = n.inputs().iter().map(|v| &env[&v.node]).collect();
                    fp8c_eval::eval_op(op, &ins).unwrap().remove(0)
                }
            };
            env.insert(id, t);
        }
        let mut exe = CpuBackend.prepare(&p, g.weights()).unwrap();
        let feed = inputs(&[("a", a), ("b", b), ("r", r)]);
        let got = exe.run(&feed).unwrap();
        let mut seen = Vec::new();
        let observed = exe
            .run_observed(&feed, &mut |s, ins, _| {
                seen.push((s.node.clone(), ins.iter().map(|t| t.bytes().to_vec()).collect::<Vec<_>>()))
            })
            .unwrap();
        for o in g.outputs() {
            prop_assert_eq!(got[&o.name].bytes(), env[&o.value.node].bytes());
            prop_assert_eq!(observed[&o.name].bytes(), env[&o.value.node].bytes());
        }
        // The observer saw each step's inputs as the direct evaluation had them.
        for (node, ins) in seen {
            let id = g.find_node(&node).unwrap();
            let want: Vec<Vec<u8>> = g.node(id).inputs().iter().map(|v| env[&v.node].bytes().to_vec()).collect();
            prop_assert_eq!(ins, want, "inputs of {}", node);
        }
    }
}

/// Two convs as in a ResNet block: `r1 = relu(conv(x))`, `y = relu(conv(r1) + r1)`. The CPU
/// backend fuses each conv with the elementwise steps whose inputs die there (the first
/// conv with its ReLU, the second with the add and the ReLU; `r1` lives on, read by the
/// add, so the first chain stops at it), and gives the bits of the steps run one by one,
/// which is how it runs them for an observer.
#[test]
fn convs_take_their_elementwise_steps_as_epilogues_with_the_same_bits() {
    let conv = |pad: i64| Op::Conv {
        kernel_shape: vec![3, 3],
        strides: vec![1, 1],
        pads: vec![pad; 4],
        dilations: vec![1, 1],
        group: 1,
        auto_pad: fp8c_ir::AutoPad::NotSet,
    };
    let vals = |n: usize, seed: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 + seed * 11) % 23) as f32 * 0.11 - 1.2)
            .collect()
    };
    let mut g = Graph::new("block");
    let x = g.add_input("x", f32t(&[2, 4, 6, 5])).unwrap();
    let param = |g: &mut Graph, name: &str, dims: &[u64], seed: usize| {
        let n = dims.iter().product::<u64>() as usize;
        let t = Tensor::from_f32(dims.to_vec(), &vals(n, seed));
        g.add_param(name, f32t(dims), Some(t)).unwrap()
    };
    let (w1, b1) = (
        param(&mut g, "w1", &[4, 4, 3, 3], 1),
        param(&mut g, "b1", &[4], 2),
    );
    let w2 = param(&mut g, "w2", &[4, 4, 3, 3], 3);
    let c1 = g.add_node("conv1", conv(1), &[x, w1, b1]).unwrap()[0];
    let r1 = g.add_node("relu1", Op::Relu, &[c1]).unwrap()[0];
    let c2 = g.add_node("conv2", conv(1), &[r1, w2]).unwrap()[0];
    let s = g.add_node("residual", Op::Add, &[r1, c2]).unwrap()[0];
    let y = g.add_node("relu2", Op::Relu, &[s]).unwrap()[0];
    g.set_output("y", y).unwrap();

    let p = lower(&g).unwrap();
    let mut exe = fp8c_runtime::CpuExecutable::new(&p, g.weights()).unwrap();
    let fused = vec![
        ("conv1".to_string(), vec!["relu1".to_string()]),
        (
            "conv2".to_string(),
            vec!["residual".to_string(), "relu2".to_string()],
        ),
    ];
    assert_eq!(exe.conv_epilogues(), fused);
    let ins = inputs(&[("x", Tensor::from_f32(vec![2, 4, 6, 5], &vals(240, 4)))]);
    let got = exe.run(&ins).unwrap();
    let mut seen = Vec::new();
    let one_by_one = exe
        .run_observed(&ins, &mut |s, _, _| seen.push(s.node.clone()))
        .unwrap();
    assert_eq!(seen, ["conv1", "relu1", "conv2", "residual", "relu2"]);
    assert_eq!(got["y"].bytes(), one_by_one["y"].bytes());
    assert!(values(&got["y"]).iter().any(|&v| v > 0.0));
}

/// A training step's guard, `where(ok, updated, old)` on one bool, hands over the operand it
/// selects (`cpu_moves.rs`): the state takes the update only when `ok` is true, an output that
/// is also the state's update is returned too, and the select of two computed operands gives
/// the chosen one's values either way.
#[test]
fn guarded_state_updates_select_the_whole_operand() {
    let mut g = Graph::new("guard");
    let x = g.add_input("x", f32t(&[4])).unwrap();
    let ok = g.add_input("ok", TensorType::scalar(DType::Bool)).unwrap();
    let w = g.add_state("w", f32t(&[4]), 0.0).unwrap();
    let new = g.add_node("w.new", Op::Add, &[w, x]).unwrap()[0];
    let next = g.add_node("w.next", Op::Where, &[ok, new, w]).unwrap()[0];
    g.set_state_update("w", next).unwrap();
    g.set_output("w_next", next).unwrap();
    let a = g.add_node("a", Op::Neg, &[x]).unwrap()[0];
    let b = g.add_node("b", Op::Exp, &[x]).unwrap()[0];
    let y = g.add_node("pick", Op::Where, &[ok, a, b]).unwrap()[0];
    g.set_output("y", y).unwrap();
    let mut exe = prepare(&g);
    let xs = Tensor::from_f32(vec![4], &[1., 2., 3., 4.]);
    let step = |exe: &mut Box<dyn Executable>, flag: bool| {
        exe.run(&inputs(&[
            ("x", xs.clone()),
            ("ok", Tensor::from_bool(vec![], &[flag])),
        ]))
        .unwrap()
    };
    let out = step(&mut exe, true);
    assert_eq!(values(&out["w_next"]), [1., 2., 3., 4.]);
    assert_eq!(values(&out["y"]), [-1., -2., -3., -4.]);
    assert_eq!(values(&exe.state()["w"]), [1., 2., 3., 4.]);
    let out = step(&mut exe, false);
    assert_eq!(
        values(&out["w_next"]),
        [1., 2., 3., 4.],
        "a skipped step keeps the old state"
    );
    let exp: Vec<f32> = [1f32, 2., 3., 4.].iter().map(|v| v.exp()).collect();
    assert_eq!(values(&out["y"]), exp);
    assert_eq!(values(&exe.state()["w"]), [1., 2., 3., 4.]);
    step(&mut exe, true);
    assert_eq!(values(&exe.state()["w"]), [2., 4., 6., 8.]);
}
