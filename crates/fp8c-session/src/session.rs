//! [`Session`]: a model served call after call. Programs are compiled for static shapes, so a
//! session compiles one per distinct set of input shapes — and per distinct value of the
//! inputs that decide shapes ([`Model::shape_inputs`]: a Reshape target, Slice bounds, axes
//! fed as graph inputs) — and keeps it for the next call with the same ones. What a test
//! harness would otherwise do by freezing inputs, the product does for every caller.

use crate::error::Result;
use crate::model::Model;
use crate::options::CompileOptions;
use crate::runner::{Device, Runner};
use fp8c_ir::Tensor;
use std::collections::BTreeMap;

/// How many specialisations a session keeps (least recently used go first).
const CACHE: usize = 16;

/// What a specialisation depends on: every input's shape, and the values of shape inputs.
type Key = BTreeMap<String, (Vec<u64>, Option<Vec<u8>>)>;

/// A model, compile options and a device, with one prepared program per input signature.
pub struct Session {
    model: Model,
    opts: CompileOptions,
    device: Device,
    /// Most recently used last.
    cache: Vec<(Key, Entry)>,
}

struct Entry {
    runner: Runner,
    /// Inputs that became constants (not fed at run time).
    specialised: Vec<String>,
}

impl Session {
    /// A session over `model`; nothing is compiled until the first [`Session::run`].
    pub fn new(model: Model, opts: CompileOptions, device: Device) -> Session {
        Session {
            model,
            opts,
            device,
            cache: Vec::new(),
        }
    }

    /// Runs the model on `inputs` (every graph input by name), compiling and preparing a
    /// program first if no earlier call had the same shapes and shape-input values. Each
    /// specialisation is logged at info level (`fp8c -v`).
    pub fn run(&mut self, inputs: &BTreeMap<String, Tensor>) -> Result<BTreeMap<String, Tensor>> {
        for (name, t) in inputs {
            self.model.check_input(name, t)?;
        }
        let key: Key = inputs
            .iter()
            .map(|(n, t)| {
                let value = self
                    .model
                    .shape_inputs()
                    .contains(n)
                    .then(|| t.bytes().to_vec());
                (n.clone(), (t.shape().to_vec(), value))
            })
            .collect();
        let at = match self.cache.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let entry = self.prepare(inputs)?;
                if self.cache.len() == CACHE {
                    self.cache.remove(0);
                }
                self.cache.push((key, entry));
                self.cache.len() - 1
            }
        };
        let hit = self.cache.remove(at);
        self.cache.push(hit);
        let entry = &mut self.cache.last_mut().expect("just pushed").1;
        let feed: BTreeMap<String, Tensor> = inputs
            .iter()
            .filter(|(n, _)| !entry.specialised.contains(n))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        entry.runner.run(&feed)
    }

    /// How many programs the session holds (one per input signature seen, up to 16).
    pub fn programs(&self) -> usize {
        self.cache.len()
    }

    /// The model as loaded (before any specialisation).
    pub fn model(&self) -> &Model {
        &self.model
    }

    fn prepare(&self, inputs: &BTreeMap<String, Tensor>) -> Result<Entry> {
        let (model, said) = match self.model.specialise(inputs)? {
            Some((m, said)) => (m, said),
            None => (self.model.clone(), Vec::new()),
        };
        for line in &said {
            tracing::info!("{line}");
        }
        let specialised: Vec<String> = self
            .model
            .shape_inputs()
            .iter()
            .filter(|n| inputs.contains_key(*n))
            .cloned()
            .collect();
        let mut opts = self.opts.clone();
        for (n, t) in inputs.iter().filter(|(n, _)| !specialised.contains(n)) {
            opts.input_shapes.insert(n.clone(), t.shape().to_vec());
        }
        let compiled = model.compile(&opts)?;
        for n in compiled.notes() {
            tracing::info!("{n}");
        }
        let runner = compiled.prepare(self.device)?;
        Ok(Entry {
            runner,
            specialised,
        })
    }
}
