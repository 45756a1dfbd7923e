"""hostnet-rdma: a mutating admission webhook for multi-node PyTorch on the host network."""

__version__ = "0.1.0"
