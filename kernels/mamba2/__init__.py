"""Mamba-2's state space duality (SSD) forward pass.

For now only the float64 references (no GPU, no CuTe or cuTile import): ``ssd_sequential``
runs the recurrence step by step, ``ssd_reference`` the five-stage chunked algorithm, and
``ssd_bytes_and_flops`` counts the bytes and FLOPs the chapter's roofline needs.
"""
from .reference import ssd_bytes_and_flops, ssd_reference, ssd_sequential

__all__ = ["ssd_reference", "ssd_sequential", "ssd_bytes_and_flops"]
