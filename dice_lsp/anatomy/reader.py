"""Reads a kernel file's Python with tree-sitter: Model, ModelNew, get_inputs, load_inline calls and their sources.

Source strings are followed from `cuda_sources=` / `cpp_sources=` back to their module-level assignments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter_python
from tree_sitter import Language, Node, Parser

from dice_lsp.anatomy.cuda import read_functions
from dice_lsp.anatomy.literals import Literal, evaluate_literal
from dice_lsp.anatomy.offsets import ByteOffsets
from dice_lsp.anatomy.types import Call, ClassInfo, CudaFunction, Extension, SourceString, Span

REFERENCE_LINK = re.compile(r"#\s*dice:\s*reference\s*[=:]\s*(?P<path>\S.*?)\s*$", re.MULTILINE)


@lru_cache(maxsize=1)
def _parser() -> Parser:
    return Parser(Language(tree_sitter_python.language()))


@dataclass
class Assignment:
    name: str
    statement: Node
    value: Node


@dataclass
class Reading:
    """What the reader found; `parse` turns it into an Anatomy."""

    model: ClassInfo | None = None
    model_new: ClassInfo | None = None
    get_inputs: Span | None = None
    get_init_inputs: Span | None = None
    extensions: list[Extension] = field(default_factory=list)
    syntax_errors: list[Span] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Nodes the deception checks look at again.
    classes: dict[str, Node] = field(default_factory=dict)
    module: Node | None = None


class FileReader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8", "surrogatepass")
        self.offsets = ByteOffsets(text, self.data)
        self.tree = _parser().parse(self.data)
        self.assignments: dict[str, list[Assignment]] = {}
        self.unresolved: list[str] = []  # source arguments that are not string expressions we can evaluate

    # -- positions -------------------------------------------------------------------------------------------------
    def span(self, node: Node) -> Span:
        return Span(self.offsets.char(node.start_byte), self.offsets.char(node.end_byte))

    def source(self, node: Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    # -- the whole file --------------------------------------------------------------------------------------------
    def read(self) -> Reading:
        root = self.tree.root_node
        reading = Reading(module=root)
        if root.has_error:
            reading.syntax_errors = [self.span(n) for n in _error_nodes(root)]
        self._collect_assignments(root)
        for node in module_statements(root):
            definition = definition_of(node)
            if definition is None:
                continue
            name_node = definition.child_by_field_name("name")
            name = self.source(name_node) if name_node else ""
            if definition.type == "class_definition" and name in ("Model", "ModelNew"):
                reading.classes[name] = definition
            elif definition.type == "function_definition" and name == "get_inputs":
                reading.get_inputs = self.span(definition)
            elif definition.type == "function_definition" and name == "get_init_inputs":
                reading.get_init_inputs = self.span(definition)
        reading.extensions = [self._extension(call) for call in _calls_named(root, "load_inline", self)]
        for expression in self.unresolved:
            reading.notes.append(f"the source `{expression}` passed to load_inline could not be followed to string "
                                 "literals (f-strings, function calls and file reads are not evaluated)")
        if "Model" in reading.classes:
            reading.model = self._class(reading.classes["Model"], reading.extensions)
        if "ModelNew" in reading.classes:
            reading.model_new = self._class(reading.classes["ModelNew"], reading.extensions)
        return reading

    def _collect_assignments(self, root: Node) -> None:
        for statement in module_statements(root):
            if statement.type != "expression_statement" or not statement.named_children:
                continue
            assignment = statement.named_children[0]
            if assignment.type != "assignment":
                continue
            left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
            if left is not None and right is not None and left.type == "identifier":
                name = self.source(left)
                self.assignments.setdefault(name, []).append(Assignment(name, statement, right))

    def _assignment_before(self, name: str, offset_byte: int) -> Assignment | None:
        """The last module-level assignment to `name` that starts before `offset_byte` (else the first one)."""
        candidates = self.assignments.get(name, [])
        before = [a for a in candidates if a.statement.start_byte < offset_byte]
        if before:
            return before[-1]
        return candidates[0] if candidates else None

    # -- string expressions ----------------------------------------------------------------------------------------
    def literal(self, node: Node, at_byte: int, depth: int = 0) -> Literal | None:
        """The value of a string expression: literals, implicit and `+` concatenation, parentheses, names."""
        if depth > 20:
            return None
        kind = node.type
        if kind == "string":
            start, end = self.offsets.char(node.start_byte), self.offsets.char(node.end_byte)
            return evaluate_literal(self.text, start, end)
        if kind == "concatenated_string":
            return self._join([self.literal(c, at_byte, depth + 1) for c in node.named_children])
        if kind == "parenthesized_expression" and node.named_children:
            return self.literal(node.named_children[0], at_byte, depth + 1)
        if kind == "binary_operator":
            operator = node.child_by_field_name("operator")
            if operator is not None and operator.type == "+":
                left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
                if left is not None and right is not None:
                    return self._join([self.literal(left, at_byte, depth + 1), self.literal(right, at_byte, depth + 1)])
            return None
        if kind == "identifier":
            assignment = self._assignment_before(self.source(node), at_byte)
            if assignment is None:
                return None
            return self.literal(assignment.value, assignment.statement.start_byte, depth + 1)
        return None

    @staticmethod
    def _join(parts: list[Literal | None]) -> Literal | None:
        if not parts or any(p is None for p in parts):
            return None
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    def _source_strings(self, node: Node | None, role: str, call: Node) -> list[SourceString]:
        """The SourceStrings of a `cuda_sources=` / `cpp_sources=` argument: a string expression or a list of them."""
        if node is None:
            return []
        if node.type == "identifier":
            assignment = self._assignment_before(self.source(node), call.start_byte)
            if assignment is not None and assignment.value.type in ("list", "tuple"):
                return self._source_strings(assignment.value, role, call)
        if node.type in ("list", "tuple"):
            out: list[SourceString] = []
            for element in node.named_children:
                out.extend(self._source_strings(element, role, call))
            return out
        literal = self.literal(node, call.start_byte)
        if literal is None:
            self.unresolved.append(self.source(node).split("\n")[0][:60])
            return []
        variable = None
        statement = expression = node
        if node.type == "identifier":
            variable = self.source(node)
            assignment = self._assignment_before(variable, call.start_byte)
            if assignment is not None:
                statement, expression = assignment.statement, assignment.value
        return [self._source_string(literal, variable, role, statement, expression)]

    def _source_string(self, literal: Literal, variable: str | None, role: str, statement: Node,
                       expression: Node) -> SourceString:
        base = SourceString(variable, role, literal.value, self.span(statement), self.span(expression), literal.pieces)
        found, errors = read_functions(literal.value)
        functions = tuple(
            CudaFunction(
                name=f.name,
                kind=f.kind,
                span=Span(base.text_offset(f.start), base.text_offset(max(f.end - 1, f.start)) + 1),
                name_span=Span(base.text_offset(f.name_start), base.text_offset(max(f.name_end - 1, f.name_start)) + 1),
                value_span=Span(f.start, f.end),
            )
            for f in found
        )
        parse_errors = tuple(Span(base.text_offset(s), base.text_offset(max(e - 1, s)) + 1) for s, e in errors)
        return SourceString(variable, role, literal.value, base.statement, base.literal, base.pieces, functions,
                            parse_errors)

    # -- load_inline -----------------------------------------------------------------------------------------------
    def _extension(self, call: Node) -> Extension:
        arguments = _keyword_arguments(call, self)
        positional = _positional_arguments(call)
        name_node = arguments.get("name") or (positional[0] if positional else None)
        name_literal = self.literal(name_node, call.start_byte) if name_node is not None else None
        cpp = arguments.get("cpp_sources") or (positional[1] if len(positional) > 1 else None)
        cuda = arguments.get("cuda_sources") or (positional[2] if len(positional) > 2 else None)
        functions_node = arguments.get("functions") or (positional[3] if len(positional) > 3 else None)
        statement = _enclosing_statement(call)
        return Extension(
            name=name_literal.value if name_literal else None,
            call=self.span(call),
            statement=self.span(statement),
            variable=self._assigned_name(call),
            cuda_sources=tuple(self._source_strings(cuda, "cuda", call)),
            cpp_sources=tuple(self._source_strings(cpp, "cpp", call)),
            functions=tuple(self._function_names(functions_node, call)),
        )

    def _assigned_name(self, call: Node) -> str | None:
        parent = call.parent
        if parent is not None and parent.type == "assignment":
            left = parent.child_by_field_name("left")
            if left is not None and left.type in ("identifier", "attribute"):
                return self.source(left)
        return None

    def _function_names(self, node: Node | None, call: Node) -> list[str]:
        if node is None:
            return []
        if node.type == "identifier":
            assignment = self._assignment_before(self.source(node), call.start_byte)
            return self._function_names(assignment.value, call) if assignment else []
        if node.type in ("list", "tuple"):
            names = []
            for element in node.named_children:
                literal = self.literal(element, call.start_byte)
                if literal is not None:
                    names.append(literal.value)
            return names
        literal = self.literal(node, call.start_byte)
        return [literal.value] if literal is not None else []

    # -- classes ---------------------------------------------------------------------------------------------------
    def _class(self, node: Node, extensions: list[Extension]) -> ClassInfo:
        name_node = node.child_by_field_name("name")
        bases: tuple[str, ...] = ()
        superclasses = node.child_by_field_name("superclasses")
        if superclasses is not None:
            bases = tuple(self.source(c) for c in superclasses.named_children if c.type != "keyword_argument")
        methods = methods_of(node, self)
        init, forward = methods.get("__init__"), methods.get("forward")
        extension_names = {e.variable for e in extensions if e.variable}
        bindings: dict[str, str] = {}
        if init is not None:
            for assignment in descendants_of(init, "assignment"):
                left, right = assignment.child_by_field_name("left"), assignment.child_by_field_name("right")
                if left is None or right is None or left.type != "attribute":
                    continue
                target = self.source(left)
                if not target.startswith("self."):
                    continue
                if right.type == "identifier" and self.source(right) in extension_names:
                    bindings[target[5:]] = self.source(right)
                elif right.type == "call" and _callee_tail(right, self) == "load_inline":
                    bindings[target[5:]] = target
        calls = tuple(
            Call(_callee_text(c, self), self.span(c)) for c in (descendants_of(forward, "call") if forward else [])
        )
        return ClassInfo(
            name=self.source(name_node) if name_node else "",
            span=self.span(node),
            name_span=self.span(name_node) if name_node else self.span(node),
            bases=bases,
            init=self.span(init) if init is not None else None,
            forward=self.span(forward) if forward is not None else None,
            init_params=_parameter_names(init, self) if init is not None else (),
            forward_params=_parameter_names(forward, self) if forward is not None else (),
            bindings=bindings,
            forward_calls=calls,
        )


# -- tree helpers ----------------------------------------------------------------------------------------------------
def module_statements(root: Node):
    """Module-level statements, looking inside top-level if / try / with blocks (guarded imports and builds)."""
    for node in root.named_children:
        yield node
        if node.type in ("if_statement", "try_statement", "with_statement"):
            for block in descendants_of(node, "block", stop_at=("function_definition", "class_definition")):
                yield from block.named_children


def definition_of(node: Node) -> Node | None:
    if node.type == "decorated_definition":
        node = node.child_by_field_name("definition")
    if node is not None and node.type in ("class_definition", "function_definition"):
        return node
    return None


def descendants_of(node: Node, kind: str, stop_at: tuple[str, ...] = ()):
    stack = list(reversed(node.named_children))
    while stack:
        current = stack.pop()
        if current.type == kind:
            yield current
        if current.type in stop_at:
            continue
        stack.extend(reversed(current.named_children))


def _error_nodes(root: Node) -> list[Node]:
    found = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            found.append(node)
            continue
        if node.has_error:
            stack.extend(node.children)
    return sorted(found, key=lambda n: n.start_byte)


def _callee_text(call: Node, reader: FileReader) -> str:
    function = call.child_by_field_name("function")
    return reader.source(function) if function is not None else ""


def _callee_tail(call: Node, reader: FileReader) -> str:
    return _callee_text(call, reader).rsplit(".", 1)[-1].strip()


def _calls_named(root: Node, name: str, reader: FileReader) -> list[Node]:
    return [call for call in descendants_of(root, "call") if _callee_tail(call, reader) == name]


def _keyword_arguments(call: Node, reader: FileReader) -> dict[str, Node]:
    arguments = call.child_by_field_name("arguments")
    out: dict[str, Node] = {}
    if arguments is None:
        return out
    for child in arguments.named_children:
        if child.type == "keyword_argument":
            key, value = child.child_by_field_name("name"), child.child_by_field_name("value")
            if key is not None and value is not None:
                out[reader.source(key)] = value
    return out


def _positional_arguments(call: Node) -> list[Node]:
    arguments = call.child_by_field_name("arguments")
    if arguments is None:
        return []
    return [c for c in arguments.named_children if c.type not in ("keyword_argument", "comment",
                                                                  "list_splat", "dictionary_splat")]


def _enclosing_statement(node: Node) -> Node:
    current = node
    while current.parent is not None and current.parent.type not in ("module", "block"):
        current = current.parent
    return current


def methods_of(class_node: Node, reader: FileReader) -> dict[str, Node]:
    body = class_node.child_by_field_name("body")
    methods: dict[str, Node] = {}
    if body is None:
        return methods
    for statement in body.named_children:
        definition = definition_of(statement)
        if definition is not None and definition.type == "function_definition":
            name = definition.child_by_field_name("name")
            if name is not None:
                methods[reader.source(name)] = definition
    return methods


def _parameter_names(function: Node, reader: FileReader) -> tuple[str, ...]:
    parameters = function.child_by_field_name("parameters")
    names = []
    if parameters is None:
        return ()
    for child in parameters.named_children:
        if child.type == "identifier":
            names.append(reader.source(child))
        elif child.type in ("typed_parameter", "default_parameter", "typed_default_parameter"):
            inner = child.child_by_field_name("name") or (child.named_children[0] if child.named_children else None)
            if inner is not None:
                names.append(reader.source(inner))
        elif child.type in ("list_splat_pattern", "dictionary_splat_pattern"):
            names.append(reader.source(child))
    if names and names[0] == "self":
        names = names[1:]
    return tuple(names)


def reference_link(text: str) -> tuple[str, Span] | None:
    """A reference written visibly in the file as `# dice: reference = path/to/problem.py`."""
    match = REFERENCE_LINK.search(text)
    if match is None:
        return None
    return match.group("path"), Span(match.start(), match.end())
