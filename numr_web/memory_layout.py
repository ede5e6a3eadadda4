"""Memory layouts of a GroupNorm input: NCHW, channels-last (NHWC) or other, and the permutations between them.

A GroupNorm input has the logical shape ``(N, C, *spatial)``.  Two memory
layouts get dedicated kernels:

* ``"nchw"``: C-contiguous in the logical order (channels-first);
* ``"nhwc"``: channels-last, i.e. the logical array is a transposed view of a
  C-contiguous ``(N, *spatial, C)`` buffer (what ``torch.channels_last`` and
  ``np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)`` give).

Anything else is ``"other"`` and is copied to ``"nchw"`` first.  When both
descriptions fit (no spatial extent, a single channel...) ``"nchw"`` wins.
"""

from __future__ import annotations


def contiguous_strides(shape, itemsize):
    strides = []
    acc = itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def _strides_match(shape, strides, expected):
    # Strides of axes with extent 1 never matter.
    return all(n == 1 or s == e for n, s, e in zip(shape, strides, expected))


def channels_last_perm(ndim: int):
    """Axis order of the channels-last buffer in terms of logical axes: (0, 2, ..., ndim-1, 1)."""
    return (0,) + tuple(range(2, ndim)) + (1,)


_CL_PERMS: dict = {}


def channels_last_perms(ndim: int):
    """(perm, inverse), cached: logical (N, C, *spatial) axes -> channels-last buffer axes and back."""
    p = _CL_PERMS.get(ndim)
    if p is None:
        perm = channels_last_perm(ndim)
        p = _CL_PERMS[ndim] = (perm, inverse_permutation(perm))
    return p


def inverse_permutation(perm):
    """The axis order that undoes ``perm``."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse)


def as_channels_last(a):
    """The NumPy array ``a`` (N, C, *spatial) in dense channels-last memory, same shape (a copy
    unless its memory is in that order already)."""
    import numpy as np

    perm, inverse = channels_last_perms(a.ndim)
    return np.ascontiguousarray(a.transpose(perm)).transpose(inverse)


def is_dense_channels_last(a) -> bool:
    """A NumPy array that is dense channels-last (and not empty): the fast test, by a transpose
    and NumPy's contiguity flag, with memory_layout's answer (both ignore the strides of
    extent-1 axes).  C-contiguous arrays of extent-1 channels or spatial axes are both."""
    return a.ndim >= 3 and a.size > 0 and a.transpose(channels_last_perms(a.ndim)[0]).flags.c_contiguous


def memory_layout(shape, strides, itemsize) -> str:
    """Classify ``(shape, strides)`` (strides in bytes) as ``nchw``, ``nhwc`` or ``other``."""
    shape = tuple(int(n) for n in shape)
    strides = tuple(int(s) for s in strides)
    if _strides_match(shape, strides, contiguous_strides(shape, itemsize)):
        return "nchw"
    if len(shape) >= 3:
        perm = channels_last_perm(len(shape))
        pshape = tuple(shape[a] for a in perm)
        pstrides = tuple(strides[a] for a in perm)
        if _strides_match(pshape, pstrides, contiguous_strides(pshape, itemsize)):
            return "nhwc"
    return "other"


def memory_order(shape, strides):
    """The axis order of a dense buffer, outermost first (a permutation of the axes)."""
    return tuple(sorted(range(len(shape)), key=lambda a: (-strides[a], a)))
