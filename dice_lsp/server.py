"""The language server: registers LSP handlers that call anatomy, the harness and the engine, and converts results.

Nothing here blocks the event loop: checks and generation run on worker threads that wait on child processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from dice_lsp import __version__, actions, convert
from dice_lsp.anatomy import Anatomy, LineIndex, Span, find_reference, infill_split, parse
from dice_lsp.checking import CheckRunner
from dice_lsp.generation import EngineWorker, GenerationCancelled, GenerationError, GenerationJob
from dice_lsp.settings import Settings

log = logging.getLogger("dice_lsp")
DEBOUNCE_S = 0.25


@dataclass
class Document:
    """What the server knows about one open file."""

    anatomy: Anatomy | None = None
    version: int = 0
    report: Any = None  # the last harness Report for this file
    report_text: str | None = None  # the text that report was computed on
    check_serial: int = 0  # bumps on every check request; a finished check publishes only if still current
    debounce: asyncio.TimerHandle | None = None
    generating: threading.Event | None = None  # set to cancel the running generation
    reference_problem: str | None = None


@dataclass
class State:
    settings: Settings = field(default_factory=Settings)
    documents: dict[str, Document] = field(default_factory=dict)
    shown: set[str] = field(default_factory=set)  # error kinds already shown once as a message
    speedups: dict[str, float] = field(default_factory=dict)


class DiceServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("dice-lsp", __version__)
        self.state = State()
        self.checks = CheckRunner()
        self.engine = EngineWorker()
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- small services the handlers share -------------------------------------------------------------------------
    @property
    def encoding(self) -> str:
        encoding = self.workspace.position_encoding or "utf-16"
        return str(getattr(encoding, "value", encoding))

    def document(self, uri: str) -> Document:
        return self.state.documents.setdefault(uri, Document())

    def text(self, uri: str) -> str:
        return self.workspace.get_text_document(uri).source

    def path(self, uri: str) -> Path | None:
        path = to_fs_path(uri)
        return Path(path) if path else None

    def show_once(self, kind: str, message: str, severity=types.MessageType.Error) -> None:
        if kind in self.state.shown:
            return
        self.state.shown.add(kind)
        self.window_show_message(types.ShowMessageParams(type=severity, message=f"dice-lsp: {message}"))

    def status(self, state: str, message: str = "", **extra: Any) -> None:
        self.protocol.notify("dice/status", {"state": state, "message": message, **extra})

    def on_loop(self, callback, *args) -> None:
        """Run `callback` on the event loop from a worker thread."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(callback, *args)

    # -- anatomy and diagnostics -----------------------------------------------------------------------------------
    def analyse(self, uri: str) -> Anatomy:
        doc = self.document(uri)
        text = self.text(uri)
        anatomy = parse(text)
        missing = None
        if anatomy.model_new is not None and anatomy.model is None:
            pairing = find_reference(anatomy, self.path(uri))
            missing = pairing.problem
            if pairing.text is not None:
                anatomy = parse(text, pairing.text)
        doc.anatomy = anatomy
        doc.reference_problem = missing
        return anatomy

    def publish(self, uri: str) -> None:
        doc = self.document(uri)
        if doc.anatomy is None:
            return
        diagnostics = convert.anatomy_diagnostics(doc.anatomy, self.encoding, doc.reference_problem)
        if doc.report is not None and doc.report_text == doc.anatomy.text:
            static = {(d.code, d.range.start.line) for d in diagnostics}
            for diagnostic in convert.report_diagnostics(doc.anatomy, doc.report, self.encoding):
                if (diagnostic.code, diagnostic.range.start.line) not in static:
                    diagnostics.append(diagnostic)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics,
                                                                              version=doc.version))

    def refresh(self, uri: str) -> None:
        if uri in self.state.documents and uri in self.workspace.text_documents:
            self.analyse(uri)
            self.publish(uri)

    def schedule_refresh(self, uri: str) -> None:
        doc = self.document(uri)
        if doc.debounce is not None:
            doc.debounce.cancel()
        doc.debounce = asyncio.get_running_loop().call_later(DEBOUNCE_S, self.refresh, uri)

    # -- checks ----------------------------------------------------------------------------------------------------
    def start_check(self, uri: str, reason: str) -> str | None:
        """Start a harness check of the file in the background; returns why not, or None when started."""
        settings = self.state.settings
        doc = self.document(uri)
        anatomy = self.analyse(uri)
        if anatomy.model_new is None:
            return "this file has no `class ModelNew` to check"
        if not settings.trusted_workspace:
            self.show_once("untrusted", "this workspace is not trusted, so kernels are not built or run. Trust the "
                                        "workspace to check kernels on save.", types.MessageType.Warning)
            return "the workspace is not trusted"
        pairing = find_reference(anatomy, self.path(uri))
        reference, missing = pairing.text, pairing.problem
        if reference is None:
            self.show_once("no-reference", missing, types.MessageType.Warning)
            return missing
        if anatomy.cuda_sources and not _nvcc_available(settings):
            self.show_once("no-nvcc", "no nvcc found on PATH or in CUDA_HOME; install the CUDA toolkit or set "
                                      "dice.cudaHome")
            return "no nvcc"
        doc.check_serial += 1
        serial, text = doc.check_serial, anatomy.text
        self.status("checking", f"{reason}: building and checking", uri=uri)

        def finished(report) -> None:
            self.on_loop(self.check_finished, uri, serial, text, report)

        self.checks.start(uri, reference, text, settings, finished)
        return None

    def check_finished(self, uri: str, serial: int, text: str, report) -> None:
        doc = self.document(uri)
        if serial != doc.check_serial or report is None or report.status == "cancelled":
            return  # a newer save superseded this check: never let old results replace newer ones
        doc.report, doc.report_text = report, text
        if report.status == "built-not-run":
            self.show_once("no-gpu", f"{report.message or 'no CUDA GPU found'}: kernels are built but not run. "
                                     "Checking correctness and speed needs a CUDA GPU.", types.MessageType.Warning)
        if report.speedup_eager is not None:
            self.state.speedups[uri] = report.speedup_eager
        self.status("idle", report.summary(), uri=uri, speedup=report.speedup_eager)
        self.publish(uri)
        workspace = self.client_capabilities.workspace
        if workspace is not None and workspace.code_lens is not None and workspace.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    # -- generation ------------------------------------------------------------------------------------------------
    async def generate(self, uri: str, infill: bool) -> dict:
        anatomy = self.analyse(uri)
        path = self.path(uri)
        settings = self.state.settings
        skeleton = None
        if infill:
            if anatomy.model_new is None or infill_split(anatomy) is None:
                return {"ok": False, "message": "no ModelNew skeleton with an empty or TODO CUDA source to infill"}
            pairing = find_reference(anatomy, path)
            reference, missing = pairing.text, pairing.problem
            skeleton = anatomy.text
        else:
            if anatomy.model is None:
                return {"ok": False, "message": "no `class Model` in this file to generate a kernel for"}
            reference, missing = anatomy.text, None
        if reference is None:
            self.show_once("no-reference", missing, types.MessageType.Warning)
            return {"ok": False, "message": missing}
        doc = self.document(uri)
        if doc.generating is not None:
            doc.generating.set()
        cancelled = threading.Event()
        doc.generating = cancelled
        token = str(uuid.uuid4())
        progress = self.work_done_progress
        title = "Infilling kernel core" if infill else "Generating CUDA kernel"
        try:
            await progress.create_async(token)
            progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=True, message="starting"))
            has_progress = True
        except Exception:
            has_progress = False
        self.status("generating", title, uri=uri)
        job = GenerationJob(reference=reference, model=settings.model, device=settings.device, dtype=settings.dtype,
                            decoding=_decoding_dict(settings), skeleton=skeleton)

        def on_progress(event: dict) -> None:
            if not has_progress:
                return
            message = event.get("message") or _progress_message(event)
            self.on_loop(progress.report, token, types.WorkDoneProgressReport(message=message))

        def watch_cancel() -> None:
            if has_progress and token in getattr(progress, "tokens", {}):
                future = progress.tokens[token]
                if future.cancelled():
                    cancelled.set()

        loop = asyncio.get_running_loop()
        watcher = asyncio.ensure_future(_watch(watch_cancel, cancelled))
        try:
            drafts = await loop.run_in_executor(None, self.engine.run, job, on_progress, cancelled)
        except GenerationCancelled:
            return {"ok": False, "message": "cancelled"}
        except GenerationError as error:
            self.show_once(f"generation-{error.kind}", str(error))
            self.status("error", str(error), uri=uri)
            return {"ok": False, "message": str(error)}
        finally:
            watcher.cancel()
            if doc.generating is cancelled:
                doc.generating = None
            if has_progress:
                progress.end(token, types.WorkDoneProgressEnd(message="done"))
        self.status("idle", "generation finished", uri=uri, model=settings.model or "bundled default model")
        draft = drafts[0]
        text = draft.code
        if text is None:
            message = f"the model wrote no usable kernel: {draft.note}"
            if infill or settings.solution_location == "sameFile":
                # Never put raw model output into the user's own file.
                self.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                                 message=f"dice-lsp: {message}; nothing changed"))
                return {"ok": False, "message": message}
            # A new file loses nothing: keep what the model wrote, as comments, so the user can see why.
            text = f"# dice-lsp: {message}. The model's raw output:\n" + "".join(
                f"# {line}\n" for line in draft.raw.splitlines())
        edit = self.solution_edit(uri, anatomy, text, infill)
        result = await self.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=title))
        return {"ok": bool(result.applied), "message": result.failure_reason or ""}

    def solution_edit(self, uri: str, anatomy: Anatomy, text: str, infill: bool) -> types.WorkspaceEdit:
        index = LineIndex(anatomy.text)
        doc_version = self.workspace.get_text_document(uri).version
        identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=doc_version)
        if infill:
            # The engine kept the skeleton's prefix and suffix byte for byte: the edit replaces the core only.
            split = infill_split(anatomy)
            prefix, suffix = split.prefix.slice(anatomy.text), split.suffix.slice(anatomy.text)
            if not (text.startswith(prefix) and text.endswith(suffix)):
                raise ValueError("the infilled file does not keep the skeleton's prefix and suffix")
            core = text[len(prefix):len(text) - len(suffix)]
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                text_document=identifier,
                edits=[types.TextEdit(convert.lsp_range(index, split.core, self.encoding), core)])])
        path = self.path(uri)
        if self.state.settings.solution_location == "sameFile" or path is None:
            end = convert.lsp_range(index, Span(len(anatomy.text), len(anatomy.text)), self.encoding)
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                text_document=identifier, edits=[types.TextEdit(end, "\n\n# --- generated by dice-lsp ---\n" + text)])])
        target = actions.solution_path(path)
        body = actions.with_reference_link(text, path, target)
        target_uri = target.as_uri()
        return types.WorkspaceEdit(document_changes=[
            types.CreateFile(uri=target_uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=False)),
            types.TextDocumentEdit(text_document=types.OptionalVersionedTextDocumentIdentifier(uri=target_uri,
                                                                                                version=None),
                                   edits=[types.TextEdit(types.Range(types.Position(0, 0), types.Position(0, 0)),
                                                         body)]),
        ])

    async def reload_settings(self) -> None:
        try:
            result = await self.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="dice")]))
            raw = result[0] if result else None
        except Exception as error:  # a client without workspace/configuration keeps the defaults
            log.info("workspace/configuration failed: %s", error)
            raw = None
        self.state.settings = Settings.from_client(raw)
        if self.state.settings.cuda_home:
            os.environ["CUDA_HOME"] = self.state.settings.cuda_home


def _nvcc_available(settings: Settings) -> bool:
    homes = [settings.cuda_home, os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    return shutil.which("nvcc") is not None or any(h and Path(h, "bin", "nvcc").exists() for h in homes)


def _decoding_dict(settings: Settings) -> dict:
    from dataclasses import asdict

    return asdict(settings.decoding)


def _progress_message(event: dict) -> str:
    parts = []
    if "tokens" in event:
        parts.append(f"{event['tokens']} tokens")
    if "blocks" in event:
        parts.append(f"{event['blocks']} blocks")
    if "tokens_per_second" in event:
        parts.append(f"{event['tokens_per_second']:.0f} tok/s")
    return ", ".join(parts) or "decoding"


async def _watch(check, cancelled: threading.Event) -> None:
    while not cancelled.is_set():
        check()
        await asyncio.sleep(0.2)


server = DiceServer()


@server.feature(types.INITIALIZED)
async def initialized(ls: DiceServer, params: types.InitializedParams) -> None:
    ls.loop = asyncio.get_running_loop()
    await ls.reload_settings()
    workspace = ls.client_capabilities.workspace
    dynamic = workspace is not None and workspace.did_change_configuration is not None and \
        workspace.did_change_configuration.dynamic_registration
    if dynamic:  # VS Code sends didChangeConfiguration only to servers that register for it
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="dice-configuration", method=types.WORKSPACE_DID_CHANGE_CONFIGURATION, register_options={})]))
        except Exception as error:
            log.info("could not register for configuration changes: %s", error)
    ls.status("idle", "ready", model=ls.state.settings.model or None)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def did_change_configuration(ls: DiceServer, params: types.DidChangeConfigurationParams) -> None:
    await ls.reload_settings()
    for uri in list(ls.state.documents):
        ls.refresh(uri)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: DiceServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.loop = ls.loop or asyncio.get_running_loop()
    doc = ls.document(params.text_document.uri)
    doc.version = params.text_document.version
    ls.refresh(params.text_document.uri)
    settings = ls.state.settings
    if settings.run_on_save and settings.trusted_workspace and doc.anatomy is not None and doc.anatomy.cuda_sources:
        ls.checks.prepare(settings)  # a save is likely next: its check finds the shared build parts ready


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: DiceServer, params: types.DidChangeTextDocumentParams) -> None:
    doc = ls.document(params.text_document.uri)
    doc.version = params.text_document.version
    ls.schedule_refresh(params.text_document.uri)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: DiceServer, params: types.DidSaveTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.refresh(uri)
    doc = ls.document(uri)
    if ls.state.settings.run_on_save and doc.anatomy is not None and doc.anatomy.model_new is not None:
        ls.start_check(uri, "saved")


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: DiceServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.checks.cancel(uri)
    doc = ls.state.documents.pop(uri, None)
    if doc is not None and doc.generating is not None:
        doc.generating.set()
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.RefactorRewrite, types.CodeActionKind.Source]))
def code_action(ls: DiceServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    anatomy = ls.document(uri).anatomy or ls.analyse(uri)
    offset = LineIndex(anatomy.text).offset(params.range.start.line, params.range.start.character, ls.encoding)
    return [types.CodeAction(title=offer.title, kind=offer.kind,
                             command=types.Command(title=offer.title, command=offer.command, arguments=[uri]))
            for offer in actions.offers(anatomy, offset)]


@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
def code_lens(ls: DiceServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    doc = ls.document(uri)
    anatomy = doc.anatomy or ls.analyse(uri)
    if anatomy.model_new is None:
        return []
    where = convert.first_line(LineIndex(anatomy.text), anatomy.model_new.name_span, ls.encoding)
    lenses = [types.CodeLens(range=where, command=types.Command(title="Benchmark", command=actions.BENCHMARK,
                                                                arguments=[uri]))]
    if doc.report is not None:
        title = convert.result_line(doc.report) or doc.report.status
        lenses.insert(0, types.CodeLens(range=where, command=types.Command(title=title, command="")))
    return lenses


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: DiceServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    doc = ls.document(uri)
    anatomy = doc.anatomy or ls.analyse(uri)
    offset = LineIndex(anatomy.text).offset(params.position.line, params.position.character, ls.encoding)
    report = doc.report if doc.report_text == anatomy.text else None
    markdown = convert.kernel_hover(anatomy, report, offset)
    if markdown is None:
        return None
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=markdown))


@server.command(actions.GENERATE)
async def command_generate(ls: DiceServer, uri: str) -> dict:
    return await ls.generate(uri, infill=False)


@server.command(actions.INFILL)
async def command_infill(ls: DiceServer, uri: str) -> dict:
    return await ls.generate(uri, infill=True)


@server.command(actions.BENCHMARK)
def command_benchmark(ls: DiceServer, uri: str) -> dict:
    ls.loop = ls.loop or asyncio.get_event_loop()
    why = ls.start_check(uri, "benchmark")
    return {"started": why is None, "message": why or "checking"}


@server.feature(types.SHUTDOWN)
def shutdown(ls: DiceServer, params: None) -> None:
    ls.checks.close()
    ls.engine.close()
