"""The exceptions fp8c raises. Each carries the library's message unchanged: it names the
file, the node and the value at fault (``model.onnx: node "fc1" (MatMul): ...``).

    Error                  every fp8c error
    ├── ModelError         the model cannot be read or imported (ONNX, IR text)
    ├── CompileError       a compiler pass failed
    ├── RunError           lowering, loading on the device or running failed
    ├── InvalidInputError  a request that does not fit the model or the data (also ValueError)
    └── FileError          a file cannot be read or written (also OSError)
"""


class Error(Exception):
    """Every error fp8c raises."""


class ModelError(Error):
    """The model cannot be read or imported (a bad ONNX file, an unsupported op)."""


class CompileError(Error):
    """A compiler pass failed (the message names the pass and the node)."""


class RunError(Error):
    """Lowering, loading on the device or running failed (no GPU, a failing kernel)."""


class InvalidInputError(Error, ValueError):
    """A request that does not fit the model or the data: an unknown input, a wrong dtype
    or shape, a bad option (``--recipe foo: expected ...``)."""


class FileError(Error, OSError):
    """A file cannot be read or written."""


__all__ = ["Error", "ModelError", "CompileError", "RunError", "InvalidInputError", "FileError"]
