"""`python -m dice_lsp` starts the language server over stdio (what editors launch)."""

import sys

from dice_lsp.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["serve"]))
