"""Subcommands of `dice-lsp`, one module each."""
