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

    /// The relative L2 distance of `output` between MLIR's JIT and the CPU reference.
    fn jit_vs_cpu(
        compiled: &fp8c_session::Compiled,
        inputs: &BTreeMap<String, Tensor>,
        output: &str,
    ) -> f64 {
        let cpu = compiled.prepare(Device::Cpu).unwrap().run(inputs).unwrap();
        let got = compiled.prepare(Device::Mlir).unwrap().run(inputs).unwrap();
        assert_eq!(got[output].ty(), cpu[output].ty());
        rel_l2(&got[output], &cpu[output])
    }

    /// A digits model of examples/models (input `x`: 4 images of 64 pixels, seeded values)
    /// compiled with `opts`: the relative L2 distance of `output` between the JIT and the CPU.
    fn digits_model_on_the_jit(name: &str, opts: CompileOptions, output: &str, seed: u64) -> f64 {
        let compiled = Model::load(example(name))
            .unwrap()
            .compile(&opts.input_shape("x", &[4, 64]))
            .unwrap();
        let x = Tensor::from_f32(vec![4, 64], &values(4 * 64, seed));
        let inputs = BTreeMap::from([("x".to_string(), x)]);
        jit_vs_cpu(&compiled, &inputs, output)
    }

    /// An example export's inputs (its `.ref.npz` without the reference `output`).
    fn ref_inputs(name: &str, output: &str) -> BTreeMap<String, Tensor> {
        fp8c_session::npy::read_npz(&example(&format!("{name}.ref.npz")))
            .unwrap()
            .into_iter()
            .filter(|(k, _)| k != output)
            .collect()
    }

    /// The digits MLP, its training data (batch 16), its forward model bound to that batch
    /// and the default cross-entropy options on its logits.
    fn digits() -> (
        Model,
        fp8c_session::train::Dataset,
        Model,
        fp8c_session::train::TrainOptions,
    ) {
        use fp8c_session::train::{DataOptions, Dataset, TrainOptions};
        let model = Model::load(example("mlp_digits.onnx")).unwrap();
        let options = TrainOptions::new("logits");
        let data = Dataset::load(
            &example("../data/digits_train.npz"),
            &model,
            &DataOptions {
                inputs: BTreeMap::new(),
                labels: "y".into(),
                loss: options.loss,
                batch: 16,
            },
        )
        .unwrap();
        let forward = data.forward_model(&model, 16, "logits").unwrap();
        (model, data, forward, options)
    }

    /// The digits MLP in FP8 with delayed scaling (amax histories as state), batch 16.
    fn delayed_mlp() -> fp8c_session::Compiled {
        Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(
                &CompileOptions::fp8_training()
                    .input_shape("x", &[16, 64])
                    .min_fp8_flops(0),
            )
            .unwrap()
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

    /// MLIR's own tools take the emitted text without fp8c: `mlir-opt` lowers an FP8 module
    /// with delayed scaling (state arguments and results, the fast-accumulation loops) through
    /// `fp8c_mlir::LOWERING`, and `mlir-translate` turns the result into LLVM IR.
    #[test]
    fn mlirs_tools_lower_an_fp8_module_with_state_to_llvm_ir() {
        let compiled = delayed_mlp();
        let text = fp8c_mlir::emit(&compiled.graph).unwrap();
        assert!(text.contains("scf.for") && text.contains("f8E4M3FN"));
        let dir = tempfile::tempdir().unwrap();
        let (src, low) = (dir.path().join("m.mlir"), dir.path().join("m.llvm.mlir"));
        std::fs::write(&src, &text).unwrap();
        let run = |cmd: &mut Command| {
            let out = cmd
                .output()
                .expect("LLVM 22's tools, on PATH through mlir-env.sh");
            assert!(
                out.status.success(),
                "{cmd:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        };
        run(Command::new("mlir-opt")
            .arg(&src)
            .arg(format!("--pass-pipeline={}", fp8c_mlir::LOWERING))
            .arg("-o")
            .arg(&low));
        let ir = run(Command::new("mlir-translate")
            .arg("--mlir-to-llvmir")
            .arg(&low));
        let ir = String::from_utf8_lossy(&ir);
        assert!(
            ir.contains("define void @_mlir_ciface_mlp_digits"),
            "{}",
            &ir[..ir.len().min(400)]
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

    /// The FP8 MLP (current scaling, every GEMM in FP8, f32 accumulation): amax, scale,
    /// quantize and the scaled GEMMs with their bias + ReLU epilogues on MLIR's JIT.
    fn fp8_mlp() -> fp8c_session::Compiled {
        let cur = fp8c_core::CurrentScaling::default();
        Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(
                &CompileOptions::fp8()
                    .input_shape("x", &[16, 64])
                    .min_fp8_flops(0)
                    .recipe(fp8c_session::Recipe::Current(cur)),
            )
            .unwrap()
    }

    #[test]
    fn mlirs_jit_runs_the_fp8_mlp_like_the_cpu_reference() {
        let compiled = fp8_mlp();
        let text = fp8c_mlir::emit(&compiled.graph).unwrap();
        assert!(text.contains("f8E4M3FN"), "FP8 tensors typed as such");
        let x = Tensor::from_f32(vec![16, 64], &values(16 * 64, 11));
        let inputs = BTreeMap::from([("x".to_string(), x)]);
        let rel = jit_vs_cpu(&compiled, &inputs, "logits");
        eprintln!("mlp_digits FP8 on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}");
        assert!(rel <= 1e-5, "rel L2 {rel}");
    }

    /// FP8 training steps of the digits MLP (delayed scaling, HYBRID, AdamW; every GEMM in FP8,
    /// the 10-class head padded to 16 as `--pad-to-16` does) on MLIR's JIT and on the CPU
    /// reference, through the library's `Trainer` as `fp8c train --device mlir` runs them:
    /// every output (loss, logits, gradients) and the whole state after each step (weights,
    /// AdamW moments, amax histories, scales, counters) bit for bit. The forward GEMMs use the
    /// fast-accumulation model, the backward ones sum exact FP8 products in K order, as the
    /// CPU's `gemm` does for K ≤ 512 on any machine (its K blocks are at least 512 long). An
    /// f32 GEMM need not agree to the bit: `gemm` reorders small transposed products, which is
    /// why the head is in FP8 here (f32 GEMMs are checked to 1e-5 by the inference tests).
    #[test]
    fn fp8_training_steps_of_the_mlp_on_mlirs_jit_match_the_cpu_bit_for_bit() {
        use fp8c_session::train::Trainer;
        let (_, data, forward, options) = digits();
        let mut spec = options.spec();
        spec.expose_grads = true;
        spec.keep_output = true;
        let mut opts = CompileOptions::fp8()
            .min_fp8_flops(0)
            .recipe(fp8c_session::Recipe::Delayed(Default::default()));
        opts.policy.pad_to_16 = true;
        let mut cpu = Trainer::for_model(&forward, &spec, &opts, Device::Cpu).unwrap();
        let mut jit = Trainer::for_model(&forward, &spec, &opts, Device::Mlir).unwrap();
        let fp8 = fp8c_passes::precision::Precision::Fp8;
        let fp8_gemms = cpu
            .decisions()
            .iter()
            .filter(|d| d.precision == fp8)
            .count();
        assert_eq!(fp8_gemms, 3, "every GEMM in FP8");
        let same = |what: &str, a: &BTreeMap<String, Tensor>, b: &BTreeMap<String, Tensor>| {
            assert_eq!(
                a.keys().collect::<Vec<_>>(),
                b.keys().collect::<Vec<_>>(),
                "{what}"
            );
            for (name, want) in a {
                let got = &b[name];
                assert_eq!(got.ty(), want.ty(), "{what} {name}");
                if got.bytes() != want.bytes() {
                    let rel = if want.dtype().is_float() {
                        rel_l2(got, want)
                    } else {
                        f64::NAN
                    };
                    panic!("{what} {name} differs from the CPU's (rel L2 {rel:.3e})");
                }
            }
            a.len()
        };
        for step in 0..3 {
            let feed = data.batch(16, 7, step).feed(&spec);
            let (oa, ob) = (
                cpu.step_outputs(&feed).unwrap(),
                jit.step_outputs(&feed).unwrap(),
            );
            let outputs = same(&format!("step {step}: output"), &oa, &ob);
            let state = same(&format!("step {step}: state"), &cpu.state(), &jit.state());
            let loss = oa["loss"].to_f64_vec().unwrap()[0];
            eprintln!(
                "step {step}: loss {loss}; {outputs} outputs and {state} state entries bit for bit"
            );
            assert!(oa["finite"].bytes()[0] != 0, "step {step} applied");
        }
        // The scaling state moved: histories hold this run's amaxes, scales left 1.
        let st = jit.state();
        let h = st["fc2.x.amax_history"].to_f64_vec().unwrap();
        assert!(h.iter().filter(|&&v| v > 0.0).count() >= 3, "{:?}", &h[..4]);
        assert_ne!(st["fc2.fp8.dy.scale"].to_f64_vec().unwrap()[0], 1.0);
    }

    /// An FP8 Q/DQ model made by another tool (onnx's Python API,
    /// `scripts/make_qdq_model.py`: FP8 weights behind DequantizeLinear, QuantizeLinear /
    /// DequantizeLinear pairs with FP8 zero points on the activations) runs on the JIT like
    /// the CPU: ONNX's Q/DQ ops, FP8 constants and the model's own scales.
    #[test]
    fn a_third_party_fp8_qdq_model_runs_on_mlirs_jit_like_the_cpu() {
        let rel = digits_model_on_the_jit("qdq_mlp_fp8.onnx", CompileOptions::fp8(), "y", 9);
        eprintln!("qdq_mlp_fp8 on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}");
        assert!(rel <= 1e-5, "rel L2 {rel}");
    }

    /// quantize, dequantize, amax and compute_scale bit for bit against the CPU reference on
    /// every f32 class: zeros of both signs, subnormals of f32 and of FP8, ties, the saturation
    /// edge, ±inf, NaNs of both signs; both formats, both saturation modes (the scale from a
    /// NaN amax keeps the previous one, a finite one is computed, power-of-two or not).
    #[test]
    fn quantize_and_dequantize_are_bit_exact() {
        use fp8c_ir::{DType, Graph, Op, TensorType};
        let mut vals: Vec<f32> = vec![
            0.0,
            -0.0,
            1e-45,
            -3e-39,
            0.0009765625,
            0.001953125,
            0.0029296875,
            464.0,
            464.00003,
            -480.0,
            448.0,
            61440.0,
            57344.0,
            1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            1.0625,
            1.1875,
            -2.5,
            0.3,
        ];
        vals.extend(values(4096 - vals.len(), 3).iter().map(|v| v * 600.0));
        let n = vals.len() as u64;
        for fmt in [DType::F8E4M3, DType::F8E5M2] {
            for saturate in [true, false] {
                let mut g = Graph::new("q");
                let x = g
                    .add_input("x", TensorType::fixed(DType::F32, &[n]))
                    .unwrap();
                let s = g
                    .add_input("s", TensorType::fixed(DType::F32, &[]))
                    .unwrap();
                let q = g
                    .add_node("q", Op::Quantize { to: fmt, saturate }, &[x, s])
                    .unwrap()[0];
                let d = g
                    .add_node("d", Op::Dequantize { to: DType::F32 }, &[q, s])
                    .unwrap()[0];
                g.set_output("q", q).unwrap();
                g.set_output("d", d).unwrap();
                // amax (NaN wins) and the scale computed from it, with a previous scale kept
                // when the amax is not usable.
                let a = g.add_node("a", Op::Amax, &[x]).unwrap()[0];
                let prev = g
                    .add_input("prev", TensorType::fixed(DType::F32, &[]))
                    .unwrap();
                let cs = Op::ComputeScale {
                    fmt,
                    margin: 1.0,
                    source: fp8c_ir::AmaxSource::Current,
                    epsilon: 1e-12,
                    power_2: saturate,
                };
                let sc = g.add_node("cs", cs.clone(), &[a, prev]).unwrap();
                let finite = g.add_node("finite_amax", Op::Amax, &[s]).unwrap()[0];
                let sc2 = g.add_node("cs2", cs, &[finite, prev]).unwrap();
                for (k, v) in [
                    ("amax", a),
                    ("scale", sc[0]),
                    ("scale_inv", sc[1]),
                    ("scale2", sc2[0]),
                    ("scale_inv2", sc2[1]),
                ] {
                    g.set_output(k, v).unwrap();
                }
                let inputs = BTreeMap::from([
                    ("x".to_string(), Tensor::from_f32(vec![n], &vals)),
                    ("s".to_string(), Tensor::from_f32(vec![], &[0.75])),
                    ("prev".to_string(), Tensor::from_f32(vec![], &[2.0])),
                ]);
                use fp8c_runtime::Backend;
                let cpu = fp8c_runtime::CpuBackend
                    .prepare(&fp8c_runtime::lower(&g).unwrap(), g.weights())
                    .unwrap()
                    .run(&inputs)
                    .unwrap();
                let got = fp8c_mlir::prepare(&g, g.weights())
                    .unwrap()
                    .run(&inputs)
                    .unwrap();
                for k in [
                    "q",
                    "d",
                    "amax",
                    "scale",
                    "scale_inv",
                    "scale2",
                    "scale_inv2",
                ] {
                    let (a, b) = (got[k].bytes(), cpu[k].bytes());
                    let first = a.iter().zip(b).position(|(x, y)| x != y);
                    assert!(
                        first.is_none(),
                        "{fmt} saturate={saturate} {k}: first difference at byte {first:?}"
                    );
                }
            }
        }
    }

    /// A PyTorch dynamo export of a Llama-style decoder (examples/models/llama-tiny.onnx:
    /// embedding gather, RMSNorm from pow/mean/sqrt, rotary slices and concats, grouped
    /// attention with batched matmuls, softmax, SiLU) emitted, parsed by mlir-opt and run on
    /// MLIR's JIT: f32, and FP8 with current scaling and f32 accumulation, each within 1e-5
    /// of the CPU reference.
    #[test]
    fn a_llama_style_export_runs_on_mlirs_jit_like_the_cpu_in_f32_and_fp8() {
        let path = example("llama-tiny.onnx");
        let inputs = ref_inputs("llama-tiny", "logits");
        let shape = inputs["input_ids"].shape().to_vec();
        let mut fp8 = fp8c_core::CurrentScaling::default();
        fp8.fp8_gemm_fprop.use_split_accumulator = true;
        let options = [
            ("f32", CompileOptions::f32()),
            (
                "fp8",
                CompileOptions::fp8()
                    .min_fp8_flops(0)
                    .recipe(fp8c_session::Recipe::Current(fp8)),
            ),
        ];
        for (name, opts) in options {
            let compiled = Model::load(&path)
                .unwrap()
                .compile(&opts.input_shape("input_ids", &shape))
                .unwrap();
            let text = fp8c_mlir::emit(&compiled.graph).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("llama.mlir");
            std::fs::write(&file, &text).unwrap();
            let out = Command::new("mlir-opt").arg(&file).output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let rel = jit_vs_cpu(&compiled, &inputs, "logits");
            eprintln!("llama-tiny {name} on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}");
            assert!(rel <= 1e-5, "{name}: rel L2 {rel}");
        }
    }

    /// The CNN of examples/models (conv 3×3 with padding, max and average pooling, GEMM).
    #[test]
    fn a_cnn_runs_on_mlirs_jit_like_the_cpu() {
        let rel = digits_model_on_the_jit("cnn_digits.onnx", CompileOptions::f32(), "logits", 5);
        eprintln!("cnn_digits f32 on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}");
        assert!(rel <= 1e-5, "rel L2 {rel}");
    }

    /// The GPT-2-style decoder (split heads, tanh GELU) and the BERT-style encoder (the
    /// attention mask's GatherND and logic ops, layer norms, erf GELU) exports, f32.
    #[test]
    fn gpt2_and_bert_style_exports_run_on_mlirs_jit_like_the_cpu() {
        for (name, output) in [
            ("gpt2-tiny", "logits"),
            ("bert-tiny-enc", "last_hidden_state"),
        ] {
            let inputs = ref_inputs(name, output);
            let mut opts = CompileOptions::f32();
            for (k, t) in &inputs {
                opts = opts.input_shape(k, t.shape());
            }
            let compiled = Model::load(example(&format!("{name}.onnx")))
                .unwrap()
                .compile(&opts)
                .unwrap();
            let rel = jit_vs_cpu(&compiled, &inputs, output);
            eprintln!("{name} f32 on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}");
            assert!(rel <= 1e-5, "{name}: rel L2 {rel}");
        }
    }

    /// A real PyTorch export by someone else: paraphrase-MiniLM-L3 (fetched by
    /// `scripts/fetch-models.sh`, as the CLI tests fetch it), 2×16 seeded token ids, in f32
    /// and in FP8 (current scaling, f32 accumulation; every eligible GEMM in FP8), each
    /// within 1e-5 of the CPU reference on the last hidden state.
    #[test]
    fn minilm_runs_on_mlirs_jit_like_the_cpu_in_f32_and_fp8() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let out = Command::new(root.join("scripts/fetch-models.sh"))
            .current_dir(&root)
            .arg("minilm-l3-paraphrase")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .trim(),
        );
        let ids: Vec<i64> = values(32, 11)
            .iter()
            .map(|v| ((v + 1.0) * 15_000.0) as i64)
            .collect();
        let inputs = BTreeMap::from([
            ("input_ids".to_string(), Tensor::from_i64(vec![2, 16], &ids)),
            (
                "attention_mask".to_string(),
                Tensor::from_i64(vec![2, 16], &[1; 32]),
            ),
        ]);
        let mut fp8 = fp8c_core::CurrentScaling::default();
        fp8.fp8_gemm_fprop.use_split_accumulator = true;
        let options = [
            ("f32", CompileOptions::f32()),
            (
                "fp8",
                CompileOptions::fp8()
                    .min_fp8_flops(0)
                    .recipe(fp8c_session::Recipe::Current(fp8)),
            ),
        ];
        let model = Model::load(&path).unwrap();
        let mut cpu_runs = Vec::new();
        for (name, opts) in options {
            let opts = opts
                .input_shape("input_ids", &[2, 16])
                .input_shape("attention_mask", &[2, 16]);
            let compiled = model.compile(&opts).unwrap();
            let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
            let got = compiled
                .prepare(Device::Mlir)
                .unwrap()
                .run(&inputs)
                .unwrap();
            // Every float output: the token embeddings' sequence output and the pooled one.
            let floats: Vec<&String> = cpu.keys().filter(|k| cpu[*k].dtype().is_float()).collect();
            assert_eq!(floats.len(), 2, "{:?}", cpu.keys());
            for out in floats {
                assert_eq!(got[out].ty(), cpu[out].ty());
                let rel = rel_l2(&got[out], &cpu[out]);
                eprintln!(
                    "MiniLM-L3 {name} \"{out}\" on MLIR's JIT vs the CPU reference: rel L2 {rel:.3e}"
                );
                assert!(rel <= 1e-5, "{name} {out}: rel L2 {rel}");
            }
            cpu_runs.push(cpu);
        }
        // The FP8 run really quantized: its outputs are not f32's.
        for (k, t) in &cpu_runs[0] {
            if t.dtype().is_float() {
                let rel = rel_l2(&cpu_runs[1][k], t);
                assert!(rel > 1e-3, "\"{k}\": FP8 equals f32 (rel L2 {rel})");
            }
        }
    }

    /// The evaluator's golden op cases (`fp8c_eval::golden`: onnxruntime, onnx's reference
    /// evaluator and ml_dtypes outputs) on MLIR's JIT, each a one-node program, within the
    /// case's own tolerance (bit for bit for the casts and quantizers). Ops the emitter does
    /// not take are counted with its error, not failed; every FP8 cast, quantize and
    /// dequantize case must run.
    /// The block-scaling golden cases (numpy + ml_dtypes, `crates/fp8c-eval/tests/gen/
    /// gen_block_cases.py`: tile amaxes and scales, TE's power-of-two scales, OCP MX's E8M0
    /// rule with subnormal and clamped amaxes, DeepSeek-V3's per-block promotion) on the JIT:
    /// every case emitted, every element as the reference (any NaN matching any NaN).
    #[test]
    fn block_scaling_golden_cases_run_on_mlirs_jit_bit_for_bit() {
        use fp8c_eval::golden::{self, mismatch};
        let cases = golden::cases(include_str!(
            "../../fp8c-eval/tests/golden/block_cases.json"
        ))
        .unwrap();
        assert!(cases.len() >= 20, "{} cases", cases.len());
        let mut failures = Vec::new();
        for case in &cases {
            let (g, feed) = case.program().unwrap();
            let mut exe = fp8c_mlir::prepare(&g, g.weights())
                .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let got = exe.run(&feed).unwrap();
            for (k, want) in case.outputs().iter().enumerate() {
                if let Some(why) = mismatch(&got[&format!("out{k}")], want, case.atol, case.rtol) {
                    failures.push(format!("{} (output {k}): {why}", case.name));
                }
            }
        }
        eprintln!("{} block-scaling golden cases on MLIR's JIT", cases.len());
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn golden_op_cases_run_on_mlirs_jit_like_the_references() {
        use fp8c_eval::golden::{self, mismatch};
        let cases = golden::cases(golden::CASES_JSON).unwrap();
        let (mut ran, mut failures) = (Vec::new(), Vec::new());
        let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
        for case in &cases {
            let (g, feed) = match case.program() {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{}: {e}", case.name));
                    continue;
                }
            };
            let mut exe = match fp8c_mlir::prepare(&g, g.weights()) {
                Ok(exe) => exe,
                Err(e) => {
                    let op = g.node(g.find_node("op").unwrap()).op.name().to_string();
                    let why = e.to_string();
                    let why = why.rsplit(": ").next().unwrap_or(&why).to_string();
                    *skipped.entry(format!("{op}: {why}")).or_default() += 1;
                    continue;
                }
            };
            let got = match exe.run(&feed) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{}: {e}", case.name));
                    continue;
                }
            };
            ran.push(case.name.clone());
            for (k, want) in case.outputs().iter().enumerate() {
                match got.get(&format!("out{k}")) {
                    None => failures.push(format!("{}: no output {k}", case.name)),
                    Some(got) => {
                        if let Some(why) = mismatch(got, want, case.atol, case.rtol) {
                            failures.push(format!(
                                "{} (output {k}, from {}): {why}",
                                case.name, case.source
                            ));
                        }
                    }
                }
            }
        }
        eprintln!(
            "{} of {} golden cases ran on MLIR's JIT; skipped (not emitted):",
            ran.len(),
            cases.len()
        );
        for (why, n) in &skipped {
            eprintln!("  {n} x {why}");
            // An op the emitter takes must make a valid module; refusing is for ops it does not.
            assert!(!why.contains("does not verify"), "{n} x {why}");
        }
        assert!(
            failures.is_empty(),
            "{} cases differ:\n{}",
            failures.len(),
            failures.join("\n")
        );
        for name in [
            "cast_f32_f8e4m3_sat1",
            "cast_f32_f8e4m3_sat0",
            "cast_f8e4m3_f32",
            "cast_f32_f8e5m2_sat1",
            "cast_f32_f8e5m2_sat0",
            "cast_f8e5m2_f32",
            "quantize_f8e4m3_sat1",
            "quantize_f8e4m3_sat0",
            "dequantize_f8e4m3_f32",
            "quantize_f8e5m2_sat1",
            "quantize_f8e5m2_sat0",
            "dequantize_f8e5m2_f32",
        ] {
            assert!(ran.iter().any(|r| r == name), "{name} did not run on MLIR");
        }
    }

    /// `gelu_grad` (both GELUs, an encoder's backward) on the JIT against the CPU reference's
    /// kernel: f64 formulas rounded once; `erf` / `tanh` come from different C libraries, so
    /// within 1e-6 (measured on this machine: equal).
    #[test]
    fn gelu_gradients_run_on_mlirs_jit_like_the_cpu() {
        use fp8c_ir::{DType, GeluApprox, Graph, Op, TensorType};
        for approximate in [GeluApprox::None, GeluApprox::Tanh] {
            let mut g = Graph::new("g");
            let ty = TensorType::fixed(DType::F32, &[8, 32]);
            let x = g.add_input("x", ty.clone()).unwrap();
            let dy = g.add_input("dy", ty).unwrap();
            let op = Op::GeluGrad { approximate };
            let dx = g.add_node("dx", op.clone(), &[x, dy]).unwrap()[0];
            g.set_output("dx", dx).unwrap();
            let xv: Vec<f32> = values(256, 3).iter().map(|v| 4.0 * v).collect();
            let xt = Tensor::from_f32(vec![8, 32], &xv);
            let dt = Tensor::from_f32(vec![8, 32], &values(256, 4));
            let want = fp8c_eval::eval_op(&op, &[&xt, &dt]).unwrap().remove(0);
            let inputs = BTreeMap::from([("x".to_string(), xt), ("dy".to_string(), dt)]);
            let got = fp8c_mlir::prepare(&g, g.weights())
                .unwrap()
                .run(&inputs)
                .unwrap()
                .remove("dx")
                .unwrap();
            let rel = rel_l2(&got, &want);
            eprintln!("gelu_grad ({approximate:?}) on the JIT vs the CPU: rel L2 {rel:.3e}");
            assert!(rel <= 1e-6, "{approximate:?}: {rel:.3e}");
        }
    }

    /// A decoder's training step on the JIT: the GPT-2-style PyTorch export trained on text
    /// (byte tokens, next-byte labels) exercises the backward ops of normalisations and
    /// embeddings (`layer_norm_grad`, `softmax_grad`, `gather_grad`) besides the loss and
    /// AdamW. Two steps: losses and the whole state against the CPU reference (f32 GEMMs:
    /// summation order may differ, so within 1e-5; what is bit for bit is counted).
    #[test]
    fn a_decoder_export_trains_on_mlirs_jit_like_the_cpu() {
        use fp8c_session::train::{DataOptions, Dataset, TrainOptions, Trainer};
        let model = Model::load(example("gpt2-tiny.onnx")).unwrap();
        let out = model.outputs()[0].clone();
        let options = TrainOptions::new(&out);
        let text = example("../data/shakespeare.txt");
        let data = Dataset::from_text(
            &text,
            16,
            &model,
            &DataOptions {
                inputs: BTreeMap::new(),
                labels: "labels".into(),
                loss: options.loss,
                batch: 2,
            },
        )
        .unwrap();
        let forward = data.forward_model(&model, 2, &out).unwrap();
        let spec = options.spec();
        let opts = CompileOptions::fp8().recipe(fp8c_session::Recipe::Delayed(Default::default()));
        let mut cpu = Trainer::for_model(&forward, &spec, &opts, Device::Cpu).unwrap();
        let mut jit = Trainer::for_model(&forward, &spec, &opts, Device::Mlir).unwrap();
        let g = jit.graph();
        let ops: Vec<&str> = g
            .topo_order()
            .unwrap()
            .into_iter()
            .map(|id| g.node(id).op.name())
            .collect();
        for op in [
            "layer_norm_grad",
            "softmax_grad",
            "gather_grad",
            "adamw_update",
        ] {
            assert!(ops.contains(&op), "{op} in the training graph");
        }
        for step in 0..2 {
            let feed = data.batch(2, 1, step).feed(&spec);
            let (a, b) = (cpu.step(&feed).unwrap(), jit.step(&feed).unwrap());
            assert!(
                ((a.loss - b.loss) / a.loss).abs() <= 1e-6,
                "step {step}: {a:?} {b:?}"
            );
            let (sa, sb) = (cpu.state(), jit.state());
            let mut exact = 0;
            for (k, v) in &sa {
                if v.bytes() == sb[k].bytes() {
                    exact += 1;
                } else {
                    let rel = rel_l2(&sb[k], v);
                    assert!(rel <= 1e-5, "step {step}: {k} rel L2 {rel:.3e}");
                }
            }
            eprintln!(
                "gpt2-tiny step {step}: loss {} on both; {exact}/{} state entries bit for bit",
                a.loss,
                sa.len()
            );
        }
    }

    /// The per-tile recipes (#16: rowwise, DeepSeek's 1×128 / 128×128 blocks, MXFP8's 1×32
    /// with E8M0 scales): `block_quantize`, `block_scaled_matmul` (and in training the
    /// re-tiled backward GEMMs) on the JIT. Inference with every GEMM in FP8 gives the CPU's
    /// logits bit for bit; a training step its loss, gradients and updated weights bit for
    /// bit (block sums in K order, as the CPU's block kernel).
    #[test]
    fn per_tile_recipes_run_and_train_on_mlirs_jit_like_the_cpu() {
        use fp8c_session::train::Trainer;
        use fp8c_session::{Granularity, Recipe};
        let (model, data, forward, options) = digits();
        let mut spec = options.spec();
        spec.expose_grads = true;
        for g in [Granularity::Rowwise, Granularity::Block, Granularity::Mxfp8] {
            let mut opts = CompileOptions::fp8()
                .input_shape("x", &[16, 64])
                .min_fp8_flops(0)
                .recipe(Recipe::Current(fp8c_core::CurrentScaling::tiled(g)));
            opts.policy.pad_to_16 = true;
            let compiled = model.compile(&opts).unwrap();
            let g_ = &compiled.graph;
            let ops: Vec<&str> = g_
                .topo_order()
                .unwrap()
                .into_iter()
                .map(|id| g_.node(id).op.name())
                .collect();
            assert!(ops.contains(&"block_scaled_matmul"), "{g:?}: {ops:?}");
            let x = Tensor::from_f32(vec![16, 64], &values(16 * 64, 5));
            let inputs = BTreeMap::from([("x".to_string(), x)]);
            let a = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
            let b = compiled
                .prepare(Device::Mlir)
                .unwrap()
                .run(&inputs)
                .unwrap();
            assert!(a["logits"].bytes() == b["logits"].bytes(), "{g:?}: logits");
            let mut cpu = Trainer::for_model(&forward, &spec, &opts, Device::Cpu).unwrap();
            let mut jit = Trainer::for_model(&forward, &spec, &opts, Device::Mlir).unwrap();
            for step in 0..2 {
                let feed = data.batch(16, 3, step).feed(&spec);
                let (oa, ob) = (
                    cpu.step_outputs(&feed).unwrap(),
                    jit.step_outputs(&feed).unwrap(),
                );
                for (k, v) in &oa {
                    assert!(v.bytes() == ob[k].bytes(), "{g:?} step {step}: output {k}");
                }
                let (sa, sb) = (cpu.state(), jit.state());
                for (k, v) in &sa {
                    assert!(v.bytes() == sb[k].bytes(), "{g:?} step {step}: state {k}");
                }
            }
            eprintln!("{g:?}: logits, 2 training steps' outputs and state bit for bit");
        }
    }

    /// Inference with delayed scaling: the amax histories, scales and scale_invs are function
    /// arguments and results, held by the JIT's executable between runs like the CPU's state.
    /// Three runs on different inputs: the state bit for bit (the FP8 GEMMs under the
    /// fast-accumulation model), the logits of the f32 head within 1e-5.
    #[test]
    fn delayed_scaling_state_carries_across_runs_like_the_cpus() {
        let compiled = delayed_mlp();
        assert!(
            !compiled.graph.state().is_empty(),
            "delayed scaling has state"
        );
        let text = fp8c_mlir::emit(&compiled.graph).unwrap();
        assert!(text.contains("amax_history"), "state arguments are named");
        let mut cpu = compiled.prepare(Device::Cpu).unwrap();
        let mut jit = compiled.prepare(Device::Mlir).unwrap();
        for run in 0..3u64 {
            let x = Tensor::from_f32(vec![16, 64], &values(16 * 64, 100 + run));
            let inputs = BTreeMap::from([("x".to_string(), x)]);
            let (a, b) = (cpu.run(&inputs).unwrap(), jit.run(&inputs).unwrap());
            let rel = rel_l2(&b["logits"], &a["logits"]);
            assert!(rel <= 1e-5, "run {run}: logits rel L2 {rel:.3e}");
            let (sa, sb) = (cpu.state(), jit.state());
            assert_eq!(sa.len(), sb.len());
            for (k, v) in &sa {
                assert!(v.bytes() == sb[k].bytes(), "run {run}: state {k} differs");
            }
        }
        let h = jit.state()["fc1.x.amax_history"].to_f64_vec().unwrap();
        assert_eq!(
            h.iter().filter(|&&v| v > 0.0).count(),
            3,
            "three runs recorded"
        );
        // A state entry set from outside is what the next run reads.
        let scale = Tensor::scalar_f32(0.5);
        cpu.set_state("fc1.x.scale", scale.clone()).unwrap();
        jit.set_state("fc1.x.scale", scale).unwrap();
        let x = Tensor::from_f32(vec![16, 64], &values(16 * 64, 200));
        let inputs = BTreeMap::from([("x".to_string(), x)]);
        let (a, b) = (cpu.run(&inputs).unwrap(), jit.run(&inputs).unwrap());
        assert!(rel_l2(&b["logits"], &a["logits"]) <= 1e-5);
        assert!(cpu.state()["fc2.x.scale"].bytes() == jit.state()["fc2.x.scale"].bytes());
        assert!(
            jit.set_state("no.such.entry", Tensor::scalar_f32(1.0))
                .is_err()
        );
    }

    /// `op` on `inputs` (graph inputs) then `constants` (constant nodes, as an import folds
    /// axes and shapes) run on the JIT and by the CPU kernel (`fp8c_eval::eval_op`): (JIT
    /// outputs, CPU outputs), in output order.
    fn one_op_on_the_jit(
        op: fp8c_ir::Op,
        inputs: &[&Tensor],
        constants: &[&Tensor],
    ) -> (Vec<Tensor>, Vec<Tensor>) {
        let mut g = fp8c_ir::Graph::new("one_op");
        let mut vals = Vec::new();
        let mut feed = BTreeMap::new();
        for (i, t) in inputs.iter().enumerate() {
            let name = format!("in{i}");
            vals.push(g.add_input(&name, t.ty()).unwrap());
            feed.insert(name, (*t).clone());
        }
        for (i, t) in constants.iter().enumerate() {
            let c = fp8c_ir::Op::Constant {
                value: (*t).clone(),
            };
            vals.push(g.add_node(&format!("c{i}"), c, &[]).unwrap()[0]);
        }
        let outs = g.add_node("op", op.clone(), &vals).unwrap();
        for (k, v) in outs.iter().enumerate() {
            g.set_output(&format!("out{k}"), *v).unwrap();
        }
        let mut exe = fp8c_mlir::prepare(&g, g.weights()).unwrap();
        let got = exe.run(&feed).unwrap();
        let all: Vec<&Tensor> = inputs.iter().chain(constants).copied().collect();
        let want = fp8c_eval::eval_op(&op, &all).unwrap();
        let got = (0..outs.len())
            .map(|k| got[&format!("out{k}")].clone())
            .collect();
        (got, want)
    }

    /// Asserts the JIT's outputs of `op` on `inputs` equal the CPU kernel's, bit for bit.
    fn bit_exact_on_the_jit(what: &str, op: fp8c_ir::Op, inputs: &[&Tensor]) {
        bit_exact_with_constants(what, op, inputs, &[]);
    }

    /// [`bit_exact_on_the_jit`] with `constants` after the inputs (see [`one_op_on_the_jit`]).
    fn bit_exact_with_constants(
        what: &str,
        op: fp8c_ir::Op,
        inputs: &[&Tensor],
        constants: &[&Tensor],
    ) {
        let (got, want) = one_op_on_the_jit(op, inputs, constants);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.ty(), w.ty(), "{what}: output {k}'s type");
            assert!(
                g.bytes() == w.bytes(),
                "{what}: output {k}: JIT {:?} vs CPU {:?}",
                g.to_f64_vec(),
                w.to_f64_vec()
            );
        }
    }

    /// A model of tests/models (`path` without `.onnx`), run on the inputs its npz (`npz`:
    /// `ort` or `ref`) holds on the JIT and the CPU: see [`model_on_the_jit_is_bit_exact`].
    fn model_is_bit_exact_on_the_jit(path: &str, npz: &str) {
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models");
        let data: BTreeMap<String, Tensor> =
            fp8c_session::npy::read_npz(&base.join(format!("{path}.{npz}.npz")))
                .unwrap()
                .into_iter()
                .collect();
        model_on_the_jit_is_bit_exact(path, &data);
    }

    /// A model of tests/models (`path` without `.onnx`) compiled as `fp8c run` does (default
    /// options, each input's shape from `data`), run on `data` on the JIT and the CPU: every
    /// output equal bit for bit.
    fn model_on_the_jit_is_bit_exact(path: &str, data: &BTreeMap<String, Tensor>) {
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models");
        let model = Model::load(base.join(format!("{path}.onnx"))).unwrap();
        let mut opts = CompileOptions::default();
        let mut inputs = BTreeMap::new();
        for input in model.inputs() {
            let t = data[&input.name].clone();
            opts = opts.input_shape(&input.name, t.shape());
            inputs.insert(input.name, t);
        }
        let compiled = model.compile(&opts).unwrap();
        let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
        let got = compiled
            .prepare(Device::Mlir)
            .unwrap()
            .run(&inputs)
            .unwrap();
        for (k, want) in &cpu {
            assert_eq!(got[k].ty(), want.ty(), "{path}: {k}");
            assert!(got[k].bytes() == want.bytes(), "{path}: {k} differs");
        }
    }

    #[test]
    fn arg_max_and_arg_min_run_on_mlirs_jit_like_the_cpu_bit_for_bit() {
        use fp8c_ir::{DType, Op};
        let nan = f64::NAN;
        // Rows with ties, a leading NaN, a NaN in the middle, infinities and -0.0 vs 0.0.
        let rows: Vec<f64> = vec![
            1.0,
            3.0,
            3.0,
            2.0, //
            nan,
            5.0,
            1.0,
            5.0, //
            2.0,
            nan,
            7.0,
            -1.0, //
            -0.0,
            0.0,
            f64::NEG_INFINITY,
            f64::INFINITY, //
            4.0,
            4.0,
            4.0,
            4.0, //
            -3.0,
            9.0,
            -3.0,
            9.0,
        ];
        for d in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            let x = Tensor::from_f64_as(d, vec![6, 4], &rows).unwrap();
            let x3 = Tensor::from_f64_as(d, vec![2, 3, 4], &rows).unwrap();
            for (max, axis, keepdims, last) in [
                (true, 1, true, false),
                (true, -1, false, true),
                (false, 1, false, false),
                (false, 0, true, true),
            ] {
                let op = if max {
                    Op::ArgMax {
                        axis,
                        keepdims,
                        select_last_index: last,
                    }
                } else {
                    Op::ArgMin {
                        axis,
                        keepdims,
                        select_last_index: last,
                    }
                };
                bit_exact_on_the_jit(&format!("{op:?} {d}"), op.clone(), &[&x]);
                bit_exact_on_the_jit(&format!("{op:?} {d} rank 3"), op, &[&x3]);
            }
        }
        // Integers: signed, unsigned (the high bit large) and i64 beyond 2^53.
        let ints: Vec<f64> = vec![3.0, -1.0, 3.0, 100.0, -100.0, 0.0, 7.0, 7.0];
        for d in [DType::I8, DType::I32, DType::U8, DType::U16] {
            let x = Tensor::from_f64_as(d, vec![2, 4], &ints).unwrap();
            for last in [false, true] {
                let op = Op::ArgMax {
                    axis: 1,
                    keepdims: true,
                    select_last_index: last,
                };
                bit_exact_on_the_jit(&format!("{op:?} {d}"), op, &[&x]);
                let op = Op::ArgMin {
                    axis: 0,
                    keepdims: false,
                    select_last_index: last,
                };
                bit_exact_on_the_jit(&format!("{op:?} {d}"), op, &[&x]);
            }
        }
        let big = (1i64 << 60) + 1;
        let x = Tensor::from_i64(vec![1, 4], &[big - 1, big, big - 2, -big]);
        let op = Op::ArgMax {
            axis: 1,
            keepdims: false,
            select_last_index: false,
        };
        bit_exact_on_the_jit("arg_max i64 beyond 2^53", op, &[&x]);
        // u64 compares as its f64 rounding, as the CPU: 2^60 + 1 ties 2^60.
        let x = Tensor::from_pod(DType::U64, vec![3], &[1u64 << 60, (1u64 << 60) + 1, 5]).unwrap();
        for last in [false, true] {
            let op = Op::ArgMax {
                axis: 0,
                keepdims: true,
                select_last_index: last,
            };
            bit_exact_on_the_jit("arg_max u64", op, &[&x]);
        }
        // sklearn classifiers end in arg_max: labels and probabilities equal the CPU's.
        for name in ["iris_gaussian_nb", "iris_logreg_binary"] {
            model_is_bit_exact_on_the_jit(&format!("sklearn/{name}"), "ort");
        }
        model_is_bit_exact_on_the_jit("sklearn/mlp_digits_clf", "ref");
    }

    #[test]
    fn fp8_of_f16_and_bf16_models_runs_on_mlirs_jit_like_the_cpu_bit_for_bit() {
        use fp8c_ir::{DType, Op};
        // amax, quantize and quantize_amax of f16 / bf16 / f64 tensors (read as f32, as the
        // CPU), every special class included; dequantize to f16 / bf16.
        let mut v: Vec<f64> = values(60, 7)
            .iter()
            .map(|&x| f64::from(x) * 300.0)
            .collect();
        v.extend([
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            0.0,
            -0.0,
        ]);
        v.extend([1e-6, -3e-8, 65504.0, 448.0, 464.0, 57344.0]);
        let scale = Tensor::scalar_f32(0.75);
        for d in [DType::F16, DType::BF16, DType::F64] {
            let x = Tensor::from_f64_as(d, vec![8, 9], &v).unwrap();
            bit_exact_on_the_jit(&format!("amax {d}"), Op::Amax, &[&x]);
            let finite: Vec<f64> = v
                .iter()
                .map(|&a| if a.is_nan() { 1.0 } else { a })
                .collect();
            let xf = Tensor::from_f64_as(d, vec![8, 9], &finite).unwrap();
            bit_exact_on_the_jit(&format!("amax {d} without NaN"), Op::Amax, &[&xf]);
            for to in [DType::F8E4M3, DType::F8E5M2] {
                for saturate in [true, false] {
                    let op = Op::Quantize { to, saturate };
                    bit_exact_on_the_jit(&format!("{op:?} of {d}"), op, &[&x, &scale]);
                    let op = Op::QuantizeAmax { to, saturate };
                    bit_exact_on_the_jit(&format!("{op:?} of {d}"), op, &[&x, &scale]);
                }
            }
        }
        let codes: Vec<u8> = (0..=255).collect();
        for fmt in [DType::F8E4M3, DType::F8E5M2] {
            let q = Tensor::from_pod(fmt, vec![16, 16], &codes).unwrap();
            for to in [DType::F16, DType::BF16] {
                let op = Op::Dequantize { to };
                bit_exact_on_the_jit(&format!("{op:?} of {fmt}"), op, &[&q, &scale]);
            }
        }
        // The f16 and bf16 MLPs in FP8: amax, quantize and the scaled GEMMs with an f16 /
        // bf16 result and bias epilogue.
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/models/export");
        for (name, d) in [("mlp_f16", DType::F16), ("mlp_bf16", DType::BF16)] {
            let compiled = Model::load(dir.join(format!("{name}.onnx")))
                .unwrap()
                .compile(&CompileOptions::fp8().input_shape("x", &[4, 32]))
                .unwrap();
            let xs: Vec<f64> = values(128, 11)
                .iter()
                .map(|&a| f64::from(a) * 4.0)
                .collect();
            let x = Tensor::from_f64_as(d, vec![4, 32], &xs).unwrap();
            let inputs = BTreeMap::from([("x".to_string(), x)]);
            let cpu = compiled.prepare(Device::Cpu).unwrap().run(&inputs).unwrap();
            let got = compiled
                .prepare(Device::Mlir)
                .unwrap()
                .run(&inputs)
                .unwrap();
            for (k, want) in &cpu {
                assert_eq!(got[k].ty(), want.ty(), "{name}: {k}");
                assert!(got[k].bytes() == want.bytes(), "{name}: {k} differs");
            }
        }
    }

    #[test]
    fn gather_elements_and_cum_sum_run_on_mlirs_jit_like_the_cpu_bit_for_bit() {
        use fp8c_ir::{DType, Op};
        // gather_elements: indices of another shape than data (smaller off the axis, larger
        // along it), negative ones, i64 and i32 indices, float and integer data.
        let data: Vec<f64> = (0..12).map(|k| f64::from(k) * 1.5 - 4.0).collect();
        let idx = [0i64, -1, 2, 1, 3, -4, 2, 2, 0, 1, -2, 3, 1, 0, 0];
        for d in [DType::F32, DType::F16, DType::I64, DType::U8] {
            let x = Tensor::from_f64_as(
                d,
                vec![3, 4],
                &data.iter().map(|v| v.abs()).collect::<Vec<_>>(),
            )
            .unwrap();
            for (axis, shape, take) in [(1i64, vec![3u64, 5], 15usize), (-1, vec![2, 3], 6)] {
                let i = Tensor::from_i64(shape.clone(), &idx[..take]);
                let i32s: Vec<i32> = idx[..take].iter().map(|&v| v as i32).collect();
                let i32_idx = Tensor::from_i32(shape, &i32s);
                let op = Op::GatherElements { axis };
                bit_exact_on_the_jit(&format!("{op:?} {d}"), op.clone(), &[&x, &i]);
                bit_exact_on_the_jit(&format!("{op:?} {d} i32"), op, &[&x, &i32_idx]);
            }
            let i = Tensor::from_i64(vec![5, 2], &[0, 1, 2, -1, -3, 0, 1, 1, 2, 2]);
            let op = Op::GatherElements { axis: 0 };
            bit_exact_on_the_jit(&format!("{op:?} {d}"), op, &[&x, &i]);
        }
        // cum_sum: every exclusive / reverse mode along each axis; f32 values whose sums
        // round differently in another order; f16 / bf16 summed in f32, integers wrapping.
        let v: Vec<f64> = values(24, 5)
            .iter()
            .enumerate()
            .map(|(k, &a)| f64::from(a) * 10f64.powi(k as i32 % 7 - 3))
            .collect();
        for d in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I8,
        ] {
            let vals: Vec<f64> = if d.is_int() {
                v.iter()
                    .map(|a| (a * 1000.0).round().clamp(-120.0, 120.0))
                    .collect()
            } else {
                v.clone()
            };
            let x = Tensor::from_f64_as(d, vec![2, 3, 4], &vals).unwrap();
            for axis in [0i64, 1, -1] {
                for (exclusive, reverse) in
                    [(false, false), (true, false), (false, true), (true, true)]
                {
                    let op = Op::CumSum { exclusive, reverse };
                    let a = Tensor::from_i64(vec![], &[axis]);
                    bit_exact_with_constants(&format!("{op:?} axis {axis} {d}"), op, &[&x], &[&a]);
                }
            }
        }
        // Tree ensembles (sklearn's, through onnxruntime's TreeEnsemble import) use both.
        for name in [
            "iris_decision_tree",
            "iris_gradient_boosting",
            "reg_gradient_boosting",
        ] {
            model_is_bit_exact_on_the_jit(&format!("sklearn/{name}"), "ort");
        }
    }

    #[test]
    fn integer_quantize_linear_and_dequantize_linear_run_on_mlirs_jit_bit_for_bit() {
        use fp8c_ir::{DType, Op};
        // Halves (ties to even), NaN, infinities, values past the range, −0.0.
        let mut v: Vec<f64> = values(30, 3)
            .iter()
            .map(|&a| f64::from(a) * 200.0)
            .collect();
        v.extend([
            0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, -128.5, 254.5, 255.5,
        ]);
        v.extend([
            f64::NAN,
            f64::INFINITY,
            -f64::INFINITY,
            -0.0,
            1e9,
            -1e9,
            3e4,
            7e4,
        ]);
        assert_eq!(v.len(), 49);
        let per_tensor = Tensor::scalar_f32(0.5);
        let per_axis = Tensor::from_f32(vec![7], &[0.5, 1.0, 0.25, 3.0, 0.1, 1.0, 2.0]);
        for xt in [DType::F32, DType::F16, DType::F64, DType::I32] {
            let xv: Vec<f64> = if xt == DType::I32 {
                v.iter()
                    .map(|a| if a.is_finite() { a.round() } else { 7.0 })
                    .collect()
            } else {
                v.clone()
            };
            let x = Tensor::from_f64_as(xt, vec![7, 7], &xv).unwrap();
            for to in [DType::I8, DType::U8, DType::I16, DType::U16] {
                let op = Op::QuantizeLinear {
                    axis: 0,
                    saturate: true,
                    to,
                    block_size: 0,
                };
                let what = format!("quantize_linear {xt} → {to}");
                bit_exact_on_the_jit(&what, op.clone(), &[&x, &per_tensor]);
                let zp = Tensor::from_f64_as(to, vec![], &[3.0]).unwrap();
                bit_exact_on_the_jit(&what, op.clone(), &[&x, &per_tensor, &zp]);
                let zps = Tensor::from_f64_as(to, vec![7], &[0.0, 1.0, 2.0, 100.0, 7.0, 0.0, 9.0])
                    .unwrap();
                bit_exact_on_the_jit(&what, op, &[&x, &per_axis, &zps]);
            }
        }
        // Dequantize: every integer input type, per tensor and per axis, with and without
        // a zero point.
        for xt in [DType::I8, DType::U8, DType::I16, DType::U16, DType::I32] {
            let xv: Vec<f64> = (0..49).map(|k| f64::from(k * 37 % 256)).collect();
            let x = Tensor::from_f64_as(xt, vec![7, 7], &xv).unwrap();
            let what = format!("dequantize_linear {xt}");
            for axis in [0i64, 1] {
                let op = Op::DequantizeLinear {
                    axis,
                    block_size: 0,
                };
                bit_exact_on_the_jit(&what, op.clone(), &[&x, &per_tensor]);
                let zps = Tensor::from_f64_as(xt, vec![7], &[0.0, 1.0, 2.0, 100.0, 7.0, 0.0, 9.0])
                    .unwrap();
                bit_exact_on_the_jit(&what, op, &[&x, &per_axis, &zps]);
            }
        }
    }

    #[test]
    fn integer_and_f64_matmuls_and_qoperator_models_run_on_mlirs_jit_like_the_cpu() {
        use fp8c_ir::{DType, Op};
        // Integer matmuls wrap in their type (the CPU's wrapping i64 sum cast back).
        let av: Vec<f64> = (0..2 * 3 * 5)
            .map(|k| f64::from((k * 53 % 255) - 127))
            .collect();
        let bv: Vec<f64> = (0..5 * 4)
            .map(|k| f64::from((k * 29 % 251) - 125))
            .collect();
        for d in [DType::I32, DType::I8, DType::U8, DType::I64, DType::I16] {
            let (a, b) = if d == DType::U8 {
                let u = |v: &[f64]| v.iter().map(|x| x + 127.0).collect::<Vec<_>>();
                (u(&av), u(&bv))
            } else {
                (av.clone(), bv.clone())
            };
            let a2 = Tensor::from_f64_as(d, vec![6, 5], &a).unwrap();
            let a3 = Tensor::from_f64_as(d, vec![2, 3, 5], &a).unwrap();
            let b = Tensor::from_f64_as(d, vec![5, 4], &b).unwrap();
            bit_exact_on_the_jit(&format!("matmul {d}"), Op::MatMul, &[&a2, &b]);
            bit_exact_on_the_jit(&format!("batched matmul {d}"), Op::MatMul, &[&a3, &b]);
        }
        // i32 sums past 2^31 wrap.
        let big = Tensor::from_i32(vec![1, 2], &[i32::MAX, 3]);
        let k = Tensor::from_i32(vec![2, 1], &[2, i32::MAX]);
        bit_exact_on_the_jit("matmul i32 wrapping", Op::MatMul, &[&big, &k]);
        // f64: integer-valued operands (exact in any order) bit for bit; other values within
        // f64 rounding (fma in K order against the CPU's GEMM).
        let a = Tensor::from_f64_as(DType::F64, vec![6, 5], &av).unwrap();
        let b = Tensor::from_f64_as(DType::F64, vec![5, 4], &bv).unwrap();
        bit_exact_on_the_jit("matmul f64 of integers", Op::MatMul, &[&a, &b]);
        let fa: Vec<f64> = values(64 * 48, 21)
            .iter()
            .map(|&v| f64::from(v) / 3.0)
            .collect();
        let fb: Vec<f64> = values(48 * 8, 22)
            .iter()
            .map(|&v| f64::from(v) / 7.0)
            .collect();
        let a = Tensor::from_f64(vec![64, 48], &fa);
        let b = Tensor::from_f64(vec![48, 8], &fb);
        let (got, want) = one_op_on_the_jit(Op::MatMul, &[&a, &b], &[]);
        assert_eq!(got[0].ty(), want[0].ty());
        let err = rel_l2(&got[0], &want[0]);
        assert!(err < 1e-15, "f64 matmul: {err:e}");
        // f64 elementwise arithmetic (the correctly rounded ops) and a constant operand.
        let x = Tensor::from_f64(vec![2, 3], &[1.0 / 3.0, -2.5, f64::NAN, 1e300, -0.0, 7.0]);
        let c = Tensor::from_f64(vec![3], &[0.1, -1e300, 3.0]);
        for op in [Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Max, Op::Min] {
            bit_exact_with_constants(&format!("{op:?} f64"), op, &[&x], &[&c]);
        }
        for op in [Op::Neg, Op::Abs, Op::Sqrt, Op::Floor, Op::Ceil, Op::Round] {
            bit_exact_on_the_jit(&format!("{op:?} f64"), op, &[&x]);
        }
        // onnxruntime's QOperator models (QLinearConv's f64 integer sums, QLinearMatMul and
        // MatMulInteger's i32 sums, integer Q/DQ) and dynamic quantization, bit for bit.
        let image = |n: usize, seed| Tensor::from_f32(vec![2, 3, 10, 10], &values(n, seed));
        for name in ["static_qop_cnn_u8", "static_qop_cnn_s8"] {
            let data = BTreeMap::from([("x".to_string(), image(600, 31))]);
            model_on_the_jit_is_bit_exact(&format!("ops/{name}"), &data);
        }
        let x = Tensor::from_f32(vec![4, 32], &values(128, 32));
        let data = BTreeMap::from([("x".to_string(), x)]);
        model_on_the_jit_is_bit_exact("ops/dynamic_quant_mlp", &data);
        let codes: Vec<u8> = (0..64u32).map(|k| (k * 97 % 256) as u8).collect();
        let a = Tensor::from_pod(DType::U8, vec![2, 4, 8], &codes).unwrap();
        let data = BTreeMap::from([("a".to_string(), a)]);
        model_on_the_jit_is_bit_exact("ops/matmul_integer_u8", &data);
        // sklearn's SVCs: f64 kernel sums (constants, matmul, add) before the f32 scores.
        for name in ["iris_svc_rbf", "iris_svc_poly_binary", "iris_nusvc_sigmoid"] {
            model_is_bit_exact_on_the_jit(&format!("sklearn/{name}"), "ort");
        }
    }

    #[test]
    fn rms_norm_runs_on_mlirs_jit_like_the_cpu_bit_for_bit() {
        use fp8c_ir::Op;
        // Rows of 7, 15 and 5·3 elements (the CPU's four lane sums, a remainder), magnitudes
        // spread so that another summation order would change the last bits.
        let v: Vec<f32> = values(2 * 3 * 5 * 7, 41)
            .iter()
            .enumerate()
            .map(|(k, &a)| a * 10f32.powi(k as i32 % 9 - 4))
            .collect();
        for (shape, axis, sshape) in [
            (vec![30u64, 7], -1i64, vec![7u64]),
            (vec![14, 15], 1, vec![15]),
            (vec![2, 3, 5, 7], 2, vec![5, 7]),
            (vec![6, 35], 0, vec![6, 35]),
        ] {
            let x = Tensor::from_f32(shape.clone(), &v);
            let n: u64 = sshape.iter().product();
            let scale = Tensor::from_f32(sshape.clone(), &values(n as usize, 42));
            let op = Op::RmsNormalization {
                axis,
                epsilon: 1e-6,
            };
            bit_exact_on_the_jit(
                &format!("rms_norm {shape:?} axis {axis}"),
                op,
                &[&x, &scale],
            );
        }
        // onnxruntime's SimplifiedLayerNormalization (and its skip form) import as rms_norm.
        let x = Tensor::from_f32(vec![2, 3, 16], &v[..96]);
        let data = BTreeMap::from([("x".to_string(), x)]);
        model_on_the_jit_is_bit_exact("ops/ms_simplified_layer_norm", &data);
        let x = Tensor::from_f32(vec![3, 16], &v[..48]);
        let skip = Tensor::from_f32(vec![3, 16], &v[100..148]);
        let data = BTreeMap::from([("x".to_string(), x), ("skip".to_string(), skip)]);
        model_on_the_jit_is_bit_exact("ops/ms_skip_simplified_layer_norm", &data);
    }

    #[test]
    fn top_k_runs_on_mlirs_jit_like_the_cpu_bit_for_bit() {
        use fp8c_ir::{DType, Op};
        // Many ties (ties go to the lower index), NaNs (above every number), ±0, ±inf.
        let mut v: Vec<f64> = (0..60).map(|k| f64::from(k * 7 % 5 - 2)).collect();
        for (at, x) in [
            (1, f64::NAN),
            (7, f64::NAN),
            (3, -0.0),
            (11, f64::INFINITY),
            (13, -f64::INFINITY),
            (22, f64::NAN),
        ] {
            v[at] = x;
        }
        for d in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::U8,
        ] {
            let vals: Vec<f64> = if d.is_int() {
                v.iter()
                    .map(|&a| if a.is_finite() { a + 2.0 } else { 9.0 })
                    .collect()
            } else {
                v.clone()
            };
            let x = Tensor::from_f64_as(d, vec![3, 4, 5], &vals).unwrap();
            // Every case in f32; two in the other types (each case is one JIT compile).
            let cases: &[(i64, i64, bool)] = if d == DType::F32 {
                &[
                    (-1, 3, true),
                    (-1, 3, false),
                    (1, 4, true),
                    (1, 4, false),
                    (0, 2, true),
                    (0, 3, false),
                    (2, 5, true),
                    (1, 0, false),
                ]
            } else {
                &[(-1, 3, true), (1, 4, false)]
            };
            for &(axis, k, largest) in cases {
                let op = Op::TopK {
                    axis,
                    largest,
                    sorted: true,
                };
                let kt = Tensor::from_i64(vec![1], &[k]);
                let what = format!("{op:?} k={k} {d}");
                bit_exact_with_constants(&what, op, &[&x], &[&kt]);
            }
        }
        // One-node exports (sklearn's k-nearest-neighbours models select with top_k too, and
        // match the same way, but their hundreds of nodes take the JIT 25–50 s to compile).
        let x = Tensor::from_f64_as(DType::F32, vec![3, 10], &v[..30]).unwrap();
        let data = BTreeMap::from([("x".to_string(), x)]);
        model_on_the_jit_is_bit_exact("ops/top_k_largest", &data);
        let x = Tensor::from_f64_as(DType::F32, vec![6, 4, 2], &v[..48]).unwrap();
        let data = BTreeMap::from([("x".to_string(), x)]);
        model_on_the_jit_is_bit_exact("ops/top_k_smallest_axis0", &data);
    }

    #[test]
    fn nodes_not_emitted_yet_are_errors_naming_node_and_op() {
        // An op not emitted yet: the node and its op are named.
        {
            use fp8c_ir::{DType, Graph, Op, TensorType};
            let mut g = Graph::new("g");
            let x = g
                .add_input("x", TensorType::fixed(DType::F32, &[4, 8]))
                .unwrap();
            let k = g
                .add_input("k", TensorType::fixed(DType::I64, &[]))
                .unwrap();
            let trilu = Op::Trilu { upper: true };
            let y = g.add_node("the_trilu", trilu, &[x, k]).unwrap()[0];
            g.set_output("y", y).unwrap();
            let err = fp8c_mlir::emit(&g).unwrap_err().to_string();
            assert!(
                err.starts_with("node \"the_trilu\" (trilu)") && err.contains("not emitted"),
                "{err}"
            );
            // An emitted op with an operand the emitter needs constant: refused the same way.
            let mut g = Graph::new("g");
            let x = g
                .add_input("x", TensorType::fixed(DType::F32, &[4, 8]))
                .unwrap();
            let axis = g
                .add_input("axis", TensorType::fixed(DType::I64, &[]))
                .unwrap();
            let cumsum = Op::CumSum {
                exclusive: false,
                reverse: false,
            };
            let z = g.add_node("the_cumsum", cumsum, &[x, axis]).unwrap()[0];
            g.set_output("z", z).unwrap();
            let err = fp8c_mlir::emit(&g).unwrap_err().to_string();
            assert!(
                err.starts_with("node \"the_cumsum\" (cum_sum)") && err.contains("not emitted"),
                "{err}"
            );
        }
        // Dynamic shapes are refused with the flag that fixes them.
        let dynamic = Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(&CompileOptions::f32())
            .unwrap();
        let err = fp8c_mlir::emit(&dynamic.graph).unwrap_err().to_string();
        assert!(err.contains("--input-shape"), "{err}");
    }
}
