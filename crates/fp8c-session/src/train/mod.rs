//! Training: the [`Trainer`] (a compiled, prepared training step and its state), the data it
//! reads ([`Dataset`]: `.npz` arrays, batches depending only on seed and step), the options
//! it is built from ([`TrainOptions`] → the autodiff pass's `TrainSpec`), accuracy, and
//! [`checkpoint`]s that resume bit for bit, and the `[train]` table of a config file
//! ([`config`]).

pub mod checkpoint;
pub mod config;
mod data;
mod spec;
mod trainer;

pub use data::{Batch, DataOptions, Dataset, batch_rows, check_labels, gather, permutation};
pub use spec::{OptimizerKind, ScheduleKind, TrainOptions, accuracy, pick_output};
pub use trainer::{StepReport, Trainer, params_to_state};
