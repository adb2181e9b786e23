//! A model to compile: loaded from ONNX or IR text (`.fp8ir` and its `.safetensors` weights sidecar), or
//! handed over as a graph; its declared interface, and the checks inputs must pass against it.
//!
//! An ONNX model whose import needs what only its inputs tell is loaded as its interface and
//! imported for real when they arrive: the values of integer inputs that decide shapes, or the
//! shapes of inputs with symbolic dims (a `ConvTranspose` records its output shape, batch
//! included). Models that import with symbolic dims are imported once and bound later.
//!
//! Errors from loading and compiling are prefixed with the model's file (`model.onnx: ...`);
//! a model made with [`Model::from_graph`] has no prefix.

use crate::compiled::{Compiled, weights_path};
use crate::error::{Context, Error, PassFailure, Result, bail};
use crate::options::CompileOptions;
use fp8c_ir::{DType, Dim, Graph, Op, Tensor, TensorType, interface_name};
use fp8c_passes::{PassCx, PassManager};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Keep only these graph outputs (none: all). Nodes feeding no kept output are pruned
    /// before import, so unsupported ops on unused branches do not matter.
    pub outputs: Vec<String>,
}

/// One declared graph input.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    /// The input's name.
    pub name: String,
    /// Its declared type (dims may be symbols such as `batch`).
    pub ty: TensorType,
}

/// A model: its graph (static or with symbolic dims) and where it came from.
#[derive(Clone, Debug)]
pub struct Model {
    graph: Graph,
    path: Option<PathBuf>,
    warnings: Vec<String>,
    /// How the model was loaded (to load it again, specialised).
    load: LoadOptions,
    /// Integer inputs whose values decide shapes (see [`Model::shape_inputs`]).
    shape_inputs: Vec<String>,
    /// Why only the interface is loaded: the import needs the values of shape inputs, or
    /// static input shapes (see the module docs).
    deferred: Option<String>,
    /// The outputs a deferred model's import gives (its interface graph has none).
    deferred_outputs: Vec<String>,
    /// Outputs the model declares as strings, given as i64 indices into these labels.
    string_outputs: BTreeMap<String, Vec<String>>,
    /// Inputs that hold strings, taken as i64 indices into these vocabularies.
    string_inputs: BTreeMap<String, Vec<String>>,
}

impl Model {
    /// Loads an ONNX model or IR text (`.fp8ir`; other extensions are sniffed).
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Loads a model with options (output selection).
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Model> {
        let path = path.as_ref();
        crate::files::check_input_file("", path)?;
        Self::load_specialised(path, opts, &BTreeMap::new(), &BTreeMap::new())
    }

    /// Loads a model with the graph inputs in `constants` replaced by those values and those
    /// in `shapes` given static dims (ONNX models: the importer takes them so).
    fn load_specialised(
        path: &Path,
        opts: &LoadOptions,
        constants: &BTreeMap<String, Tensor>,
        shapes: &BTreeMap<String, Vec<u64>>,
    ) -> Result<Model> {
        let (graph, warnings, shape_inputs, (string_outputs, string_inputs)) = if is_ir_text(path)?
        {
            (
                load_ir_text(path, &opts.outputs)?,
                Vec::new(),
                Vec::new(),
                (BTreeMap::new(), BTreeMap::new()),
            )
        } else {
            let import = fp8c_onnx::ImportOptions {
                outputs: (!opts.outputs.is_empty()).then(|| opts.outputs.clone()),
                constant_inputs: constants.clone(),
                input_shapes: shapes.clone(),
            };
            let imported = match fp8c_onnx::load_model(path, &import) {
                Ok(i) => i,
                Err(e) => {
                    // Ops that take a shape input's value as an attribute (Unsqueeze axes fed
                    // as a graph input), or that need static dims where an input has symbolic
                    // ones, cannot be imported before the inputs are known: load the
                    // interface, and import for real when inputs arrive (`specialise`,
                    // `compile` with input shapes). Errors that no input can change (an
                    // unsupported op, a bad file) are reported now.
                    let Ok(bare) = fp8c_onnx::load_interface(path, &import) else {
                        return Err(e.into());
                    };
                    let node_error = matches!(
                        e.kind(),
                        fp8c_onnx::OnnxError::Node { .. } | fp8c_onnx::OnnxError::NodeIr { .. }
                    );
                    if bare.shape_inputs.is_empty()
                        && !(node_error && has_symbolic_input(&bare.graph))
                    {
                        return Err(e.into());
                    }
                    return Ok(Model {
                        graph: bare.graph,
                        path: Some(path.to_path_buf()),
                        warnings: Vec::new(),
                        load: opts.clone(),
                        shape_inputs: bare.shape_inputs,
                        deferred: Some(e.to_string()),
                        deferred_outputs: bare.outputs,
                        string_outputs: BTreeMap::new(),
                        string_inputs: BTreeMap::new(),
                    });
                }
            };
            let file = path.display();
            let warnings = imported
                .warnings
                .iter()
                .map(|w| format!("{file}: {w}"))
                .collect();
            (
                imported.graph,
                warnings,
                imported.shape_inputs,
                (imported.string_outputs, imported.string_inputs),
            )
        };
        Ok(Model {
            graph,
            path: Some(path.to_path_buf()),
            warnings,
            load: opts.clone(),
            shape_inputs,
            deferred: None,
            deferred_outputs: Vec::new(),
            string_outputs,
            string_inputs,
        })
    }

    /// The integer inputs whose *values* decide shapes: a Reshape's target shape, Slice
    /// bounds, reduction axes, ... fed as graph inputs (see `fp8c_onnx::shape_inputs`). A
    /// program is compiled for static shapes, so these are specialised on like input shapes:
    /// [`Model::specialise`] makes them constants. Data inputs (token ids) are never among
    /// them. Empty for IR text and graphs built in memory.
    pub fn shape_inputs(&self) -> &[String] {
        &self.shape_inputs
    }

    /// The model specialised on the values of its [`Model::shape_inputs`] found in `inputs`
    /// (they become constants and leave the interface) and, when its import waits for input
    /// shapes, imported for the shapes of the other `inputs`; with a line per input saying
    /// so. None when there is nothing to specialise.
    pub fn specialise(
        &self,
        inputs: &BTreeMap<String, Tensor>,
    ) -> Result<Option<(Model, Vec<String>)>> {
        let values: BTreeMap<String, Tensor> = self
            .shape_inputs
            .iter()
            .filter_map(|n| inputs.get(n).map(|t| (n.clone(), t.clone())))
            .collect();
        if values.is_empty() && self.deferred.is_none() {
            return Ok(None);
        }
        let mut said: Vec<String> = values
            .iter()
            .map(|(n, t)| format!("specialised on input \"{n}\" = {}", brief(t)))
            .collect();
        if self.deferred.is_none() {
            let Some(path) = self.path.as_deref() else {
                return Ok(None);
            };
            let m = Self::load_specialised(path, &self.load, &values, &BTreeMap::new())?;
            return Ok(Some((m, said)));
        }
        let shapes: BTreeMap<String, Vec<u64>> = inputs
            .iter()
            .filter(|(n, _)| !values.contains_key(*n))
            .map(|(n, t)| (n.clone(), t.shape().to_vec()))
            .collect();
        said.extend(
            shapes
                .iter()
                .map(|(n, d)| format!("imported for input \"{n}\" of shape {d:?}")),
        );
        Ok(Some((self.imported_for(&values, &shapes)?, said)))
    }

    /// The deferred model imported with `constants` for its shape inputs and the static
    /// `shapes` of others (checked against the declared types and bound as `--input-shape`
    /// binds them, so one input's shape fixes the symbols it shares with others).
    fn imported_for(
        &self,
        constants: &BTreeMap<String, Tensor>,
        shapes: &BTreeMap<String, Vec<u64>>,
    ) -> Result<Model> {
        let Some(path) = self.path.as_deref() else {
            bail!("a model built in memory has nothing to import again");
        };
        let mut bare = self.graph.clone();
        fp8c_passes::shapes::bind_input_shapes(&mut bare, shapes)?;
        let static_shapes: BTreeMap<String, Vec<u64>> = bare
            .inputs()
            .iter()
            .filter_map(|&id| {
                let n = bare.node(id);
                let name = interface_name(&n.op);
                let dims: Option<Vec<u64>> = n.outputs[0].shape.iter().map(Dim::known).collect();
                (!constants.contains_key(name)).then_some((name.to_string(), dims?))
            })
            .collect();
        Self::load_specialised(path, &self.load, constants, &static_shapes)
    }

    /// A model from a graph built in memory (another compiler's IR, a test).
    pub fn from_graph(graph: Graph) -> Model {
        Model {
            graph,
            path: None,
            warnings: Vec::new(),
            load: LoadOptions::default(),
            shape_inputs: Vec::new(),
            deferred: None,
            deferred_outputs: Vec::new(),
            string_outputs: BTreeMap::new(),
            string_inputs: BTreeMap::new(),
        }
    }

    /// What loading accepted but the user should know (e.g. attributes the op does not have
    /// in the model's opset, ignored as onnxruntime ignores them), one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The graph, to edit (set weights, bind shapes by hand).
    pub fn graph_mut(&mut self) -> &mut Graph {
        &mut self.graph
    }

    /// The graph, by value.
    pub fn into_graph(self) -> Graph {
        self.graph
    }

    /// The file the model was loaded from.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The declared graph inputs, in order.
    pub fn inputs(&self) -> Vec<ModelInput> {
        let g = &self.graph;
        g.inputs()
            .iter()
            .map(|&id| {
                let n = g.node(id);
                ModelInput {
                    name: interface_name(&n.op).to_string(),
                    ty: n.outputs[0].clone(),
                }
            })
            .collect()
    }

    /// Outputs the model declares as strings (a scikit-learn classifier's class labels): the
    /// graph gives each as i64 indices into its labels here (`labels[i]` for index i), and
    /// [`crate::npy::write_npz_labelled`] writes the strings.
    pub fn string_outputs(&self) -> &BTreeMap<String, Vec<String>> {
        &self.string_outputs
    }

    /// Inputs the model declares as strings (categories a OneHotEncoder compares): the graph
    /// takes each as i64 indices into its vocabulary here, which
    /// [`crate::npy::read_npz_with`] makes from a numpy string array.
    pub fn string_inputs(&self) -> &BTreeMap<String, Vec<String>> {
        &self.string_inputs
    }

    /// The graph output names, in order.
    pub fn outputs(&self) -> Vec<String> {
        if self.deferred.is_some() {
            return self.deferred_outputs.clone();
        }
        self.graph
            .outputs()
            .iter()
            .map(|o| o.name.clone())
            .collect()
    }

    /// The type of output `name` (after shapes are bound and types inferred, static).
    pub fn output_type(&self, name: &str) -> Option<TensorType> {
        let g = &self.graph;
        let o = g.outputs().iter().find(|o| o.name == name)?;
        Some(g.value_type(o.value).clone())
    }

    /// Checks a tensor against the declared input `name`: the name exists, dtype, rank and
    /// every fixed dim match. Messages name the input; callers prefix where it came from.
    pub fn check_input(&self, name: &str, t: &Tensor) -> Result<()> {
        let declared = self.inputs();
        let Some(input) = declared.iter().find(|i| i.name == name) else {
            let names: Vec<&str> = declared.iter().map(|i| i.name.as_str()).collect();
            bail!(
                "\"{name}\" is not an input of the model (its inputs are: {})",
                names.join(", ")
            );
        };
        check_type(t, &input.ty).map_err(|m| Error::Invalid(format!("input \"{name}\" {m}")))
    }

    /// A tensor read from a file for input `name`, in the input's type, checked as
    /// [`Model::check_input`] does. NumPy has no bf16 (`write_npz` widens it to f32), so an
    /// f32 array given for a bf16 input is rounded to bf16 (to nearest even, as ONNX `Cast`
    /// does); every other tensor must already have the declared type.
    pub fn conform_input(&self, name: &str, t: Tensor) -> Result<Tensor> {
        let declared = self.inputs();
        let bf16 = declared
            .iter()
            .any(|i| i.name == name && i.ty.dtype == DType::BF16);
        let t = if bf16 && t.dtype() == DType::F32 {
            let cast = Op::Cast {
                to: DType::BF16,
                saturate: false,
            };
            fp8c_eval::eval_op(&cast, &[&t])
                .map_err(|e| Error::Invalid(format!("input \"{name}\": f32 to bf16: {e}")))?
                .remove(0)
        } else {
            t
        };
        self.check_input(name, &t)?;
        Ok(t)
    }

    /// Binds concrete input shapes (and the symbols they fix) in place; a model whose import
    /// waits for input shapes is imported for them first. Errors name the input and the flag
    /// (`--input-shape`), not the file: the caller says which model.
    pub fn bind_input_shapes(&mut self, shapes: &BTreeMap<String, Vec<u64>>) -> Result<()> {
        if self.deferred.is_some() && self.shape_inputs.is_empty() && !shapes.is_empty() {
            *self = self.imported_for(&BTreeMap::new(), shapes)?;
        }
        fp8c_passes::shapes::bind_input_shapes(&mut self.graph, shapes)?;
        Ok(())
    }

    /// Re-infers every node's type (after binding shapes, to read static output types).
    pub fn reinfer(&mut self) -> Result<()> {
        let r = self.graph.reinfer();
        self.in_file(r)
    }

    /// Compiles a copy of the model: binds `opts.input_shapes`, then runs the pass pipeline
    /// (canonicalize, precision, scaling, fusion). A failed pass is an [`Error`] whose
    /// [`Error::pass_failure`] holds the pass error (with the last IR that verified) and the
    /// dumps and notes recorded before it.
    pub fn compile(&self, opts: &CompileOptions) -> Result<Compiled> {
        opts.validate()?;
        let g = match &self.deferred {
            None => self.graph.clone(),
            Some(why) if !self.shape_inputs.is_empty() => bail!(
                "{why} (the values of the inputs {} decide shapes: give them, and the model is specialised on them, as `fp8c run` and `Session::run` do)",
                self.shape_inputs.join(", ")
            ),
            Some(why) if opts.input_shapes.is_empty() => {
                bail!("{why} (give the input shapes: `--input-shape`, or run on inputs)")
            }
            Some(_) => {
                let m = self.imported_for(&BTreeMap::new(), &opts.input_shapes)?;
                if let Some(why) = &m.deferred {
                    bail!(
                        "{why} (imported for the given input shapes: give those of every input with symbolic dims)"
                    );
                }
                m.graph
            }
        };
        self.compile_graph(g, opts)
    }

    /// [`Model::compile`], consuming the model: the passes work on its graph itself, not a
    /// copy, so a weight the pipeline no longer needs (an f32 weight once its FP8 copy is
    /// made) is freed as the pipeline goes. An FP8 model then never holds its f32 weights
    /// and all their FP8 copies at once: `fp8c run` and `fp8c compile` compile this way
    /// when they need the model no more.
    pub fn into_compiled(mut self, opts: &CompileOptions) -> Result<Compiled> {
        if self.deferred.is_some() {
            return self.compile(opts);
        }
        opts.validate()?;
        let g = std::mem::replace(&mut self.graph, Graph::new(""));
        self.compile_graph(g, opts)
    }

    /// Binds `opts.input_shapes` in `g` (the model's graph) and runs the pipeline on it.
    fn compile_graph(&self, mut g: Graph, opts: &CompileOptions) -> Result<Compiled> {
        let bound = fp8c_passes::shapes::bind_input_shapes(&mut g, &opts.input_shapes);
        self.in_file(bound)?;
        let mut cx = PassCx::new(opts.pass_options());
        if let Err(error) = PassManager::default().run(&mut g, &mut cx) {
            let failure = Error::Pass(Box::new(PassFailure {
                error,
                dumps: std::mem::take(&mut cx.dumps),
                notes: std::mem::take(&mut cx.notes),
            }));
            return self.in_file(Err(failure));
        }
        Ok(Compiled::new(g, cx, self.path.clone(), opts.host_accum))
    }

    /// Prefixes an error with the model's file, if it has one.
    pub(crate) fn in_file<T, E: Into<Error>>(&self, r: std::result::Result<T, E>) -> Result<T> {
        match &self.path {
            Some(p) => r.with_context(|| p.display()),
            None => r.map_err(Into::into),
        }
    }
}

/// A short rendering of a (small, integer) tensor's values for messages: `[2, 3, -1]`, cut
/// after 16 values.
fn brief(t: &Tensor) -> String {
    match t.to_i64_vec() {
        Ok(v) if v.len() <= 16 => format!("{v:?}"),
        Ok(v) => format!("{:?} … ({} values)", &v[..16], v.len()),
        Err(_) => format!("{} {:?}", t.dtype(), t.shape()),
    }
}

/// Checks a tensor against a declared input type; the message reads after `input "x" `.
fn check_type(t: &Tensor, ty: &TensorType) -> std::result::Result<(), String> {
    if t.dtype() != ty.dtype {
        return Err(format!("has dtype {}, the model declares {ty}", t.dtype()));
    }
    if t.shape().len() != ty.rank() {
        return Err(format!(
            "has rank {} (shape {:?}), the model declares rank {} ({ty})",
            t.shape().len(),
            t.shape(),
            ty.rank()
        ));
    }
    for (axis, (d, &n)) in ty.shape.iter().zip(t.shape()).enumerate() {
        if let Dim::Known(k) = d
            && *k != n
        {
            return Err(format!(
                "has shape {:?}, but dim {axis} is fixed to {k} in the model ({ty})",
                t.shape()
            ));
        }
    }
    Ok(())
}

/// Whether a graph input has a dim that is not static.
fn has_symbolic_input(g: &Graph) -> bool {
    g.inputs().iter().any(|&id| {
        g.node(id).outputs[0]
            .shape
            .iter()
            .any(|d| d.known().is_none())
    })
}

/// Whether `path` holds IR text: by extension, else by its first bytes.
fn is_ir_text(path: &Path) -> Result<bool> {
    if path.extension().is_some_and(|e| e == "fp8ir") {
        return Ok(true);
    }
    if path.extension().is_some_and(|e| e == "onnx") {
        return Ok(false);
    }
    let head = std::fs::read(path)
        .map_err(|e| Error::io(format_args!("{}: cannot read", path.display()), e))?;
    Ok(head.trim_ascii_start().starts_with(b"graph @"))
}

/// Parses and verifies IR text, reads its weights sidecar if present, selects outputs.
fn load_ir_text(path: &Path, outputs: &[String]) -> Result<Graph> {
    let file = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format_args!("{file}: cannot read as UTF-8 text"), e))?;
    let mut g = fp8c_ir::text::parse(&text).context(&file)?;
    // Hand-written IR may declare types that contradict inference: check before any pass
    // re-infers them.
    fp8c_ir::verify(&g).context(&file)?;
    let wp = weights_path(path);
    let old = crate::compiled::old_weights_path(path);
    if !wp.exists() && old.exists() && !g.params().is_empty() {
        bail!(
            "{}: fp8c's old weights format is no longer read; parameter data now lives in {} \
             (safetensors): recompile the model with `fp8c compile MODEL.onnx --emit ir -o {file}`",
            old.display(),
            wp.display()
        );
    }
    if wp.exists() {
        let f = std::fs::File::open(&wp)
            .map_err(|e| Error::io(format_args!("{}: cannot open", wp.display()), e))?;
        fp8c_ir::text::read_weights(&mut g, &mut std::io::BufReader::new(f))
            .context(wp.display())?;
    }
    if !outputs.is_empty() {
        g.select_outputs(outputs).context(&file)?;
        g.dce();
    }
    Ok(g)
}
