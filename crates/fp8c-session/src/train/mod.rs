//! Training: the [`Trainer`] (a compiled, prepared training step and its state).

mod trainer;

pub use trainer::{StepReport, TrainError, Trainer, params_to_state};
