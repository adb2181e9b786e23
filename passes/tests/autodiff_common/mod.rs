//! Test helpers for the autodiff tests: a tiny topological interpreter over the CPU reference
//! evaluator (`eval_op`), a deterministic random source, and the finite-difference checker.

#![allow(dead_code)]

use fp8c_eval::eval_op;
use fp8c_ir::{Graph, Op, Tensor, Value, interface_name};
use fp8c_passes::autodiff::{Loss, TrainSpec, build_training_graph};
use std::collections::{BTreeMap, HashMap};

/// One run of a graph: its outputs and the values its state updates give, by name.
pub struct Run {
    pub outputs: BTreeMap<String, Tensor>,
    pub updates: BTreeMap<String, Tensor>,
    /// Every node's results, by node name.
    pub values: HashMap<String, Vec<Tensor>>,
}

/// Evaluates `g` node by node. Params read `weights` (falling back to the graph's own data),
/// state reads `state` (falling back to its splat initial value).
pub fn eval(
    g: &Graph,
    inputs: &BTreeMap<String, Tensor>,
    weights: &BTreeMap<String, Tensor>,
    state: &BTreeMap<String, Tensor>,
) -> Run {
    let mut vals: HashMap<Value, Tensor> = HashMap::new();
    let mut by_name: HashMap<String, Vec<Tensor>> = HashMap::new();
    let inits: HashMap<_, _> = g.state().iter().copied().collect();
    for id in g.topo_order().expect("acyclic") {
        let n = g.node(id);
        let outs = match &n.op {
            Op::Input { name } => vec![
                inputs
                    .get(name)
                    .unwrap_or_else(|| panic!("input {name} not given"))
                    .clone(),
            ],
            Op::Param { name } => vec![
                weights
                    .get(name)
                    .or_else(|| g.weights().get(name))
                    .unwrap_or_else(|| panic!("no data for param {name}"))
                    .clone(),
            ],
            Op::State { name } => vec![match state.get(name) {
                Some(t) => t.clone(),
                None => {
                    let ty = &n.outputs[0];
                    let dims = ty.known_dims().expect("static state");
                    let count = dims.iter().product::<u64>() as usize;
                    Tensor::from_f64_as(ty.dtype, dims, &vec![inits[&id]; count]).expect("splat")
                }
            }],
            op => {
                let ins: Vec<&Tensor> = n.inputs().iter().map(|v| &vals[v]).collect();
                eval_op(op, &ins).unwrap_or_else(|e| panic!("node \"{}\": {e}", n.name))
            }
        };
        by_name.insert(n.name.clone(), outs.clone());
        for (s, t) in outs.into_iter().enumerate() {
            vals.insert(Value::new(id, s as u32), t);
        }
    }
    Run {
        outputs: g
            .outputs()
            .iter()
            .map(|o| (o.name.clone(), vals[&o.value].clone()))
            .collect(),
        updates: g
            .state_updates()
            .iter()
            .map(|(k, v)| (k.clone(), vals[v].clone()))
            .collect(),
        values: by_name,
    }
}

/// A deterministic xorshift source.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
    pub fn vec(&mut self, n: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..n).map(|_| self.range(lo, hi)).collect()
    }
    /// An f64 tensor of `dims` with entries in [lo, hi).
    pub fn tensor(&mut self, dims: &[u64], lo: f64, hi: f64) -> Tensor {
        let n = dims.iter().product::<u64>() as usize;
        Tensor::from_f64(dims.to_vec(), &self.vec(n, lo, hi))
    }
}

/// The gradient of `output` (a scalar) for every parameter of `forward`, by autodiff, with
/// `extra` inputs fed.
pub fn autodiff_grads(
    forward: &Graph,
    output: &str,
    extra: &BTreeMap<String, Tensor>,
) -> (BTreeMap<String, Tensor>, Graph) {
    let mut spec = TrainSpec::new(output, Loss::Scalar);
    spec.optimizer = None;
    spec.expose_grads = true;
    spec.train_only = Some(vec!["*".into()]);
    let train = build_training_graph(forward, &spec).expect("training graph");
    let run = eval(&train, extra, &BTreeMap::new(), &BTreeMap::new());
    let grads = run
        .outputs
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix("grad.").map(|p| (p.to_string(), v)))
        .collect();
    (grads, train)
}

/// The scalar value of `output` with the params replaced by `weights`.
pub fn loss_at(
    forward: &Graph,
    output: &str,
    extra: &BTreeMap<String, Tensor>,
    weights: &BTreeMap<String, Tensor>,
) -> f64 {
    let run = eval(forward, extra, weights, &BTreeMap::new());
    let v = run.outputs[output].to_f64_vec().expect("float");
    assert_eq!(v.len(), 1, "the checked output must be a scalar");
    v[0]
}

/// Compares autodiff gradients with central differences `(L(θ+h) − L(θ−h)) / 2h` for every
/// element of every parameter: `|ad − fd| ≤ atol + rtol·|fd|`. Returns the worst ratio
/// `|ad − fd| / (atol + rtol·|fd|)` seen (≤ 1 passes).
pub fn gradcheck(
    forward: &Graph,
    output: &str,
    extra: &BTreeMap<String, Tensor>,
    h: f64,
    rtol: f64,
    atol: f64,
) -> f64 {
    let (grads, _) = autodiff_grads(forward, output, extra);
    let base: BTreeMap<String, Tensor> = forward.weights().clone();
    let mut names: Vec<String> = forward
        .params()
        .iter()
        .map(|&id| interface_name(&forward.node(id).op).to_string())
        .collect();
    names.retain(|n| base[n].dtype().is_float());
    assert!(!names.is_empty(), "nothing to check");
    let mut worst = 0f64;
    for name in &names {
        let ad = grads
            .get(name)
            .unwrap_or_else(|| {
                panic!(
                    "no gradient for {name} (have: {:?})",
                    grads.keys().collect::<Vec<_>>()
                )
            })
            .to_f64_vec()
            .unwrap();
        let t = &base[name];
        let vals = t.to_f64_vec().unwrap();
        for i in 0..vals.len() {
            let at = |d: f64| {
                let mut v = vals.clone();
                v[i] += d;
                let mut w = base.clone();
                w.insert(
                    name.clone(),
                    Tensor::from_f64_as(t.dtype(), t.shape().to_vec(), &v).unwrap(),
                );
                loss_at(forward, output, extra, &w)
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let err = (ad[i] - fd).abs();
            worst = worst.max(err / (atol + rtol * fd.abs()));
            assert!(
                err <= atol + rtol * fd.abs(),
                "{output}: d/d{name}[{i}]: autodiff {} vs finite differences {fd} (|err| {err:e})",
                ad[i]
            );
        }
    }
    worst
}

/// A forward graph under construction for a gradient check: f64 params with random values,
/// and a scalar output `out = Σ y·r` for a fixed random `r`, so every element of `y` matters.
pub struct Fwd {
    pub g: Graph,
    pub rng: Rng,
}

impl Fwd {
    pub fn new(seed: u64) -> Self {
        Fwd {
            g: Graph::new("gradcheck"),
            rng: Rng::new(seed),
        }
    }

    /// A parameter with entries uniform in [lo, hi).
    pub fn param(&mut self, name: &str, dims: &[u64], lo: f64, hi: f64) -> Value {
        let t = self.rng.tensor(dims, lo, hi);
        self.g.add_param(name, t.ty(), Some(t)).unwrap()
    }

    pub fn constant(&mut self, t: Tensor) -> Value {
        self.g
            .add_node("c", Op::Constant { value: t }, &[])
            .unwrap()[0]
    }

    pub fn i64s(&mut self, v: &[i64]) -> Value {
        self.constant(Tensor::from_i64(vec![v.len() as u64], v))
    }

    pub fn scalar(&mut self, v: f64) -> Value {
        self.constant(Tensor::from_f64(vec![], &[v]))
    }

    pub fn op(&mut self, op: Op, ins: &[Value]) -> Value {
        self.g
            .add_node("n", op, ins)
            .unwrap_or_else(|e| panic!("{e}"))[0]
    }

    pub fn ops(&mut self, op: Op, ins: &[Value]) -> Vec<Value> {
        self.g
            .add_node("n", op, ins)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Finishes with `out = Σ_k Σ y_k·r_k`.
    pub fn finish(mut self, ys: &[Value]) -> Graph {
        let mut total: Option<Value> = None;
        for &y in ys {
            let dims = self.g.value_type(y).known_dims().unwrap();
            let r = self.rng.tensor(&dims, -1.0, 1.0);
            let rc = self.constant(r);
            let p = self.op(Op::Mul, &[y, rc]);
            let s = self.op(
                Op::ReduceSum {
                    axes: None,
                    keepdims: false,
                },
                &[p],
            );
            total = Some(match total {
                Some(t) => self.op(Op::Add, &[t, s]),
                None => s,
            });
        }
        self.g.set_output("out", total.unwrap()).unwrap();
        self.g
    }
}

/// Runs a gradient check in f64 with the default tolerances (h = 1e-6; rtol 1e-6, atol 1e-8).
pub fn check(g: &Graph) -> f64 {
    gradcheck(g, "out", &BTreeMap::new(), 1e-6, 1e-6, 1e-8)
}
