//! The long fuzz run: `cargo run --release -p fp8c-fuzz -- [--runs N] [--seed S] [TARGET...]`
//! runs every target (or the named ones) for N mutations (default 100,000) and prints, per
//! target, runs, panics, inputs over the hang limit, the slowest input, and the peak RSS.
//! Exits non-zero on any panic or hang; crashing inputs are saved into `fuzz/corpus/`.

use std::path::PathBuf;

fn main() -> std::process::ExitCode {
    let mut runs = 100_000u64;
    let mut seed = 1u64;
    let mut only = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().and_then(|v| v.parse().ok()).unwrap_or(runs),
            "--seed" => seed = args.next().and_then(|v| v.parse().ok()).unwrap_or(seed),
            t => only.push(t.to_string()),
        }
    }
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut bad = false;
    for t in fp8c_fuzz::targets() {
        if !only.is_empty() && !only.iter().any(|o| o == t.name) {
            continue;
        }
        let start = std::time::Instant::now();
        let r = fp8c_fuzz::fuzz(&t, &corpus, runs, seed);
        bad |= !r.panics.is_empty() || !r.slow.is_empty();
        println!(
            "{:<16} {:>8} runs  {:>3} panics  {:>3} over {:?}  slowest {:>8.2} ms  {:>6.1} s  peak RSS {} KiB",
            t.name,
            r.runs,
            r.panics.len(),
            r.slow.len(),
            fp8c_fuzz::HANG,
            r.max_time.as_secs_f64() * 1e3,
            start.elapsed().as_secs_f64(),
            fp8c_fuzz::peak_rss_kib().unwrap_or(0)
        );
        for (k, m) in r.panics.iter().take(5) {
            println!("    panic at input {k}: {m}");
        }
    }
    if bad {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
