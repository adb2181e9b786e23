//! TreeEnsembleRegressor and TreeEnsembleClassifier (ai.onnx.ml 1 and 3: every float list may
//! come as its v3 `*_as_tensor` form), the decision trees, random forests, extra trees and
//! gradient boosting that skl2onnx, onnxmltools and others export, with onnxruntime's CPU
//! kernel (`tree_ensemble_common.h`, `tree_ensemble_aggregator.h`) as the reference for every
//! detail.
//!
//! Lowering, a vectorised walk of every tree at once (no new IR op): the nodes of the T trees
//! form one table of M entries (feature, threshold, true child, false child; a leaf is its own
//! child). `node [N, T]` starts at each tree's root and takes D steps (D = the longest
//! root-to-leaf path): `x = GatherElements(X, feature[node])`, then
//! `node = Where(x <mode> threshold[node], true[node], false[node])`, NaN features following
//! `nodes_missing_value_tracks_true`. The leaves' values, a dense `[M, E]` table, are gathered
//! by the leaves reached (`[N, T, E]`) and combined over T: sums as a CumSum (tree order in f32,
//! as onnxruntime adds, so ties between classes break alike), MIN/MAX as reductions; then the
//! base values, the post transform and the labels, with onnxruntime's rules for one target and
//! for two classes.

use super::{Labels, PostTransform, features};
use crate::OnnxError;
use crate::ops::NodeCx;
use fp8c_ir::{DType, Op, Tensor, Value};
use std::collections::{HashMap, HashSet};

/// A branch node's test `x <mode> threshold`; true goes to the true child.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
}

impl Mode {
    /// A `nodes_modes` entry: `Some(None)` for LEAF, `None` if unknown.
    fn parse(s: &str) -> Option<Option<Mode>> {
        Some(Some(match s {
            "BRANCH_LEQ" => Mode::Leq,
            "BRANCH_LT" => Mode::Lt,
            "BRANCH_GTE" => Mode::Gte,
            "BRANCH_GT" => Mode::Gt,
            "BRANCH_EQ" => Mode::Eq,
            "BRANCH_NEQ" => Mode::Neq,
            "LEAF" => return Some(None),
            _ => return None,
        }))
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Leq => "leq",
            Mode::Lt => "lt",
            Mode::Gte => "gte",
            Mode::Gt => "gt",
            Mode::Eq => "eq",
            Mode::Neq => "neq",
        }
    }

    /// The f32 threshold that gives every f32 x the same outcome as the f64 threshold `t` (a
    /// double `nodes_values_as_tensor`; f32 values are kept): rounded down for `<=` and `>`, up
    /// for `<` and `>=`, NaN (never equal) for `==`/`!=` when no f32 equals `t`.
    fn threshold(self, t: f64) -> f32 {
        let n = t as f32;
        if t.is_nan() || f64::from(n) == t {
            return n;
        }
        match self {
            Mode::Leq | Mode::Gt if f64::from(n) > t => n.next_down(),
            Mode::Lt | Mode::Gte if f64::from(n) < t => n.next_up(),
            Mode::Eq | Mode::Neq => f32::NAN,
            _ => n,
        }
    }

    /// `x <mode> t` (bool, broadcast).
    fn test(
        self,
        cx: &mut NodeCx<'_>,
        step: usize,
        x: Value,
        t: Value,
    ) -> Result<Value, OnnxError> {
        let op = match self {
            Mode::Leq => Op::LessOrEqual,
            Mode::Lt => Op::Less,
            Mode::Gte => Op::GreaterOrEqual,
            Mode::Gt => Op::Greater,
            Mode::Eq | Mode::Neq => Op::Equal,
        };
        let r = cx.add_helper(&format!("{}_{step}", self.name()), op, &[x, t])?;
        if self == Mode::Neq {
            cx.add_helper(&format!("neq_{step}"), Op::Not, &[r])
        } else {
            Ok(r)
        }
    }
}

/// A float-list attribute, from `name` or from its v3 form `name_as_tensor` (float or double),
/// as f64; `None` if neither is given (or both are empty).
fn floats(cx: &NodeCx<'_>, name: &str) -> Result<Option<Vec<f64>>, OnnxError> {
    let plain = cx.attr_floats(name).filter(|v| !v.is_empty());
    let tname = format!("{name}_as_tensor");
    let tensor = match cx.attr_tensor(&tname)? {
        Some(t) if !t.is_empty() => Some(
            t.to_f64_vec()
                .map_err(|e| cx.err(format!("attribute `{tname}`: {e}")))?,
        ),
        _ => None,
    };
    match (plain, tensor) {
        (Some(_), Some(_)) => Err(cx.err(format!(
            "both `{name}` and `{tname}` are given; the node must have one"
        ))),
        (Some(p), None) => Ok(Some(p.into_iter().map(f64::from).collect())),
        (None, t) => Ok(t),
    }
}

/// The trees, renumbered into one table (index = position in the `nodes_*` lists).
struct Forest {
    /// Each node's test; `None` for a leaf.
    mode: Vec<Option<Mode>>,
    /// Tested feature (0 for a leaf).
    feature: Vec<i64>,
    /// Threshold as f32 (see [`Mode::threshold`]; 0 for a leaf).
    threshold: Vec<f32>,
    /// True and false children as table indices; a leaf points to itself.
    yes: Vec<i64>,
    no: Vec<i64>,
    /// A NaN feature goes to the true child (`nodes_missing_value_tracks_true` = 1).
    nan_yes: Vec<bool>,
    /// A leaf's own `nodes_values` entry (onnxruntime's one-target value of a weightless leaf).
    value: Vec<f64>,
    /// Each tree's root: the first node listed for it.
    roots: Vec<usize>,
    /// The leaves each tree can reach.
    leaves: Vec<Vec<usize>>,
    /// The longest root-to-leaf path (edges).
    depth: usize,
    /// (tree id, node id) → table index.
    index: HashMap<(i64, i64), usize>,
}

impl Forest {
    /// Reads the `nodes_*` attributes; `f` is X's feature count.
    fn read(cx: &NodeCx<'_>, f: u64) -> Result<Self, OnnxError> {
        let ints = |name: &str| cx.attr_ints(name).unwrap_or_default();
        let tree = ints("nodes_treeids");
        let id = ints("nodes_nodeids");
        let feat = ints("nodes_featureids");
        let yes_id = ints("nodes_truenodeids");
        let no_id = ints("nodes_falsenodeids");
        let missing = ints("nodes_missing_value_tracks_true");
        let modes = cx.attr_strings("nodes_modes")?.unwrap_or_default();
        let values = floats(cx, "nodes_values")?.unwrap_or_default();
        let m = tree.len();
        if m == 0 {
            return Err(cx.err("the ensemble has no nodes (`nodes_treeids` is empty)"));
        }
        for (name, len) in [
            ("nodes_nodeids", id.len()),
            ("nodes_featureids", feat.len()),
            ("nodes_modes", modes.len()),
            ("nodes_values", values.len()),
            ("nodes_truenodeids", yes_id.len()),
            ("nodes_falsenodeids", no_id.len()),
        ] {
            if len != m {
                return Err(cx.err(format!(
                    "`{name}` has {len} entries for the {m} nodes of `nodes_treeids`"
                )));
            }
        }
        let mut index = HashMap::with_capacity(m);
        for i in 0..m {
            if index.insert((tree[i], id[i]), i).is_some() {
                return Err(cx.err(format!(
                    "node {} of tree {} is listed twice",
                    id[i], tree[i]
                )));
            }
        }
        // onnxruntime takes each run of equal tree ids as one tree rooted at its first node; a
        // tree listed in two runs would be walked twice from a wrong root.
        let mut roots = Vec::new();
        let mut seen = HashSet::new();
        for i in 0..m {
            if i == 0 || tree[i] != tree[i - 1] {
                if !seen.insert(tree[i]) {
                    return Err(cx.err(format!(
                        "the nodes of tree {} are not listed together (onnxruntime would start \
                         another tree at its node {})",
                        tree[i], id[i]
                    )));
                }
                roots.push(i);
            }
        }
        let mut fo = Forest {
            mode: Vec::with_capacity(m),
            feature: vec![0; m],
            threshold: vec![0.0; m],
            yes: (0..m as i64).collect(),
            no: (0..m as i64).collect(),
            nan_yes: vec![false; m],
            value: values.clone(),
            roots,
            leaves: Vec::new(),
            depth: 0,
            index,
        };
        for i in 0..m {
            let mode = Mode::parse(&modes[i]).ok_or_else(|| {
                cx.err(format!(
                    "node {} of tree {}: mode \"{}\" is not one of BRANCH_LEQ, BRANCH_LT, \
                     BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, LEAF",
                    id[i], tree[i], modes[i]
                ))
            })?;
            fo.mode.push(mode);
            let Some(mode) = mode else { continue };
            if feat[i] < 0 || feat[i] as u64 >= f {
                return Err(cx.err(format!(
                    "node {} of tree {} tests feature {}, but X has {f} features",
                    id[i], tree[i], feat[i]
                )));
            }
            let child = |which: &str, c: i64| {
                fo.index.get(&(tree[i], c)).copied().ok_or_else(|| {
                    cx.err(format!(
                        "node {} of tree {}: its {which} child {c} is not a node of the tree",
                        id[i], tree[i]
                    ))
                })
            };
            let (y, n) = (child("true", yes_id[i])?, child("false", no_id[i])?);
            fo.yes[i] = y as i64;
            fo.no[i] = n as i64;
            fo.feature[i] = feat[i];
            fo.threshold[i] = mode.threshold(values[i]);
            fo.nan_yes[i] = missing.get(i) == Some(&1);
        }
        fo.measure(cx, &tree, &id)?;
        Ok(fo)
    }

    /// Sets `depth` and `leaves`; errors on a cycle (onnxruntime would loop forever).
    fn measure(&mut self, cx: &NodeCx<'_>, tree: &[i64], id: &[i64]) -> Result<(), OnnxError> {
        let m = self.mode.len();
        // 0: not seen, 1: on the current path, 2: done.
        let mut state = vec![0u8; m];
        let mut height = vec![0usize; m];
        let mut mark = vec![usize::MAX; m];
        let cycle = |n: usize| {
            cx.err(format!(
                "tree {} has a cycle through its node {}",
                tree[n], id[n]
            ))
        };
        for (t, &root) in self.roots.iter().enumerate() {
            let mut leaves = Vec::new();
            let mut stack = vec![(root, false)];
            while let Some((n, done)) = stack.pop() {
                let kids = [self.yes[n] as usize, self.no[n] as usize];
                let leaf = self.mode[n].is_none();
                if done {
                    height[n] = if leaf {
                        0
                    } else {
                        1 + height[kids[0]].max(height[kids[1]])
                    };
                    state[n] = 2;
                    continue;
                }
                if mark[n] != t {
                    mark[n] = t;
                    if leaf {
                        leaves.push(n);
                    }
                }
                match state[n] {
                    2 => continue,
                    1 => return Err(cycle(n)),
                    _ => {}
                }
                state[n] = 1;
                stack.push((n, true));
                if !leaf {
                    for k in kids {
                        if state[k] == 1 {
                            return Err(cycle(k));
                        }
                        stack.push((k, false));
                    }
                }
            }
            self.leaves.push(leaves);
            self.depth = self.depth.max(height[root]);
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.mode.len()
    }

    fn trees(&self) -> usize {
        self.roots.len()
    }
}

/// The leaf weights (`target_*` or `class_*`).
struct LeafWeights {
    /// Per node, its `(target or class, weight)` pairs in attribute order; empty for branch
    /// nodes (onnxruntime ignores weights given to them).
    at: Vec<Vec<(usize, f64)>>,
    /// How many distinct ids the weights use (branch nodes' included, as onnxruntime counts).
    distinct: usize,
    /// No weight is negative (onnxruntime's `weights_are_all_positive`).
    all_positive: bool,
}

impl LeafWeights {
    /// Reads `{prefix}_ids`, `_nodeids`, `_treeids` and `_weights`; ids must be below `e`.
    fn read(cx: &NodeCx<'_>, fo: &Forest, prefix: &str, e: usize) -> Result<Self, OnnxError> {
        let ints = |s: &str| cx.attr_ints(&format!("{prefix}_{s}")).unwrap_or_default();
        let (ids, nodes, trees) = (ints("ids"), ints("nodeids"), ints("treeids"));
        let weights = floats(cx, &format!("{prefix}_weights"))?.unwrap_or_default();
        let k = ids.len();
        for (s, len) in [
            ("nodeids", nodes.len()),
            ("treeids", trees.len()),
            ("weights", weights.len()),
        ] {
            if len != k {
                return Err(cx.err(format!(
                    "`{prefix}_{s}` has {len} entries for the {k} of `{prefix}_ids`"
                )));
            }
        }
        let mut at = vec![Vec::new(); fo.len()];
        let mut seen = HashSet::new();
        for i in 0..k {
            if ids[i] < 0 || ids[i] as u64 >= e as u64 {
                return Err(cx.err(format!("`{prefix}_ids` holds {}, outside 0..{e}", ids[i])));
            }
            let n = *fo.index.get(&(trees[i], nodes[i])).ok_or_else(|| {
                cx.err(format!(
                    "weight {i} is for node {} of tree {}, which is not a node",
                    nodes[i], trees[i]
                ))
            })?;
            seen.insert(ids[i]);
            if fo.mode[n].is_none() {
                at[n].push((ids[i] as usize, weights[i]));
            }
        }
        Ok(LeafWeights {
            at,
            distinct: seen.len(),
            // `w < 0` is false for NaN, as in onnxruntime.
            all_positive: !weights.iter().any(|&w| w < 0.0),
        })
    }

    /// The `[M, e]` table of each leaf's summed weights (f32, in order), 0 where none.
    fn sums(&self, e: usize) -> Vec<f32> {
        let mut t = vec![0f32; self.at.len() * e];
        for (n, ws) in self.at.iter().enumerate() {
            for &(c, w) in ws {
                t[n * e + c] += w as f32;
            }
        }
        t
    }

    /// The `[M, e]` table of each leaf's smallest (`min`) or largest weight, ±∞ where none.
    fn extremes(&self, e: usize, min: bool) -> Vec<f32> {
        let fill = if min {
            f32::INFINITY
        } else {
            f32::NEG_INFINITY
        };
        let mut t = vec![fill; self.at.len() * e];
        for (n, ws) in self.at.iter().enumerate() {
            for &(c, w) in ws {
                let (w, v) = (w as f32, &mut t[n * e + c]);
                *v = if min { v.min(w) } else { v.max(w) };
            }
        }
        t
    }

    /// Whether leaf `n` has a weight for `c`.
    fn has(&self, n: usize, c: usize) -> bool {
        self.at[n].iter().any(|&(k, _)| k == c)
    }
}

/// Walks every row down every tree: returns `node [N, T]`, the i64 table indices of the leaves
/// reached.
fn walk(cx: &mut NodeCx<'_>, x: Value, fo: &Forest) -> Result<Value, OnnxError> {
    let (m, t) = (fo.len() as u64, fo.trees() as u64);
    let mut modes: Vec<Mode> = Vec::new();
    for &md in fo.mode.iter().flatten() {
        if !modes.contains(&md) {
            modes.push(md);
        }
    }
    let code: Vec<i64> = fo
        .mode
        .iter()
        .map(|md| {
            md.map_or(0, |md| {
                modes.iter().position(|&k| k == md).unwrap_or(0) as i64
            })
        })
        .collect();
    let any_nan = fo.nan_yes.iter().any(|&b| b);
    // Tables indexed by `node` (the first step reads the roots' entries as constants).
    struct Tables {
        feature: Value,
        threshold: Value,
        yes: Value,
        no: Value,
        code: Option<Value>,
        nan: Option<Value>,
    }
    let steps = fo.depth.max(1);
    let tables = if steps > 1 {
        Some(Tables {
            feature: cx.constant("feature", Tensor::from_i64(vec![m], &fo.feature))?,
            threshold: cx.constant("threshold", Tensor::from_f32(vec![m], &fo.threshold))?,
            yes: cx.constant("true_child", Tensor::from_i64(vec![m], &fo.yes))?,
            no: cx.constant("false_child", Tensor::from_i64(vec![m], &fo.no))?,
            code: match modes.len() {
                1 => None,
                _ => Some(cx.constant("mode", Tensor::from_i64(vec![m], &code))?),
            },
            nan: if any_nan {
                Some(cx.constant("nan_true", Tensor::from_bool(vec![m], &fo.nan_yes))?)
            } else {
                None
            },
        })
    } else {
        None
    };
    let roots = |v: &dyn Fn(usize) -> i64| fo.roots.iter().map(|&r| v(r)).collect::<Vec<_>>();
    let mut node: Option<Value> = None;
    for step in 0..steps {
        let s = |name: &str| format!("{name}_{step}");
        let (xv, thr, code, nan, yes, no) = match (node, &tables) {
            (Some(nd), Some(tb)) => {
                let at = |cx: &mut NodeCx<'_>, name: &str, table: Value| {
                    cx.add_helper(&s(name), Op::Gather { axis: 0 }, &[table, nd])
                };
                let f = at(cx, "feature", tb.feature)?;
                let xv = cx.add_helper(&s("x"), Op::GatherElements { axis: 1 }, &[x, f])?;
                let thr = at(cx, "threshold", tb.threshold)?;
                let code = tb.code.map(|c| at(cx, "mode", c)).transpose()?;
                let nan = tb.nan.map(|c| at(cx, "nan_true", c)).transpose()?;
                let yes = at(cx, "true_child", tb.yes)?;
                let no = at(cx, "false_child", tb.no)?;
                (xv, thr, code, nan, yes, no)
            }
            _ => {
                let i64s = |cx: &mut NodeCx<'_>, name: &str, v: Vec<i64>| {
                    cx.constant(&s(name), Tensor::from_i64(vec![t], &v))
                };
                let f = i64s(cx, "root_feature", roots(&|r| fo.feature[r]))?;
                let xv = cx.add_helper(&s("x"), Op::Gather { axis: 1 }, &[x, f])?;
                let thr: Vec<f32> = fo.roots.iter().map(|&r| fo.threshold[r]).collect();
                let thr = cx.constant(&s("root_threshold"), Tensor::from_f32(vec![t], &thr))?;
                let code = match modes.len() {
                    1 => None,
                    _ => Some(i64s(cx, "root_mode", roots(&|r| code[r]))?),
                };
                let nan = if any_nan {
                    let v: Vec<bool> = fo.roots.iter().map(|&r| fo.nan_yes[r]).collect();
                    Some(cx.constant(&s("root_nan_true"), Tensor::from_bool(vec![t], &v))?)
                } else {
                    None
                };
                let yes = i64s(cx, "root_true_child", roots(&|r| fo.yes[r]))?;
                let no = i64s(cx, "root_false_child", roots(&|r| fo.no[r]))?;
                (xv, thr, code, nan, yes, no)
            }
        };
        // A single-leaf tree has no mode at all; `modes` is then empty and any test will do
        // (its children are itself).
        let first = modes.first().copied().unwrap_or(Mode::Leq);
        let mut go = first.test(cx, step, xv, thr)?;
        if let Some(code) = code {
            for (k, md) in modes.iter().enumerate().skip(1) {
                let r = md.test(cx, step, xv, thr)?;
                let kv = cx.constant(&s(&format!("mode_{k}")), Tensor::scalar_i64(k as i64))?;
                let is = cx.add_helper(&s(&format!("is_mode_{k}")), Op::Equal, &[code, kv])?;
                go = cx.add_helper(&s("test"), Op::Where, &[is, r, go])?;
            }
        }
        if let Some(nan) = nan {
            let isnan = cx.add_helper(&s("x_nan"), Op::IsNaN, &[xv])?;
            let missing = cx.add_helper(&s("missing_true"), Op::And, &[nan, isnan])?;
            go = cx.add_helper(&s("go_true"), Op::Or, &[go, missing])?;
        }
        node = Some(cx.add_helper(&s("node"), Op::Where, &[go, yes, no])?);
    }
    Ok(node.expect("at least one step"))
}

/// The `[N, T, e]` values of table (`[M, e]`, f32) at the leaves reached.
fn at_leaves(
    cx: &mut NodeCx<'_>,
    name: &str,
    table: Vec<f32>,
    e: usize,
    node: Value,
) -> Result<Value, OnnxError> {
    let m = (table.len() / e) as u64;
    let c = cx.constant(name, Tensor::from_f32(vec![m, e as u64], &table))?;
    cx.add_helper(
        &format!("{name}_at_leaves"),
        Op::Gather { axis: 0 },
        &[c, node],
    )
}

/// `v [N, T, E]` summed over the trees in tree order, in f32 (a running sum whose last entry
/// is taken, as onnxruntime adds one tree after another): `[N, E]`.
fn tree_sum(cx: &mut NodeCx<'_>, v: Value, trees: usize) -> Result<Value, OnnxError> {
    let axis = cx.constant("tree_axis", Tensor::scalar_i64(1))?;
    let cum = Op::CumSum {
        exclusive: false,
        reverse: false,
    };
    let c = cx.add_helper("tree_running_sum", cum, &[v, axis])?;
    let last = cx.constant("last_tree", Tensor::scalar_i64(trees as i64 - 1))?;
    cx.add_helper("tree_sum", Op::Gather { axis: 1 }, &[c, last])
}

/// `v [N, T, E]` reduced over the trees by min or max: `[N, E]`.
fn tree_extreme(cx: &mut NodeCx<'_>, v: Value, min: bool) -> Result<Value, OnnxError> {
    let (axes, keepdims) = (Some(vec![1i64]), false);
    let (name, op) = if min {
        ("tree_min", Op::ReduceMin { axes, keepdims })
    } else {
        ("tree_max", Op::ReduceMax { axes, keepdims })
    };
    cx.add_helper(name, op, &[v])
}

/// `s + values` (a constant `[len]` row) when `values` is not empty.
fn add_row(cx: &mut NodeCx<'_>, s: Value, values: &[f64]) -> Result<Value, OnnxError> {
    if values.is_empty() {
        return Ok(s);
    }
    let v: Vec<f32> = values.iter().map(|&b| b as f32).collect();
    let b = cx.constant("base_values", Tensor::from_f32(vec![v.len() as u64], &v))?;
    cx.add_helper("with_base_values", Op::Add, &[s, b])
}

/// A regressor's `aggregate_function`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Aggregate {
    Sum,
    Average,
    Min,
    Max,
}

/// TreeEnsembleRegressor: Y `[N, n_targets]`.
///
/// As onnxruntime: with one target each leaf counts its first weight only (or, without any,
/// its own `nodes_values` entry), the base value is added after aggregating (AVERAGE: the sum
/// over T, divided by T), and only PROBIT of the post transforms applies; with several targets
/// a leaf's weights for one target add up, base values are added, a target for which no leaf
/// reached has a weight scores 0 (base value or not), and every post transform applies.
pub(in crate::ops) fn tree_ensemble_regressor(
    cx: &mut NodeCx<'_>,
) -> Result<Vec<Value>, OnnxError> {
    let e = cx.attr_int("n_targets", 0)?;
    if e < 1 {
        return Err(cx.err(format!("attribute `n_targets` = {e} must be at least 1")));
    }
    let e = e as usize;
    let agg = match cx.attr_string("aggregate_function", "SUM")?.as_str() {
        "SUM" => Aggregate::Sum,
        "AVERAGE" => Aggregate::Average,
        "MIN" => Aggregate::Min,
        "MAX" => Aggregate::Max,
        other => {
            return Err(cx.err(format!(
                "aggregate_function \"{other}\" is not one of SUM, AVERAGE, MIN, MAX"
            )));
        }
    };
    let post = PostTransform::read(cx)?;
    let base = floats(cx, "base_values")?.unwrap_or_default();
    if !base.is_empty() && base.len() != e {
        return Err(cx.err(format!(
            "{} base values for {e} targets (0 or {e} are allowed)",
            base.len()
        )));
    }
    let (x, f) = features(cx)?;
    let fo = Forest::read(cx, f)?;
    let w = LeafWeights::read(cx, &fo, "target", e)?;
    let node = walk(cx, x, &fo)?;
    let trees = fo.trees();
    let average = |cx: &mut NodeCx<'_>, s: Value| -> Result<Value, OnnxError> {
        if agg != Aggregate::Average {
            return Ok(s);
        }
        let n = cx.scalar("tree_count", DType::F32, trees as f64)?;
        cx.add_helper("average", Op::Div, &[s, n])
    };
    let s = if e == 1 {
        // onnxruntime's one-output path keeps one value per leaf.
        let table: Vec<f32> = (0..fo.len())
            .map(|n| w.at[n].first().map_or(fo.value[n], |&(_, v)| v) as f32)
            .collect();
        let v = at_leaves(cx, "leaf_value", table, 1, node)?;
        let s = match agg {
            Aggregate::Sum | Aggregate::Average => tree_sum(cx, v, trees)?,
            Aggregate::Min | Aggregate::Max => tree_extreme(cx, v, agg == Aggregate::Min)?,
        };
        let s = average(cx, s)?;
        add_row(cx, s, &base)?
    } else {
        // A target no leaf reached has a weight for is written as 0, base value or not.
        let zero = cx.scalar("zero", DType::F32, 0.0)?;
        match agg {
            Aggregate::Sum | Aggregate::Average => {
                let v = at_leaves(cx, "leaf_value", w.sums(e), e, node)?;
                let s = tree_sum(cx, v, trees)?;
                let s = average(cx, s)?;
                let s = add_row(cx, s, &base)?;
                let mut has = Presence {
                    w: &w,
                    e,
                    node,
                    forced: 0,
                    rows: None,
                };
                if base.is_empty() || (0..e).all(|c| has.known(&fo, c) == Some(true)) {
                    s
                } else {
                    let r = has.rows(cx)?;
                    cx.add_helper("tracked", Op::Where, &[r, s, zero])?
                }
            }
            Aggregate::Min | Aggregate::Max => {
                let min = agg == Aggregate::Min;
                let v = at_leaves(cx, "leaf_value", w.extremes(e, min), e, node)?;
                let r = tree_extreme(cx, v, min)?;
                // ±∞ left: no leaf reached had a weight for the target.
                let fill = if min {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                };
                let inf = cx.scalar("no_weight", DType::F32, fill)?;
                let none = cx.add_helper("no_weight_reached", Op::Equal, &[r, inf])?;
                let s = add_row(cx, r, &base)?;
                cx.add_helper("extreme", Op::Where, &[none, zero, s])?
            }
        }
    };
    let y = if e > 1 || post == PostTransform::Probit {
        post.apply(cx, s)?
    } else {
        s
    };
    Ok(vec![y])
}

/// Whether the rows have a score for one class (onnxruntime's `has_score`: some tree's leaf
/// reached carries a weight for it).
#[derive(Clone, Copy)]
enum Has {
    Always,
    Never,
    /// Row by row: bool `[N]`.
    Rows(Value),
}

/// Which of a class's scores onnxruntime tracks, known from the trees where it can be:
/// always when one tree has a weight for the class on each leaf it can reach, never when no
/// reachable leaf has one, else per row from `has [N, E]` (made on first use).
struct Presence<'w> {
    w: &'w LeafWeights,
    e: usize,
    node: Value,
    /// Classes that have a score whatever the row (multi-class base values).
    forced: usize,
    rows: Option<Value>,
}

impl Presence<'_> {
    fn known(&self, fo: &Forest, c: usize) -> Option<bool> {
        if c < self.forced
            || fo
                .leaves
                .iter()
                .any(|l| l.iter().all(|&n| self.w.has(n, c)))
        {
            Some(true)
        } else if !fo.leaves.iter().flatten().any(|&n| self.w.has(n, c)) {
            Some(false)
        } else {
            None
        }
    }

    /// bool `[N, E]`.
    fn rows(&mut self, cx: &mut NodeCx<'_>) -> Result<Value, OnnxError> {
        if let Some(r) = self.rows {
            return Ok(r);
        }
        let e = self.e;
        let mut table = vec![0f32; self.w.at.len() * e];
        for (n, ws) in self.w.at.iter().enumerate() {
            for &(c, _) in ws {
                table[n * e + c] = 1.0;
            }
            for c in 0..self.forced.min(e) {
                table[n * e + c] = 1.0;
            }
        }
        let v = at_leaves(cx, "has_weight", table, e, self.node)?;
        let any = tree_extreme(cx, v, false)?;
        let half = cx.scalar("half", DType::F32, 0.5)?;
        let r = cx.add_helper("has_score", Op::Greater, &[any, half])?;
        self.rows = Some(r);
        Ok(r)
    }

    fn class(&mut self, cx: &mut NodeCx<'_>, fo: &Forest, c: usize) -> Result<Has, OnnxError> {
        Ok(match self.known(fo, c) {
            Some(true) => Has::Always,
            Some(false) => Has::Never,
            None => {
                let r = self.rows(cx)?;
                let k = cx.constant(&format!("class_{c}"), Tensor::scalar_i64(c as i64))?;
                let col = Op::Gather { axis: 1 };
                Has::Rows(cx.add_helper(&format!("has_score_{c}"), col, &[r, k])?)
            }
        })
    }
}

/// `v` where `has`, else 0 (onnxruntime writes a score it does not track as 0).
fn masked(cx: &mut NodeCx<'_>, has: Has, v: Value) -> Result<Value, OnnxError> {
    let cond = match has {
        Has::Always => return Ok(v),
        Has::Never => cx.constant("never", Tensor::from_bool(vec![], &[false]))?,
        Has::Rows(r) => r,
    };
    let zero = cx.scalar("zero", DType::F32, 0.0)?;
    cx.add_helper("tracked", Op::Where, &[cond, v, zero])
}

/// `[a, b]` as the columns of an `[N, 2]` matrix (a, b `[N]`).
fn columns(cx: &mut NodeCx<'_>, a: Value, b: Value) -> Result<Value, OnnxError> {
    let col = |cx: &mut NodeCx<'_>, v: Value| {
        cx.add_helper("column", Op::Unsqueeze { axes: vec![1] }, &[v])
    };
    let (a, b) = (col(cx, a)?, col(cx, b)?);
    cx.add_helper("two_columns", Op::Concat { axis: 1 }, &[a, b])
}

/// TreeEnsembleClassifier: outputs Y (i64 labels `[N]`) and Z (scores `[N, classes]`).
///
/// The scores are the class weights of the leaves reached summed over the trees (whatever
/// `aggregate_function` says, as onnxruntime); more than two classes: plus `base_values`, the
/// label that of the first largest score among the classes some leaf reached (or a base value)
/// gave a score, then `post_transform`. Two classes: see [`binary`].
pub(in crate::ops) fn tree_ensemble_classifier(
    cx: &mut NodeCx<'_>,
) -> Result<Vec<Value>, OnnxError> {
    let labels = Labels::read(cx, "classlabels_int64s", "classlabels_strings")?;
    let e = labels.len();
    if e < 2 {
        return Err(cx.err(
            "a tree classifier needs at least two class labels (onnxruntime's one-class path \
             writes two scores into a one-column output)",
        ));
    }
    let post = PostTransform::read(cx)?;
    let base = floats(cx, "base_values")?.unwrap_or_default();
    if (e == 2 && base.len() > 2) || (e > 2 && !base.is_empty() && base.len() != e) {
        return Err(cx.err(format!(
            "{} base values for {e} classes (0 or {e} are allowed, or 1 with two classes)",
            base.len()
        )));
    }
    let (x, f) = features(cx)?;
    let fo = Forest::read(cx, f)?;
    let w = LeafWeights::read(cx, &fo, "class", e)?;
    let node = walk(cx, x, &fo)?;
    let v = at_leaves(cx, "leaf_value", w.sums(e), e, node)?;
    let sums = tree_sum(cx, v, fo.trees())?;
    let lab = labels.constant(cx, 0)?;
    let forced = if e > 2 { base.len() } else { 0 };
    let mut has = Presence {
        w: &w,
        e,
        node,
        forced,
        rows: None,
    };
    if e == 2 {
        return binary(cx, &fo, &w, &mut has, post, &base, sums, lab);
    }
    let s = add_row(cx, sums, &base)?;
    let y = match lab {
        None => s,
        Some(lab) => {
            let all = (0..e).all(|c| has.known(&fo, c) == Some(true));
            let scored = if all {
                s
            } else {
                let r = has.rows(cx)?;
                let low = cx.scalar("unscored", DType::F32, f64::NEG_INFINITY)?;
                cx.add_helper("scored", Op::Where, &[r, s, low])?
            };
            let arg = Op::ArgMax {
                axis: 1,
                keepdims: false,
                select_last_index: false,
            };
            let best = cx.add_helper("argmax", arg, &[scored])?;
            cx.add(Op::Gather { axis: 0 }, &[lab, best])?
        }
    };
    let z = post.apply(cx, s)?;
    Ok(vec![y, z])
}

/// How onnxruntime writes a binary classifier's one score s as two columns when the post
/// transform is not LOGISTIC (LOGISTIC: `[σ(−s), σ(s)]` in every case, as onnxruntime 1.31
/// computes, whatever its older `write_scores` says).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Second {
    /// `[1 − s, s]` (all weights ≥ 0: s is a probability).
    Complement,
    /// `[−s, s]` (a margin).
    Mirror,
    /// Only s: the second column is left unset.
    Unset,
}

/// A two-class TreeEnsembleClassifier, as onnxruntime's `TreeAggregatorClassifier`.
///
/// It is the "binary case" when every weight is for one class id (skl2onnx writes class 0's
/// id for the positive class's probability or margin): the label is the second one where the
/// score p exceeds 0.5 (all weights ≥ 0) or 0 (else), the first one otherwise. With weights
/// for both ids the label is the literal 1 where p > 0, else 0 (not the class labels).
///
/// Per row, s0/s1 are the class sums and the class-1 score is "tracked" when a leaf reached
/// has a class-1 weight. Tracked: the scores `[s0 (+ base 0), s1]` (two base values:
/// `[−(s0 + b1), s0 + b1]`, onnxruntime's reading), post-transformed, p their second. Not
/// tracked: p = s0 (+ base 0), written as two columns per [`Second`] (two base values: the
/// scores `[s0 + b0, 0]`, post-transformed). An untracked class-0 score counts as 0.
#[allow(clippy::too_many_arguments)]
fn binary(
    cx: &mut NodeCx<'_>,
    fo: &Forest,
    w: &LeafWeights,
    has: &mut Presence<'_>,
    post: PostTransform,
    base: &[f64],
    sums: Value,
    lab: Option<Value>,
) -> Result<Vec<Value>, OnnxError> {
    let binary_case = w.distinct == 1;
    let column = |cx: &mut NodeCx<'_>, c: i64| -> Result<Value, OnnxError> {
        let k = cx.constant(&format!("class_{c}"), Tensor::scalar_i64(c))?;
        cx.add_helper(&format!("sum_{c}"), Op::Gather { axis: 1 }, &[sums, k])
    };
    let (s0, s1) = (column(cx, 0)?, column(cx, 1)?);
    let (h0, h1) = (has.class(cx, fo, 0)?, has.class(cx, fo, 1)?);
    let bias = |cx: &mut NodeCx<'_>, v: Value, b: f64| -> Result<Value, OnnxError> {
        let b = cx.scalar("base_value", DType::F32, b)?;
        cx.add_helper("with_base_value", Op::Add, &[v, b])
    };
    let second = if binary_case {
        if w.all_positive {
            Second::Complement
        } else {
            Second::Mirror
        }
    } else if base.is_empty() {
        Second::Mirror
    } else {
        Second::Unset
    };
    // Rows whose class-1 score is tracked.
    let tracked = |cx: &mut NodeCx<'_>| -> Result<(Value, Value), OnnxError> {
        let (z0, z1, p) = match base.len() {
            2 => {
                let p1 = bias(cx, s0, base[1])?;
                let p0 = cx.add_helper("negated", Op::Neg, &[p1])?;
                (masked(cx, h0, p0)?, p1, p1)
            }
            1 => {
                let p0 = bias(cx, s0, base[0])?;
                (masked(cx, h0, p0)?, s1, s1)
            }
            _ => (masked(cx, h0, s0)?, s1, s1),
        };
        let z = columns(cx, z0, z1)?;
        Ok((post.apply(cx, z)?, p))
    };
    // Rows whose class-1 score is not.
    let untracked = |cx: &mut NodeCx<'_>| -> Result<(Value, Value), OnnxError> {
        if base.len() == 2 {
            let p0 = bias(cx, s0, base[0])?;
            let p = masked(cx, h0, p0)?;
            let z1 = masked(cx, Has::Never, p)?;
            let z = columns(cx, p, z1)?;
            return Ok((post.apply(cx, z)?, p));
        }
        let p0 = if base.len() == 1 {
            bias(cx, s0, base[0])?
        } else {
            s0
        };
        let p = masked(cx, h0, p0)?;
        let why = match (post, second) {
            (PostTransform::Probit, _) => "PROBIT",
            (_, Second::Unset) => "weights for both class ids and base values",
            _ => "",
        };
        if !why.is_empty() {
            return Err(cx.err(format!(
                "two classes with {why}, and rows that reach no class-1 weight: onnxruntime \
                 writes one score there and leaves the second column unset"
            )));
        }
        let z = if post == PostTransform::Logistic {
            let n = cx.add_helper("negated_score", Op::Neg, &[p])?;
            let a = cx.add_helper("logistic_negated", Op::Sigmoid, &[n])?;
            let b = cx.add_helper("logistic", Op::Sigmoid, &[p])?;
            columns(cx, a, b)?
        } else if second == Second::Complement {
            let one = cx.scalar("one", DType::F32, 1.0)?;
            let c = cx.add_helper("complement", Op::Sub, &[one, p])?;
            columns(cx, c, p)?
        } else {
            let n = cx.add_helper("negated_score", Op::Neg, &[p])?;
            columns(cx, n, p)?
        };
        Ok((z, p))
    };
    let (z, p) = match h1 {
        Has::Always => tracked(cx)?,
        Has::Never => untracked(cx)?,
        Has::Rows(r) => {
            let (z2, p2) = tracked(cx)?;
            let (z1, p1) = untracked(cx)?;
            let rc = cx.add_helper("tracked_row", Op::Unsqueeze { axes: vec![1] }, &[r])?;
            let z = cx.add_helper("binary_scores", Op::Where, &[rc, z2, z1])?;
            (z, cx.add_helper("binary_score", Op::Where, &[r, p2, p1])?)
        }
    };
    let y = match lab {
        None => p,
        Some(lab) => {
            let (cut, pos, neg) = if binary_case {
                let at = |cx: &mut NodeCx<'_>, name: &str, i: i64| {
                    let idx = cx.constant(&format!("{name}_index"), Tensor::scalar_i64(i))?;
                    cx.add_helper(name, Op::Gather { axis: 0 }, &[lab, idx])
                };
                let cut = if w.all_positive { 0.5 } else { 0.0 };
                (
                    cut,
                    at(cx, "positive_label", 1)?,
                    at(cx, "negative_label", 0)?,
                )
            } else {
                let k = |cx: &mut NodeCx<'_>, name: &str, v: i64| {
                    cx.constant(name, Tensor::scalar_i64(v))
                };
                (
                    0.0,
                    k(cx, "positive_label", 1)?,
                    k(cx, "negative_label", 0)?,
                )
            };
            let cut = cx.scalar("cut", DType::F32, cut)?;
            let positive = cx.add_helper("positive", Op::Greater, &[p, cut])?;
            cx.add(Op::Where, &[positive, pos, neg])?
        }
    };
    Ok(vec![y, z])
}
