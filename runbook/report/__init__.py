"""Renderers of the verdict: json (the contract), markdown (the incident write-up shape)."""
