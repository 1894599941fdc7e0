"""`python -m dice_lsp [SERVE-OPTIONS]` starts the language server over stdio (what editors launch).

`python -m dice_lsp COMMAND ...` runs any other command, as `dice-lsp COMMAND ...` does.
"""

import sys

from dice_lsp.cli import COMMANDS, main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version")):
        argv = ["serve", *argv]  # editors pass server options only
    sys.exit(main(argv))
