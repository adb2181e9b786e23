//! fp8c-mlir through the public library API (issue #18): models loaded and compiled by
//! fp8c-session, emitted as MLIR, checked by MLIR's own `mlir-opt-22`, and run by MLIR's JIT
//! (`Device::Mlir`) against the CPU reference. `scripts/test.sh` runs this suite with
//! `--features mlir` (LLVM/MLIR 22 installed by scripts/env/mlir-env.sh); the default build runs
//! the one test that says how to get it. The third-party models' ops (bit for bit against
//! their CPU kernels) are in `mlir/third_party_ops.rs`, a module of this file. The golden op
//! and block-scaling cases run on the JIT through the driver every device shares
//! (`crates/fp8c-session/tests/golden/`).

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
    pub(crate) fn values(n: usize, seed: u64) -> Vec<f32> {
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

    pub(crate) fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
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

    /// The digits MLP in FP8 with delayed scaling (amax histories as state), batch 16, every
    /// GEMM in FP8, the forward ones under Hopper's fast-accumulation model on the hosts
    /// (`--hopper-accum`), so that the emitted loops of the model are what the tests run.
    fn delayed_mlp() -> fp8c_session::Compiled {
        delayed_mlp_with(fp8c_session::HostAccum::Hopper)
    }

    /// [`delayed_mlp`] with the hosts' accumulation `accum`.
    fn delayed_mlp_with(accum: fp8c_session::HostAccum) -> fp8c_session::Compiled {
        Model::load(example("mlp_digits.onnx"))
            .unwrap()
            .compile(
                &CompileOptions::fp8_training()
                    .input_shape("x", &[16, 64])
                    .min_fp8_flops(0)
                    .host_accum(accum),
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
            .expect("mlir-opt (LLVM 22's, on PATH through scripts/env/mlir-env.sh)");
        assert!(
            out.status.success(),
            "mlir-opt rejected the module:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What `fp8c compile --emit mlir` writes (`Compiled::graph_for(Device::Mlir)`): the
    /// fast-accumulation GEMMs summed as `linalg` sums (f32) by default, the model's block
    /// loops (`scf.for`) only under `HostAccum::Hopper` (`--hopper-accum`).
    #[test]
    fn emitted_modules_model_the_accumulator_only_when_asked() {
        let text =
            |accum| fp8c_mlir::emit(&delayed_mlp_with(accum).graph_for(Device::Mlir)).unwrap();
        let (plain, modelled) = (
            text(fp8c_session::HostAccum::F32),
            text(fp8c_session::HostAccum::Hopper),
        );
        assert!(!plain.contains("scf.for"), "f32 sums need no block loop");
        assert!(modelled.contains("scf.for"), "the model's block loops");
        assert!(plain.contains("f8E4M3FN") && modelled.contains("f8E4M3FN"));
    }

    /// MLIR's own tools take the emitted text without fp8c: `mlir-opt` lowers an FP8 module
    /// with delayed scaling (state arguments and results, the fast-accumulation loops) through
    /// `fp8c_mlir::LOWERING`, and `mlir-translate` turns the result into LLVM IR.
    #[test]
    fn mlirs_tools_lower_an_fp8_module_with_state_to_llvm_ir() {
        let compiled = delayed_mlp();
        let text = fp8c_mlir::emit(&compiled.graph_for(Device::Mlir)).unwrap();
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
        opts.host_accum = fp8c_session::HostAccum::Hopper;
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
    /// `scripts/fixtures/make_qdq_model.py`: FP8 weights behind DequantizeLinear, QuantizeLinear /
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
                .compile(
                    &opts
                        .input_shape("input_ids", &shape)
                        .no_fuse_attention(true),
                )
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
        let opts = CompileOptions::fp8()
            .recipe(fp8c_session::Recipe::Delayed(Default::default()))
            .no_fuse_attention(true);
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

#[cfg(feature = "mlir")]
mod third_party_ops;
