"""Exceptions raised by numr_web."""

from __future__ import annotations


class NumrWebError(Exception):
    """Base class for numr_web's own errors."""


class ShapeMismatch(NumrWebError, ValueError):
    """An argument's shape does not fit the op (a ValueError)."""


class BackendUnavailable(NumrWebError, RuntimeError):
    """A backend cannot run here; the message says why and how to get it."""


class DeviceMismatch(NumrWebError, ValueError):
    """Arrays of one call live on different devices."""
