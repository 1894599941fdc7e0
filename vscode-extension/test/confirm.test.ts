// What the extension reads from an edit the server wants confirmed. Showing it and asking is VS Code's part, held by
// tests/e2e/test_vscode.py in a real VS Code.
import "./register-vscode";
import { describe, it } from "node:test";
import * as assert from "node:assert/strict";
import { WorkspaceEdit } from "vscode-languageclient/node";
import { At, confirmationsAsked, confirmed, staleFile, textEdits, withChanges } from "../src/confirm";

const URI = "file:///work/solution.py";

/** Infill's edit as the server sends it (dice_lsp/convert.py, replace_edit with `confirm`). */
function infill(version: number, needsConfirmation = true): WorkspaceEdit {
    return {
        documentChanges: [
            {
                textDocument: { uri: URI, version },
                edits: [
                    {
                        range: { start: { line: 1, character: 0 }, end: { line: 3, character: 3 } },
                        newText: 'src = """\n__global__ void k() {}\n"""',
                        annotationId: "dice-confirm",
                    },
                ],
            },
        ],
        changeAnnotations: {
            "dice-confirm": {
                label: "Infilling kernel core",
                needsConfirmation,
                description: "written by the model: review it before it is applied",
            },
        },
    };
}

function offsets(text: string): (at: At) => number {
    const starts = [0];
    for (let i = 0; i < text.length; i++) {
        if (text[i] === "\n") {
            starts.push(i + 1);
        }
    }
    return (at) => (starts[at.line] ?? text.length) + at.character;
}

describe("an edit the server wants confirmed", () => {
    it("is recognised by its annotation, and once confirmed asks nothing but keeps its label", () => {
        assert.deepEqual(
            confirmationsAsked(infill(4)).map((annotation) => annotation.label),
            ["Infilling kernel core"],
        );
        assert.deepEqual(confirmationsAsked(infill(4, false)), []);
        const done = confirmed(infill(4));
        assert.deepEqual(confirmationsAsked(done), []);
        assert.equal(done.changeAnnotations?.["dice-confirm"]?.label, "Infilling kernel core");
        assert.deepEqual(done.documentChanges, infill(4).documentChanges);
    });

    it("is stale once the open document has moved past the version the server read", () => {
        assert.equal(staleFile(infill(4), () => 4), undefined);
        assert.equal(staleFile(infill(4), () => 5), URI);
        assert.equal(staleFile(infill(4), () => undefined), undefined); // not open: nothing to compare
    });

    it("shows the file as the edit would leave it, only the edited range replaced", () => {
        const text = 'import torch\nsrc = """\n// TODO\n"""\nclass ModelNew: pass\n';
        const [file] = textEdits(infill(4)) ?? [];
        assert.ok(file);
        assert.equal(
            withChanges(text, file.edits, offsets(text)),
            'import torch\nsrc = """\n__global__ void k() {}\n"""\nclass ModelNew: pass\n',
        );
        // Several edits: each range refers to the text before any of them
        const two = [
            { range: { start: { line: 0, character: 0 }, end: { line: 0, character: 6 } }, newText: "from" },
            { range: { start: { line: 4, character: 6 }, end: { line: 4, character: 14 } }, newText: "Solution" },
        ];
        assert.equal(withChanges(text, two, offsets(text)), 'from torch\nsrc = """\n// TODO\n"""\nclass Solution: pass\n');
    });

    it("with file operations is left to VS Code", () => {
        const create: WorkspaceEdit = { documentChanges: [{ kind: "create", uri: "file:///work/new.py" }] };
        assert.equal(textEdits(create), undefined);
    });
});
