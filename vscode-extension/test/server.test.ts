// What the language client is given: the process to start and the options that shape the session.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as vscode from "vscode";
import { mock, Uri } from "./vscode-mock";
import { clientOptions, serverOptions } from "../src/server";

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
