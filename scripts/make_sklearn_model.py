#!/usr/bin/env python3
"""Builds a scikit-learn classifier exported by skl2onnx (a third party's ONNX, with the
ai.onnx.ml label branch every skl2onnx classifier has) for tests/cli.rs, and onnxruntime's
outputs on fixed inputs.

Usage (needs scikit-learn and skl2onnx: the export venv, PY=$(scripts/export-env.sh)):

  $PY scripts/make_sklearn_model.py [OUT_DIR]        # default: tests/models/sklearn
  $PY scripts/make_sklearn_model.py --zoo NAME ...   # only those zoo entries

Writes mlp_digits_clf.onnx: sklearn's MLPClassifier (64 -> 32 ReLU -> 10, 60 Adam epochs,
random_state 0) trained on sklearn's bundled digits data (pixels / 16), converted with
skl2onnx's defaults (opset 17, ai.onnx.ml 3): Cast, MatMul, Add, Relu, Softmax, then ArgMax
plus the ai.onnx.ml ops ArrayFeatureExtractor (label) and ZipMap (probabilities as a
sequence of maps). `add_result1` is the logits, `out_activations_result` the probabilities,
`argmax_output` the class index. And mlp_digits_clf.ref.npz: `X` (the first 32 digits),
`probabilities` and `label`, onnxruntime's outputs for them (ZipMap's maps turned back into
an array), plus `y`, their true classes.

Also writes the zoo of tests/run_cli.rs's `sklearn_zoo_matches_onnxruntime`: for each entry of
ZOO, NAME.onnx (skl2onnx's default conversion: ai.onnx.ml LinearClassifier, LinearRegressor,
Scaler, Normalizer, ArrayFeatureExtractor, ZipMap, TreeEnsemble*, SVM*, ...) and NAME.ort.npz:
`X` (16 rows) and onnxruntime's outputs for it under the graph output names (ZipMap's maps
as a dense [N, classes] array, columns in label order). Data: sklearn's bundled iris, or
make_regression/make_classification with fixed seeds; nothing is downloaded.
"""

import os
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from sklearn import (decomposition, ensemble, impute, linear_model, naive_bayes, neighbors,
                     pipeline, preprocessing, svm, tree)
from sklearn.datasets import load_iris, make_regression
from skl2onnx import to_onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ort_reference import save_npz  # noqa: E402  (byte-deterministic .npz writer)


def main(argv):
    out_dir = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models", "sklearn")
    os.makedirs(out_dir, exist_ok=True)
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=60, random_state=0).fit(x, y)
    model = to_onnx(clf, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    path = os.path.join(out_dir, "mlp_digits_clf.onnx")
    onnx.save(model, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    xs = x[:32]
    label, maps = sess.run(["output_label", "output_probability"], {"X": xs})
    probs = np.array([[m[k] for k in sorted(m)] for m in maps], dtype=np.float32)
    ref = {"X": xs, "probabilities": probs, "label": np.asarray(label, np.int64),
           "y": y[:32].astype(np.int64)}
    save_npz(os.path.join(out_dir, "mlp_digits_clf.ref.npz"), ref)
    print(f"wrote {path}: train accuracy {clf.score(x, y):.4f}")
    zoo(out_dir)
    return 0


def zoo_only(argv):
    """`--zoo NAME ...`: (re)writes only those zoo entries (into tests/models/sklearn)."""
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models",
                           "sklearn")
    unknown = [n for n in argv if n not in ZOO]
    if unknown:
        sys.exit(f"make_sklearn_model.py: no zoo entry {unknown}; entries: {', '.join(ZOO)}")
    zoo(out_dir, argv)
    return 0


def zoo_data():
    xi, yi = load_iris(return_X_y=True)
    xr, yr = make_regression(200, 8, n_targets=1, noise=0.5, random_state=0)
    xr2, yr2 = make_regression(200, 6, n_targets=2, noise=0.5, random_state=1)
    f = np.float32
    xn = xi.astype(f)
    xn[::7, 1] = np.nan
    cats = np.random.default_rng(3).integers(0, 4, (150, 3)).astype(np.int64)
    words = np.stack([np.array(["oslo", "paris", "rome", "lima"])[cats[:, 0]],
                      np.array(["small", "large"])[cats[:, 1] % 2],
                      np.array(["red", "green", "blue", "grey"])[cats[:, 2]]], 1)
    return {
        "iris_nan": (xn, yi),
        "cats": (cats, yi),
        "words": (words, yi),
        "iris": (xi.astype(f), yi),
        "iris_binary": (xi.astype(f), (yi > 0).astype(np.int64)),
        "iris_names": (xi.astype(f), np.array(["setosa", "versicolor", "virginica"])[yi]),
        "iris_yes_no": (xi.astype(f), np.array(["no", "yes"])[(yi > 0).astype(int)]),
        "reg": (xr.astype(f), yr),
        "reg2": (xr2.astype(f), yr2),
    }


# name -> (estimator, data set); every model is small (kilobytes).
ZOO = {
    "iris_scaler_logreg": (lambda: pipeline.make_pipeline(
        preprocessing.StandardScaler(), linear_model.LogisticRegression(max_iter=500)), "iris"),
    "iris_logreg_binary": (lambda: linear_model.LogisticRegression(max_iter=500), "iris_binary"),
    "iris_linear_svc": (lambda: svm.LinearSVC(random_state=0), "iris"),
    "iris_sgd_pca": (lambda: pipeline.make_pipeline(
        decomposition.PCA(3, random_state=0), linear_model.SGDClassifier(random_state=0)), "iris"),
    "iris_gaussian_nb": (lambda: naive_bayes.GaussianNB(), "iris"),
    "reg_minmax_ridge": (lambda: pipeline.make_pipeline(
        preprocessing.MinMaxScaler(), linear_model.Ridge()), "reg"),
    "reg_normalizer_linreg": (lambda: pipeline.make_pipeline(
        preprocessing.Normalizer(), linear_model.LinearRegression()), "reg"),
    "reg2_linreg": (lambda: linear_model.LinearRegression(), "reg2"),
    "iris_binarizer_logreg": (lambda: pipeline.make_pipeline(
        preprocessing.Binarizer(threshold=3.0), linear_model.LogisticRegression(max_iter=500)),
        "iris"),
    "iris_maxnorm_logreg": (lambda: pipeline.make_pipeline(
        preprocessing.Normalizer(norm="max"), linear_model.LogisticRegression(max_iter=500)), "iris"),
    "reg_l1norm_ridge": (lambda: pipeline.make_pipeline(
        preprocessing.Normalizer(norm="l1"), linear_model.Ridge()), "reg"),
    "iris_svc_rbf": (lambda: svm.SVC(), "iris"),
    "iris_svc_poly_binary": (lambda: svm.SVC(kernel="poly", degree=3), "iris_binary"),
    "iris_nusvc_sigmoid": (lambda: pipeline.make_pipeline(
        preprocessing.StandardScaler(), svm.NuSVC(kernel="sigmoid", nu=0.3)), "iris"),
    "reg_svr_rbf": (lambda: svm.SVR(C=10.0), "reg"),
    "reg_svr_linear": (lambda: svm.SVR(kernel="linear"), "reg"),
    "iris_one_class_svm": (lambda: svm.OneClassSVM(gamma="auto", nu=0.2), "iris"),
    "iris_nan_imputer_logreg": (lambda: pipeline.make_pipeline(
        impute.SimpleImputer(), linear_model.LogisticRegression(max_iter=300)), "iris_nan"),
    "cats_onehot_logreg": (lambda: pipeline.make_pipeline(
        preprocessing.OneHotEncoder(), linear_model.LogisticRegression(max_iter=300)), "cats"),
    "cats_ordinal": (lambda: preprocessing.OrdinalEncoder(), "cats"),
    "iris_power_transformer": (lambda: preprocessing.PowerTransformer(), "iris"),
    "iris_knn": (lambda: neighbors.KNeighborsClassifier(3), "iris"),
    "iris_decision_tree": (lambda: tree.DecisionTreeClassifier(max_depth=4, random_state=0),
                           "iris"),
    "iris_random_forest_binary": (lambda: ensemble.RandomForestClassifier(
        8, max_depth=5, random_state=0), "iris_binary"),
    "iris_gradient_boosting": (lambda: ensemble.GradientBoostingClassifier(
        n_estimators=10, max_depth=3, random_state=0), "iris"),
    "reg_gradient_boosting": (lambda: ensemble.GradientBoostingRegressor(
        n_estimators=20, random_state=0), "reg"),
    "reg2_extra_trees": (lambda: ensemble.ExtraTreesRegressor(6, max_depth=6, random_state=0),
                         "reg2"),
    "reg_knn_distance": (lambda: neighbors.KNeighborsRegressor(4, weights="distance"), "reg"),
    # probability=True: prob_a/prob_b and libsvm's pairwise coupling of the probabilities.
    "iris_svc_proba": (lambda: pipeline.make_pipeline(
        preprocessing.StandardScaler(), svm.SVC(probability=True, random_state=0)), "iris"),
    "iris_svc_proba_binary": (lambda: svm.SVC(probability=True, random_state=0), "iris_binary"),
    # String class labels (iris' species names; "no"/"yes"): the label output is strings.
    "iris_names_random_forest": (lambda: ensemble.RandomForestClassifier(
        5, max_depth=3, random_state=0), "iris_names"),
    "iris_names_gaussian_nb": (lambda: naive_bayes.GaussianNB(), "iris_names"),
    "iris_names_knn": (lambda: neighbors.KNeighborsClassifier(3), "iris_names"),
    "iris_yes_no_svc": (lambda: svm.SVC(), "iris_yes_no"),
    "iris_yes_no_logreg": (lambda: linear_model.LogisticRegression(max_iter=500), "iris_yes_no"),
    # String inputs: categorical columns of city and size names.
    "words_onehot_logreg": (lambda: pipeline.make_pipeline(
        preprocessing.OneHotEncoder(handle_unknown="ignore"),
        linear_model.LogisticRegression(max_iter=300)), "words"),
    "words_ordinal_tree": (lambda: pipeline.make_pipeline(
        preprocessing.OrdinalEncoder(), tree.DecisionTreeClassifier(max_depth=4, random_state=0)),
        "words"),
}


def dense(v):
    """An output as an array; ZipMap's list of {label: probability} maps as [N, labels]."""
    if isinstance(v, list) and v and isinstance(v[0], dict):
        keys = list(v[0].keys())
        return np.array([[m[k] for k in keys] for m in v], dtype=np.float32)
    a = np.asarray(v)
    # String labels come back as Python objects; numpy's fixed-width unicode saves without
    # pickling.
    return a.astype(str) if a.dtype == object else a


def zoo(out_dir, only=()):
    data = zoo_data()
    for name, (make, which) in ZOO.items():
        if only and name not in only:
            continue
        x, y = data[which]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = make().fit(x, y)
        model = to_onnx(est, x[:1])
        path = os.path.join(out_dir, f"{name}.onnx")
        onnx.save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rows = np.random.default_rng(0).choice(len(x), 16, replace=False)
        xs = x[rows]
        names = [o.name for o in sess.get_outputs()]
        ref = {"X": xs}
        ref.update({n: dense(v) for n, v in zip(names, sess.run(None, {"X": xs}))})
        save_npz(os.path.join(out_dir, f"{name}.ort.npz"), ref)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"wrote {path}: {', '.join(ops)}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zoo"]:
        sys.exit(zoo_only(sys.argv[2:]))
    sys.exit(main(sys.argv))
