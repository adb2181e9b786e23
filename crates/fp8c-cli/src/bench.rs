//! `fp8c bench`: what FP8 buys on this GPU. Three tables (or one JSON document with `--json`):
//! - GEMM throughput through cuBLASLt, FP8 (E4M3, TN, fast accumulation) against BF16, for
//!   square sizes and a few transformer shapes;
//! - the quantize kernels' bandwidth (bytes read + written) against a device-to-device copy,
//!   the ceiling for a memory-bound kernel;
//! - one transformer layer's training-step GEMMs (with FP8's casts) in FP8 against BF16.
//!
//! Needs a GPU: without one it fails with the backend's message and exit code 1.

use anyhow::{Context, Result};
use clap::Args;
use fp8c_session::DType;
use fp8c_session::bench::Bench;

/// `fp8c bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Print one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// The GPU to measure (ordinal).
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Square GEMM sizes (m = n = k).
    #[arg(long, value_delimiter = ',', default_values_t = [1024u64, 2048, 4096, 8192])]
    pub sizes: Vec<u64>,
    /// Elements per tensor in the bandwidth tests.
    #[arg(long, default_value_t = 1 << 26)]
    pub elements: u64,
    /// Hidden size and token count of the transformer-layer step.
    #[arg(long, value_name = "HIDDEN,TOKENS", value_delimiter = ',', default_values_t = [4096u64, 8192])]
    pub layer: Vec<u64>,
    /// Small sizes only: a smoke test that finishes in seconds.
    #[arg(long)]
    pub quick: bool,
}

/// Transformer GEMM shapes (m tokens × k → n): GPT-3 2.7B-like, 8 × 1024 tokens.
const TRANSFORMER_SHAPES: &[(&str, u64, u64, u64)] = &[
    ("qkv 8192x2560->7680", 8192, 2560, 7680),
    ("proj 8192x2560->2560", 8192, 2560, 2560),
    ("fc1 8192x2560->10240", 8192, 2560, 10240),
    ("fc2 8192x10240->2560", 8192, 10240, 2560),
];

/// `fp8c bench`.
pub fn bench(a: BenchArgs) -> Result<()> {
    let b = Bench::open(a.device).context("fp8c bench needs an NVIDIA GPU")?;
    let info = b.device().clone();
    let (sizes, elements, layer) = if a.quick {
        (vec![1024, 2048], 1 << 22, vec![1024, 2048])
    } else {
        (a.sizes.clone(), a.elements, a.layer.clone())
    };
    let mut gemms = Vec::new();
    let mut shapes: Vec<(String, u64, u64, u64)> =
        sizes.iter().map(|&s| (format!("{s}^3"), s, s, s)).collect();
    if !a.quick {
        shapes.extend(
            TRANSFORMER_SHAPES
                .iter()
                .map(|&(n, m, k, nn)| (n.to_string(), m, k, nn)),
        );
    }
    for (name, m, k, n) in &shapes {
        let (t8, fp8) = b
            .gemm(*m, *n, *k, DType::F8E4M3)
            .with_context(|| format!("FP8 GEMM {name}"))?;
        let (t16, bf16) = b
            .gemm(*m, *n, *k, DType::BF16)
            .with_context(|| format!("BF16 GEMM {name}"))?;
        let block = b
            .block_gemm(*m, *n, *k)
            .with_context(|| format!("block-scaled FP8 GEMM {name}"))?;
        let (block_tflops, block_ms, block_why) = match block {
            Ok((t, f)) => (Some(f), Some(t.ms), None),
            Err(why) => (None, None, Some(why)),
        };
        gemms.push(serde_json::json!({
            "shape": name, "m": m, "n": n, "k": k,
            "fp8_tflops": fp8, "bf16_tflops": bf16, "speedup": bf16.recip() * fp8,
            "fp8_ms": t8.ms, "bf16_ms": t16.ms,
            "block_fp8_tflops": block_tflops, "block_fp8_ms": block_ms,
            "block_fp8_unavailable": block_why,
        }));
    }
    let (tc, copy_gbs) = b.copy(elements * 4)?;
    let mut bandwidth = vec![serde_json::json!({
        "kernel": "device-to-device copy (f32)", "gb_per_s": copy_gbs, "ms": tc.ms, "of_copy": 1.0,
    })];
    let cols = 8192u64.min(elements);
    let n_ct = elements / cols * cols;
    for (name, input, amax, transpose) in [
        ("quantize f32->e4m3", DType::F32, false, None),
        ("quantize+amax f32->e4m3", DType::F32, true, None),
        ("quantize+amax bf16->e4m3", DType::BF16, true, None),
        (
            "cast+transpose+amax f32->e4m3",
            DType::F32,
            true,
            Some(cols),
        ),
        (
            "cast+transpose+amax bf16->e4m3",
            DType::BF16,
            true,
            Some(cols),
        ),
    ] {
        let n = if transpose.is_some() { n_ct } else { elements };
        let (t, gbs) = b
            .quantize(n, input, amax, transpose)
            .with_context(|| name.to_string())?;
        bandwidth.push(serde_json::json!({
            "kernel": name, "gb_per_s": gbs, "ms": t.ms, "of_copy": gbs / copy_gbs,
        }));
    }
    let (hidden, tokens) = (
        layer.first().copied().unwrap_or(4096),
        layer.get(1).copied().unwrap_or(8192),
    );
    let (s8, f8) = b
        .layer_step(tokens, hidden, true)
        .context("FP8 layer step")?;
    let (s16, f16) = b
        .layer_step(tokens, hidden, false)
        .context("BF16 layer step")?;
    let step = serde_json::json!({
        "hidden": hidden, "tokens": tokens,
        "fp8_ms": s8.ms, "bf16_ms": s16.ms, "speedup": s16.ms / s8.ms,
        "fp8_gemm_tflops": f8, "bf16_gemm_tflops": f16,
        "includes": "forward, dgrad and wgrad GEMMs of QKV, projection, FC1 and FC2, plus FP8 cast+transpose+amax of X, W and dY; not attention's batched matmuls, norms, softmax or the optimizer",
    });

    if a.json {
        let doc = serde_json::json!({
            "device": {
                "name": info.name,
                "compute_capability": format!("{}.{}", info.compute_capability.0, info.compute_capability.1),
                "sm_count": info.sm_count,
                "memory_bytes": info.total_memory,
                "driver_cuda_version": info.driver_version,
            },
            "method": "CUDA events; median of 7 samples after warm-up; random inputs; GEMM operands rotate among 3 sets",
            "gemm": gemms,
            "bandwidth": bandwidth,
            "layer_step": step,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "{} (sm_{}{}, {} SMs, {:.0} GiB), CUDA driver {}.{}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.sm_count,
        info.total_memory as f64 / (1u64 << 30) as f64,
        info.driver_version / 1000,
        info.driver_version % 1000 / 10
    );
    println!(
        "\nGEMM (cuBLASLt, bf16 output)          FP8 TFLOP/s  BF16 TFLOP/s  speedup  block FP8 TFLOP/s"
    );
    for g in &gemms {
        let block = g["block_fp8_tflops"]
            .as_f64()
            .map_or_else(|| "-".to_string(), |f| format!("{f:.1}"));
        println!(
            "  {:<36} {:>10.1}  {:>12.1}  {:>6.2}x  {block:>17}",
            g["shape"].as_str().unwrap_or(""),
            g["fp8_tflops"].as_f64().unwrap_or(0.0),
            g["bf16_tflops"].as_f64().unwrap_or(0.0),
            g["speedup"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(why) = gemms
        .iter()
        .find_map(|g| g["block_fp8_unavailable"].as_str())
    {
        println!("  (block FP8 = 1×128 × 128×128 scales, DeepSeek-V3's; not run: {why})");
    } else {
        println!("  (block FP8 = 1×128 × 128×128 scales, DeepSeek-V3's, no fast accumulation)");
    }
    println!("\nMemory-bound kernels ({elements} elements)      GB/s   of copy");
    for k in &bandwidth {
        println!(
            "  {:<40} {:>7.0}  {:>6.1}%",
            k["kernel"].as_str().unwrap_or(""),
            k["gb_per_s"].as_f64().unwrap_or(0.0),
            100.0 * k["of_copy"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "\nTransformer layer training step (hidden {hidden}, {tokens} tokens; GEMMs + FP8 casts)"
    );
    println!(
        "  fp8  {:>8.3} ms  ({:.0} TFLOP/s)\n  bf16 {:>8.3} ms  ({:.0} TFLOP/s)\n  speedup {:.2}x",
        s8.ms,
        f8,
        s16.ms,
        f16,
        s16.ms / s8.ms
    );
    Ok(())
}
