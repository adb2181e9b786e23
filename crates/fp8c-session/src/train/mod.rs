//! Training: the [`Trainer`] (a compiled, prepared training step, its state and the training
//! loop [`Trainer::fit`]), the data it reads ([`Dataset`]: `.npz` arrays or a text file,
//! batches depending only on seed and step), the options it is built from ([`TrainOptions`]
//! → the autodiff pass's `TrainSpec`; [`TrainSettings`] from flags and a config's `[train]`
//! table), a whole run as `fp8c train` makes it ([`TrainRun`]), loss parity across precisions
//! ([`Parity`]), the CSV log, and [`checkpoint`]s that resume bit for bit.
//!
//! Train the digits MLP for 20 steps with a checkpoint every 10, then resume the state into a
//! fresh trainer, all through [`Trainer`]:
//!
//! ```
//! use fp8c_session::train::{DataOptions, Dataset, FitOptions, Silent, TrainOptions, Trainer};
//! use fp8c_session::{CompileOptions, Device, Model};
//! # fn main() -> fp8c_session::Result<()> {
//! # let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
//! # let dir = tempfile::tempdir().unwrap();
//! # let ckpt = dir.path().join("ck");
//! let model = Model::load(format!("{root}/models/mlp_digits.onnx"))?;
//! let options = TrainOptions::new("logits"); // cross-entropy, AdamW, lr 1e-3
//! let data = Dataset::load(
//!     format!("{root}/data/digits_train.npz").as_ref(),
//!     &model,
//!     &DataOptions { inputs: Default::default(), labels: "y".into(), loss: options.loss, batch: 32 },
//! )?;
//! let forward = data.forward_model(&model, 32, "logits")?;
//! let compile = CompileOptions::fp8_training().min_fp8_flops(0);
//! let mut trainer = Trainer::for_model(&forward, &options.spec(), &compile, Device::Cpu)?;
//! let fit = FitOptions {
//!     steps: 20,
//!     batch: 32,
//!     checkpoint_dir: Some(ckpt.clone()),
//!     checkpoint_every: 10,
//!     ..FitOptions::default()
//! };
//! let run = trainer.fit(&data, &fit, &mut Silent)?;
//! assert_eq!(run.steps_run(), 20);
//! assert!(run.tail_loss(5) < run.losses[0].1, "the loss goes down");
//! trainer.save_checkpoint(&ckpt, &fit)?; // the periodic one was at step 10
//!
//! let mut again = Trainer::for_model(&forward, &options.spec(), &compile, Device::Cpu)?;
//! assert_eq!(again.resume(&ckpt, &fit)?, 20);
//! assert_eq!(again.state(), trainer.state(), "the whole state, bit for bit");
//! # Ok(())
//! # }
//! ```

pub mod checkpoint;
mod claim;
mod compare;
mod data;
mod fit;
mod job;
mod log;
mod settings;
mod spec;
mod split;
mod trainer;

pub use compare::Parity;
pub use data::{Batch, DataOptions, Dataset, batch_rows, check_labels, gather, permutation};
pub use fit::{Fit, FitOptions, Observer, Silent, Tee, interrupted_dir};
pub use fp8c_passes::autodiff::Loss;
pub use job::{DataSource, Finished, RunInfo, TrainConfig, TrainRun};
pub use log::{CSV_HEADER, CsvLog};
pub use settings::{DEFAULT_BATCH, DEFAULT_SEQ_LEN, DEFAULT_STEPS, ResolvedTrain, TrainSettings};
pub use spec::{OptimizerKind, ScheduleKind, TrainOptions, accuracy, accuracy_counts, pick_output};
pub use split::Parallel;
pub use trainer::{StepReport, Trainer, params_to_state};
