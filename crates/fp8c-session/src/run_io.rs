//! The files a run reads and writes: inputs from a `.npz` archive, single `.npy` files and an
//! ONNX backend-test directory (`input_0.pb`, ...), each checked against the model's declared
//! interface (errors name the file and the input); outputs to a `.npz` archive and to an
//! `output_K.pb` directory, in program order, string class labels written as strings.

use crate::error::{Context, Error, Result, bail};
use crate::model::Model;
use crate::npy;
use fp8c_ir::Tensor;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a run's inputs come from.
#[derive(Clone, Debug, Default)]
pub struct InputSources {
    /// A `.npz` archive, keys = input names (`--inputs`).
    pub npz: Option<PathBuf>,
    /// `NAME=FILE.npy` (`--input`, repeatable).
    pub npy: Vec<String>,
    /// An ONNX backend-test directory: `input_0.pb`, ... in the graph's input order (`--data`).
    pub pb_dir: Option<PathBuf>,
}

/// Reads every input source, checking names and types against `model`; every declared
/// input must be given exactly once.
pub fn read_inputs(src: &InputSources, model: &Model) -> Result<BTreeMap<String, Tensor>> {
    let mut given: BTreeMap<String, (Tensor, String)> = BTreeMap::new();
    let mut add = |name: String, t: Tensor, from: String| -> Result<()> {
        let t = model.conform_input(&name, t).context(from.clone())?;
        if let Some((_, prev)) = given.get(&name) {
            bail!("input \"{name}\" is given twice: in {prev} and in {from}");
        }
        given.insert(name, (t, from));
        Ok(())
    };
    if let Some(path) = &src.npz {
        for (k, t) in npy::read_npz_with(path, model.string_inputs())? {
            add(k, t, path.display().to_string())?;
        }
    }
    for spec in &src.npy {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| Error::Invalid(format!("--input `{spec}`: expected NAME=FILE.npy")))?;
        let path = Path::new(file);
        let t = match model.string_inputs().get(name) {
            Some(vocab) => std::fs::read(path)
                .map_err(|e| Error::io(format_args!("{}: cannot read", path.display()), e))
                .and_then(|b| npy::indices_from_npy(&b, vocab))
                .with_context(|| format!("input \"{name}\": {}", path.display()))?,
            None => npy::read_npy(path).with_context(|| format!("input \"{name}\""))?,
        };
        add(name.to_string(), t, path.display().to_string())?;
    }
    let declared = model.inputs();
    if let Some(dir) = &src.pb_dir {
        if !dir.is_dir() {
            bail!("--data {}: not a directory", dir.display());
        }
        for (k, input) in declared.iter().enumerate() {
            let path = dir.join(format!("input_{k}.pb"));
            if !path.is_file() {
                bail!(
                    "--data {}: input_{k}.pb (for input \"{}\") is missing",
                    dir.display(),
                    input.name
                );
            }
            let t = fp8c_onnx::load_tensor_pb(&path)
                .map_err(Error::from)
                .with_context(|| format!("input \"{}\"", input.name))?;
            add(input.name.clone(), t, path.display().to_string())?;
        }
    }
    for input in &declared {
        if !given.contains_key(&input.name) {
            bail!(
                "input \"{name}\" ({}) is missing: give it with --inputs FILE.npz, --input {name}=FILE.npy or --data DIR",
                input.ty,
                name = input.name
            );
        }
    }
    Ok(given.into_iter().map(|(k, (t, _))| (k, t)).collect())
}

/// Writes `outs` (in the order of `order`, the program's outputs) to `npz` and as `.pb`
/// files into `pb_dir`; outputs with class labels (`labels`) are written as their strings.
/// Returns notes about what was written (`output "label": ...`).
pub fn write_outputs(
    order: &[String],
    outs: &BTreeMap<String, Tensor>,
    labels: &BTreeMap<String, Vec<String>>,
    npz: Option<&Path>,
    pb_dir: Option<&Path>,
) -> Result<Vec<String>> {
    let ordered: Vec<(&str, &Tensor)> = order
        .iter()
        .filter_map(|n| outs.get(n).map(|t| (n.as_str(), t)))
        .collect();
    let mut notes = Vec::new();
    if let Some(path) = npz {
        for (key, note) in npy::write_npz_labelled(path, &ordered, labels)? {
            notes.push(format!("output \"{key}\": {note}"));
        }
    }
    if let Some(dir) = pb_dir {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::io(
                format_args!("{}: cannot create the directory", dir.display()),
                e,
            )
        })?;
        for (k, (name, t)) in ordered.iter().enumerate() {
            let path = dir.join(format!("output_{k}.pb"));
            let bytes = match labels.get(*name) {
                Some(table) => {
                    let strings = npy::label_strings(name, t, table)?;
                    fp8c_onnx::string_tensor_pb_bytes(name, t.shape(), &strings)
                }
                None => fp8c_onnx::tensor_pb_bytes(name, t),
            };
            crate::files::Output::check("--out-dir", &path, &[])?
                .write_bytes(&bytes)
                .with_context(|| format!("output \"{name}\""))?;
        }
    }
    Ok(notes)
}
