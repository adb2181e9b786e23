//! fp8c's runtime: running whole graphs.
//!
//! [`lower`] turns a static graph into a [`Program`] (ordered steps over
//! buffers with a liveness-based memory plan); a [`Backend`] prepares it into an
//! [`Executable`] that runs it and keeps its scaling state. [`CpuBackend`] executes each step
//! with the reference evaluator (`fp8c_eval::eval_op`); [`CudaBackend`] runs the same program on a GPU ([`cuda`]). [`compare`] and [`fp8_stats`] give the numbers to judge FP8 results by.

mod backend;
mod conv_epilogue;
mod cpu_backend;
mod cpu_moves;
pub mod cuda;
mod dynamic_shape;
mod lower;
mod memory;
mod plan;
pub mod profile;
mod program;
mod schedule;
pub mod stats;

pub use backend::{Backend, Executable, Observer, RuntimeError};
pub use cpu_backend::{CpuBackend, CpuExecutable};
pub use cuda::{CudaBackend, CudaOptions, EmuFaults};
pub use lower::lower;
pub use memory::{MemoryBreakdown, breakdown as memory_breakdown};
pub use profile::Profile;
pub use program::{
    ARENA_ALIGN, BufId, Buffer, BufferKind, MemoryPlan, Program, StateBinding, Step, describe_plan,
    initial_state,
};
pub use stats::{Comparison, Fp8TensorStats, WhatIf, compare, fp8_stats, values_f64, what_if};
