//! Every parser survives its corpus (`fuzz/corpus/<target>/`, the regressions) and a few
//! thousand fresh mutations of its seeds: no panic, no input slower than the hang limit.

#[test]
fn parsers_survive_the_corpus_and_mutations() {
    let corpus = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut failures = Vec::new();
    for t in fp8c_fuzz::targets() {
        let r = fp8c_fuzz::fuzz(&t, &corpus, 1_500, 7);
        println!(
            "{:<16} {} runs, {} panics, slowest {:.2} ms",
            t.name,
            r.runs,
            r.panics.len(),
            r.max_time.as_secs_f64() * 1e3
        );
        for (k, m) in &r.panics {
            failures.push(format!("{}: input {k} panicked: {m}", t.name));
        }
        for (k, d) in &r.slow {
            failures.push(format!("{}: input {k} took {d:?}", t.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
