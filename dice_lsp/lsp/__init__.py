"""pygls adapted to dice-lsp: the only package besides the handlers (dice_lsp/server.py) and the conversions
(dice_lsp/convert.py) that speaks pygls or LSP types.

- `protocol`: pygls' protocol with what we change in it (invalid params answered, commands cancelled for real);
  every private pygls name we touch is in that one module.
- `editor`: the session's `Editor` over an LSP connection (diagnostics, progress, edits, settings).
- `transport`: one client over stdio or TCP, and an end on SIGINT/SIGTERM that leaves nothing running.
"""
