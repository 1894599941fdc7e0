"""What the client said it supports (its `ClientCapabilities`), one question each: the server asks nothing of a client,
and sends it nothing, that it did not declare."""

from __future__ import annotations

from lsprotocol import types


def pulls_diagnostics(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client pulls diagnostics and can be asked to pull again (workspace/diagnostic/refresh). Both, since
    a file's diagnostics change with no edit of it: a check's result arrives a minute after the save, and a client
    that could not be told would show it only after the next edit. Any other client gets them pushed."""
    document, workspace = capabilities.text_document, capabilities.workspace
    return document is not None and document.diagnostic is not None and workspace is not None and \
        workspace.diagnostics is not None and bool(workspace.diagnostics.refresh_support)


def shows_related(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client shows a diagnostic's related locations. A pulling client may say so only for pushed
    diagnostics (relatedInformation came to the pull capabilities in LSP 3.18): it is one view either way."""
    document = capabilities.text_document
    if document is None:
        return False
    pushed = document.publish_diagnostics is not None and bool(document.publish_diagnostics.related_information)
    pulled = document.diagnostic is not None and bool(document.diagnostic.related_information)
    return pushed or pulls_diagnostics(capabilities) and pulled


def answers_configuration(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client answers workspace/configuration."""
    workspace = capabilities.workspace
    return workspace is not None and bool(workspace.configuration)


def registers_configuration_changes(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client sends didChangeConfiguration only to a server that registers for it (VS Code does)."""
    workspace = capabilities.workspace
    return workspace is not None and workspace.did_change_configuration is not None and \
        bool(workspace.did_change_configuration.dynamic_registration)


def shows_progress(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client shows server-initiated work-done progress."""
    window = capabilities.window
    return window is not None and bool(window.work_done_progress)


def confirms_edits(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client supports change annotations, so that an edit can ask the user to confirm it."""
    workspace = capabilities.workspace
    return workspace is not None and workspace.workspace_edit is not None and \
        workspace.workspace_edit.change_annotation_support is not None


def shows_documents(capabilities: types.ClientCapabilities) -> bool:
    """Whether the client opens a file the server names (window/showDocument)."""
    window = capabilities.window
    return window is not None and window.show_document is not None and bool(window.show_document.support)


def refreshes_code_lenses(capabilities: types.ClientCapabilities) -> bool:
    workspace = capabilities.workspace
    return workspace is not None and workspace.code_lens is not None and bool(workspace.code_lens.refresh_support)


def refreshes_inlay_hints(capabilities: types.ClientCapabilities) -> bool:
    workspace = capabilities.workspace
    return workspace is not None and workspace.inlay_hint is not None and bool(workspace.inlay_hint.refresh_support)
