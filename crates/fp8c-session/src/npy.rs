//! NumPy `.npy` / `.npz` files ⇄ IR tensors, through the `npyz` crate (arrays) and the `zip`
//! crate (archives): what `fp8c run` reads inputs from and writes outputs to.
//!
//! Keys are kept verbatim (ONNX names may hold `/` or `:`; the member for key K is `K.npy`,
//! as `np.savez` writes it). Written archives are uncompressed and deterministic (fixed
//! timestamps, arrays in the order given); reading accepts `np.savez_compressed` too.
//!
//! Element types: f64, f32, f16, i64, i32, i16, i8, u8 and bool map one to one. On writing,
//! bf16 is widened to f32 (exact) and FP8 is written as its raw codes (u8), since NumPy has
//! neither type; [`write_npz`] reports which arrays it converted.
//!
//! A corrupt file is an `Err` naming the file (and the key), never a panic.

use crate::error::{Context, Error, Result, bail};
use fp8c_ir::{DType, Tensor};
use npyz::{TypeChar, WriterBuilder};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// Runs a parser of untrusted bytes, turning a panic inside it into an error (npyz multiplies
/// header dims without overflow checks, which panics in debug builds on absurd shapes).
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.unwrap_or_else(|_| {
        Err(Error::invalid(
            "the file is corrupt (its header cannot be interpreted)",
        ))
    })
}

/// Parses one `.npy` image.
pub fn tensor_from_npy(bytes: &[u8]) -> Result<Tensor> {
    guarded(|| parse_npy(bytes))
}

/// An `.npy` image's array (its data unread), shape, element count and data bytes.
type Opened<'a> = (npyz::NpyFile<&'a [u8]>, Vec<u64>, usize, &'a [u8]);

fn open_npy(bytes: &[u8]) -> Result<Opened<'_>> {
    let mut data = bytes;
    let header = npyz::NpyHeader::from_reader(&mut data)
        .map_err(|e| Error::invalid(format!("not a valid .npy array: {e}")))?;
    let npy = npyz::NpyFile::with_header(header, data);
    let shape = npy.shape().to_vec();
    let n = fp8c_ir::checked_numel(&shape)
        .ok_or_else(|| Error::invalid(format!("shape {shape:?} is too large")))?
        as usize;
    Ok((npy, shape, n, data))
}

fn parse_npy(bytes: &[u8]) -> Result<Tensor> {
    let (npy, shape, n, data) = open_npy(bytes)?;
    let npyz::DType::Plain(ts) = npy.dtype() else {
        bail!(
            "dtype {} is not supported (structured or array dtypes)",
            npy.dtype().descr()
        );
    };
    let (ch, size) = (ts.type_char(), ts.size_field());
    let dtype = match (ch, size) {
        (TypeChar::Float, 8) => DType::F64,
        (TypeChar::Float, 4) => DType::F32,
        (TypeChar::Float, 2) => DType::F16,
        (TypeChar::Int, 8) => DType::I64,
        (TypeChar::Int, 4) => DType::I32,
        (TypeChar::Int, 2) => DType::I16,
        (TypeChar::Int, 1) => DType::I8,
        (TypeChar::Uint, 1) => DType::U8,
        (TypeChar::Uint, 2) => DType::U16,
        (TypeChar::Uint, 4) => DType::U32,
        (TypeChar::Uint, 8) => DType::U64,
        (TypeChar::Bool, 1) => DType::Bool,
        _ => {
            bail!(
                "dtype `{ts}` is not supported (use float64/32/16, int64/32/16/8, uint64/32/16/8 or bool)"
            )
        }
    };
    // The data must be there before anything is allocated for it.
    if (n as u64).saturating_mul(dtype.size() as u64) > data.len() as u64 {
        bail!(
            "the file is truncated: shape {shape:?} of {} needs {} bytes of data, the file has {}",
            dtype,
            n * dtype.size(),
            data.len()
        );
    }
    let fortran = npy.order() == npyz::Order::Fortran;
    let io = |e: std::io::Error| Error::invalid(format!("cannot read the array data: {e}"));
    let data: Vec<u8> = match dtype {
        DType::F64 => le(npy.into_vec::<f64>().map_err(io)?, f64::to_le_bytes),
        DType::F32 => le(npy.into_vec::<f32>().map_err(io)?, f32::to_le_bytes),
        DType::F16 => le(
            npy.into_vec::<half::f16>().map_err(io)?,
            half::f16::to_le_bytes,
        ),
        DType::I64 => le(npy.into_vec::<i64>().map_err(io)?, i64::to_le_bytes),
        DType::I32 => le(npy.into_vec::<i32>().map_err(io)?, i32::to_le_bytes),
        DType::I16 => le(npy.into_vec::<i16>().map_err(io)?, i16::to_le_bytes),
        DType::I8 => le(npy.into_vec::<i8>().map_err(io)?, i8::to_le_bytes),
        DType::U8 => npy.into_vec::<u8>().map_err(io)?,
        DType::U16 => le(npy.into_vec::<u16>().map_err(io)?, u16::to_le_bytes),
        DType::U32 => le(npy.into_vec::<u32>().map_err(io)?, u32::to_le_bytes),
        DType::U64 => le(npy.into_vec::<u64>().map_err(io)?, u64::to_le_bytes),
        DType::Bool => npy
            .into_vec::<bool>()
            .map_err(io)?
            .into_iter()
            .map(u8::from)
            .collect(),
        _ => unreachable!("mapped above"),
    };
    if !fortran || shape.len() < 2 {
        return Tensor::from_bytes(dtype, shape, data).map_err(Error::invalid);
    }
    // Fortran order: the data is the C-order array of the reversed shape; transpose it back.
    let rev: Vec<u64> = shape.iter().rev().copied().collect();
    let t = Tensor::from_bytes(dtype, rev, data).map_err(Error::invalid)?;
    let perm: Vec<i64> = (0..shape.len() as i64).rev().collect();
    let mut out = fp8c_eval::eval_op(&fp8c_ir::Op::Transpose { perm }, &[&t])
        .map_err(|e| Error::invalid(format!("cannot reorder the Fortran-ordered array: {e}")))?;
    Ok(out.remove(0))
}

fn le<T: Copy, const N: usize>(v: Vec<T>, f: fn(T) -> [u8; N]) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}

/// The most bytes of array data one `.npy` file or `.npz` archive may hold once decompressed
/// (2 GiB, what a CPU run or a training set of this scale needs): checked against the sizes a
/// file declares before anything is allocated, so a 4 MB archive claiming a 4 GiB array is
/// refused, not inflated into memory it would take twice over.
pub const MAX_ARRAY_BYTES: u64 = 2 << 30;

/// Opens an input file, refusing anything but a regular file (`/dev/zero`, a FIFO).
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    let m = std::fs::metadata(path)
        .map_err(|e| Error::io(format_args!("{}: cannot read", path.display()), e))?;
    if !m.is_file() {
        // Says which: a directory, or a FIFO, device or socket.
        crate::files::check_input_file("", path)?;
    }
    std::fs::File::open(path)
        .map_err(|e| Error::io(format_args!("{}: cannot open", path.display()), e))
}

/// Reads a `.npy` file.
pub fn read_npy(path: &Path) -> Result<Tensor> {
    let mut f = open_regular(path)?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_ARRAY_BYTES + (1 << 20) {
        return Err(Error::invalid(format!(
            "{}: {len} bytes is more than the {MAX_ARRAY_BYTES} bytes of array data allowed",
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    tensor_from_npy(&bytes).with_context(|| format!("{}", path.display()))
}

/// Reads every array of a `.npz` file, in archive order. The archive's declared sizes are
/// checked against [`MAX_ARRAY_BYTES`] before any member is inflated, and a member that
/// inflates past its declared size is refused.
pub fn read_npz(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let f = open_regular(path)?;
    read_npz_from(std::io::BufReader::new(f), path)
}

/// [`read_npz`] for a model with string inputs (see `crate::Model::string_inputs`): a numpy
/// string array (`<U`) under one of their names becomes i64 indices into its vocabulary (a
/// string outside it, `vocabulary.len()`).
pub fn read_npz_with(
    path: &Path,
    vocabularies: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<(String, Tensor)>> {
    let f = open_regular(path)?;
    read_npz_impl(std::io::BufReader::new(f), path, vocabularies)
}

/// [`read_npz`] over any seekable reader (`path` names it in messages).
pub fn read_npz_from(
    reader: impl std::io::Read + std::io::Seek,
    path: &Path,
) -> Result<Vec<(String, Tensor)>> {
    read_npz_impl(reader, path, &BTreeMap::new())
}

fn read_npz_impl(
    reader: impl std::io::Read + std::io::Seek,
    path: &Path,
    vocabularies: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<(String, Tensor)>> {
    let mut zip = zip::ZipArchive::new(reader).map_err(|e| {
        Error::invalid(format!(
            "{}: not a valid .npz (zip) archive: {e}",
            path.display()
        ))
    })?;
    let mut declared = 0u64;
    for i in 0..zip.len() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| Error::invalid(format!("{}: member {i}: {e}", path.display())))?;
        declared = declared.saturating_add(entry.size());
    }
    if declared > MAX_ARRAY_BYTES {
        return Err(Error::invalid(format!(
            "{}: the archive declares {declared} bytes of arrays, more than the {MAX_ARRAY_BYTES} allowed",
            path.display()
        )));
    }
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let entry = zip
            .by_index(i)
            .map_err(|e| Error::invalid(format!("{}: member {i}: {e}", path.display())))?;
        let member = entry.name().to_string();
        let Some(key) = member.strip_suffix(".npy") else {
            continue;
        };
        let key = key.to_string();
        let size = entry.size();
        let mut bytes = Vec::with_capacity(size.min(1 << 30) as usize);
        // Never inflate past the declared size (a lying header is an error, not an allocation).
        let mut limited = entry.take(size + 1);
        limited.read_to_end(&mut bytes).map_err(|e| {
            Error::invalid(format!(
                "{}: array \"{key}\": cannot read: {e}",
                path.display()
            ))
        })?;
        if bytes.len() as u64 > size {
            return Err(Error::invalid(format!(
                "{}: array \"{key}\" inflates past the size the archive declares ({size} bytes)",
                path.display()
            )));
        }
        let t = match vocabularies.get(&key) {
            Some(vocab) => indices_from_npy(&bytes, vocab),
            None => tensor_from_npy(&bytes),
        }
        .with_context(|| format!("{}: array \"{key}\"", path.display()))?;
        out.push((key, t));
    }
    Ok(out)
}

/// A numpy unicode array (`<U`) as i64 indices into `vocab` (`vocab.len()` for a string
/// outside it).
pub fn indices_from_npy(bytes: &[u8], vocab: &[String]) -> Result<Tensor> {
    guarded(|| {
        let (npy, shape, n, body) = open_npy(bytes)?;
        let descr = npy.dtype().descr();
        let npyz::DType::Plain(ts) = npy.dtype() else {
            bail!("dtype {descr} is not a string array (this input holds strings)");
        };
        if ts.type_char() != TypeChar::UnicodeStr || descr.contains('>') {
            bail!("dtype {descr} is not a string array (`<U`; this input holds strings)");
        }
        let width = ts.size_field() as usize;
        if body.len() < n * width * 4 {
            bail!("the array is truncated");
        }
        let index: Vec<i64> = (0..n)
            .map(|i| {
                let s: String = body[i * width * 4..][..width * 4]
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .take_while(|&c| c != 0)
                    .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
                    .collect();
                vocab.iter().position(|v| *v == s).unwrap_or(vocab.len()) as i64
            })
            .collect();
        Ok(Tensor::from_i64(shape, &index))
    })
}

/// The most dimensions an array written as `.npy` may have: NumPy's `NPY_MAXDIMS` (64 since
/// NumPy 2.0). NumPy cannot load more, and npyz's version-1 header (at most 65535 bytes)
/// would not hold the shape of a few thousand dims.
pub const MAX_NPY_RANK: usize = 64;

/// Checks, before anything is built, that an array of `shape` can be written as `.npy`
/// ([`MAX_NPY_RANK`]); the error names the rank and the limit.
pub fn check_npy_shape(shape: &[u64]) -> Result<()> {
    if shape.len() > MAX_NPY_RANK {
        bail!(
            "its rank {} is more than the {MAX_NPY_RANK} dimensions a NumPy array may have (NPY_MAXDIMS); NumPy could not read it",
            shape.len()
        );
    }
    Ok(())
}

/// One array as a `.npy` image; the second value says what was converted, if anything.
pub fn npy_bytes(t: &Tensor) -> Result<(Vec<u8>, Option<&'static str>)> {
    check_npy_shape(t.shape())?;
    let shape = t.shape().to_vec();
    let mut buf = Vec::new();
    fn put<T: npyz::AutoSerialize>(buf: &mut Vec<u8>, shape: &[u64], v: Vec<T>) -> Result<()> {
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(shape)
            .writer(buf)
            .begin_nd()?;
        w.extend(v)?;
        w.finish()?;
        Ok(())
    }
    let ints = || t.to_i64_vec().map_err(Error::invalid);
    let mut note = None;
    match t.dtype() {
        DType::F64 => put(&mut buf, &shape, t.to_f64_vec().map_err(Error::invalid)?)?,
        DType::F32 => put(&mut buf, &shape, t.to_f32_vec().map_err(Error::invalid)?)?,
        DType::F16 => {
            let v: Vec<half::f16> = t
                .bytes()
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]))
                .collect();
            put(&mut buf, &shape, v)?
        }
        DType::BF16 => {
            note = Some("bf16 written as float32 (exact)");
            put(&mut buf, &shape, t.to_f32_vec().map_err(Error::invalid)?)?
        }
        DType::F8E4M3
        | DType::F8E5M2
        | DType::F8E4M3Fnuz
        | DType::F8E5M2Fnuz
        | DType::F8E8M0
        | DType::F4E2M1 => {
            note = Some("FP8/FP4 written as its raw uint8 codes (FP4: one per byte)");
            put(&mut buf, &shape, t.bytes().to_vec())?
        }
        DType::U16 => put(
            &mut buf,
            &shape,
            t.as_slice::<u16>().map_err(Error::invalid)?.to_vec(),
        )?,
        DType::U32 => put(
            &mut buf,
            &shape,
            t.as_slice::<u32>().map_err(Error::invalid)?.to_vec(),
        )?,
        DType::U64 => put(
            &mut buf,
            &shape,
            t.as_slice::<u64>().map_err(Error::invalid)?.to_vec(),
        )?,
        DType::I64 => put(&mut buf, &shape, ints()?)?,
        DType::I32 => put(
            &mut buf,
            &shape,
            ints()?.into_iter().map(|v| v as i32).collect(),
        )?,
        DType::I16 => put(
            &mut buf,
            &shape,
            ints()?.into_iter().map(|v| v as i16).collect(),
        )?,
        DType::I8 => put(
            &mut buf,
            &shape,
            ints()?.into_iter().map(|v| v as i8).collect(),
        )?,
        DType::U8 => put(&mut buf, &shape, t.bytes().to_vec())?,
        DType::Bool => put(
            &mut buf,
            &shape,
            t.bytes().iter().map(|&b| b != 0).collect::<Vec<bool>>(),
        )?,
    }
    Ok((buf, note))
}

/// `(key, note)` for every array that had to be converted on writing.
pub type Conversions = Vec<(String, &'static str)>;

/// The bytes of an uncompressed `.npz` archive of `arrays`, and the arrays that had to be
/// converted (see the module docs).
pub fn npz_bytes(arrays: &[(&str, &Tensor)]) -> Result<(Vec<u8>, Conversions)> {
    npz_labelled_bytes(arrays, &BTreeMap::new())
}

/// [`npz_bytes`] with the arrays named in `labels` written as the strings their i64 indices
/// stand for (see [`write_npz_labelled`]).
fn npz_labelled_bytes(
    arrays: &[(&str, &Tensor)],
    labels: &BTreeMap<String, Vec<String>>,
) -> Result<(Vec<u8>, Conversions)> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    let mut notes = Vec::new();
    // Every array is checked before the archive is built (a late failure wastes nothing).
    for (key, t) in arrays {
        check_npy_shape(t.shape()).with_context(|| format!("array \"{key}\""))?;
    }
    for (key, t) in arrays {
        let bytes = match labels.get(*key) {
            Some(table) => npy_strings(t.shape(), &label_strings(key, t, table)?),
            None => {
                let (bytes, note) = npy_bytes(t).with_context(|| format!("array \"{key}\""))?;
                if let Some(n) = note {
                    notes.push((key.to_string(), n));
                }
                bytes
            }
        };
        zip.start_file(format!("{key}.npy"), opts)
            .and_then(|()| zip.write_all(&bytes).map_err(Into::into))
            .with_context(|| format!("array \"{key}\""))?;
    }
    let cursor = zip.finish().context("cannot finish the archive")?;
    Ok((cursor.into_inner(), notes))
}

/// Writes `arrays` to an uncompressed `.npz` file (checked and atomic, see
/// [`crate::files::Output`]); returns `(key, note)` for every array that had to be converted.
pub fn write_npz(path: &Path, arrays: &[(&str, &Tensor)]) -> Result<Vec<(String, &'static str)>> {
    write_npz_labelled(path, arrays, &BTreeMap::new())
}

/// A `.npy` image of strings as numpy's fixed-width unicode (`<U{width}`, UTF-32 code points,
/// zero-padded), the array type onnxruntime returns string tensors as.
pub fn npy_strings(shape: &[u64], strings: &[&str]) -> Vec<u8> {
    let width = strings
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0)
        .max(1);
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header =
        format!("{{'descr': '<U{width}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + newline: a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for s in strings {
        let mut n = 0;
        for c in s.chars() {
            out.extend_from_slice(&u32::from(c).to_le_bytes());
            n += 1;
        }
        out.resize(out.len() + 4 * (width - n), 0);
    }
    out
}

/// [`write_npz`] where the arrays named in `labels` are i64 indices into those string labels
/// (a model's string outputs, see [`crate::Model::string_outputs`]): they are written as the
/// strings. An index outside its labels is an error naming the array.
pub fn write_npz_labelled(
    path: &Path,
    arrays: &[(&str, &Tensor)],
    labels: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<(String, &'static str)>> {
    let out = crate::files::Output::check("", path, &[])?;
    let (bytes, notes) = npz_labelled_bytes(arrays, labels).with_context(|| path.display())?;
    out.write_bytes(&bytes)?;
    Ok(notes)
}

/// The strings the i64 indices of `t` (the array `key`) stand for in `table`; an index
/// outside it is an error naming the array.
pub fn label_strings<'a>(key: &str, t: &Tensor, table: &'a [String]) -> Result<Vec<&'a str>> {
    let index = t.to_i64_vec().map_err(Error::invalid)?;
    index
        .iter()
        .map(|&i| {
            usize::try_from(i)
                .ok()
                .and_then(|i| table.get(i))
                .map(String::as_str)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "array \"{key}\": label index {i} is outside its {} labels",
                        table.len()
                    ))
                })
        })
        .collect()
}
