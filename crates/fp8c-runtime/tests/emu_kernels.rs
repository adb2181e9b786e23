//! The emulated device's kernel execution (issue #15, `cuda/emu.rs` + `kernels/emu/cuda_host.h`):
//! fp8c's CUDA kernels compiled for the host and launched by name run CUDA's execution model
//! (several blocks, 256-thread blocks, block reductions through shared memory and warp
//! shuffles, atomics) and give the CPU reference's bytes; the scheduler reports a barrier
//! that can never open instead of hanging. Needs only a C++17 compiler ($CXX, g++, c++ or clang++).

use fp8c_ir::{DType, Op, Tensor};
use fp8c_runtime::cuda::emu;
use fp8c_runtime::cuda::kernels;
use std::ffi::c_void;

#[test]
fn name_patterns_match_like_format_strings() {
    assert!(matches("fp8c_gather_{es}_{it}", "fp8c_gather_4_i64"));
    assert!(matches("fp8c_transpose2d_1", "fp8c_transpose2d_1"));
    assert!(!matches("fp8c_gather_{es}_{it}", "fp8c_gather_4"));
    assert!(!matches(
        "fp8c_quantize_{}_e4m3_sat",
        "fp8c_quantize_f32_e5m2_sat"
    ));
}

/// A pointer to `v` as one `kernelParams` entry.
fn arg<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

/// f32 values that exercise every quantize path: normals across the range, subnormals of
/// E4M3, values past 448 (saturation), ±0, NaN and ±inf.
fn values(n: usize) -> Vec<f32> {
    let mut x = 0x2545_f491_u64;
    (0..n)
        .map(|i| match i % 97 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => -0.0,
            3 => 1.0e6,
            _ => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let m = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                m * 2f32.powi(((x >> 8) % 24) as i32 - 12)
            }
        })
        .collect()
}

#[test]
fn quantize_kernels_give_the_cpu_references_codes_and_amax() {
    let m = emu::compile(
        kernels::QUANTIZE.name,
        kernels::QUANTIZE.source,
        &kernels::fixed_headers(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(m.names().iter().any(|n| n == "fp8c_quantize_f32_e4m3_sat"));
    // Not a multiple of the 16-byte pack or of the grid: the vector body, the scalar tail and
    // the grid-stride loop all run; three blocks commit their amax through atomicMax.
    let n = 5003usize;
    let x = values(n);
    for (fmt, name) in [
        (DType::F8E4M3, "fp8c_quantize_f32_e4m3_sat"),
        (DType::F8E5M2, "fp8c_quantize_f32_e5m2_sat"),
    ] {
        let scale = 3.75f32;
        let mut q = vec![0u8; n];
        let mut amax = 0f32;
        let (mut px, mut ps, mut pq, mut pa, mut pn) = (
            x.as_ptr().cast::<c_void>(),
            &scale as *const f32,
            q.as_mut_ptr(),
            &mut amax as *mut f32,
            n as u64,
        );
        let mut args = [
            arg(&mut px),
            arg(&mut ps),
            arg(&mut pq),
            arg(&mut pa),
            arg(&mut pn),
        ];
        // SAFETY: the parameters are (const void* x, const float* scale, u8* q, float* amax,
        // u64 n) and every buffer holds n elements.
        unsafe { m.launch(name, [3, 1, 1], [256, 1, 1], &mut args) }.unwrap();
        let xt = Tensor::from_f32(vec![n as u64], &x);
        let want = fp8c_eval::eval_op(
            &Op::Quantize {
                to: fmt,
                saturate: true,
            },
            &[&xt, &Tensor::scalar_f32(scale)],
        )
        .unwrap();
        let diff = q.iter().zip(want[0].bytes()).position(|(a, b)| a != b);
        assert_eq!(diff, None, "{name}: first differing code at {diff:?}");
        let want_amax = fp8c_eval::eval_op(&Op::Amax, &[&xt]).unwrap()[0]
            .to_f32_vec()
            .unwrap()[0];
        assert_eq!(amax.to_bits(), want_amax.to_bits(), "{name}: amax");
    }
}

/// Kernels written for the scheduler itself: a warp reduction by shuffles, a vote, a block
/// reduction through shared memory, and barriers that can never open together.
const PROBE: &str = r#"
#include "common.cuh"
extern "C" __global__ void fp8c_probe_sums(const float* x, float* warp_sums, float* block_sum, u32* any) {
  const unsigned t = threadIdx.x;
  float v = x[blockIdx.x * blockDim.x + t];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((t & 31) == 0) warp_sums[blockIdx.x * (blockDim.x / 32) + t / 32] = v;
  __shared__ float part[32];
  if ((t & 31) == 0) part[t / 32] = v;
  __syncthreads();
  if (t == 0) {
    float s = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += part[w];
    block_sum[blockIdx.x] = s;
  }
  if (__any_sync(0xffffffffu, x[blockIdx.x * blockDim.x + t] < 0.0f) && (t & 31) == 0) atomicMax(any, 1u + t / 32);
}
extern "C" __global__ void fp8c_probe_divergent(float* x) {
  // Half a warp waits for the block, the other half for a warp exchange the first half
  // never joins: on hardware, a hang.
  if (threadIdx.x < 16) __syncthreads();
  else x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}
"#;

#[test]
fn shuffles_votes_shared_memory_and_barriers_follow_cuda() {
    let m = emu::compile("probe.cu", PROBE, &kernels::fixed_headers())
        .unwrap_or_else(|e| panic!("{e}"));
    let (blocks, threads) = (2usize, 128usize);
    // Integers, so every summation order gives the same f32.
    let mut x: Vec<f32> = (0..blocks * threads).map(|i| (i % 7) as f32).collect();
    x[200] = -1.0; // block 1, warp 2 (thread 72 of the block)
    let mut warp_sums = vec![0f32; blocks * threads / 32];
    let mut block_sum = vec![0f32; blocks];
    let mut any = 0u32;
    let (mut a, mut b, mut c, mut d) = (
        x.as_ptr(),
        warp_sums.as_mut_ptr(),
        block_sum.as_mut_ptr(),
        &mut any as *mut u32,
    );
    let mut args = [arg(&mut a), arg(&mut b), arg(&mut c), arg(&mut d)];
    // SAFETY: four pointers to buffers of the sizes the kernel indexes.
    unsafe { m.launch("fp8c_probe_sums", [2, 1, 1], [128, 1, 1], &mut args) }.unwrap();
    for (w, s) in warp_sums.iter().enumerate() {
        let want: f32 = x[w * 32..(w + 1) * 32].iter().sum();
        assert_eq!(*s, want, "warp {w}: every lane ends with the warp's sum");
    }
    for (blk, s) in block_sum.iter().enumerate() {
        let want: f32 = x[blk * threads..(blk + 1) * threads].iter().sum();
        assert_eq!(*s, want, "block {blk}");
    }
    assert_eq!(any, 3, "the vote is true in warp 2 only");

    let mut p = x.as_mut_ptr();
    let mut args = [arg(&mut p)];
    // SAFETY: one pointer to at least 32 floats.
    let e =
        unsafe { m.launch("fp8c_probe_divergent", [1, 1, 1], [32, 1, 1], &mut args) }.unwrap_err();
    assert!(e.contains("divergent barrier"), "{e}");
    // SAFETY: as above.
    let e = unsafe { m.launch("fp8c_no_such", [1, 1, 1], [32, 1, 1], &mut args) }.unwrap_err();
    assert!(e.contains("fp8c_no_such"), "{e}");
}

/// Whether `name` matches `pattern`, where each `{..}` of the pattern (a `format!` argument)
/// stands for one or more of `[a-z0-9]`.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.find('{') {
        None => pattern == name,
        Some(open) => {
            let Some(close) = pattern[open..].find('}') else {
                return false;
            };
            let (head, rest) = (&pattern[..open], &pattern[open + close + 1..]);
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (1..=tail.len())
                .take_while(|&i| tail[..i].bytes().all(|b| b.is_ascii_alphanumeric()))
                .any(|i| matches(rest, &tail[i..]))
        }
    }
}

/// Every fixed kernel file compiles for the host and defines entry points (the elementwise
/// file needs a generated program header and is compiled per program, as by NVRTC); and every
/// kernel name the CUDA backend writes (the `"fp8c_..."` literals and `format!` patterns of
/// `src/cuda/`, the emulator's own files aside) names at least one entry point that exists, so a renamed or misspelt kernel
/// fails here rather than at `prepare` on a GPU.
#[test]
fn every_fixed_kernel_file_compiles_for_the_emulated_device() {
    // The elementwise module needs a generated header; its two entry points by name.
    let mut names: Vec<String> = vec![
        "fp8c_elementwise".into(),
        "fp8c_elementwise_block_quantize".into(),
    ];
    assert!(kernels::ELEMENTWISE.source.contains("fp8c_elementwise("));
    assert!(
        kernels::ELEMENTWISE
            .source
            .contains("fp8c_elementwise_block_quantize(")
    );
    let mut total = 0;
    for f in kernels::FILES {
        if f.name == kernels::ELEMENTWISE.name {
            continue;
        }
        let m = emu::compile(f.name, f.source, &kernels::fixed_headers())
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert!(
            m.names().iter().all(|n| n.starts_with("fp8c_")) && !m.names().is_empty(),
            "{}: {:?}",
            f.name,
            m.names()
        );
        total += m.names().len();
        names.extend(m.names().iter().cloned());
    }
    println!("{total} kernel entry points compiled for the emulated device");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cuda");
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for dir in [src.clone(), src.join("lower")] {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            // The emulator's own files name its entry symbol, not kernels.
            let emulator = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("emu"));
            if p.extension().is_some_and(|x| x == "rs") && !emulator {
                files.push(p);
            }
        }
    }
    let mut patterns = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for part in text.split("\"fp8c_").skip(1) {
            let Some(end) = part.find('"') else { continue };
            let pattern = format!("fp8c_{}", &part[..end]);
            if pattern == "fp8c_" || pattern.contains(' ') {
                continue;
            }
            patterns += 1;
            assert!(
                names.iter().any(|n| matches(&pattern, n)),
                "{}: the lowering asks for `{pattern}`, which no kernel module defines",
                f.display()
            );
        }
    }
    assert!(patterns >= 30, "found only {patterns} kernel-name patterns");
    println!("{patterns} kernel names and patterns of the lowering resolve to entry points");
}
