//! ONNX `ModelProto` -> [`fp8c_ir::Graph`].
//!
//! The import runs in checked stages, each on the proto, so that a model is rejected with a
//! complete message before any IR is built:
//! 1. opset: the ai.onnx opset must be in [`MIN_OPSET`]..=[`MAX_OPSET`] (13–21 fully,
//!    7–12 where the older op forms are cheap, 1–6 where an op's form is its opset-7 one
//!    (`ops::old_forms` refuses the rest by attribute), 22–27 where nothing changed that
//!    matters);
//! 2. definitions: every value has one producer (node output, graph input or initializer);
//! 3. pruning: only nodes that feed a selected output are kept, so an unsupported op in an
//!    unused branch does not fail the import;
//! 4. order: kept nodes are sorted topologically (a cycle is one error naming its nodes);
//! 5. support: every kept node's op must be in the registry (all others listed at once);
//! 6. mapping: graph inputs, then the initializers the kept nodes read (float -> params,
//!    others -> constants), then each node through its builder (`ops/`), then the outputs.

use crate::ops::{NodeCx, lookup_node};
use crate::proto::{GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto};
use crate::tensor::{check_regular, dtype_from_onnx, tensor_from_proto, tensor_from_raw};
use crate::value_info::{is_default_domain, value_info_parts};
use crate::{OnnxError, UnsupportedOp};
use fp8c_ir::{DType, Graph, Op, Storage, Tensor, TensorType, Value, shape_of};
use prost::Message;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::path::Path;

/// Oldest ai.onnx opset the importer accepts (older op forms are mapped where cheap; before
/// opset 7, `ops::old_forms` checks each node).
pub const MIN_OPSET: i64 = 1;
/// Newest ai.onnx opset the importer accepts. Opsets 22–25 changed the mapped ops only by
/// adding element types and the attributes Cast/CastLike `round_mode` (FLOAT8E8M0 only:
/// `cast_e8m0`), QuantizeLinear `precision` and DequantizeLinear `output_dtype`, which the
/// builders handle; ONNX's backend tests use these opsets. Opset 26 added ops (BitCast,
/// CumProd) and changed none; 27 added ops (CausalConvWithState, LinearAttention) and Range's
/// `stash_type` (`ops::math::range`). An op not mapped is an error naming it.
pub const MAX_OPSET: i64 = 27;

/// What to import and how.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Keep only these outputs (graph outputs or any other value name), in this order; nodes
    /// that feed none of them are dropped before op mapping. `None` keeps every graph output.
    pub outputs: Option<Vec<String>>,
    /// Replaces the dims of these graph inputs (the rank must match the declared one).
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Makes these graph inputs constants with the given values (dtype and rank must match
    /// the declared type, and known dims too). For inputs the IR needs as attributes
    /// (`axes`, `split`, `pads` fed as graph inputs, as in ONNX's backend tests).
    pub constant_inputs: BTreeMap<String, Tensor>,
}

/// An imported model: the IR graph and what the model says about itself.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The graph: ONNX inputs, float initializers as params, nodes, outputs.
    pub graph: Graph,
    /// The model's ai.onnx opset version.
    pub opset: i64,
    /// The model's IR version.
    pub ir_version: i64,
    /// `producer_name` (e.g. `pytorch`).
    pub producer: String,
    /// `producer_version`.
    pub producer_version: String,
    /// Every imported ONNX value name and the IR value it became.
    pub values: BTreeMap<String, Value>,
    /// What the importer accepted but the user should know (attributes no version of their op
    /// has, ignored as onnxruntime ignores them), one line each, naming the node.
    pub warnings: Vec<String>,
    /// Integer graph inputs whose values decide shapes ([`crate::shape_inputs`]), still graph
    /// inputs (not given in `ImportOptions::constant_inputs`); a caller specialises on them.
    pub shape_inputs: Vec<String>,
    /// The graph outputs the full import gives, in order: the graph's own, except from
    /// [`load_interface`], whose graph has none.
    pub outputs: Vec<String>,
    /// Graph outputs that hold strings (a scikit-learn classifier's class labels), which the IR
    /// gives as i64 indices into these labels: `labels[i]` is index i's string.
    pub string_outputs: BTreeMap<String, Vec<String>>,
    /// Graph inputs that hold strings (categories a OneHotEncoder or LabelEncoder compares),
    /// which the IR takes as i64 indices into this vocabulary (the strings the model compares
    /// them with; a string outside it is `vocabulary.len()`, which matches no category).
    pub string_inputs: BTreeMap<String, Vec<String>>,
}

/// Decodes model bytes; an empty or graph-less message is an error.
pub fn decode_model(bytes: &[u8]) -> Result<ModelProto, OnnxError> {
    let model = ModelProto::decode(bytes).map_err(|e| OnnxError::Decode {
        what: "model",
        reason: crate::error::protobuf_reason(&e),
    })?;
    if model.graph.is_none() {
        return Err(OnnxError::NoGraph);
    }
    Ok(model)
}

/// The model's ai.onnx opset version, checked against the supported range.
pub fn ai_onnx_opset(model: &ModelProto) -> Result<i64, OnnxError> {
    let mut default = model
        .opset_import
        .iter()
        .filter(|o| is_default_domain(o.domain()));
    let v = default
        .next()
        .map(|o| o.version())
        .ok_or_else(|| OnnxError::Opset("the model imports no ai.onnx opset".into()))?;
    // skl2onnx lists the default domain twice at one version; two versions are ambiguous.
    if let Some(again) = default.find(|o| o.version() != v) {
        return Err(OnnxError::Opset(format!(
            "the model imports the ai.onnx opset twice, at versions {v} and {}",
            again.version()
        )));
    }
    if !(MIN_OPSET..=MAX_OPSET).contains(&v) {
        return Err(OnnxError::Opset(format!(
            "ai.onnx opset {v} is not supported (supported: {MIN_OPSET} to {MAX_OPSET})"
        )));
    }
    Ok(v)
}

/// Whether the importer maps `node`: an op of the registries, Scan (unrolled, `scan.rs`) or
/// If (inlined, `if_node.rs`).
pub(crate) fn is_supported(node: &NodeProto) -> bool {
    lookup_node(node.domain(), node.op_type()).is_some()
        || (is_default_domain(node.domain()) && matches!(node.op_type(), "Scan" | "If"))
}

/// Reads and imports an ONNX model file; external data is looked up next to it.
/// Every error is prefixed with the file name.
/// The initializers' data is read from the file straight into the tensors' storage
/// (`stream.rs`), so the weights are held once, not three times, while importing.
pub fn load_model(path: &Path, opts: &ImportOptions) -> Result<Imported, OnnxError> {
    let run = || {
        check_regular(path)?;
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let s = crate::stream::read_model(std::io::BufReader::new(file), len)?;
        import_streamed(&s.model, &s.raw, path.parent(), opts)
    };
    run().map_err(|e| e.in_file(path))
}

/// The interface of a model that cannot be imported until some inputs are known: a graph
/// with the model's inputs and no nodes, and the integer inputs whose values decide shapes
/// (over the outputs `opts` selects). What a session loads before it specialises a model
/// whose ops need those values as constants (e.g. `Unsqueeze` with `axes` fed as an input).
pub fn load_interface(path: &Path, opts: &ImportOptions) -> Result<Imported, OnnxError> {
    let run = || {
        let file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let s = crate::stream::read_model(std::io::BufReader::new(file), len)?;
        let graph = s.model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
        let plan = plan(graph, opts)?;
        let shape_inputs: Vec<String> = crate::shape_inputs(graph)
            .into_iter()
            .filter(|n| !opts.constant_inputs.contains_key(n) && plan.used.contains(n))
            .collect();
        let bare = ImportOptions {
            outputs: Some(Vec::new()),
            ..opts.clone()
        };
        let mut imported = import_streamed(&s.model, &s.raw, path.parent(), &bare)?;
        imported.shape_inputs = shape_inputs;
        imported.outputs = plan.selected.clone();
        Ok(imported)
    };
    run().map_err(|e: OnnxError| e.in_file(path))
}

/// Imports serialized model bytes; `base_dir` is where external data files are looked up.
pub fn import_bytes(
    bytes: &[u8],
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported, OnnxError> {
    import_model(&decode_model(bytes)?, base_dir, opts)
}

/// Imports a decoded model.
pub fn import_model(
    model: &ModelProto,
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported, OnnxError> {
    import_streamed(model, &[], base_dir, opts)
}

/// [`import_model`] where `raw[i]` (if present) is the `raw_data` of initializer `i`, read
/// separately (`stream.rs`).
fn import_streamed(
    model: &ModelProto,
    raw: &[Option<Storage>],
    base_dir: Option<&Path>,
    opts: &ImportOptions,
) -> Result<Imported, OnnxError> {
    let graph = model.graph.as_ref().ok_or(OnnxError::NoGraph)?;
    let opset = ai_onnx_opset(model)?;
    let plan = plan(graph, opts)?;
    let shape_inputs = crate::shape_inputs(graph)
        .into_iter()
        .filter(|n| !opts.constant_inputs.contains_key(n) && plan.used.contains(n))
        .collect();
    let mut warnings = Vec::new();
    let (graph, values, string_outputs, string_inputs) =
        build(graph, &plan, opset, raw, base_dir, opts, &mut warnings)?;
    let outputs = plan.selected.clone();
    Ok(Imported {
        graph,
        opset,
        ir_version: model.ir_version(),
        producer: model.producer_name().into(),
        producer_version: model.producer_version().into(),
        values: values.into_iter().collect(),
        warnings,
        shape_inputs,
        outputs,
        string_outputs,
        string_inputs,
    })
}

/// What the checks before mapping decide (stages 2 to 5).
struct Plan<'m> {
    /// Node names, `{op_type}_{index}` where the model has none.
    names: Vec<String>,
    /// Graph inputs that are not initializers.
    inputs: Vec<&'m ValueInfoProto>,
    /// Names of sparse initializers.
    sparse: HashSet<&'m str>,
    /// The outputs to produce, in order.
    selected: Vec<String>,
    /// Every value the kept nodes and the outputs read.
    used: HashSet<String>,
    /// Kept nodes in topological order.
    order: Vec<usize>,
}

/// Checks definitions, prunes to the selected outputs, orders the kept nodes and checks
/// that every one of them is supported.
fn plan<'m>(graph: &'m GraphProto, opts: &ImportOptions) -> Result<Plan<'m>, OnnxError> {
    let nodes = &graph.node;
    let names: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            if n.name().is_empty() {
                format!("{}_{i}", n.op_type())
            } else {
                n.name().to_string()
            }
        })
        .collect();

    // ---- definitions
    let mut inits: HashMap<&str, &TensorProto> = HashMap::new();
    for t in &graph.initializer {
        if inits.insert(t.name(), t).is_some() {
            return Err(OnnxError::tensor(
                t.name(),
                "is defined by two initializers",
            ));
        }
    }
    let sparse: HashSet<&str> = graph
        .sparse_initializer
        .iter()
        .filter_map(|s| s.values.as_ref())
        .map(|v| v.name())
        .collect();
    let inputs: Vec<&ValueInfoProto> = graph
        .input
        .iter()
        .filter(|i| !inits.contains_key(i.name()))
        .collect();
    let mut defined: HashMap<&str, String> = HashMap::new();
    for i in &inputs {
        if defined.insert(i.name(), "a graph input".into()).is_some() {
            return Err(value_err("graph input", i.name(), "is listed twice"));
        }
    }
    for name in inits.keys().chain(sparse.iter()) {
        defined
            .entry(name)
            .or_insert_with(|| "an initializer".into());
    }
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (k, n) in nodes.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            let by = format!("node \"{}\"", names[k]);
            if let Some(prev) = defined.insert(o, by.clone()) {
                return Err(value_err(
                    "value",
                    o,
                    format!("is defined twice: by {prev} and by {by}"),
                ));
            }
            producer.insert(o, k);
        }
    }

    // ---- selected outputs
    let selected: Vec<String> = match &opts.outputs {
        Some(list) => {
            for o in list {
                if !defined.contains_key(o.as_str()) {
                    let outs: Vec<&str> = graph.output.iter().map(|o| o.name()).collect();
                    return Err(OnnxError::Options(format!(
                        "no value named \"{o}\" to output: no such output or intermediate value (graph outputs are: {})",
                        outs.join(", ")
                    )));
                }
            }
            list.clone()
        }
        None => graph.output.iter().map(|o| o.name().to_string()).collect(),
    };
    for o in &selected {
        if !defined.contains_key(o.as_str()) {
            return Err(value_err(
                "graph output",
                o,
                "is not produced by any node, graph input or initializer",
            ));
        }
    }

    // ---- pruning
    let mut keep = vec![false; nodes.len()];
    let mut used: HashSet<&str> = selected.iter().map(String::as_str).collect();
    let mut stack: Vec<&str> = selected.iter().map(String::as_str).collect();
    let mut missing: Vec<(usize, &str)> = Vec::new();
    while let Some(v) = stack.pop() {
        let Some(&k) = producer.get(v) else { continue };
        if std::mem::replace(&mut keep[k], true) {
            continue;
        }
        for i in crate::subgraph::node_refs(&nodes[k])
            .into_iter()
            .filter(|i| !i.is_empty())
        {
            if !defined.contains_key(i) {
                missing.push((k, i));
            }
            if used.insert(i) {
                stack.push(i);
            }
        }
    }
    if let Some(&(k, value)) = missing.iter().min() {
        return Err(OnnxError::MissingInput {
            node: names[k].clone(),
            op_type: nodes[k].op_type().into(),
            value: value.into(),
        });
    }

    // ---- order
    let order = topo_order(nodes, &keep, &producer)
        .map_err(|cycle| OnnxError::Cycle(cycle.into_iter().map(|k| names[k].clone()).collect()))?;

    // ---- support
    // (The nodes of kept If/Scan/Loop bodies too, named by their path: `{if}.then.{node}`.)
    let mut unsupported: Vec<UnsupportedOp> = Vec::new();
    for k in (0..nodes.len()).filter(|&k| keep[k]) {
        if !is_supported(&nodes[k]) {
            unsupported.push(UnsupportedOp::of(&nodes[k], &names[k]));
        }
        crate::subgraph::check_bodies(&nodes[k], &names[k], &mut unsupported)?;
    }
    if !unsupported.is_empty() {
        return Err(OnnxError::Unsupported(unsupported));
    }

    let used = used.into_iter().map(String::from).collect();
    Ok(Plan {
        names,
        inputs,
        sparse,
        selected,
        used,
        order,
    })
}

/// Builds the IR graph from a plan: inputs, the initializers read, nodes, outputs.
/// What [`build`] makes: the graph, the IR value of every ONNX value, and the string tables
/// of the graph outputs and of the graph inputs that hold strings.
type Built = (
    Graph,
    HashMap<String, Value>,
    BTreeMap<String, Vec<String>>,
    BTreeMap<String, Vec<String>>,
);

fn build(
    graph: &GraphProto,
    plan: &Plan<'_>,
    opset: i64,
    raw: &[Option<Storage>],
    base_dir: Option<&Path>,
    opts: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Built, OnnxError> {
    let Plan {
        names,
        inputs,
        sparse,
        selected,
        used,
        order,
    } = plan;
    let nodes = &graph.node;
    let mut g = Graph::new(if graph.name().is_empty() {
        "main"
    } else {
        graph.name()
    });
    let mut values: HashMap<String, Value> = HashMap::new();
    for (what, name) in opts
        .input_shapes
        .keys()
        .map(|n| ("input_shapes", n))
        .chain(opts.constant_inputs.keys().map(|n| ("constant_inputs", n)))
    {
        if !inputs.iter().any(|i| i.name() == name) {
            let all: Vec<&str> = inputs.iter().map(|i| i.name()).collect();
            return Err(OnnxError::Options(format!(
                "{what}: no graph input named \"{name}\" (inputs are: {})",
                all.join(", ")
            )));
        }
    }
    let mut strings: HashMap<String, Vec<String>> = HashMap::new();
    // Initializers stored as ONNX INT4 / UINT4 (held as I8 / U8, see `tensor.rs`).
    let mut four_bit: HashSet<String> = HashSet::new();
    let vocabularies = crate::strings::input_vocabularies(graph, inputs, order);
    for vi in inputs {
        let v = match opts.constant_inputs.get(vi.name()) {
            Some(t) => constant_input(&mut g, vi, t)?,
            None => match vocabularies.get(vi.name()) {
                // A string input: i64 indices into the strings the model compares it with.
                Some(vocab) => {
                    let ty = crate::strings::input_type(vi, opts.input_shapes.get(vi.name()))?;
                    strings.insert(vi.name().to_string(), vocab.clone());
                    g.add_input(vi.name(), ty)?
                }
                None => {
                    let ty = input_type(vi, opts.input_shapes.get(vi.name()))?;
                    g.add_input(vi.name(), ty)?
                }
            },
        };
        values.insert(vi.name().to_string(), v);
    }
    for (i, t) in graph.initializer.iter().enumerate() {
        if !used.contains(t.name()) {
            continue;
        }
        if t.data_type == Some(crate::proto::tensor_proto::DataType::String as i32) {
            let v = crate::strings::index_constant(&mut g, t, &mut strings)?;
            values.insert(t.name().to_string(), v);
            continue;
        }
        let tensor = match raw.get(i).cloned().flatten() {
            Some(data) => tensor_from_raw(t, data)?,
            None => tensor_from_proto(t, base_dir)?,
        };
        if crate::tensor::is_four_bit_int(t.data_type()) {
            four_bit.insert(t.name().to_string());
        }
        let v = add_initializer(&mut g, t, tensor)?;
        values.insert(t.name().to_string(), v);
    }
    if let Some(s) = sparse
        .iter()
        .find(|s| used.contains(**s) && !values.contains_key(**s))
    {
        return Err(OnnxError::tensor(
            s,
            "sparse initializers are not supported",
        ));
    }
    for &k in order {
        let mut cx = MapCx {
            opset,
            used,
            base_dir,
            warnings: &mut *warnings,
            strings: &mut strings,
            four_bit: &four_bit,
        };
        map_node(&mut g, &mut values, &nodes[k], &names[k], &mut cx)?;
    }
    let mut labels = BTreeMap::new();
    let string_inputs: BTreeMap<String, Vec<String>> = vocabularies.into_iter().collect();
    for o in selected {
        let v = *values
            .get(o)
            .ok_or_else(|| value_err("graph output", o, "was not imported"))?;
        g.set_output(o, v)?;
        if let Some(table) = strings.get(o) {
            labels.insert(o.clone(), table.clone());
        }
    }
    Ok((g, values, labels, string_inputs))
}

pub(crate) fn value_err(kind: &'static str, name: &str, msg: impl Into<String>) -> OnnxError {
    OnnxError::Value {
        kind,
        name: name.into(),
        msg: msg.into(),
    }
}

/// Kept nodes in topological order, ties broken by position in the model. On a cycle, the
/// nodes on one cycle in dataflow order.
pub(crate) fn topo_order(
    nodes: &[NodeProto],
    keep: &[bool],
    producer: &HashMap<&str, usize>,
) -> Result<Vec<usize>, Vec<usize>> {
    let preds = |k: usize| {
        crate::subgraph::node_refs(&nodes[k])
            .into_iter()
            .filter_map(|i| producer.get(i).copied())
            .filter(|&p| keep[p])
    };
    let mut indeg = vec![0usize; nodes.len()];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for k in (0..nodes.len()).filter(|&k| keep[k]) {
        for p in preds(k) {
            indeg[k] += 1;
            succs[p].push(k);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> = (0..nodes.len())
        .filter(|&k| keep[k] && indeg[k] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::new();
    while let Some(Reverse(k)) = ready.pop() {
        order.push(k);
        for &s in &succs[k] {
            indeg[s] -= 1;
            if indeg[s] == 0 {
                ready.push(Reverse(s));
            }
        }
    }
    if order.len() == keep.iter().filter(|&&k| k).count() {
        return Ok(order);
    }
    // Every node left has a predecessor left: walk predecessors until one repeats.
    let left = |k: usize| keep[k] && indeg[k] > 0;
    let start = (0..nodes.len()).find(|&k| left(k)).unwrap_or(0);
    let mut path = vec![start];
    let mut k = start;
    loop {
        let Some(p) = preds(k).find(|&p| left(p)) else {
            return Err(path);
        };
        if let Some(pos) = path.iter().position(|&q| q == p) {
            let mut cycle = path.split_off(pos);
            cycle.reverse();
            // Start at the node that comes first in the model, for a stable message.
            let first = cycle
                .iter()
                .enumerate()
                .min_by_key(|(_, k)| **k)
                .map_or(0, |(i, _)| i);
            cycle.rotate_left(first);
            return Err(cycle);
        }
        path.push(p);
        k = p;
    }
}

/// A graph input's IR type, with its dims replaced by an `input_shapes` entry.
fn input_type(vi: &ValueInfoProto, dims: Option<&Vec<u64>>) -> Result<TensorType, OnnxError> {
    let name = vi.name();
    let (code, declared) = value_info_parts(vi).map_err(|m| value_err("graph input", name, m))?;
    let dtype = dtype_from_onnx(code).map_err(|m| value_err("graph input", name, m))?;
    let shape = match (dims, declared) {
        (Some(d), Some(decl)) if d.len() != decl.len() => {
            return Err(OnnxError::Options(format!(
                "input_shapes: input \"{name}\" has rank {}, but {} dims were given ({d:?})",
                decl.len(),
                d.len()
            )));
        }
        (Some(d), _) => shape_of(d),
        (None, Some(decl)) => decl,
        (None, None) => {
            return Err(value_err(
                "graph input",
                name,
                "has no shape (unknown rank); give its dims in input_shapes",
            ));
        }
    };
    Ok(TensorType::new(dtype, shape))
}

/// A graph input frozen to a constant (checked against its declared type).
fn constant_input(g: &mut Graph, vi: &ValueInfoProto, t: &Tensor) -> Result<Value, OnnxError> {
    let name = vi.name();
    let (code, shape) = value_info_parts(vi).map_err(|m| value_err("graph input", name, m))?;
    let dtype = dtype_from_onnx(code).map_err(|m| value_err("graph input", name, m))?;
    let fits = dtype == t.dtype()
        && shape.as_ref().is_none_or(|s| {
            s.len() == t.shape().len()
                && s.iter()
                    .zip(t.shape())
                    .all(|(d, &n)| d.known().is_none_or(|k| k == n))
        });
    if !fits {
        let declared = shape.map_or_else(
            || format!("{dtype}[..]"),
            |s| TensorType::new(dtype, s).to_string(),
        );
        return Err(OnnxError::Options(format!(
            "constant_inputs: input \"{name}\" is declared {declared}, but the value is {}",
            t.ty()
        )));
    }
    g.add_node(name, Op::Constant { value: t.clone() }, &[])
        .map(|v| v[0])
        .map_err(OnnxError::from)
}

/// Float initializers become params (weights); integer, bool and FP8 ones become constants
/// (exporters use them as shape constants and quantized data).
fn add_initializer(g: &mut Graph, t: &TensorProto, tensor: Tensor) -> Result<Value, OnnxError> {
    if t.name().is_empty() {
        return Err(OnnxError::tensor("", "initializers must have a name"));
    }
    if matches!(
        tensor.dtype(),
        DType::F32 | DType::F16 | DType::BF16 | DType::F64
    ) {
        Ok(g.add_param(t.name(), tensor.ty(), Some(tensor))?)
    } else {
        let name = t.name();
        g.add_node(name, Op::Constant { value: tensor }, &[])
            .map(|v| v[0])
            .map_err(|e| OnnxError::tensor(name, e.to_string()))
    }
}

fn arity_text(r: &RangeInclusive<usize>) -> String {
    match (*r.start(), *r.end()) {
        (a, b) if a == b => format!("{a}"),
        (a, usize::MAX) => format!("at least {a}"),
        (a, b) => format!("{a} to {b}"),
    }
}

/// What every node mapping reads: the opset, the values the kept graph uses, where external
/// data lives, and where warnings go.
pub(crate) struct MapCx<'a> {
    pub(crate) opset: i64,
    pub(crate) used: &'a HashSet<String>,
    pub(crate) base_dir: Option<&'a Path>,
    pub(crate) warnings: &'a mut Vec<String>,
    /// Values that hold strings, as i64 indices into their table (`crate::strings`).
    pub(crate) strings: &'a mut HashMap<String, Vec<String>>,
    /// Initializers stored as ONNX INT4 / UINT4, which the IR holds as I8 / U8.
    pub(crate) four_bit: &'a HashSet<String>,
}

/// Maps one ONNX node through its builder and records its outputs.
pub(crate) fn map_node(
    g: &mut Graph,
    values: &mut HashMap<String, Value>,
    node: &NodeProto,
    name: &str,
    mcx: &mut MapCx<'_>,
) -> Result<(), OnnxError> {
    let (opset, used, base_dir) = (mcx.opset, mcx.used, mcx.base_dir);
    let warnings = &mut *mcx.warnings;
    let op_type = node.op_type();
    if is_default_domain(node.domain()) && op_type == "Scan" {
        return crate::scan::map_scan(g, values, node, name, mcx);
    }
    if is_default_domain(node.domain()) && op_type == "If" {
        return crate::if_node::map_if(g, values, node, name, mcx);
    }
    let err = |msg: String| OnnxError::node(name, op_type, msg);
    let (build, arity) =
        lookup_node(node.domain(), op_type).ok_or_else(|| err("op is not supported".into()))?;
    // The schema table is ai.onnx's; ai.onnx.ml builders check their own attributes.
    if is_default_domain(node.domain()) {
        for w in crate::ops::schema::check_attrs(op_type, opset, &node.attribute).map_err(err)? {
            warnings.push(format!("node \"{name}\" ({op_type}): {w}"));
        }
        crate::ops::old_forms::check(op_type, opset, &node.attribute).map_err(err)?;
    }
    let given = node
        .input
        .iter()
        .rposition(|i| !i.is_empty())
        .map_or(0, |p| p + 1);
    if !arity.contains(&given) {
        return Err(err(format!(
            "expects {} input(s), got {given}",
            arity_text(&arity)
        )));
    }
    let mut inputs = Vec::with_capacity(given);
    for i in &node.input[..given] {
        if i.is_empty() {
            inputs.push(None);
            continue;
        }
        let v = values
            .get(i)
            .copied()
            .ok_or_else(|| OnnxError::MissingInput {
                node: name.into(),
                op_type: op_type.into(),
                value: i.clone(),
            })?;
        inputs.push(Some(v));
    }
    let used_outputs = node
        .output
        .iter()
        .map(|o| !o.is_empty() && used.contains(o.as_str()))
        .collect();
    let passed = crate::strings::check_inputs(node, name, mcx.strings)?;
    let mut cx = NodeCx::new(g, node, name, opset, inputs, used_outputs, base_dir);
    cx.input_tables = node
        .input
        .iter()
        .map(|i| mcx.strings.get(i).cloned())
        .collect();
    cx.four_bit_inputs = node
        .input
        .iter()
        .map(|i| mcx.four_bit.contains(i))
        .collect();
    let outs = build(&mut cx)?;
    for (slot, table) in std::mem::take(&mut cx.labels) {
        mcx.strings.insert(node.output[slot].clone(), table);
    }
    if let (Some(table), Some(out)) = (passed, node.output.first()) {
        mcx.strings.insert(out.clone(), table);
    }
    for (slot, o) in node
        .output
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.is_empty())
    {
        match outs.get(slot) {
            Some(&v) => {
                values.insert(o.clone(), v);
            }
            None if used.contains(o.as_str()) => {
                return Err(err(format!(
                    "output {slot} (\"{o}\") is used, but the importer does not produce it"
                )));
            }
            None => {}
        }
    }
    Ok(())
}
