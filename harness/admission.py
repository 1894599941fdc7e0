"""Which load_inline calls the harness builds at all: an identifier for a name, sources and flags of bounded size, and
only compiler and linker flags of known forms, none of which can reach a shell, load code or read a file of its own.

A `Call` comes from a worker that runs the candidate, so every field is data to check, not to trust. The caller checks
it before anything touches the disk (`builder.build_entry`), the builder again before a compiler sees it, and the
candidate's own worker first, so that honest code gets torch's usual RuntimeError with the reason.

torch writes the flags and `-DTORCH_EXTENSION_NAME=<name>` unquoted into build.ninja, whose commands run through
/bin/sh, and the light build runs the compilers with those lines too: every accepted flag is therefore a word of
plain characters (letters, digits, `_ . , = + - /`), so no quote, space, `$`, `;`, `|`, `&`, `<`, `>`, backquote,
glob character or newline ever reaches a shell or ninja. Within that alphabet, a flag must also match one of the forms
below; anything else (plugins, `-B`, `-specs=`, `@file`, `-Wl,`/`-Xlinker`, `-ccbin`, `--options-file`, `-include`,
`-wrapper`, `-fuse-ld=`, `-Xclang`, `-mllvm`, ...) is refused with the flag named.
"""

from __future__ import annotations

import keyword
import re
from typing import Any

MAX_NAME = 100  # characters in an extension's name
MAX_SOURCES = 64  # source strings in one call
MAX_SOURCE_BYTES = 16 << 20  # all its source strings together
MAX_FLAGS = 64  # items in one flag list
MAX_FLAG = 256  # characters in one flag
MAX_FUNCTIONS = 1024
MAX_DOCSTRING = 4096

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"[A-Za-z0-9_.,=+\-/]+")  # the characters any flag may hold
_PATH = r"/?[A-Za-z0-9_.+\-][A-Za-z0-9_.+\-/]*"  # an include or library folder: plain characters, no comma
_VALUE = r"[A-Za-z0-9_.+\-]*"  # a macro's value, a switch's argument
_ARCH = r"(?:sm|compute|lto)_\d+[af]?"
_ARCH_LIST = re.compile(r"\d+\.\d+[af]?(\+PTX)?([ ;]\d+\.\d+[af]?(\+PTX)?)*")  # TORCH_CUDA_ARCH_LIST

# Flags every compiler here takes the same way (g++ directly, nvcc and g++ through -Xcompiler)
_COMMON = [
    r"-O[0-3sgz]?", r"-Ofast",
    r"-std=(c|gnu)(\+\+)?[0-9a-z]{2}",
    rf"-D[A-Za-z_][A-Za-z0-9_]*(={_VALUE})?", r"-U[A-Za-z_][A-Za-z0-9_]*",
    rf"-I{_PATH}",
    r"-w",
    r"-g", r"-g[0-3]", r"-ggdb[0-3]?",
]
_HOST = _COMMON + [
    r"-W[A-Za-z0-9][A-Za-z0-9\-=+_]*",  # warnings; -Wl, -Wa and -Wp hold a comma, or are refused below
    rf"-f[A-Za-z0-9][A-Za-z0-9\-+_]*(={_VALUE})?",  # switches, minus the names in _REFUSED_SWITCHES
    rf"-m[A-Za-z0-9][A-Za-z0-9\-+_.]*(={_VALUE})?",
    r"-pthread", r"-pedantic", r"-pedantic-errors",
]
_LINK = [r"-l[A-Za-z0-9_+.\-]+", rf"-L{_PATH}", r"-pthread", r"-fopenmp", r"-static-libstdc\+\+", r"-static-libgcc",
         r"-O[0-3]?", r"-shared", r"-fPIC"]
_NVCC = _COMMON + [
    r"-W[A-Za-z0-9][A-Za-z0-9\-=+_]*", r"--Werror=[a-z\-]+",
    r"--?use_fast_math", r"--?(ftz|prec-div|prec-sqrt|fmad)=(true|false)",
    r"--?(expt-relaxed-constexpr|expt-extended-lambda|extended-lambda|restrict|resource-usage|res-usage"
    r"|allow-unsupported-compiler|extra-device-vectorization|generate-line-info|dlto)",
    r"-lineinfo", r"-G", r"--device-debug",
    rf"(-arch|--gpu-architecture|-code|--gpu-code)=({_ARCH}(,{_ARCH})*|native|all|all-major)",
    rf"(-gencode|--generate-code)=arch=compute_\d+[af]?,code={_ARCH}",
    r"--?maxrregcount=\d+", r"(-t|--threads|--split-compile)=\d+",
    r"(-rdc|--relocatable-device-code)=(true|false)", r"--default-stream=(legacy|null|per-thread)",
    r"--?diag-(suppress|warn|error)=[0-9,]+",
    r"-l[A-Za-z0-9_+.\-]+", rf"-L{_PATH}",
]
# Flags whose value may come as the next item, as nvcc and gcc also read them ("-arch", "sm_90")
_SPLIT = {"host": {"-I", "-D", "-U"}, "link": {"-l", "-L"},
          "nvcc": {"-I", "-D", "-U", "-l", "-L", "-arch", "--gpu-architecture", "-code", "--gpu-code", "-gencode",
                   "--generate-code", "-maxrregcount", "--maxrregcount", "-t", "--threads", "--split-compile",
                   "-rdc", "--relocatable-device-code", "--default-stream", "-std", "--std",
                   "-Xptxas", "--ptxas-options", "-Xcompiler", "--compiler-options", "-Xcudafe"}}
_GLUED = {"-I", "-D", "-U", "-l", "-L"}  # written without "=" when glued to their value
# Names of -f and -m switches (after an optional "no-") that load code, run programs, or read or write files of their
# choosing: refused even where their form would pass
_REFUSED_SWITCHES = {
    "f": ("plugin", "pass-plugin", "module", "use-ld", "use-linker-plugin", "lto", "profile", "auto-profile", "dump",
          "opt-info", "save-optimization-record", "record-", "sanitize-blacklist", "sanitize-ignorelist",
          "sanitize-coverage", "callgraph-info", "debug-prefix-map", "file-prefix-map", "macro-prefix-map",
          "diagnostics-add-output", "diagnostics-set-output", "self-test", "embed-bitcode", "crash-diagnostics",
          "compare-debug", "jobserver", "preprocessed", "working-directory", "coverage", "test-coverage",
          "stack-usage", "ident", "pch"),
    "m": ("llvm", "plugin"),
}
_PASSED_ON = {"-Xptxas": "ptxas", "--ptxas-options": "ptxas", "-Xcompiler": "host", "--compiler-options": "host",
              "-Xcudafe": "cudafe"}  # nvcc's options whose values go to another program, split at commas
_PTXAS = re.compile(r"-v|--verbose|-O[0-3]|-dlcm=(ca|cg|cs|lu|cv)|-dscm=(wb|cg|cs|wt)|--?warn-on-spills|-warn-spills"
                    r"|-warn-lmem-usage|--warn-on-local-memory-usage|-warn-double-usage"
                    r"|--warn-on-double-precision-use|--?allow-expensive-optimizations(=(true|false))?"
                    r"|--?maxrregcount=\d+|--?def-(load|store)-cache=[a-z]+|--?suppress-stack-size-warning")
_CUDAFE = re.compile(r"--?diag_(suppress|warning|error|default)=[A-Za-z0-9_]+|--display_error_number")
_FORMS = {kind: re.compile("|".join(f"(?:{form})" for form in forms))
          for kind, forms in (("host", _HOST), ("link", _LINK), ("nvcc", _NVCC))}
_LISTS = {"extra_cflags": "host", "extra_cuda_cflags": "nvcc", "extra_ldflags": "link"}
_SWITCHES = ("with_pytorch_error_handling", "no_implicit_headers")
_KNOWN = {*_LISTS, "extra_include_paths", "functions", "with_cuda", "is_python_module", *_SWITCHES}


def safe_name(name: Any) -> bool:
    """An extension's name the cache may hold: a Python identifier of ASCII letters, digits and underscores (never a
    path: no "/", no "..", nothing a shell would read), at most MAX_NAME long."""
    return isinstance(name, str) and bool(_IDENTIFIER.fullmatch(name)) and len(name) <= MAX_NAME \
        and not keyword.iskeyword(name)


def refusal(call: Any, mode: str = "") -> str:
    """Why `call` (a build.Call, or what a worker sent as one) is not built; "" when it may be. Says what the
    candidate asked for, shortened, so a report can show it."""
    name = call.name
    if not safe_name(name):
        return f"the extension's name {_shown(name)} is not a Python identifier of at most {MAX_NAME} characters"
    if mode not in ("", "plain"):
        return f"the build mode {_shown(mode)} is not one the harness knows"
    sources = [*call.cpp, *call.cuda]
    if len(sources) > MAX_SOURCES or not all(isinstance(s, str) for s in sources):
        return f"extension {name!r} has {len(sources)} sources, or sources that are not strings"
    if sum(len(s.encode("utf-8", "surrogatepass")) for s in sources) > MAX_SOURCE_BYTES:
        return f"extension {name!r}'s sources are over {MAX_SOURCE_BYTES >> 20} MiB together"
    if not isinstance(call.arch, str) or not _ARCH_LIST.fullmatch(call.arch):
        return f"the CUDA architecture list {_shown(call.arch)} is not of the form 9.0 or 8.6+PTX;9.0"
    if not (isinstance(call.torch, str) and len(call.torch) <= 64 and isinstance(call.python, str)
            and re.fullmatch(r"\d+\.\d+", call.python)):
        return "the torch or Python version of the call is not a version string"
    return _flags_refusal(name, call.flags)


def _flags_refusal(name: str, flags: Any) -> str:
    if not isinstance(flags, dict):
        return f"extension {name!r}'s arguments are not a mapping"
    unknown = sorted(str(k) for k in flags if k not in _KNOWN)
    if unknown:
        return f"extension {name!r} passes {_shown(unknown[0])}, which the harness does not build with"
    for key, kind in _LISTS.items():
        why = _list_refusal(flags.get(key), key, kind)
        if why:
            return f"extension {name!r}: {why}"
    paths = flags.get("extra_include_paths")
    why = _strings_refusal(paths, "extra_include_paths")
    if why:
        return f"extension {name!r}: {why}"
    for path in (p.strip() for p in paths or []):
        if path and not re.fullmatch(_PATH, path):
            return f"extension {name!r}: include path {_shown(path)} holds characters other than letters, digits " \
                   "and _ . + - /"
    why = _functions_refusal(flags.get("functions"))
    if why:
        return f"extension {name!r}: {why}"
    for key in ("with_cuda", "is_python_module", *_SWITCHES):
        value = flags.get(key)
        if key in flags and not (isinstance(value, bool) or value is None and key == "with_cuda"):
            return f"extension {name!r}: {key} is {_shown(value)}, not True or False"
    return ""


def _strings_refusal(value: Any, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return f"{key} is {_shown(value)}, not a list of strings"
    if len(value) > MAX_FLAGS or any(len(v) > MAX_FLAG for v in value):
        return f"{key} has more than {MAX_FLAGS} items, or one longer than {MAX_FLAG} characters"
    return ""


def _list_refusal(value: Any, key: str, kind: str) -> str:
    why = _strings_refusal(value, key)
    if why or not value:
        return why
    words = []
    for item in value:
        for word in item.split(" "):  # torch joins the items with spaces: the shell splits one item so too
            if word and not _WORD.fullmatch(word):
                return f"flag {_shown(item)} in {key} holds a character other than letters, digits and " \
                       "_ . , = + - / (a shell or ninja would read it)"
            if word:
                words.append(word)
    index = 0
    while index < len(words):
        word = words[index]
        if word in _SPLIT[kind]:  # "-arch", "sm_90": the value is the next word
            if index + 1 == len(words):
                return f"flag {word!r} in {key} has no value after it"
            value_word = words[index + 1]
            word = f"{word}{value_word}" if word in _GLUED else f"{word}={value_word}"
            index += 1
        why = _word_refusal(word, kind)
        if why:
            return f"flag {_shown(word)} in {key} {why}"
        index += 1
    return ""


def _word_refusal(word: str, kind: str) -> str:
    """Why one flag (its value joined to it) is refused; "" when it is of a known form."""
    if kind == "nvcc":
        option, _, value = word.partition("=")
        if option in _PASSED_ON:
            return _passed_on_refusal(value, _PASSED_ON[option])
        if option == "--std":
            word = word[1:]
    if _loads_code(word):
        return "could load code, or read or write files of its choosing"
    if _FORMS[kind].fullmatch(word):
        return ""
    return ("is not among the flags the harness builds with (optimisation, -std, -D/-U, warnings, -f/-m switches, "
            "nvcc's usual options, -I/-L/-l with plain paths); flags that load code or read files are refused")


def _passed_on_refusal(value: str, program: str) -> str:
    for part in value.split(","):
        if program == "host":
            why = _word_refusal(part, "host")
        else:
            why = "" if (_PTXAS if program == "ptxas" else _CUDAFE).fullmatch(part) else \
                f"passes {part!r} to {program}, which is not among the options the harness lets through"
        if why:
            return why
    return ""


def _loads_code(word: str) -> bool:
    switch = re.match(r"-([fm])(no-)?([A-Za-z0-9][A-Za-z0-9\-+_.]*)", word)
    if switch:
        return switch[3].lower().startswith(_REFUSED_SWITCHES[switch[1]])
    # the linker's, assembler's and preprocessor's own options: -Wl,-T,script, -Wl,--plugin=..., -Wp,-include,...
    return word in ("-Wl", "-Wa", "-Wp") or word.startswith(("-Wl,", "-Wa,", "-Wp,", "-Xlinker", "-Xassembler",
                                                               "-Xpreprocessor", "-Xclang"))
def _functions_refusal(functions: Any) -> str:
    if functions is None:
        return ""
    if isinstance(functions, str):
        functions = [functions]
    names = list(functions) if isinstance(functions, (list, dict)) else None
    if names is None or len(names) > MAX_FUNCTIONS or not all(isinstance(n, str) for n in names):
        return f"functions is {_shown(functions)}, not a list of names or a mapping of names to docstrings"
    bad = [n for n in names if not _IDENTIFIER.fullmatch(n) or len(n) > MAX_NAME]
    if bad:
        return f"function name {_shown(bad[0])} is not a C++ identifier"
    if isinstance(functions, dict) and not all(isinstance(d, str) and len(d) <= MAX_DOCSTRING
                                               for d in functions.values()):
        return f"a docstring in functions is not a string of at most {MAX_DOCSTRING} characters"
    return ""


def _shown(value: Any, limit: int = 80) -> str:
    """`value` for a message: its repr (control characters escaped), cut short."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
