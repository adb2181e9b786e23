//! Root package of the fp8c workspace: it only hosts the integration tests in `tests/` and the examples in `examples/`.
