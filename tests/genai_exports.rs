//! onnxruntime-genai's LLM exports, as a user runs them: `tests/models/genai/llama-{int4,fp32}`
//! (made by `scripts/fixtures/export_genai.py` with onnxruntime-genai's model builder from a tiny
//! random-weight Llama) hold com.microsoft GroupQueryAttention (packed QKV, rotary inside,
//! past and present KV caches), MatMulNBits (int4, `accuracy_level` 4: A in int8 blocks) and
//! the skip/simplified layer norms. For a prompt, a decode step that feeds the prompt's
//! present KV back as past, and a chunked prompt after a past, `fp8c run --precision f32`
//! must give onnxruntime's logits and present KV within 1e-5 relative L2, and the default FP8
//! run must keep a logits cosine of at least 0.99 against f32. Each runs on every backend
//! (`test_backends!`): the CPU reference and the CUDA backend on the emulated device.

#[macro_use]
mod support;

use support::TestDevice;

const STEPS: &[&str] = &["prompt", "decode", "chunk"];

fn check(precision: &str, dev: TestDevice) {
    let dir = support::repo_root().join(format!("tests/models/genai/llama-{precision}"));
    let model = dir.join("model.onnx");
    for step in STEPS {
        let inputs = dir.join(format!("{step}.inputs.npz"));
        let want = support::read_npz(&dir.join(format!("{step}.ort.npz")));
        let scratch = support::scratch(&format!("genai_{precision}_{step}_{}", dev.flag()));
        let got = support::run_outputs(
            &format!("{precision} {step} on {dev:?}"),
            &model,
            &inputs,
            &["--precision", "f32", "--device", dev.flag()],
            &scratch.join("f32.npz"),
        );
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{precision} {step}: output names"
        );
        for (name, w) in &want {
            let c = fp8c_runtime::compare(&got[name], w).unwrap();
            eprintln!(
                "{precision} {step} \"{name}\" on {dev:?}: f32 vs onnxruntime rel_l2={:.3e}",
                c.rel_l2
            );
            assert!(
                c.rel_l2 <= 1e-5,
                "{precision} {step} \"{name}\": rel L2 {:.3e}",
                c.rel_l2
            );
        }

        let r = support::run_fp8c([
            "run".as_ref(),
            model.as_os_str(),
            "--inputs".as_ref(),
            inputs.as_os_str(),
            "--compare".as_ref(),
            "--device".as_ref(),
            dev.flag().as_ref(),
            "-o".as_ref(),
            scratch.join("fp8.npz").as_os_str(),
        ]);
        assert!(
            r.ok,
            "{precision} {step}: fp8c run --compare failed:\n{}",
            r.stderr
        );
        let cmp = support::parse_compare(&r.stdout);
        let (_, _, cosine) = cmp
            .get("logits")
            .unwrap_or_else(|| panic!("{precision} {step}: no logits line in:\n{}", r.stdout));
        eprintln!("{precision} {step} logits on {dev:?}: FP8 vs f32 cosine={cosine:.6}");
        assert!(
            *cosine >= 0.99,
            "{precision} {step}: FP8 logits cosine {cosine}"
        );
    }
}

test_backends! {
    fn genai_int4_llama_matches_onnxruntime_over_prompt_decode_and_chunk(dev) {
        check("int4", dev);
    }
}

test_backends! {
    fn genai_fp32_llama_matches_onnxruntime_over_prompt_decode_and_chunk(dev) {
        check("fp32", dev);
    }
}
