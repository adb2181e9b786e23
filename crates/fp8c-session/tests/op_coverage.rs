//! Op coverage (issue #11): every op of the table (`fp8c_ir::Op::examples()`, one instance per
//! op) has type inference, a CPU kernel, a CUDA lowering or a stated reason why not, a
//! gradient rule or a stated reason why it has none, and a cost class. Each answer comes from
//! an exhaustive per-family match in its crate, so a new op without one does not compile; this
//! test catches an answer that is present but empty, and prints the table of answers
//! (`cargo test -p fp8c-session --test op_coverage -- --nocapture`).

use fp8c_ir::infer::InferInput;
use fp8c_ir::{Family, Op, Support, TensorType};
use fp8c_passes::fusion::cost::{KernelClass, kernel_class};

#[test]
fn every_op_has_inference_cpu_cuda_vjp_and_cost_or_a_stated_reason() {
    let ops = Op::examples();
    assert_eq!(ops.len(), Op::NAMES.len(), "one example per op");
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    for op in &ops {
        let name = op.name();
        // Inference: answers (a type or a message) for no inputs and for one f32 input,
        // without panicking; the interface ops say their types are declared.
        let t = TensorType::fixed(fp8c_ir::DType::F32, &[2, 3]);
        for inputs in [Vec::new(), vec![InferInput::new(&t)]] {
            match fp8c_ir::infer::infer(op, &inputs) {
                Ok(_) => {}
                Err(m) if m.trim().is_empty() => {
                    problems.push(format!("{name}: empty infer error"))
                }
                Err(_) => {}
            }
        }
        let interface = op.is_interface();
        let cpu = fp8c_eval::support(op);
        match (interface, cpu) {
            (false, Support::No(why)) => problems.push(format!("{name}: no CPU kernel ({why})")),
            (true, Support::Yes) => problems.push(format!("{name}: an interface op evaluated")),
            _ => {}
        }
        let cuda = fp8c_runtime::cuda::support(op);
        let vjp = fp8c_passes::differentiability(op);
        for (what, s) in [("CUDA", cuda), ("gradient", vjp)] {
            if let Support::No(why) = s
                && why.trim().len() < 10
            {
                problems.push(format!("{name}: {what} refused without a reason ({why:?})"));
            }
        }
        let cost = kernel_class(op);
        if (interface || matches!(op, Op::Constant { .. })) != (cost == KernelClass::Free)
            && !op.props().view
        {
            problems.push(format!("{name}: cost class {cost:?}"));
        }
        rows.push(format!(
            "{:<12} {:<28} cuda {:<8} grad {:<8} cost {:?}",
            op.family().name(),
            name,
            if cuda == Support::Yes {
                "yes"
            } else {
                "reason"
            },
            if vjp == Support::Yes { "yes" } else { "reason" },
            cost
        ));
    }
    for r in &rows {
        eprintln!("{r}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every family has ops, and every op is in one.
    for f in Family::ALL {
        assert!(
            ops.iter().any(|o| o.family() == *f),
            "family {} is empty",
            f.name()
        );
    }
}

/// A new float op that is not differentiable must say why, and autodiff reports that reason
/// when a gradient has to flow through it — the opposite of a silent zero gradient.
#[test]
fn non_differentiable_float_ops_state_why() {
    for op in Op::examples() {
        if let Support::No(why) = fp8c_passes::differentiability(&op) {
            assert!(!why.is_empty(), "{}", op.name());
        }
    }
    let m = Op::Mod { fmod: true };
    assert!(matches!(fp8c_passes::differentiability(&m), Support::No(_)));
}
