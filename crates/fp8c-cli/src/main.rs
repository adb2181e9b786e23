//! The `fp8c` command-line tool: inspect ONNX models and compile them to FP8 IR.

mod args;
mod bench;
mod commands;
mod fp8args;
mod malloc;
mod out;
mod plot;
mod progress;
mod run;
mod train;
mod train_args;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

/// fp8c: an FP8 mixed-precision compiler for ONNX models.
#[derive(Parser, Debug)]
#[command(name = "fp8c", version, about, long_about = None)]
struct Cli {
    /// Log progress and pass timings to stderr (-v info, -vv debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// CPU threads for compiling and running (the CPU backend and the passes) [default: one
    /// per core].
    #[arg(long, value_name = "N", global = true, value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Summarise an ONNX model: opset, op histogram, parameters, inputs and outputs.
    Inspect(commands::InspectArgs),
    /// Compile an ONNX model (or .fp8ir text) through the pass pipeline and emit the IR.
    Compile(Box<commands::CompileArgs>),
    /// Run a model on the CPU reference backend or a GPU (inputs from .npz/.npy/.pb, outputs to .npz).
    Run(Box<run::RunArgs>),
    /// Measure FP8 against BF16 on the GPU: GEMM TFLOP/s, quantize bandwidth, a layer step.
    Bench(bench::BenchArgs),
    /// Train a model (loss, gradients, optimizer; FP8 forward and backward) on .npz data.
    Train(Box<train_args::TrainArgs>),
    /// Overlay the loss curves of training logs (CSV) in one plot.
    Plot(plot::PlotArgs),
}

/// Under an MPI launcher with several ranks on this machine, the cores shared among them (each
/// rank its part) instead of one thread per core in every rank.
fn threads_per_local_rank() -> Option<usize> {
    let local: usize = [
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
        "PMIX_LOCAL_SIZE",
    ]
    .iter()
    .find_map(|k| std::env::var(k).ok()?.trim().parse().ok())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (local > 1).then(|| (cores / local).max(1))
}

fn main() -> ExitCode {
    malloc::keep_freed_memory();
    std::panic::set_hook(Box::new(|info| {
        // `println!` to a closed pipe panics; end quietly as other command-line tools do.
        let msg = info.to_string();
        if msg.contains("Broken pipe") {
            std::process::exit(out::BROKEN_PIPE_EXIT.into());
        }
        eprintln!(
            "error: internal compiler error (this is a bug in fp8c, please report it): {}",
            out::sanitize(&msg)
        );
    }));
    let passes = fp8c_session::pass_names()
        .iter()
        .map(|(n, a)| format!("  {n:<14} {a}"))
        .collect::<Vec<_>>()
        .join("\n");
    let cmd = Cli::command().mut_subcommand("compile", |c| {
        c.after_help(format!(
            "Passes, in pipeline order (for --print-after / --stop-after):\n{passes}"
        ))
    });
    let matches = cmd.get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FP8C_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(format!("{level},egg=warn"))
            }),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    // This thread is worker 0 of the pool (rayon's `use_current_thread`): a run's steps and
    // their parallel loops start here instead of being handed to a sleeping worker and
    // waited for, which cost a wake-up and a context switch per run (0.2 ms of a 0.06 ms
    // digits-MLP inference); `--threads 1` runs everything on this one thread.
    let mut pool = rayon::ThreadPoolBuilder::new().use_current_thread();
    let threads = cli.threads.map(usize::from).or_else(threads_per_local_rank);
    if let Some(n) = threads {
        pool = pool.num_threads(n);
    }
    if let Err(e) = pool.build_global() {
        match cli.threads {
            Some(n) => eprintln!("error: --threads {n}: {e}"),
            None => eprintln!("error: starting the thread pool: {e}"),
        }
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Inspect(a) => commands::inspect(a),
        Command::Compile(a) => commands::compile(*a),
        Command::Run(a) => run::run(*a),
        Command::Train(a) => train::train(*a),
        Command::Plot(a) => plot::plot_cmd(a),
        Command::Bench(a) => bench::bench(a),
    };
    // Checkpoint directories this run claimed are released (one it created and never saved
    // into is removed).
    fp8c_session::train::checkpoint::release_all();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if out::is_broken_pipe(&e) => ExitCode::from(out::BROKEN_PIPE_EXIT),
        Err(e) => {
            eprintln!("error: {}", out::sanitize(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}
