"""Adversarial candidates against the build path (THREATS: escape through the build). A candidate shapes the `Call`
its worker sends: its name, flags and sources, and, sent round its worker's own Builder, any field at all. Each attack
is aimed at a decoy folder the test makes; the defence holds when the check ends without a clean verdict, says what
was refused, and the decoy's files, modes and owners are exactly as they were.

C++-only candidates run for real on the CPU; the CUDA one builds here (nvcc) and is not run.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from decoys import Decoy

from dice_lsp.harness import Options, admission, check
from dice_lsp.harness.build import Call

@pytest.fixture
def decoy(tmp_path) -> Decoy:
    return Decoy(tmp_path / "decoy")



@pytest.fixture
def own_cache(sandboxed, tmp_path) -> Options:
    """A build cache of the test's own: what it plants there, and what a refused build would have left, go with it."""
    return sandboxed.with_(cache_dir=str(tmp_path / "cache" / "extensions"))


def tiny_solution(name: str, extra: str = "", prelude: str = "") -> str:
    """A C++ extension that adds two tensors, named `name`, with `extra` load_inline arguments."""
    return f'''{prelude}
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = "torch::Tensor add_values(torch::Tensor a, torch::Tensor b) {{ return a + b; }}"
extension = load_inline(name={name!r}, cpp_sources=SOURCE, functions=["add_values"]{extra})


class ModelNew(nn.Module):
    def forward(self, a, b):
        return extension.add_values(a, b)
'''


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def refused(report) -> str:
    """The build-refused finding's message; fails the test when there is none."""
    found = [f for f in report.findings if f.code == "build-refused"]
    assert found, (report.status, report.message, codes(report))
    assert found[0].severity == "error"
    return found[0].message


# -- the names, flags and fields a call may carry: the rules alone ---------------------------------------------------
def call(name: str = "ext", **flags) -> Call:
    return Call(name, ("torch::Tensor f(torch::Tensor x);",), (), flags, "9.0", "2.14.1", "3.11")


HONEST_FLAGS = [
    {"extra_cflags": ["-O3", "-march=native", "-fopenmp", "-ffast-math", "-std=c++17", "-DBLOCK=256", "-w", "-Wall",
                      "-Wno-unused-variable", "-UNDEBUG", "-fPIC", "-g"]},
    {"extra_cuda_cflags": ["-O3", "--use_fast_math", "-Xptxas", "-O3,-v", "-gencode=arch=compute_90a,code=sm_90a",
                           "-arch", "sm_90", "--expt-relaxed-constexpr", "--extended-lambda", "-lineinfo",
                           "-Xcompiler", "-fopenmp", "--ptxas-options=-v", "-maxrregcount=64",
                           "-U__CUDA_NO_HALF_OPERATORS__", "--std=c++17", "-Xcudafe", "--diag_suppress=177",
                           "--ftz=true", "--prec-div=false", "--fmad=true", "-DNDEBUG"]},
    {"extra_ldflags": ["-lcublas", "-L/usr/local/cuda/lib64", "", "-lcuda -lcurand"]},
    {"extra_include_paths": ["/usr/include/eigen3"]},
    {"functions": ["f", "g"]}, {"functions": {"f": 'its "doc"'}},
    {"with_cuda": None, "is_python_module": True, "with_pytorch_error_handling": False, "no_implicit_headers": False},
]


@pytest.mark.parametrize("flags", HONEST_FLAGS, ids=lambda f: next(iter(f)))
def test_the_flags_honest_kernels_use_are_built(flags):
    assert admission.refusal(call(**flags)) == ""


REFUSED = {
    "shell": {"extra_cflags": ["-O0 ; touch /tmp/x ; #"]},
    "command substitution": {"extra_cflags": ["-DX=$(id)"]},
    "newline into build.ninja": {"extra_cflags": ["-O2\nrule x"]},
    "plugin": {"extra_cflags": ["-fplugin=/tmp/x.so"]},
    "module mapper": {"extra_cflags": ["-fmodule-mapper=x"]},
    "-B": {"extra_cflags": ["-B/tmp/tools"]},
    "specs": {"extra_cflags": ["-specs=/tmp/x.specs"]},
    "response file": {"extra_cflags": ["@/tmp/args"]},
    "Xclang load": {"extra_cflags": ["-Xclang", "-load"]},
    "mllvm": {"extra_cflags": ["-mllvm"]},
    "include": {"extra_cflags": ["-include", "/etc/shadow"]},
    "imacros": {"extra_cflags": ["-imacros/etc/shadow"]},
    "wrapper": {"extra_cflags": ["-wrapper", "sh"]},
    "save-temps": {"extra_cflags": ["-save-temps"]},
    "linker script": {"extra_ldflags": ["-T/tmp/x.ld"]},
    "linker option": {"extra_ldflags": ["-Wl,-rpath,/tmp,--plugin=/tmp/x.so"]},
    "linker": {"extra_ldflags": ["-fuse-ld=/tmp/ld"]},
    "ccbin": {"extra_cuda_cflags": ["-ccbin", "/tmp/cc"]},
    "compiler-bindir": {"extra_cuda_cflags": ["--compiler-bindir=/tmp"]},
    "options file": {"extra_cuda_cflags": ["--options-file", "/tmp/args"]},
    "Xcompiler plugin": {"extra_cuda_cflags": ["-Xcompiler", "-fplugin=/tmp/x.so"]},
    "Xcompiler linker": {"extra_cuda_cflags": ["-Xcompiler=-O2,-Wl,-T,/tmp/x.ld"]},
    "Xlinker": {"extra_cuda_cflags": ["-Xlinker", "--script=/tmp/x.ld"]},
    "ptxas options file": {"extra_cuda_cflags": ["-Xptxas", "--options-file=/tmp/x"]},
    "a string, not a list": {"extra_cflags": "-O3"},
    "include path with a shell": {"extra_include_paths": ["/tmp/x;id"]},
    "function name into C++": {"functions": ["f); system(\"id\"); (void"]},
    "unknown argument": {"build_directory": "/tmp/x"},
    "not a boolean": {"is_python_module": "yes"},
}


@pytest.mark.parametrize("attack", sorted(REFUSED))
def test_flags_that_reach_a_shell_load_code_or_read_files_are_refused(attack):
    assert admission.refusal(call(**REFUSED[attack])) != ""


@pytest.mark.parametrize("name", ["../../../srv/pwn", "/tmp/x/pwn", "a/b", "pwn;id", "ext$(id)", "", "x" * 101,
                                  "class", "\u00e9t\u00e9", "a\nb", "-rf"])
def test_a_name_must_be_a_python_identifier(name):
    assert "identifier" in admission.refusal(call(name))


def test_other_fields_are_checked_too():
    assert "architecture" in admission.refusal(Call("ext", (), (), {}, "9.0;$(id)", "2.14", "3.11"))
    assert "mode" in admission.refusal(call(), mode="../plain")
    assert "sources" in admission.refusal(Call("ext", ("x" * (admission.MAX_SOURCE_BYTES + 1),), (), {}, "9.0",
                                               "2.14", "3.11"))


def test_a_call_refuses_to_name_a_folder_outside_its_root(tmp_path):
    """The last line: whatever let such a call through, its directory is never outside the cache."""
    with pytest.raises(ValueError):
        call("../../pwn").directory(tmp_path)


def test_the_builder_refuses_what_the_caller_would(tmp_path):
    """Defence in depth: the builder's own entry point refuses before any compiler runs."""
    from dice_lsp.harness.build import compile_entry

    made = compile_entry(call(extra_cflags=["-O0 ; touch x"]), str(tmp_path), True)
    assert not made.ok and "character" in made.refused and not list(tmp_path.iterdir())


# -- the attacks, end to end ----------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_name_that_leaves_the_cache_is_refused(files, own_cache, decoy, form):
    cache = Path(own_cache.extensions_dir)
    cache.mkdir(parents=True)
    target = decoy.folder / "pwn"
    name = os.path.relpath(target, cache) if form == "relative" else str(target)
    report = check(files.text("add_reference.py"), tiny_solution(name), own_cache)
    assert decoy.unchanged()
    assert not [p for p in cache.parent.rglob("*") if "pwn" in p.name]
    assert report.status == "compile-error", (report.status, report.message)
    assert "identifier" in refused(report)


def around_the_worker(call_fields: dict, mode: str = "") -> str:
    """A prelude that sends a BuildRequest of its own on the worker's reply pipe, past the worker's Builder, and
    waits for the answer; then raises with it, so a report that gets that far shows what came back."""
    return f'''
import json, os, sys
import torch
fields = json.loads({json.dumps(json.dumps(call_fields))})
fields.setdefault("torch", torch.__version__)
fields.setdefault("python", "%d.%d" % sys.version_info[:2])
request = json.dumps({{"reply": "build-request", "call": fields, "mode": {mode!r}}})
os.write(int(sys.argv[1]), (request + "\\n").encode())
answer = sys.stdin.readline()
raise RuntimeError("ESCAPED: the caller answered " + answer[:300])
'''


@pytest.mark.slow
def test_a_build_request_sent_round_the_worker_is_refused_by_the_caller(files, own_cache, decoy):
    cache = Path(own_cache.extensions_dir)
    cache.mkdir(parents=True)
    fields = {"name": os.path.relpath(decoy.folder / "pwn", cache), "cpp": ["int f() { return 1; }"], "cuda": [],
              "flags": {"functions": None}, "arch": "9.0"}
    report = check(files.text("add_reference.py"), around_the_worker(fields) + tiny_solution("unused_ext"), own_cache)
    assert decoy.unchanged()
    assert "ESCAPED" not in report.message + (report.log or "")
    assert report.status == "compile-error", (report.status, report.message)
    assert "identifier" in refused(report) and "round" in refused(report)


SHELL_FLAGS = {
    "semicolon": ["-O1 ; touch {marker} ; #"],
    "command substitution": ["-DX=$(touch {marker})"],
}


@pytest.mark.slow
@pytest.mark.parametrize("attack", sorted(SHELL_FLAGS))
@pytest.mark.parametrize("path", ["load_inline", "round the worker"])
def test_shell_in_flags_never_runs(files, own_cache, attack, path):
    marker = f"shell-ran-{uuid.uuid4().hex[:8]}"
    flags = [flag.format(marker=marker) for flag in SHELL_FLAGS[attack]]
    if path == "load_inline":
        solution = tiny_solution("shell_flags", f", extra_cflags={flags!r}")
    else:
        fields = {"name": "shell_flags", "cpp": ["int f() { return 1; }"], "cuda": [], "arch": "9.0",
                  "flags": {"extra_cflags": flags, "functions": None}}
        solution = around_the_worker(fields) + tiny_solution("unused_ext")
    report = check(files.text("add_reference.py"), solution, own_cache)
    assert not [p for p in Path(own_cache.extensions_dir).parent.rglob(f"*{marker}*")]
    assert report.status == "compile-error", (report.status, report.message)
    assert "character" in refused(report)


def entry_of(name: str, solution_flags: dict, arch: str = "") -> str:
    """The cache entry's folder name a worker asks for: `<name>-<key>`, the key worked out as the worker does."""
    from dice_lsp.harness.build import FLAGS, Call

    import torch
    import sys

    flags = {"extra_cflags": None, "extra_cuda_cflags": None, "extra_ldflags": None, "extra_include_paths": None,
             "functions": ["add_values"], "with_cuda": None, "is_python_module": True,
             "with_pytorch_error_handling": True, "no_implicit_headers": False, **solution_flags}
    made = Call(name, ("torch::Tensor add_values(torch::Tensor a, torch::Tensor b) { return a + b; }",), (),
                {k: flags[k] for k in FLAGS}, arch or os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0",
                torch.__version__, "%d.%d" % sys.version_info[:2])
    return made.directory("/").name


@pytest.mark.slow
def test_a_link_planted_where_an_entry_goes_is_not_followed(files, own_cache, decoy):
    """A link named as a later call's entry (the key is computable) to a folder of the user's: the caller neither
    changes what it points at (chown, a read-write bind, the builder's files) nor builds into it."""
    cache = Path(own_cache.extensions_dir)
    cache.mkdir(parents=True)
    name = f"planted_{uuid.uuid4().hex[:8]}"
    (cache / entry_of(name, {})).symlink_to(decoy.folder, target_is_directory=True)
    report = check(files.text("add_reference.py"), tiny_solution(name), own_cache)
    assert decoy.unchanged()
    assert report.status != "correct", report.message
    assert "not a folder the harness made" in report.message + (report.log or ""), report.message


@pytest.mark.slow
def test_a_link_planted_for_the_shared_header_is_not_followed(files, own_cache, decoy):
    """The shared precompiled header's folder, replaced by a link to a folder of the user's: neither a build of
    plain flags nor `harness.prepare` follows it."""
    from dice_lsp import harness

    cache = Path(own_cache.extensions_dir)
    cache.mkdir(parents=True)
    (cache / "pch").symlink_to(decoy.folder, target_is_directory=True)
    report = check(files.text("add_reference.py"), tiny_solution(f"plain_{uuid.uuid4().hex[:8]}"), own_cache)
    assert report.status == "correct", (report.status, report.message)
    assert decoy.unchanged()
    with pytest.raises(harness.HarnessError, match="not a folder the harness made"):
        harness.prepare(own_cache)
    assert decoy.unchanged()
