"""Asked by the VS Code extension before it starts the server: can this interpreter run dice-lsp, and if not, why.

Run as `python -c <this file's text> [--dependencies]` with the same environment and folder as the server, so
`import dice_lsp` finds what `python -m dice_lsp` would. Prints one JSON object:
  python              this interpreter's version
  error               why `import dice_lsp` failed ("ModuleNotFoundError: No module named 'dice_lsp'"), if it did
  origin              the folder dice_lsp was imported from
  missing             with --dependencies: what dice-lsp's metadata requires and this interpreter lacks, each as
                      "torch>=2.6" or "torch>=2.6 (2.4.1 installed)"; an unmet Requires-Python too
  externallyManaged   pip refuses to install here without --break-system-packages (PEP 668)
Written for any Python 3: an interpreter too old to run it is still told apart by its error.
"""

import json
import os
import sys
import sysconfig


def externally_managed():
    """PEP 668's marker: an EXTERNALLY-MANAGED file beside the standard library, outside any virtual environment."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
        return False
    stdlib = sysconfig.get_path("stdlib")
    return bool(stdlib) and os.path.isfile(os.path.join(stdlib, "EXTERNALLY-MANAGED"))


def packaging():
    """The `packaging` library (or pip's copy of it), which reads requirements as pip does; None without either."""
    try:
        from packaging import requirements, version
    except ImportError:
        try:
            from pip._vendor.packaging import requirements, version
        except ImportError:
            return None
    return requirements, version


def missing_requirements():
    """dice-lsp's unmet requirements, as pip would judge them from the distribution's metadata; [] when it cannot
    tell (no metadata, no packaging library): the server's start then shows what is wrong."""
    from importlib import metadata

    tools = packaging()
    try:
        distribution = metadata.distribution("dice-lsp")
    except metadata.PackageNotFoundError:
        return []
    if tools is None:
        return []
    requirements, version = tools
    out = []
    needs_python = distribution.metadata.get("Requires-Python")
    here = ".".join(str(part) for part in sys.version_info[:3])
    if needs_python and not requirements.SpecifierSet(needs_python).contains(here, prereleases=True):
        out.append("Python %s (this is %s)" % (needs_python, here))
    for line in distribution.requires or []:
        requirement = requirements.Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an optional extra, or another platform's
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            out.append(str(requirement))
            continue
        if not requirement.specifier.contains(version.Version(installed), prereleases=True):
            out.append("%s (%s installed)" % (requirement, installed))
    return out


def main():
    answer = {"python": sys.version.split()[0], "externallyManaged": externally_managed()}
    try:
        import dice_lsp
    except Exception as error:  # noqa: BLE001 -- whatever stops the import stops the server: say it
        answer["error"] = "%s: %s" % (type(error).__name__, error)
    else:
        answer["origin"] = os.path.dirname(os.path.abspath(dice_lsp.__file__))
        if "--dependencies" in sys.argv:
            answer["missing"] = missing_requirements()
    print(json.dumps(answer))


main()
