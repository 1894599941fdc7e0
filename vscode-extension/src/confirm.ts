/**
 * Edits the server asks the user to confirm (an LSP change annotation with `needsConfirmation`: Infill's new core, a
 * Generate into the problem's own file). VS Code's own answer to such an edit is its Refactor Preview with the change
 * unticked, where "Apply" applies nothing until the user ticks it (microsoft/vscode#207578): a user who clicked Apply
 * saw nothing change and heard nothing. So the extension answers `workspace/applyEdit` itself: the change opens in a
 * diff editor beside the file, a dialog asks to apply it, and Apply makes it one edit of the open file (Undo takes it
 * back; nothing is saved). An edit that asks no confirmation is applied as the language client would.
 */

import * as path from "node:path";
import * as vscode from "vscode";
import {
    ApplyWorkspaceEditParams,
    ApplyWorkspaceEditResult,
    LanguageClient,
    TextDocumentEdit,
    WorkspaceEdit,
} from "vscode-languageclient/node";

export const PROPOSED_SCHEME = "dice-proposed";
export const APPLY = "Apply";

/** A position as LSP sends it, and a text edit at a range of them. */
export interface At {
    readonly line: number;
    readonly character: number;
}
export interface Change {
    readonly range: { readonly start: At; readonly end: At };
    readonly newText: string;
}

/** The change annotations of `edit` that ask for the user's confirmation: their labels and descriptions. */
export function confirmationsAsked(edit: WorkspaceEdit): { label: string; description?: string }[] {
    return Object.values(edit.changeAnnotations ?? {}).filter((annotation) => annotation.needsConfirmation === true);
}

/** `edit` once the user has confirmed it: its annotations (labels, descriptions) kept, none asking any more. */
export function confirmed(edit: WorkspaceEdit): WorkspaceEdit {
    if (edit.changeAnnotations === undefined) {
        return edit;
    }
    const annotations = Object.fromEntries(
        Object.entries(edit.changeAnnotations).map(([id, note]) => [id, { ...note, needsConfirmation: false }]),
    );
    return { ...edit, changeAnnotations: annotations };
}

/** The text edits of `edit`, file by file; undefined when it also creates, renames or deletes files. */
export function textEdits(edit: WorkspaceEdit): { uri: string; version: number | null; edits: Change[] }[] | undefined {
    if (edit.documentChanges !== undefined) {
        const documents = edit.documentChanges.filter((change) => TextDocumentEdit.is(change));
        if (documents.length !== edit.documentChanges.length) {
            return undefined;
        }
        return documents.map((change) => ({
            uri: change.textDocument.uri,
            version: change.textDocument.version,
            edits: change.edits,
        }));
    }
    return Object.entries(edit.changes ?? {}).map(([uri, edits]) => ({ uri, version: null, edits }));
}

/**
 * The first file that `edit` was made for at a version other than the open document's `versionOf(uri)` (it was
 * typed in after the server read it: the edit's ranges no longer fit); undefined when every version still matches.
 */
export function staleFile(edit: WorkspaceEdit, versionOf: (uri: string) => number | undefined): string | undefined {
    for (const change of textEdits(edit) ?? []) {
        const open = versionOf(change.uri);
        if (change.version !== null && change.version >= 0 && open !== undefined && open !== change.version) {
            return change.uri;
        }
    }
    return undefined;
}

/** `text` with `edits` made (LSP's rule: every range refers to the text before any of them), `offsetAt` mapping a
 * position to its offset in `text`. */
export function withChanges(text: string, edits: readonly Change[], offsetAt: (position: At) => number): string {
    const spans = edits
        .map((edit) => ({ start: offsetAt(edit.range.start), end: offsetAt(edit.range.end), text: edit.newText }))
        .sort((a, b) => b.start - a.start || b.end - a.end);
    return spans.reduce((out, span) => out.slice(0, span.start) + span.text + out.slice(span.end), text);
}

export class EditConfirmation implements vscode.Disposable {
    private readonly proposals = new Map<string, string>();
    private readonly provider: vscode.Disposable;
    private asked = 0;

    constructor(private readonly log: vscode.LogOutputChannel) {
        this.provider = vscode.workspace.registerTextDocumentContentProvider(PROPOSED_SCHEME, {
            provideTextDocumentContent: (uri) => this.proposals.get(uri.toString()),
        });
    }

    dispose(): void {
        this.provider.dispose();
    }

    /** The answer to the server's `workspace/applyEdit` of `client`. */
    async apply(client: LanguageClient, params: ApplyWorkspaceEditParams): Promise<ApplyWorkspaceEditResult> {
        const asked = confirmationsAsked(params.edit);
        const files = textEdits(params.edit);
        if (asked.length === 0 || files === undefined) {
            // Nothing to confirm, or file operations: VS Code's own handling (its preview, where it asks)
            return this.make(client, params.edit);
        }
        const stale = staleFile(params.edit, openVersion);
        if (stale !== undefined) {
            return changedMeanwhile(stale);
        }
        const proposed = await Promise.all(files.map((file) => this.propose(file.uri, file.edits)));
        const names = files.map((file) => path.basename(vscode.Uri.parse(file.uri).path)).join(", ");
        const label = asked.map((annotation) => annotation.label).join(", ");
        const question = `DICE: ${label}: apply the model's change to ${names}?`;
        const why = [...new Set(asked.map((annotation) => annotation.description).filter(Boolean))].join("; ");
        const detail =
            `${why ? `${capitalised(why)}. ` : ""}The diff editor shows the change. Apply makes it one edit of the ` +
            "open file, which Undo takes back; nothing is saved until you save.";
        this.log.info(question);
        let choice: string | undefined;
        try {
            choice = await vscode.window.showInformationMessage(question, { modal: true, detail }, APPLY);
        } finally {
            await this.withdraw(proposed);
        }
        if (choice !== APPLY) {
            this.log.info(`${label}: not applied`);
            return { applied: false };
        }
        const changed = staleFile(params.edit, openVersion);
        return changed === undefined ? this.make(client, confirmed(params.edit)) : changedMeanwhile(changed);
    }

    /** The file `uri` with `edits` made, shown in a diff editor against it; the proposal's uri. */
    private async propose(uri: string, edits: readonly Change[]): Promise<vscode.Uri> {
        const document = await vscode.workspace.openTextDocument(vscode.Uri.parse(uri));
        const text = withChanges(document.getText(), edits, (at) =>
            document.offsetAt(new vscode.Position(at.line, at.character)),
        );
        this.asked += 1;
        const name = path.basename(document.uri.path);
        const proposal = vscode.Uri.from({ scheme: PROPOSED_SCHEME, path: `/${this.asked}/${name}` });
        this.proposals.set(proposal.toString(), text);
        await vscode.commands.executeCommand("vscode.diff", document.uri, proposal, `${name} ↔ the model's change`);
        return proposal;
    }

    /** Closes the diff editors of `proposals` and forgets their text. */
    private async withdraw(proposals: readonly vscode.Uri[]): Promise<void> {
        const shown = new Set(proposals.map((uri) => uri.toString()));
        const tabs = vscode.window.tabGroups.all
            .flatMap((group) => group.tabs)
            .filter((tab) => tab.input instanceof vscode.TabInputTextDiff && shown.has(tab.input.modified.toString()));
        try {
            await vscode.window.tabGroups.close(tabs);
        } finally {
            shown.forEach((uri) => this.proposals.delete(uri));
        }
    }

    /** Makes `edit` as the language client does: converted, and applied by VS Code. */
    private async make(client: LanguageClient, edit: WorkspaceEdit): Promise<ApplyWorkspaceEditResult> {
        const stale = staleFile(edit, openVersion);
        if (stale !== undefined) {
            return changedMeanwhile(stale);
        }
        const converted = await client.protocol2CodeConverter.asWorkspaceEdit(edit);
        return { applied: await vscode.workspace.applyEdit(converted) };
    }
}

function openVersion(uri: string): number | undefined {
    const wanted = vscode.Uri.parse(uri).toString(); // the language client's spelling of a uri, as VS Code's
    return vscode.workspace.textDocuments.find((document) => document.uri.toString() === wanted)?.version;
}

function changedMeanwhile(uri: string): ApplyWorkspaceEditResult {
    const name = path.basename(vscode.Uri.parse(uri).path);
    const failureReason = `${name} changed while the server worked, so its edit no longer fits: nothing changed`;
    return { applied: false, failureReason };
}

function capitalised(text: string): string {
    return text.charAt(0).toUpperCase() + text.slice(1);
}
