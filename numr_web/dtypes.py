"""The floating-point dtypes numr_web stores, as a small NumPy-free dtype object, and the NumPy conversions.

The op layer and autograd read dtypes through ``dtype_name`` and ``as_dtype``,
which accept this module's ``DType``, a NumPy dtype or scalar type, an
ml_dtypes type or a name, and import neither NumPy nor ml_dtypes: in the
browser a GPU-only page never downloads them.  ``numpy_dtype`` (and the
``BFLOAT16`` and ``FLOAT_DTYPES`` names, made on first use) are for code that
holds NumPy arrays already.  The compute dtype of an op comes from its schema
(``numr_web.schema``), not from here.
"""

from __future__ import annotations


class DType:
    """A storage dtype: ``name`` ("float32"...), ``itemsize`` in bytes.

    Equal to its name, to another ``DType`` and to the NumPy or ml_dtypes
    dtype of that name, so ``webgpu_array.dtype == np.float32`` reads as on
    NumPy; ``np.dtype(d)`` gives the NumPy dtype (through ``.dtype``).
    """

    __slots__ = ("name", "itemsize")

    def __init__(self, name: str, itemsize: int):
        self.name = name
        self.itemsize = itemsize

    def __eq__(self, other):
        if other is self:  # the common case (one DType object per name): no name lookup
            return True
        try:
            return dtype_name(other) == self.name
        except TypeError:
            return NotImplemented

    def __hash__(self):
        return hash(self.name)

    def __str__(self):
        return self.name

    def __repr__(self):
        return f"numr_web.dtypes.{self.name}"

    @property
    def dtype(self):
        """The NumPy dtype of this name (imports NumPy, and ml_dtypes for bfloat16)."""
        return numpy_dtype(self.name)


float16 = DType("float16", 2)
bfloat16 = DType("bfloat16", 2)
float32 = DType("float32", 4)
float64 = DType("float64", 8)

#: every floating-point storage dtype the ops take, by name
FLOAT_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")
_BY_NAME = {d.name: d for d in (float16, bfloat16, float32, float64)}
_ALIASES = {"float": "float64", "double": "float64", "half": "float16", "single": "float32", "bf16": "bfloat16"}


#: names of the dtype objects (NumPy dtypes, scalar types) dtype_name was asked about
_NAME_OF: dict = {}


def dtype_name(dtype) -> str:
    """The name of ``dtype`` ("float32", "bfloat16", "int64"...): a DType, a NumPy dtype or scalar
    type, an ml_dtypes type, Python's ``float``, or a name.  TypeError for anything else."""
    if isinstance(dtype, DType):
        return dtype.name
    if isinstance(dtype, str):
        name = dtype.lower()
        return _ALIASES.get(name, name)
    try:
        known = _NAME_OF.get(dtype)  # NumPy's dtype.name is a Python property of some microseconds
    except TypeError:  # unhashable
        known = None
    if known is not None:
        return known
    name = getattr(dtype, "name", None)  # a NumPy dtype
    if not isinstance(name, str):
        name = getattr(dtype, "__name__", None)  # a scalar type: np.float32, ml_dtypes.bfloat16, float
    if not isinstance(name, str):
        raise TypeError(f"dtype: expected a dtype or a dtype name, got {dtype!r}")
    if getattr(dtype, "isnative", True) is False:  # a NumPy dtype in the other byte order
        name = f"{name} (non-native byte order)"
    else:
        name = _ALIASES.get(name, name)
    if len(_NAME_OF) < 256:
        try:
            _NAME_OF[dtype] = name
        except TypeError:
            pass
    return name


def as_dtype(dtype) -> DType:
    """numr_web's ``DType`` for a floating-point ``dtype``; TypeError naming the floats otherwise."""
    name = dtype_name(dtype)
    found = _BY_NAME.get(name)
    if found is None:
        raise TypeError(f"dtype: expected a floating-point dtype (float16, bfloat16, float32 or float64), got {name}")
    return found


def is_supported_dtype(dtype) -> bool:
    try:
        return dtype_name(dtype) in _BY_NAME
    except TypeError:
        return False


def numpy_dtype(dtype):
    """The NumPy dtype of ``dtype`` (bfloat16 through ml_dtypes); imports them on first use."""
    import numpy as np

    name = dtype_name(dtype)
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def __getattr__(name):
    # NumPy-side constants, made only when code that has NumPy arrays asks for them
    if name == "BFLOAT16":
        try:
            return numpy_dtype("bfloat16")
        except ImportError:  # pragma: no cover - ml_dtypes is a dependency
            return None
    if name == "FLOAT_DTYPES":
        import numpy as np

        out = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)]
        bf16 = __getattr__("BFLOAT16")
        if bf16 is not None:
            out.insert(1, bf16)
        return tuple(out)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
