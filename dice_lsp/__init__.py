"""dice-lsp: a language server that writes, checks and benchmarks CUDA kernels for PyTorch modules.

The server and the command line live here; `engine` writes kernels, `harness` checks them.
"""

__version__ = "0.1.0"
