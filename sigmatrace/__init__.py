"""sigmatrace: see every RDMA operation a program performs, CPU- or GPU-initiated."""

__version__ = "0.1.0"
