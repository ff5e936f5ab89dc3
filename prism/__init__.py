"""PRISM: GPU-cluster workload forecasting with dynamic demand primitives."""

__version__ = "0.1.0"
