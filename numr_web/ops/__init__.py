"""Array-level ops (no autograd): forward and closed-form backward."""

from numr_web.ops.group_norm import group_norm, group_norm_backward, group_norm_forward

__all__ = ["group_norm", "group_norm_forward", "group_norm_backward"]
