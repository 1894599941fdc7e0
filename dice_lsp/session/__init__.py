"""The editor's logic without a transport or pygls: what happens when the editor tells the server something or asks
it to do something. dice_lsp/server.py calls it from each LSP handler; tests call it with a recording Editor.

- `state`: the `Session`, the state every call shares (open files, settings, the check runner, the engine).
- `editor`: what the session needs from an editor (`Editor`) and the plain values that cross it.
- `notifications`: the client is ready, the settings changed, a file was opened, typed in, saved or closed.
- `checks`: a harness check, on save or by *Benchmark*.
- `generate`: *Generate* and *Infill*, from the engine's child to a new file or an edit.
- `files`: the files it reads and writes besides the open ones.
"""

from dice_lsp.session.state import Session

__all__ = ["Session"]
