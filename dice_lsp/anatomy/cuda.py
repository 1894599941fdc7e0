"""The functions inside a C++/CUDA source string: `__global__` kernels, `__device__` helpers, host launchers.

Read with tree-sitter-cuda from the string's value; ranges are offsets into that value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from dice_lsp.anatomy.offsets import ByteOffsets


@dataclass(frozen=True)
class FoundFunction:
    name: str
    kind: str  # "global" | "device" | "host"
    start: int  # value offsets
    end: int
    name_start: int
    name_end: int


@lru_cache(maxsize=1)
def _parser() -> Parser:
    return Parser(Language(tree_sitter_cuda.language()))


def read_functions(value: str) -> tuple[list[FoundFunction], list[tuple[int, int]]]:
    """The function definitions in `value` and the ranges tree-sitter could not parse (both as value offsets)."""
    data = value.encode("utf-8")
    offsets = ByteOffsets(value, data)
    tree = _parser().parse(data)
    found: list[FoundFunction] = []
    errors: list[tuple[int, int]] = []
    _walk(tree.root_node, offsets, found, errors)
    return found, errors


def _walk(node: Node, offsets: ByteOffsets, found: list[FoundFunction], errors: list[tuple[int, int]]) -> None:
    for child in node.children:
        if child.type == "function_definition":
            function = _function(child, offsets)
            if function is not None:
                found.append(function)
            continue  # nothing we care about is nested inside a function body
        if child.is_error or child.is_missing:
            errors.append((offsets.char(child.start_byte), offsets.char(child.end_byte)))
        if child.type in ("template_declaration", "namespace_definition", "declaration_list", "linkage_specification",
                          "preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif") or child.is_error:
            _walk(child, offsets, found, errors)


def _function(node: Node, offsets: ByteOffsets) -> FoundFunction | None:
    kind = "host"
    declarator = None
    for child in node.children:
        if child.type == "__global__":
            kind = "global"
        elif child.type == "__device__" and kind != "global":
            kind = "device"
        elif child.type in ("function_declarator", "pointer_declarator", "reference_declarator"):
            declarator = child
    name_node = _declarator_name(declarator)
    if name_node is None:
        return None
    # A template's `template <...>` belongs to the definition the user sees.
    start_node = node.parent if node.parent is not None and node.parent.type == "template_declaration" else node
    return FoundFunction(
        name=name_node.text.decode("utf-8", "replace").split("::")[-1],
        kind=kind,
        start=offsets.char(start_node.start_byte),
        end=offsets.char(node.end_byte),
        name_start=offsets.char(name_node.start_byte),
        name_end=offsets.char(name_node.end_byte),
    )


def _declarator_name(node: Node | None) -> Node | None:
    while node is not None:
        if node.type == "function_declarator":
            inner = node.child_by_field_name("declarator")
            if inner is not None and inner.type in ("identifier", "field_identifier", "qualified_identifier",
                                                    "destructor_name", "operator_name", "template_function"):
                return inner
            node = inner
        elif node.type in ("pointer_declarator", "reference_declarator"):
            node = node.child_by_field_name("declarator") or (node.named_children[-1] if node.named_children else None)
        else:
            return None
    return None


def launches(value: str, kernel: str) -> bool:
    """Whether `value` launches `kernel` with the triple-chevron syntax (templates allowed: `k<float><<<...>>>`)."""
    return bool(launch_sites(value, kernel))


def launch_sites(value: str, kernel: str) -> list[tuple[int, int]]:
    """Where `value` launches `kernel`: (start, end) value offsets of each `kernel<<<`, from the name to the chevrons."""
    return [match.span() for match in re.finditer(rf"\b{re.escape(kernel)}\s*(<[^<>;]*>)?\s*<<<", value)]
