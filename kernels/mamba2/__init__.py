"""Mamba-2's state space duality (SSD) forward pass.

``mamba_chunk_scan_combined`` runs it on the GPU in cuTile (``ssd.py`` launches the kernels of
``tiles.py``; cuTile is the optional extra ``.[tile]``, imported on first use). The float64
references need no GPU and no cuTile: ``ssd_sequential`` runs the recurrence step by step,
``ssd_reference`` the five-stage chunked algorithm, and ``ssd_bytes_and_flops`` counts the bytes
and FLOPs the chapter's roofline needs.
"""
from .reference import ssd_bytes_and_flops, ssd_reference, ssd_sequential
from .ssd import check_inputs, export_cubins, mamba_chunk_scan_combined

__all__ = ["mamba_chunk_scan_combined", "check_inputs", "export_cubins", "ssd_reference", "ssd_sequential",
           "ssd_bytes_and_flops"]
