//! Data-parallel training under `mpirun` (the `mpi` feature; scripts/test.sh runs this suite
//! through scripts/env/mpi-env.sh): the same global batch gives the same losses, weights and
//! amax histories bit for bit whatever the number of ranks (`-np 1 --accumulate 4` =
//! `-np 2 --accumulate 2` = `-np 4`), in f32 and FP8 delayed scaling on an MLP, a CNN and
//! the Llama-style export, and in bf16 and every FP8 recipe on the last; sharding the
//! optimizer keeps the bits; a checkpoint resumes under another rank count with the same bits;
//! a rank that dies or errors ends the run with a message naming it; ranks started with other
//! flags are refused with one message.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::scratch;

fn root() -> PathBuf {
    support::repo_root()
}

fn fp8c_bin() -> PathBuf {
    std::env::var_os("FP8C_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_fp8c").into())
}

/// `mpirun` as a user on this machine types it (root in a container, more ranks than cores),
/// with a session directory of its own: OpenMPI 4 keeps each launch's files under
/// `$TMPDIR/ompi.HOST.UID/pid.N` and the last launch to end removes the shared parent, so two
/// launches that start and end at once (this suite's tests run in parallel) can race on it
/// ("A call to mkdir was unable to create the desired directory").
fn launcher() -> Command {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // Short: OpenMPI puts a Unix socket under it (at most 107 bytes of path).
    let session = std::env::temp_dir().join(format!("fp8c-ompi.{}.{n}", std::process::id()));
    std::fs::create_dir_all(&session).unwrap();
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe"])
        .arg("--mca")
        .arg("orte_tmpdir_base")
        .arg(&session)
        .stdin(Stdio::null());
    c
}

/// `mpirun -np N fp8c ARGS`.
fn mpirun(np: usize, args: &[String]) -> Command {
    let mut c = launcher();
    c.args(["-np", &np.to_string()]).arg(fp8c_bin()).args(args);
    c
}

struct Out {
    ok: bool,
    stderr: String,
}

fn run(mut c: Command) -> Out {
    let o = c.output().expect("mpirun runs");
    Out {
        ok: o.status.success(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// One model and its data.
struct Case {
    name: &'static str,
    model: PathBuf,
    data: Vec<String>,
    batch: u64,
}

fn cases() -> Vec<Case> {
    let digits = root()
        .join("examples/data/digits_train.npz")
        .display()
        .to_string();
    let text = root()
        .join("examples/data/shakespeare.txt")
        .display()
        .to_string();
    vec![
        Case {
            name: "mlp",
            model: root().join("examples/models/mlp_digits.onnx"),
            data: vec![
                "--data".into(),
                digits.clone(),
                "--labels".into(),
                "y".into(),
            ],
            batch: 16,
        },
        Case {
            name: "cnn",
            model: root().join("examples/models/cnn_digits.onnx"),
            data: vec!["--data".into(), digits, "--labels".into(), "y".into()],
            batch: 16,
        },
        Case {
            name: "llama",
            model: root().join("examples/models/llama-tiny.onnx"),
            data: vec!["--text".into(), text, "--seq-len".into(), "16".into()],
            batch: 2,
        },
    ]
}

/// `fp8c train` arguments for `case` in `precision`, `steps` steps, writing to `dir`.
fn train_args(
    case: &Case,
    precision: &str,
    accumulate: u64,
    steps: u64,
    dir: &Path,
) -> Vec<String> {
    // "fp8:block": FP8 with the recipe after the colon (delayed scaling otherwise).
    let (precision, recipe) = precision.split_once(':').unwrap_or((precision, "delayed"));
    let mut a: Vec<String> = vec!["train".into(), case.model.display().to_string()];
    a.extend(case.data.iter().cloned());
    a.extend(
        [
            "--batch",
            &case.batch.to_string(),
            "--accumulate",
            &accumulate.to_string(),
            "--steps",
            &steps.to_string(),
            "--precision",
            precision,
            "--recipe",
            recipe,
            "--min-fp8-flops",
            "0",
            "--clip-grad-norm",
            "1.0",
            "--quiet",
            "--log",
            &dir.join("log.csv").display().to_string(),
            "--checkpoint",
            &dir.join("ck").display().to_string(),
        ]
        .map(String::from),
    );
    a
}

/// The log without its elapsed-seconds column.
fn log_rows(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log.csv"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            [&f[..5], &f[6..]].concat().join(",")
        })
        .collect()
}

fn state(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("ck/state.safetensors"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

#[test]
fn the_same_global_batch_gives_the_same_bits_on_1_2_and_4_ranks() {
    let work = scratch("distributed_bits");
    for case in cases() {
        // Every precision and FP8 recipe on the Llama export; f32 and delayed FP8 on the rest.
        let precisions: &[&str] = if case.name == "llama" {
            &[
                "f32",
                "bf16",
                "fp8",
                "fp8:current",
                "fp8:rowwise",
                "fp8:block",
                "fp8:mxfp8",
            ]
        } else {
            &["f32", "fp8"]
        };
        for &precision in precisions {
            let mut runs = Vec::new();
            for (np, acc) in [(1usize, 4u64), (2, 2), (4, 1)] {
                let dir = work.join(format!("{}-{precision}-np{np}", case.name).replace(':', "-"));
                std::fs::create_dir_all(&dir).unwrap();
                let r = run(mpirun(np, &train_args(&case, precision, acc, 6, &dir)));
                assert!(r.ok, "{} {precision} -np {np}: {}", case.name, r.stderr);
                runs.push((np, dir));
            }
            let (_, first) = &runs[0];
            let (rows, bits) = (log_rows(first), state(first));
            assert_eq!(rows.len(), 7, "{}: a header and 6 steps", case.name);
            for (np, dir) in &runs[1..] {
                assert_eq!(
                    log_rows(dir),
                    rows,
                    "{} {precision}: -np {np}'s losses",
                    case.name
                );
                assert!(
                    state(dir) == bits,
                    "{} {precision}: -np {np}'s state",
                    case.name
                );
            }
            // The same run without mpirun is the same run.
            let plain = work.join(format!("{}-{precision}-plain", case.name).replace(':', "-"));
            std::fs::create_dir_all(&plain).unwrap();
            let o = Command::new(fp8c_bin())
                .args(train_args(&case, precision, 4, 6, &plain))
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            assert_eq!(
                log_rows(&plain),
                rows,
                "{} {precision}: without mpirun",
                case.name
            );
            assert!(
                state(&plain) == bits,
                "{} {precision}: without mpirun",
                case.name
            );
        }
    }
}

/// `--shard optimizer` (ZeRO-1: each rank keeps and updates a slice of the master weights and
/// moments, then they are gathered) gives the unsharded run's bits, and rank 0 holds about
/// 1/N of the optimizer state; `--fp8-all-gather` (FP8 codes gathered instead of the FP8
/// GEMMs' f32 weights) gives the same bits for a quarter of those weights' bytes.
#[test]
fn sharding_the_optimizer_keeps_the_bits_and_splits_its_state() {
    let work = scratch("distributed_shard");
    for case in &cases() {
        for precision in ["f32", "fp8"] {
            let whole = work.join(format!("{}-{precision}-whole", case.name));
            std::fs::create_dir_all(&whole).unwrap();
            let r = run(mpirun(1, &train_args(case, precision, 4, 6, &whole)));
            assert!(r.ok, "{}", r.stderr);
            let mut gathered = BTreeMap::new();
            for (np, acc, fp8) in [
                (2usize, 2u64, false),
                (4, 1, false),
                (2, 2, true),
                (4, 1, true),
            ] {
                if fp8 && precision != "fp8" {
                    continue;
                }
                let dir = work.join(format!("{}-{precision}-shard{np}-{fp8}", case.name));
                std::fs::create_dir_all(&dir).unwrap();
                let mut args = train_args(case, precision, acc, 6, &dir);
                args.extend(["--shard".into(), "optimizer".into(), "--profile".into()]);
                if fp8 {
                    args.push("--fp8-all-gather".into());
                }
                let r = run(mpirun(np, &args));
                assert!(r.ok, "{} -np {np}: {}", case.name, r.stderr);
                assert_eq!(
                    log_rows(&dir),
                    log_rows(&whole),
                    "{} {precision} -np {np}",
                    case.name
                );
                assert!(
                    state(&dir) == state(&whole),
                    "{} {precision} -np {np}: the gathered state",
                    case.name
                );
                let line = r
                    .stderr
                    .lines()
                    .find(|l| l.contains("optimizer state"))
                    .unwrap_or_else(|| panic!("no optimizer state line: {}", r.stderr));
                assert!(line.contains(&format!("sharded over {np} ranks")), "{line}");
                let words: Vec<&str> = line.split_whitespace().collect();
                let mib: Vec<f64> = words
                    .windows(2)
                    .filter(|w| w[1].starts_with("MiB"))
                    .filter_map(|w| w[0].parse().ok())
                    .collect();
                let share = mib[0] / mib[1];
                assert!(
                    (share - 1.0 / np as f64).abs() < 0.5 / np as f64,
                    "rank 0 holds {share} of the state: {line}"
                );
                // "weights all-gathered by rank 0: F KiB a gather as f32, C KiB as FP8 codes"
                let line = r
                    .stderr
                    .lines()
                    .find(|l| l.contains("weights all-gathered"))
                    .unwrap_or_else(|| panic!("no all-gather line: {}", r.stderr));
                let words: Vec<&str> = line.split_whitespace().collect();
                let kib: Vec<f64> = words
                    .windows(2)
                    .filter(|w| w[1] == "KiB")
                    .filter_map(|w| w[0].parse().ok())
                    .collect();
                gathered.insert((np, fp8), (kib[0], kib[1]));
            }
            if precision == "fp8" {
                for np in [2, 4] {
                    // The FP8 weights' f32 bytes leave the f32 gather and come back as a
                    // quarter of them in codes.
                    let (f32_only, none) = gathered[&(np, false)];
                    let (rest, codes) = gathered[&(np, true)];
                    assert_eq!(none, 0.0);
                    assert!(
                        codes > 0.0,
                        "{} -np {np}: no FP8 weight gathered",
                        case.name
                    );
                    let moved = f32_only - rest;
                    assert!(
                        (codes - moved / 4.0).abs() <= 0.2,
                        "{} -np {np}: {codes} KiB of codes for {moved} KiB of f32 weights",
                        case.name
                    );
                }
            }
        }
    }
}

#[test]
fn a_checkpoint_resumes_under_another_rank_count_with_the_same_bits() {
    let work = scratch("distributed_resume");
    let case = &cases()[2];
    let whole = work.join("whole");
    std::fs::create_dir_all(&whole).unwrap();
    let r = run(mpirun(1, &train_args(case, "fp8", 4, 8, &whole)));
    assert!(r.ok, "{}", r.stderr);
    let split = work.join("split");
    std::fs::create_dir_all(&split).unwrap();
    let r = run(mpirun(2, &train_args(case, "fp8", 2, 4, &split)));
    assert!(r.ok, "{}", r.stderr);
    let meta = std::fs::read_to_string(split.join("ck/meta.json")).unwrap();
    assert!(
        meta.contains("\"ranks\": 2"),
        "the checkpoint says its rank count: {meta}"
    );
    let mut args = train_args(case, "fp8", 1, 8, &split);
    args.extend(["--resume".into(), split.join("ck").display().to_string()]);
    let r = run(mpirun(4, &args));
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(log_rows(&split), log_rows(&whole));
    assert!(state(&split) == state(&whole));
}

#[test]
fn ranks_started_with_other_flags_are_refused_with_one_message() {
    let work = scratch("distributed_mismatch");
    let case = &cases()[0];
    let a = train_args(case, "f32", 1, 2, &work);
    let mut b = a.clone();
    b.extend(["--lr".into(), "0.002".into()]);
    let mut c = launcher();
    c.args(["-np", "1"])
        .arg(fp8c_bin())
        .args(&a)
        .arg(":")
        .args(["-np", "1"])
        .arg(fp8c_bin())
        .args(&b);
    let r = run(c);
    assert!(!r.ok);
    assert_eq!(
        r.stderr.matches("were not started alike").count(),
        1,
        "one message: {}",
        r.stderr
    );
    assert!(
        r.stderr.contains("rank 1 has another model, other flags"),
        "{}",
        r.stderr
    );
}

/// The parent of process `pid`.
fn parent(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The processes `mpirun_pid` started (its descendants), by their MPI rank.
fn ranks_of(mpirun_pid: u32) -> Vec<(usize, u32)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let mut up = parent(pid);
        let mut descends = false;
        for _ in 0..8 {
            match up {
                Some(p) if p == mpirun_pid => {
                    descends = true;
                    break;
                }
                Some(p) if p > 1 => up = parent(p),
                _ => break,
            }
        }
        if !descends {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let rank = String::from_utf8_lossy(&env)
            .split('\0')
            .find_map(|kv| kv.strip_prefix("OMPI_COMM_WORLD_RANK=")?.parse().ok());
        if let Some(r) = rank {
            found.push((r, pid));
        }
    }
    found
}

#[test]
fn a_rank_that_dies_ends_every_rank_with_a_message_naming_it() {
    let work = scratch("distributed_dies");
    let case = &cases()[2];
    let mut c = mpirun(2, &train_args(case, "f32", 1, 100_000, &work));
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let started = Instant::now();
    // Wait for both ranks to be training, then kill rank 1.
    let victim = loop {
        let ranks = ranks_of(child.id());
        if ranks.len() == 2 && work.join("log.csv").is_file() {
            break ranks
                .iter()
                .find(|(r, _)| *r == 1)
                .map(|&(_, p)| p)
                .unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the ranks did not start"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let killed = Instant::now();
    unsafe_kill(victim);
    let out = child.wait_with_output().unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "the run ended {:?} after the kill",
        killed.elapsed()
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1"), "the message names the rank: {err}");
}

/// SIGKILL to `pid` through the `kill` command (no unsafe code here).
fn unsafe_kill(pid: u32) {
    let s = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(s.success());
}

/// A rank's write that fails mid-run (here the disk "fills": a file-size limit rank 0's
/// checkpoint exceeds, the log's rows staying under it) ends every rank at once, the failing
/// rank naming the file and flag; the log keeps every row written.
#[test]
fn a_rank_whose_write_fails_ends_every_rank_with_its_message() {
    let work = scratch("distributed_write_fails");
    let case = &cases()[2];
    let mut args = train_args(case, "f32", 1, 1000, &work);
    args.extend(["--checkpoint-every".into(), "3".into()]);
    // `ulimit -f` (KiB) and an ignored SIGXFSZ in each rank (not in mpirun, whose shared
    // memory it would break): writes past 1 MiB fail with EFBIG, as on a full disk; the Llama
    // export's state (~7 MB) does not fit, its log does.
    let rank = format!(
        "ulimit -f 1024; trap '' XFSZ; exec {} {}",
        fp8c_bin().display(),
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let t = Instant::now();
    let out = launcher()
        .args(["-np", "2"])
        .args(["sh", "-c", &rank])
        .output()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(120), "{:?}", t.elapsed());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--checkpoint") && err.contains("File too large"),
        "{err}"
    );
    let rows = log_rows(&work);
    assert_eq!(
        rows.len(),
        4,
        "a header and the 3 steps before the failed checkpoint: {rows:?}"
    );
}

/// `--fp8-all-gather` says what it needs instead of training without it.
#[test]
fn fp8_all_gather_without_its_prerequisites_is_refused() {
    let work = scratch("distributed_fp8_gather_refused");
    let case = &cases()[0];
    for (precision, extra, needs) in [
        ("fp8", vec![], "--shard optimizer"),
        ("f32", vec!["--shard", "optimizer"], "--precision fp8"),
        (
            "fp8:current",
            vec!["--shard", "optimizer"],
            "--recipe delayed",
        ),
    ] {
        let mut args = train_args(case, precision, 1, 2, &work);
        args.push("--fp8-all-gather".into());
        args.extend(extra.iter().map(|s| s.to_string()));
        let o = Command::new(fp8c_bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{precision} {extra:?}: {err}");
        assert!(err.contains(needs), "{precision} {extra:?}: {err}");
    }
}
