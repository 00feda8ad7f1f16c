"""nccl-runbook: decision-tree runbooks that find the earliest anomaly behind an NCCL failure."""

__version__ = "1.2.0"
__all__ = ["__version__"]
