//! The session API on the repository's MLP (`examples/models/mlp_digits.onnx`, x f32[batch,64]
//! → logits f32[batch,10]): load, compile, IR round trip, input checks, recipes, calibration,
//! training with checkpoints, failures that keep the pass error.

use fp8c_passes::PassError;
use fp8c_session::train::{DataOptions, Dataset, TrainOptions, checkpoint};
use fp8c_session::{
    CompileOptions, ConfigFile, Device, LoadOptions, Model, PrecisionMode, Purpose, Recipe,
    RecipeOptions, Tensor, Trainer,
};
use std::collections::BTreeMap;
use std::path::PathBuf;

fn repo(path: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(path)
}

fn mlp() -> Model {
    Model::load(repo("examples/models/mlp_digits.onnx")).expect("the example MLP loads")
}

fn feed(rows: u64) -> BTreeMap<String, Tensor> {
    let v: Vec<f32> = (0..rows * 64).map(|i| (i % 17) as f32 / 17.0).collect();
    BTreeMap::from([("x".to_string(), Tensor::from_f32(vec![rows, 64], &v))])
}

#[test]
fn compile_emit_reload_and_run_give_the_same_outputs() {
    let model = mlp();
    assert_eq!(model.inputs()[0].name, "x");
    assert_eq!(model.inputs()[0].ty.to_string(), "f32[batch,64]");
    assert_eq!(model.outputs(), ["logits"]);
    let opts = CompileOptions::fp8()
        .input_shape("x", &[16, 64])
        .min_fp8_flops(0)
        .recipe(Recipe::Current(Default::default()))
        .print_after("precision");
    let compiled = model.compile(&opts).unwrap();
    assert_eq!(compiled.dumps().len(), 1);
    assert_eq!(compiled.dumps()[0].0, "precision");
    assert_eq!(compiled.decisions().len(), 3, "one decision per GEMM");
    assert!(compiled.report(false).totals.fp8_flops_fraction > 0.0);
    let want = compiled
        .prepare(Device::Cpu)
        .unwrap()
        .run(&feed(16))
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let ir = dir.path().join("mlp.fp8ir");
    compiled.write_ir(&ir).unwrap();
    assert!(fp8c_session::weights_path(&ir).is_file());
    let reloaded = Model::load(&ir).unwrap();
    let again = reloaded.compile(&CompileOptions::fp8()).unwrap();
    let got = again.prepare(Device::Cpu).unwrap().run(&feed(16)).unwrap();
    assert_eq!(got["logits"].bytes(), want["logits"].bytes());
    assert!(compiled.json().starts_with('{'));
}

#[test]
fn inputs_are_checked_against_the_declared_interface() {
    let model = mlp();
    model
        .check_input("x", &Tensor::from_f32(vec![3, 64], &[0.0; 192]))
        .unwrap();
    let msg = |name: &str, t: Tensor| model.check_input(name, &t).unwrap_err().to_string();
    assert_eq!(
        msg("y", Tensor::scalar_f32(0.0)),
        "\"y\" is not an input of the model (its inputs are: x)"
    );
    assert_eq!(
        msg("x", Tensor::from_f32(vec![2, 8], &[0.0; 16])),
        "input \"x\" has shape [2, 8], but dim 1 is fixed to 64 in the model (f32[batch,64])"
    );
    assert!(msg("x", Tensor::from_i64(vec![1, 64], &[0; 64])).contains("has dtype i64"));
    assert!(msg("x", Tensor::from_f32(vec![64], &[0.0; 64])).contains("has rank 1"));
}

#[test]
fn load_errors_name_the_file_once() {
    let e = Model::load("/nonexistent/m.onnx").unwrap_err();
    assert_eq!(e.to_string(), "/nonexistent/m.onnx: no such file");
    let e = Model::load_with(
        repo("examples/models/mlp_digits.onnx"),
        &LoadOptions {
            outputs: vec!["nope".into()],
        },
    )
    .unwrap_err();
    let text = e.to_string();
    assert_eq!(text.matches("no value named \"nope\"").count(), 1, "{text}");
    assert!(std::error::Error::source(&e).is_none());
}

#[test]
fn recipe_options_read_the_config_then_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fp8.toml");
    std::fs::write(&cfg, "[recipe]\nkind = \"delayed\"\namax_history_len = 8\n").unwrap();
    let from_file = RecipeOptions {
        config: Some(std::sync::Arc::new(ConfigFile::read(&cfg).unwrap())),
        ..Default::default()
    };
    let history = |o: &RecipeOptions| match o.recipe_for(Purpose::Training).unwrap() {
        Recipe::Delayed(d) => d.amax_history_len,
        Recipe::Current(_) => panic!("expected delayed scaling"),
    };
    assert_eq!(history(&from_file), 8);
    let flag = RecipeOptions {
        amax_history: Some(4),
        ..from_file.clone()
    };
    assert_eq!(history(&flag), 4, "a flag overrides the file");
    let over = RecipeOptions {
        kind: Some("current".into()),
        margin: Some(1.0),
        ..from_file.clone()
    };
    let e = over.recipe_for(Purpose::Training).unwrap_err().to_string();
    assert!(e.contains("apply to --recipe delayed only"), "{e}");
    let bad = RecipeOptions {
        format: Some("e5m2".into()),
        ..Default::default()
    };
    assert!(
        bad.recipe_for(Purpose::Training)
            .unwrap_err()
            .to_string()
            .starts_with("--format e5m2: ")
    );
    let run = RecipeOptions::default();
    assert!(matches!(
        run.recipe_for(Purpose::Inference { calibrated: false })
            .unwrap(),
        Recipe::Current(_)
    ));
    assert!(matches!(
        run.recipe_for(Purpose::Inference { calibrated: true })
            .unwrap(),
        Recipe::Delayed(_)
    ));
    assert!(matches!(
        run.recipe_for(Purpose::Training).unwrap(),
        Recipe::Delayed(_)
    ));
    // A config file without a [recipe] table says nothing: inference keeps current scaling.
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let from_empty = RecipeOptions {
        config: Some(std::sync::Arc::new(ConfigFile::read(&empty).unwrap())),
        ..Default::default()
    };
    assert!(matches!(
        from_empty
            .recipe_for(Purpose::Inference { calibrated: false })
            .unwrap(),
        Recipe::Current(_)
    ));
    assert!(
        ConfigFile::read(&dir.path().join("absent.toml"))
            .unwrap_err()
            .to_string()
            .contains("absent.toml: cannot read")
    );
}

#[test]
fn calibration_fills_every_fp8_tensor_from_the_f32_path() {
    let model = mlp();
    // Calibration fills delayed-scaling histories: the recipe of calibrated inference.
    let opts = CompileOptions::fp8()
        .input_shape("x", &[16, 64])
        .min_fp8_flops(0)
        .recipe(fp8c_session::default_recipe(Purpose::Inference {
            calibrated: true,
        }));
    let Recipe::Delayed(d) = opts.recipe else {
        panic!("calibrated inference uses delayed scaling")
    };
    let mut fp8 = model.compile(&opts).unwrap().prepare(Device::Cpu).unwrap();
    let f32_opts = opts.clone().with_precision(PrecisionMode::F32);
    let mut reference = model
        .compile(&f32_opts)
        .unwrap()
        .prepare(Device::Cpu)
        .unwrap();
    let before = fp8.state();
    let c = fp8c_session::calibrate::calibrate(&mut fp8, &mut reference, &feed(16), &d).unwrap();
    assert_eq!(
        (c.calibrated, c.total),
        (4, 4),
        "x and w of the two FP8 GEMMs"
    );
    let after = fp8.state();
    let changed = after
        .iter()
        .filter(|(k, v)| before[*k].bytes() != v.bytes());
    assert_eq!(
        changed.count(),
        12,
        "history, scale and scale_inv of each tensor"
    );
}

/// The digits MLP's training data, its forward model bound to batch 16, and the default
/// cross-entropy spec on its logits.
fn digits_mlp() -> (Dataset, Model, fp8c_passes::autodiff::TrainSpec) {
    let model = mlp();
    let options = TrainOptions::new("logits");
    let data = Dataset::load(
        &repo("examples/data/digits_train.npz"),
        &model,
        &DataOptions {
            inputs: BTreeMap::new(),
            labels: "y".into(),
            loss: options.loss,
            batch: 16,
        },
    )
    .unwrap();
    let forward = data.forward_model(&model, 16, "logits").unwrap();
    (data, forward, options.spec())
}

#[test]
fn training_resumes_bit_identically_from_a_checkpoint() {
    let (data, forward, spec) = digits_mlp();
    let opts = CompileOptions::fp8().min_fp8_flops(0);
    let new = || Trainer::for_model(&forward, &spec, &opts, Device::Cpu).unwrap();
    let steps = |t: &mut Trainer, range: std::ops::Range<u64>| -> Vec<u64> {
        range
            .map(|s| {
                t.step(&data.batch(16, 7, s).feed(&spec))
                    .unwrap()
                    .loss
                    .to_bits()
            })
            .collect()
    };
    let mut full = new();
    let all = steps(&mut full, 0..6);

    let dir = tempfile::tempdir().unwrap();
    let meta = checkpoint::Meta::new("mlp", "fp8", "ce", 7, 16);
    let mut first = new();
    steps(&mut first, 0..3);
    checkpoint::save(dir.path(), &first, &meta).unwrap();
    let mut resumed = new();
    assert_eq!(
        checkpoint::load(dir.path(), &mut resumed, &meta).unwrap(),
        3
    );
    assert_eq!(steps(&mut resumed, 3..6), all[3..]);

    let other = checkpoint::Meta::new("mlp", "fp8", "ce", 8, 16);
    let e = checkpoint::load(dir.path(), &mut new(), &other).unwrap_err();
    assert!(
        e.to_string()
            .contains("--seed 7 --accumulate 1; this run has"),
        "{e}"
    );
}

/// A checkpoint without usable delayed-scaling state (an f32 run continued in FP8, a history
/// of another length) resumes with scales recomputed from the next batch, never scale 1
/// (TransformerEngine issue 982), and a history of another length keeps its newest entries.
#[test]
fn resuming_without_amax_histories_recomputes_them_from_the_next_batch() {
    let (data, forward, spec) = digits_mlp();
    let trainer = |opts: &CompileOptions| {
        Trainer::for_model(&forward, &spec, &opts.clone().min_fp8_flops(0), Device::Cpu).unwrap()
    };
    let batch = |s: u64| data.batch(16, 7, s).feed(&spec);
    let dir = tempfile::tempdir().unwrap();

    // Three f32 steps, continued in FP8.
    let mut f32_run = trainer(&CompileOptions::f32());
    for s in 0..3 {
        f32_run.step(&batch(s)).unwrap();
    }
    checkpoint::save(
        dir.path(),
        &f32_run,
        &checkpoint::Meta::new("mlp", "f32", "ce", 7, 16),
    )
    .unwrap();
    let f32_loss = f32_run.step(&batch(3)).unwrap().loss;
    let mut fp8 = trainer(&CompileOptions::fp8_training());
    let fp8_meta = checkpoint::Meta::new("mlp", "fp8", "ce", 7, 16);
    assert_eq!(
        checkpoint::load(dir.path(), &mut fp8, &fp8_meta).unwrap(),
        3
    );
    let tensors = fp8.scaled_tensors();
    assert_eq!(tensors.len(), 6, "x, w and dy of two GEMMs: {tensors:?}");
    let loss = fp8.step(&batch(3)).unwrap().loss;
    assert!(
        (loss - f32_loss).abs() < 0.05 * f32_loss,
        "FP8 loss {loss} after resuming vs f32 {f32_loss}"
    );
    let state = fp8.state();
    for t in &tensors {
        let h = state[&format!("{t}.amax_history")].to_f32_vec().unwrap();
        let scale = state[&format!("{t}.scale")].to_f32_vec().unwrap()[0];
        let amax = h.iter().copied().fold(0f32, f32::max);
        // Two amaxes recorded: the recomputation's (before step 3 quantized anything) and
        // step 3's own; the scale follows them: fp8_max / amax, E4M3 (x, w) or E5M2 (dy).
        assert_eq!(h.iter().filter(|&&v| v > 0.0).count(), 2, "{t}: {h:?}");
        let max = if t.ends_with(".dy") { 57344.0 } else { 448.0 };
        assert!(
            ((scale * amax) / max - 1.0).abs() < 1e-5,
            "{t}: scale {scale}, amax {amax}"
        );
    }

    // An FP8 checkpoint read with a shorter history keeps the newest entries and its scales,
    // recomputes nothing, and trains on.
    checkpoint::save(dir.path(), &fp8, &fp8_meta).unwrap();
    let saved = fp8.state();
    let mut short = trainer(
        &CompileOptions::fp8().recipe(
            fp8c_core::DelayedScaling {
                amax_history_len: 4,
                ..Default::default()
            }
            .into(),
        ),
    );
    assert_eq!(
        checkpoint::load(dir.path(), &mut short, &fp8_meta).unwrap(),
        4
    );
    let after = short.state();
    for t in &tensors {
        let k = format!("{t}.amax_history");
        let (old, new) = (
            saved[&k].to_f32_vec().unwrap(),
            after[&k].to_f32_vec().unwrap(),
        );
        assert_eq!(new.len(), 4);
        assert_eq!(new[0], 0.0);
        assert_eq!(new[1..], old[old.len() - 3..], "{t}");
        assert_eq!(
            after[&format!("{t}.scale")].bytes(),
            saved[&format!("{t}.scale")].bytes()
        );
    }
    assert!(short.step(&batch(4)).unwrap().loss.is_finite());
}

/// `Model::into_compiled` hands the model's graph to the passes: the f32 weights of FP8
/// GEMMs, frozen to FP8 params, are then held by nothing (`compile(&self)` leaves them with
/// the model), and the outputs are those of `compile`.
#[test]
fn compiling_by_value_lets_the_frozen_f32_weights_go() {
    let model = mlp();
    let opts = CompileOptions::fp8()
        .input_shape("x", &[16, 64])
        .min_fp8_flops(0)
        .recipe(Recipe::Current(Default::default()));
    let handles: Vec<(String, fp8c_ir::StorageHandle)> = model
        .graph()
        .weights()
        .iter()
        .map(|(n, t)| (n.clone(), t.storage().handle()))
        .collect();
    let by_ref = model.compile(&opts).unwrap();
    assert!(handles.iter().all(|(_, h)| h.is_live()));
    let by_value = model.into_compiled(&opts).unwrap();
    let mut gone = 0;
    for (name, h) in &handles {
        let held = by_value
            .graph
            .weights()
            .values()
            .chain(by_ref.graph.weights().values())
            .any(|t| h.refers_to(t.storage()));
        assert_eq!(h.is_live(), held, "{name}");
        gone += usize::from(!held);
    }
    assert_eq!(
        gone, 2,
        "the two FP8 GEMMs' f32 weights (the last GEMM has N = 10)"
    );
    let run = |c: &fp8c_session::Compiled| c.prepare(Device::Cpu).unwrap().run(&feed(16)).unwrap();
    assert_eq!(
        run(&by_value)["logits"].bytes(),
        run(&by_ref)["logits"].bytes()
    );
}

#[test]
fn a_failed_pass_keeps_its_error_and_last_good_ir() {
    let model = mlp().into_graph();
    let mut forward = Model::from_graph(model);
    forward
        .bind_input_shapes(&BTreeMap::from([("x".to_string(), vec![16, 64])]))
        .unwrap();
    let mut options = TrainOptions::new("logits");
    options.freeze = vec!["*".into()];
    let e = match Trainer::for_model(
        &forward,
        &options.spec(),
        &CompileOptions::f32(),
        Device::Cpu,
    ) {
        Ok(_) => panic!("freezing every parameter must fail"),
        Err(e) => e,
    };
    assert_eq!(
        e.to_string().matches("no trainable parameters").count(),
        1,
        "{e}"
    );
    match e.pass_error() {
        Some(PassError::Failed {
            pass, last_good, ..
        }) => {
            assert_eq!(*pass, "autodiff");
            assert!(!last_good.inputs().is_empty());
            // The backup holds weights by handle: those still held come back with it.
            assert_eq!(last_good.weights().len(), forward.graph().weights().len());
            for (name, t) in forward.graph().weights() {
                assert_eq!(last_good.weights()[name].bytes(), t.bytes(), "{name}");
            }
        }
        other => panic!("expected a failed pass, got {other:?}"),
    }
    let e = mlp()
        .compile(&CompileOptions::fp8().stop_after("nosuchpass"))
        .unwrap_err();
    assert!(
        e.to_string().starts_with("unknown pass `nosuchpass`"),
        "{e}"
    );
}

/// The first step of a fresh delayed-scaling run quantizes with scales measured from its own
/// batch, not TransformerEngine's initial scale of 1. Fine-tuning a trained model is where
/// scale 1 hurts: its gradients are small, at scale 1 its E5M2 gradients fall among the
/// subnormals and the first weight gradients are mostly noise (cosine ≈ 0.2–0.6 to f32's on
/// the GPT-2-style export after 100 f32 steps), which Adam's first, learning-rate-sized update
/// spreads over every weight. One SGD step with lr 1 (the weight change is the gradient) from
/// such weights must point where f32's does.
#[test]
fn the_first_fp8_step_measures_its_scales_before_quantizing() {
    let model = Model::load(repo("examples/models/gpt2-tiny.onnx")).unwrap();
    let output = model.outputs()[0].clone();
    let data_opts = DataOptions {
        inputs: BTreeMap::new(),
        labels: "labels".into(),
        loss: TrainOptions::new(&output).loss,
        batch: 16,
    };
    let data = Dataset::from_text(
        &repo("examples/data/shakespeare.txt"),
        16,
        &model,
        &data_opts,
    )
    .unwrap();
    let forward = data.forward_model(&model, 16, &output).unwrap();
    let trainer = |options: &TrainOptions, opts: CompileOptions| {
        let spec = options.spec();
        let t = Trainer::for_model(&forward, &spec, &opts.min_fp8_flops(0), Device::Cpu);
        (t.unwrap(), spec)
    };

    // The pretrained weights: 100 f32 AdamW steps.
    let mut adam = TrainOptions::new(&output);
    adam.lr = 3e-3;
    let (mut pre, spec) = trainer(&adam, CompileOptions::f32());
    for s in 0..100 {
        pre.step(&data.batch(16, 0, s).feed(&spec)).unwrap();
    }
    let mut w0 = pre.weights();
    w0.retain(|k, _| pre.trained().contains(k));

    let mut sgd = TrainOptions::new(&output);
    sgd.optimizer = fp8c_session::train::OptimizerKind::Sgd;
    sgd.momentum = 0.0;
    sgd.lr = 1.0;
    sgd.weight_decay = Some(0.0);
    let step = |opts: CompileOptions| {
        let (mut t, spec) = trainer(&sgd, opts);
        t.set_state(&w0).unwrap();
        t.step(&data.batch(16, 7, 0).feed(&spec)).unwrap();
        t.weights()
    };
    let f32_w = step(CompileOptions::f32());
    let fp8_w = step(CompileOptions::fp8_training());
    let mut checked = 0;
    for (name, w) in &w0 {
        if w.shape().len() != 2 || !name.contains(".h.") {
            continue;
        }
        let w = w.to_f64_vec().unwrap();
        let delta = |t: &BTreeMap<String, Tensor>| -> Vec<f64> {
            let v = t[name].to_f64_vec().unwrap();
            w.iter().zip(&v).map(|(a, b)| a - b).collect()
        };
        let (a, b) = (delta(&f32_w), delta(&fp8_w));
        let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cos = dot / (norm(&a) * norm(&b));
        eprintln!("{name}: cosine {cos:.4}");
        assert!(
            cos > 0.98,
            "{name}: first-step FP8 gradient has cosine {cos} to f32's"
        );
        checked += 1;
    }
    assert_eq!(
        checked, 8,
        "two layers of c_attn, attn.c_proj, c_fc, mlp.c_proj"
    );
}

/// On the CUDA backend (the emulated device, with a fault injected) a checkpoint whose state
/// cannot be read from the device is an error, and the previous checkpoint stays whole and
/// loadable: `save` reads the state with `try_state`, so a failed download never becomes a
/// checkpoint with entries missing.
#[test]
fn a_checkpoint_the_device_cannot_deliver_is_an_error_and_keeps_the_last_one() {
    let (data, forward, spec) = digits_mlp();
    let faults = fp8c_runtime::EmuFaults::default();
    let backend = fp8c_runtime::CudaBackend::new(fp8c_runtime::CudaOptions {
        emulated: true,
        emulated_faults: faults.clone(),
        ..Default::default()
    });
    let opts = CompileOptions::fp8().min_fp8_flops(0);
    let mut t = Trainer::new(forward.graph(), &spec, opts.pass_options(), &backend).unwrap();
    let meta = checkpoint::Meta::new("mlp", "fp8", "ce", 7, 16);
    let dir = tempfile::tempdir().unwrap();
    t.step(&data.batch(16, 7, 0).feed(&spec)).unwrap();
    checkpoint::save(dir.path(), &t, &meta).unwrap();
    t.step(&data.batch(16, 7, 1).feed(&spec)).unwrap();
    faults.fail_downloads(true);
    let e = checkpoint::save(dir.path(), &t, &meta)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot read it from the device"), "{e}");
    faults.fail_downloads(false);
    let mut resumed = Trainer::for_model(&forward, &spec, &opts, Device::Cpu).unwrap();
    assert_eq!(
        checkpoint::load(dir.path(), &mut resumed, &meta).unwrap(),
        1
    );
}

/// Issue #46 case 4 through the library: a recipe written as a struct literal with a margin
/// or epsilon out of range (what `--margin 100` gave: NaN outputs from finite inputs) is an
/// error from `validate` and from `compile`, before any pass runs.
#[test]
fn a_recipe_literal_with_margin_100_or_amax_epsilon_1e30_is_refused_by_compile() {
    let delayed = Recipe::Delayed(fp8c_core::DelayedScaling {
        margin: 100.0,
        ..Default::default()
    });
    let current = Recipe::Current(fp8c_core::CurrentScaling {
        amax_epsilon: 1e30,
        ..Default::default()
    });
    for recipe in [delayed, current] {
        let opts = CompileOptions::fp8()
            .input_shape("x", &[16, 64])
            .min_fp8_flops(0)
            .recipe(recipe);
        let e = opts.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("recipe: ") && e.contains("is out of range"),
            "{e}"
        );
        let Err(e) = mlp().compile(&opts) else {
            panic!("a recipe out of range compiled")
        };
        assert!(e.to_string().contains("is out of range"), "{e}");
    }
}
