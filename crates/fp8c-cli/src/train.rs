//! `fp8c train`: what it prints. The run itself is the library's
//! (`fp8c_session::train::TrainRun`: prepare, fit, finish); this file shows the summary
//! line, the progress bar (an observer of the loop), the end-of-run line, the profile and
//! where each output went, and for `--compare` the parity table.

use crate::progress::{Bar, stop_flag};
pub use crate::train_args::TrainArgs;
use anyhow::{Context, Result};
use fp8c_session::train::{Fit, Parity, TrainConfig, TrainRun};

/// `fp8c train`. Under `mpirun -np N` every rank runs this; rank 0 prints and writes, and an
/// error on any rank ends every rank (it names its rank; none is left waiting).
pub fn train(a: TrainArgs) -> Result<()> {
    let comm = fp8c_session::dist::init().map_err(|e| anyhow::anyhow!("{e}"))?;
    let (rank, ranks) = (comm.rank(), comm.size());
    let mut config = a.config()?;
    config.comm = Some(comm.clone());
    let r = train_ranks(&config, &a, rank);
    if ranks == 1 {
        return r;
    }
    match r {
        Ok(()) => Ok(()),
        // Every rank raised it alike: rank 0 says it once, and the others wait until it has
        // (a rank that ends first makes mpirun end the rest).
        Err(e) if is_rank_mismatch(&e) => {
            if rank == 0 {
                eprintln!("error: {}", crate::out::sanitize(&format!("{e:#}")));
            }
            let _ = comm.all_gather_bytes(&[]);
            std::process::exit(1)
        }
        Err(e) => {
            let prefix = if rank == 0 {
                String::new()
            } else {
                format!("rank {rank} of {ranks}: ")
            };
            eprintln!("error: {prefix}{}", crate::out::sanitize(&format!("{e:#}")));
            comm.abort(1)
        }
    }
}

/// True for the error every rank raises alike when the ranks were started differently.
fn is_rank_mismatch(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<fp8c_session::Error>()
            .is_some_and(|s| matches!(s.root(), fp8c_session::Error::Ranks(_)))
    })
}

/// The run (or the `--compare` runs) on this rank; only rank 0 prints.
fn train_ranks(config: &TrainConfig, a: &TrainArgs, rank: usize) -> Result<()> {
    let quiet_rank = rank != 0;
    let a = &TrainArgs {
        quiet: a.quiet || quiet_rank,
        ..a.clone()
    };
    if a.compare.is_empty() {
        return train_one(config, a, quiet_rank).map(|_| ());
    }
    if quiet_rank {
        anyhow::bail!("--compare runs on one process: start it without mpirun");
    }
    let config = config.clone();
    let mut parity = Parity::new(&config, &a.compare, &a.seeds)?;
    for (p, one) in parity.configs(&config) {
        let fit = train_one(&one, a, false)
            .with_context(|| format!("--compare: {}", parity.run_name(p, &one)))?;
        let steps = one
            .train
            .steps
            .unwrap_or(fp8c_session::train::DEFAULT_STEPS);
        parity.add(p, fit, steps);
    }
    crate::out::print(&parity.table())?;
    if let Some(p) = &config.plot {
        parity.plot(p)?;
        eprintln!("  plot: {}", p.display());
    }
    Ok(())
}

/// One training run: prepare, print what will run (`silent`: nothing), fit with the progress
/// bar, finish.
fn train_one(config: &TrainConfig, a: &TrainArgs, silent: bool) -> Result<Fit> {
    let mut run = TrainRun::prepare(config)?;
    // From here a signal stops the loop after its step, with the state saved (before, it
    // ends the process: nothing is lost while compiling).
    run.set_stop(stop_flag()?);
    if silent {
        let fit = run.fit(&mut fp8c_session::train::Silent)?;
        if let (_, Some(e)) = run.finish(&fit) {
            return Err(e.into());
        }
        return Ok(fit);
    }
    let info = run.info().clone();
    let trainer = run.trainer();
    for w in &info.warnings {
        eprintln!("warning: {w}");
    }
    for (pass, text) in trainer.dumps() {
        eprintln!("// ----- IR after {pass} -----\n{text}");
    }
    for n in trainer.notes() {
        tracing::info!("{n}");
    }
    eprintln!(
        "fp8c train: {} ({} samples, batch {}{}{}), output \"{}\", loss {}, {} lr {}, precision {}; {} parameters train{}",
        info.model.display(),
        info.rows,
        info.batch,
        if info.accumulate > 1 {
            format!(" x {} accumulated micro-batches", info.accumulate)
        } else {
            String::new()
        },
        if info.rank.1 > 1 {
            format!(" on each of {} ranks", info.rank.1)
        } else {
            String::new()
        },
        info.output,
        loss_name(info.loss),
        optimizer_name(info.optimizer),
        info.lr,
        info.precision,
        info.trained,
        if info.start_step > 0 {
            format!("; resuming at step {}", info.start_step)
        } else {
            String::new()
        }
    );
    for line in trainer.high_precision_summary() {
        eprintln!("  {line}");
    }
    if info.rank.1 > 1 {
        let (mine, total) = trainer.optimizer_state_bytes();
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        eprintln!(
            "  optimizer state (f32 master weights and moments): {:.2} MiB on rank 0 of {:.2} MiB{}",
            mib(mine),
            mib(total),
            if trainer.is_sharded() {
                format!(", sharded over {} ranks", info.rank.1)
            } else {
                " on every rank (--shard optimizer splits it)".to_string()
            }
        );
    }
    for note in trainer.memory_notes() {
        eprintln!("  note: {note}");
    }
    a.report.print(|all| trainer.report(all))?;
    if info.start_step >= info.steps {
        eprintln!(
            "  the checkpoint is at step {}: nothing left to do for --steps {}",
            info.start_step, info.steps
        );
    }
    let mut bar = Bar::new(a.quiet, info.steps, info.start_step);
    let fit = run.fit(&mut bar);
    bar.finish();
    let fit = fit?;
    if let Some(dir) = &fit.interrupted {
        anyhow::bail!(
            "interrupted after step {}: the whole training state is in {dir} (continue with --resume {dir})",
            fit.start_step + fit.steps_run() - 1,
            dir = dir.display()
        );
    }
    let ran = fit.steps_run();
    let tail = fit.losses.len().min(50);
    if tail > 0 {
        eprintln!(
            "  {ran} steps in {:.1} s ({:.2} steps/s, {:.1} s to compile); final loss {:.4} (mean of the last {tail}){}; {} skipped steps",
            fit.seconds,
            fit.steps_per_s(),
            info.prepare_seconds,
            fit.tail_loss(tail),
            fit.last_accuracy
                .map(|v| format!(", last batch accuracy {:.1}%", v * 100.0))
                .unwrap_or_default(),
            run.trainer().skipped_steps()
        );
    }
    if let Some(p) = run.trainer().profile() {
        eprint!("{}", p.report(a.profile_nodes));
        eprint!("{}", run.trainer().memory());
        if let Some(rss) = crate::malloc::peak_rss() {
            eprintln!(
                "  process peak RSS: {} (the plan counts views as buffers; the CPU shares their storage)",
                fp8c_session::human_bytes(rss)
            );
        }
        if let Some(c) = run.trainer().collective().filter(|c| c.size() > 1) {
            let sent = c.bytes_sent() as f64;
            eprintln!(
                "  rank 0 sent {:.2} MiB to the other {} rank(s) in the run ({:.1} KiB a step)",
                sent / (1024.0 * 1024.0),
                c.size() - 1,
                sent / 1024.0 / ran.max(1) as f64
            );
        }
        if let Some((f32s, codes, n)) = run.trainer().weights_gathered().filter(|w| w.2 > 0) {
            let kib = |b: u64| b as f64 / 1024.0 / n as f64;
            eprintln!(
                "  weights all-gathered by rank 0: {:.1} KiB a gather as f32, {:.1} KiB as FP8 codes ({n} gathers)",
                kib(f32s),
                kib(codes)
            );
        }
    }
    let (done, failed) = run.finish(&fit);
    if let Some((dir, step)) = &done.checkpoint {
        eprintln!("  checkpoint: {} (step {step})", dir.display());
    }
    if let Some(p) = &done.plot {
        eprintln!("  plot: {}", p.display());
    }
    if let Some((dst, missing)) = &done.saved_onnx {
        for m in missing {
            eprintln!(
                "warning: trained parameter \"{m}\" is not an initializer of {}; its update is not in {}",
                info.model.display(),
                dst.display()
            );
        }
        eprintln!("  trained model: {}", dst.display());
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(fit),
    }
}

/// The loss as the summary line names it.
fn loss_name(l: fp8c_session::train::Loss) -> &'static str {
    match l {
        fp8c_session::train::Loss::CrossEntropy => "Ce",
        fp8c_session::train::Loss::Mse => "Mse",
        fp8c_session::train::Loss::Scalar => "Scalar",
    }
}

/// The optimizer as the summary line names it.
fn optimizer_name(o: fp8c_session::train::OptimizerKind) -> &'static str {
    match o {
        fp8c_session::train::OptimizerKind::AdamW => "Adamw",
        fp8c_session::train::OptimizerKind::Sgd => "Sgd",
    }
}
