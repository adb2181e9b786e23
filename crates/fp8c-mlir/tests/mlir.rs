//! fp8c-mlir through the public library API (issue #18): models loaded and compiled by
//! fp8c-session, emitted as MLIR, checked by MLIR's own `mlir-opt-22`, and run by MLIR's JIT
//! (`Device::Mlir`) against the CPU reference. `scripts/test.sh` runs this suite with
//! `--features mlir` (LLVM/MLIR 22 installed by scripts/mlir-env.sh); the default build runs
//! the one test that says how to get it.

use fp8c_session::{CompileOptions, Model};
use std::path::PathBuf;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/models")
        .join(name)
}

#[cfg(not(feature = "mlir"))]
#[test]
fn without_the_feature_emit_and_the_device_say_how_to_get_them() {
    let model = Model::load(example("mlp_digits.onnx")).unwrap();
    let compiled = model
        .compile(&CompileOptions::f32().input_shape("x", &[4, 64]))
        .unwrap();
    let err = fp8c_mlir::emit(&compiled.graph).unwrap_err().to_string();
    assert!(
        err.contains("--features mlir") && err.contains("mlir-env.sh"),
        "{err}"
    );
    let err = compiled
        .prepare(fp8c_session::Device::Mlir)
        .err()
        .expect("no MLIR in this build")
        .to_string();
    assert!(err.contains("--features mlir"), "{err}");
    assert!(!fp8c_mlir::available());
}

#[cfg(feature = "mlir")]
mod with_mlir {
    use super::*;
    use fp8c_session::{Device, Tensor};
    use std::collections::BTreeMap;
    use std::process::Command;

    /// Seeded values in [-1, 1) (SplitMix64), never all zeros.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        let num: f64 = a.iter().zip(&b).map(|(x, y)| (x - y) * (x - y)).sum();
        let den: f64 = b.iter().map(|y| y * y).sum();
        (num / den).sqrt()
    }

    fn mlp() -> fp8c_session::Compiled {
        Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(&CompileOptions::f32().input_shape("x", &[16, 64]))
            .unwrap()
    }

    #[test]
    fn the_emitted_module_parses_in_mlir_opt_and_names_its_nodes() {
        let text = fp8c_mlir::emit(&mlp().graph).unwrap();
        assert!(text.contains("linalg.generic"), "{text}");
        assert!(text.contains("func.func @mlp_digits"), "{text}");
        // Each operation is located at the fp8c node it comes from.
        for node in ["fc1", "relu1", "fc3"] {
            assert!(
                text.contains(&format!("loc(\"{node}\")")),
                "no loc of {node}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mlp.mlir");
        std::fs::write(&file, &text).unwrap();
        let out = Command::new("mlir-opt")
            .arg(&file)
            .arg("--verify-diagnostics")
            .output()
            .expect("mlir-opt (LLVM 22's, on PATH through scripts/mlir-env.sh)");
        assert!(
            out.status.success(),
            "mlir-opt rejected the module:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn mlirs_jit_runs_the_mlp_like_the_cpu_reference() {
        let compiled = mlp();
        let x = Tensor::from_f32(vec![16, 64], &values(16 * 64, 7));
        let inputs = BTreeMap::from([("x".to_string(), x)]);
        let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
        let mut jit = compiled.prepare(Device::Mlir).unwrap();
        // Twice: the executable is reusable and frees what each run returns.
        for _ in 0..2 {
            let got = jit.run(&inputs).unwrap();
            assert_eq!(got["logits"].shape(), [16, 10]);
            let rel = rel_l2(&got["logits"], &cpu["logits"]);
            eprintln!("mlp_digits f32 on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}");
            // Same f32 arithmetic; only the GEMMs' summation order may differ.
            assert!(rel <= 1e-5, "rel L2 {rel}");
        }
        // A missing input is an error naming it.
        let err = jit.run(&BTreeMap::new()).unwrap_err().to_string();
        assert!(err.contains("\"x\""), "{err}");
    }

    #[test]
    fn nodes_not_emitted_yet_are_errors_naming_node_and_op() {
        // A CNN: the first node on the way (its reshape's i64 shape, then the convolutions).
        let cnn = Model::load(example("cnn_digits.onnx"))
            .unwrap()
            .compile(&CompileOptions::f32().input_shape("x", &[2, 64]))
            .unwrap();
        let err = fp8c_mlir::emit(&cnn.graph).unwrap_err().to_string();
        assert!(
            err.starts_with("node \"") && err.contains("not emitted yet"),
            "{err}"
        );
        // FP8 (the scaling ops) is the next part of issue #18.
        let fp8 = Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(
                &CompileOptions::fp8()
                    .input_shape("x", &[16, 64])
                    .min_fp8_flops(0),
            )
            .unwrap();
        let err = fp8c_mlir::emit(&fp8.graph).unwrap_err().to_string();
        assert!(err.starts_with("node \""), "{err}");
        // Dynamic shapes are refused with the flag that fixes them.
        let dynamic = Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(&CompileOptions::f32())
            .unwrap();
        let err = fp8c_mlir::emit(&dynamic.graph).unwrap_err().to_string();
        assert!(err.contains("--input-shape"), "{err}");
    }
}
