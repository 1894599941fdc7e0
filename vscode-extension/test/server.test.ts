// What the language client is given: the process to start and the options that shape the session.
import "./register-vscode";
import { afterEach, beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import { mock, Uri } from "./vscode-mock";
import { serverMissing } from "../src/launch";
import { FIXES, ServerSession, clientOptions, serverOptions } from "../src/server";
import { ServerStatus } from "../src/status";

describe("serverOptions", () => {
    beforeEach(() => mock.reset());

    it("runs exactly `<python> -m dice_lsp <serverArgs>` in the workspace folder, over stdio", () => {
        const launch = { command: "/venv/bin/python", args: ["-m", "dice_lsp", "-v"], source: "dice.interpreter" };
        const options = serverOptions(launch, Uri.file("/work/project")) as {
            command: string;
            args: string[];
            transport?: unknown;
            options: { cwd?: string };
        };
        assert.equal(options.command, "/venv/bin/python");
        assert.deepEqual(options.args, ["-m", "dice_lsp", "-v"], "no --stdio or other flag is appended");
        assert.equal(options.transport, undefined);
        assert.equal(options.options.cwd, "/work/project");
    });
});

describe("clientOptions", () => {
    beforeEach(() => mock.reset());

    it("serves Python files and writes the client log and the LSP trace to one output channel", () => {
        const log = vscode.window.createOutputChannel("DICE", { log: true });
        const options = clientOptions(log);
        assert.deepEqual(options.documentSelector, [
            { scheme: "file", language: "python" },
            { scheme: "untitled", language: "python" },
        ]);
        assert.equal(options.outputChannel, log);
        assert.equal(options.traceOutputChannel, log);
    });

    it("answers the server's workspace/configuration for `dice` with the editor's trust", async () => {
        mock.trusted = false;
        const configuration = clientOptions(vscode.window.createOutputChannel("DICE", { log: true })).middleware
            ?.workspace?.configuration;
        assert.ok(configuration);
        const params = { items: [{ section: "dice" }] };
        const token = new vscode.CancellationTokenSource().token;
        const answers = await configuration(params, token, () => [{ model: "", runOnSave: true }]);
        assert.deepEqual(answers, [{ model: "", runOnSave: true, trustedWorkspace: false }]);
    });
});

/** An interpreter that runs but cannot import dice_lsp: python3 without site-packages, where pip installs it. */
function interpreterWithoutDiceLsp(folder: string): string {
    const wrapper = path.join(folder, "python-without-site");
    fs.writeFileSync(wrapper, '#!/bin/sh\nexec python3 -S "$@"\n', { mode: 0o755 });
    return wrapper;
}

describe("serverMissing", () => {
    let folder: string;
    beforeEach(() => {
        mock.reset();
        folder = fs.mkdtempSync(path.join(os.tmpdir(), "dice-missing-"));
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("finds nothing wrong with an interpreter that imports dice_lsp", async () => {
        assert.equal(await serverMissing({ command: "python3", args: [], source: "fallback" }, folder), undefined);
    });

    it("says the interpreter was not found, or the import error of one without dice_lsp", async () => {
        const absent = { command: path.join(folder, "no-python"), args: [], source: "dice.interpreter" };
        assert.match((await serverMissing(absent, folder)) ?? "", /the interpreter `.*no-python` was not found/);
        const bare = { command: interpreterWithoutDiceLsp(folder), args: [], source: "dice.interpreter" };
        assert.equal(await serverMissing(bare, folder), "ModuleNotFoundError: No module named 'dice_lsp'");
    });
});

describe("ServerSession with an interpreter that lacks dice-lsp", () => {
    let folder: string;
    beforeEach(() => {
        mock.reset();
        folder = fs.mkdtempSync(path.join(os.tmpdir(), "dice-missing-"));
        mock.workspaceFolders = [{ uri: Uri.file(folder), name: "project", index: 0 }];
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("starts no server, says why once with the ways out, and opens the interpreter setting when asked", async () => {
        mock.settings.set("dice.interpreter", interpreterWithoutDiceLsp(folder));
        mock.answer = "Open settings";
        const log = vscode.window.createOutputChannel("DICE", { log: true });
        const status = new ServerStatus(vscode.languages.createLanguageStatusItem("dice.status", { language: "python" }));
        const session = new ServerSession(log, status, undefined);
        mock.commands.set("workbench.action.openSettings", () => undefined);
        await session.refresh("test");
        await new Promise((resolve) => setImmediate(resolve)); // the message box's answer is handled after refresh
        assert.equal(session.running, false);
        assert.equal(mock.messages.length, 1);
        assert.match(mock.messages[0].text, /cannot run the DICE server: ModuleNotFoundError: No module named 'dice_lsp'/);
        assert.deepEqual(mock.messages[0].items, [...FIXES]);
        assert.match(mock.statusItems[0].text, /error/);
        assert.deepEqual(mock.executed, [{ command: "workbench.action.openSettings", args: ["dice.interpreter"] }]);
        await session.stop();
    });
});
