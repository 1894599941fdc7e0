"""dice-lsp: a language server that writes, checks and benchmarks CUDA kernels for PyTorch modules.

One import namespace, in data-flow order from the ground up: `anatomy` reads a file, `engine` writes kernels and
`harness` checks them (side by side), `train` and `evaluation` stand on both, and the server and CLI wire it all.
"""

__version__ = "0.1.0"
