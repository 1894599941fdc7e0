// What the language client is given: the process to start and the options that shape the session.
import "./register-vscode";
import { afterEach, beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import * as vscode from "vscode";
import { mock, Uri } from "./vscode-mock";
import { INSTALL } from "../src/install";
import { probeServer } from "../src/probe";
import { FIXES, clientOptions, serverOptions } from "../src/server";
import { ServerMessages } from "../src/notifications";
import { processFolder } from "../src/launch";
import { EXTENSION_ROOT, REPOSITORY, interpreterWithoutDiceLsp, session, temporaryFolder, testHome } from "./fixtures";

describe("serverOptions", () => {
    beforeEach(() => mock.reset());

    it("runs exactly `<python> -m dice_lsp <serverArgs>` in the folder and environment given, over stdio", () => {
        const launch = {
            command: "/venv/bin/python",
            args: ["-m", "dice_lsp", "-v"],
            source: "dice.interpreter",
            strategy: "useBundled",
        } as const;
        const options = serverOptions(launch, { cwd: "/work/project", env: { PYTHONPATH: "/bundle" } }) as {
            command: string;
            args: string[];
            transport?: unknown;
            options: { cwd?: string; env?: NodeJS.ProcessEnv };
        };
        assert.equal(options.command, "/venv/bin/python");
        assert.deepEqual(options.args, ["-m", "dice_lsp", "-v"], "no --stdio or other flag is appended");
        assert.equal(options.transport, undefined);
        assert.equal(options.options.cwd, "/work/project");
        assert.deepEqual(options.options.env, { PYTHONPATH: "/bundle" });
        assert.deepEqual((serverOptions(launch, { cwd: undefined }) as { options: object }).options, {});
    });
});

describe("clientOptions", () => {
    beforeEach(() => mock.reset());

    it("serves Python files and writes the server's stderr, a record a line, and the LSP trace to one log", () => {
        const log = vscode.window.createOutputChannel("DICE", { log: true });
        const options = clientOptions(log, new ServerMessages(log));
        assert.deepEqual(options.documentSelector, [
            { scheme: "file", language: "python" },
            { scheme: "untitled", language: "python" },
        ]);
        assert.equal(options.traceOutputChannel, log);
        // stderr as the client hands it over: chunks that end anywhere, each line ended by a newline
        options.outputChannel?.append("2026-12-07 04:14:04,528 dice_lsp INFO dice-lsp 0.1.0 serving (pid 7)\n2026-12-");
        options.outputChannel?.append("07 04:14:05,001 dice_lsp ERROR a check failed\nTraceback (most recent call last):\n");
        assert.deepEqual(mock.outputs[0]?.lines, [
            "[info] dice_lsp: dice-lsp 0.1.0 serving (pid 7)",
            "[error] dice_lsp: a check failed",
            "[error] Traceback (most recent call last):",
        ]);
    });

    it("answers the server's workspace/configuration for `dice` with the editor's trust", async () => {
        mock.trusted = false;
        const log = vscode.window.createOutputChannel("DICE", { log: true });
        const configuration = clientOptions(log, new ServerMessages(log)).middleware
            ?.workspace?.configuration;
        assert.ok(configuration);
        const params = { items: [{ section: "dice" }] };
        const token = new vscode.CancellationTokenSource().token;
        const answers = await configuration(params, token, () => [{ model: "", runOnSave: true }]);
        assert.deepEqual(answers, [{ model: "", runOnSave: true, trustedWorkspace: false }]);
    });
});

describe("probeServer", () => {
    let folder: string;
    beforeEach(() => {
        mock.reset();
        folder = temporaryFolder("dice-missing-");
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("finds nothing wrong with an interpreter that imports dice_lsp, and says where it found it", async () => {
        const probe = await probeServer("python3", EXTENSION_ROOT, { cwd: folder }, false);
        assert.equal(probe.problem, undefined);
        assert.equal(probe.origin, path.join(REPOSITORY, "dice_lsp"));
    });

    it("says the interpreter was not found, or the import error of one without dice_lsp", async () => {
        const absent = await probeServer(path.join(folder, "no-python"), EXTENSION_ROOT, { cwd: folder }, false);
        assert.match(absent.problem ?? "", /the interpreter `.*no-python` was not found/);
        assert.equal(absent.runs, false);
        const bare = await probeServer(interpreterWithoutDiceLsp(folder), EXTENSION_ROOT, { cwd: folder }, false);
        assert.equal(bare.problem, "ModuleNotFoundError: No module named 'dice_lsp'");
        assert.equal(bare.runs, true);
    });

    it("says what an interpreter prints when it cannot run the probe at all", async () => {
        const broken = path.join(folder, "broken-python");
        const script = '#!/bin/sh\necho "Fatal Python error: init_fs_encoding" >&2\nexit 1\n';
        fs.writeFileSync(broken, script, { mode: 0o755 });
        const probe = await probeServer(broken, EXTENSION_ROOT, { cwd: folder }, false);
        assert.equal(probe.problem, "Fatal Python error: init_fs_encoding");
    });
});

describe("ServerSession with an interpreter that lacks dice-lsp", () => {
    let folder: string;
    beforeEach(() => {
        mock.reset();
        folder = temporaryFolder("dice-missing-");
        mock.workspaceFolders = [{ uri: Uri.file(folder), name: "project", index: 0 }];
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("starts no server, says why once with the ways out, and opens the interpreter setting when asked", async () => {
        mock.settings.set("dice.interpreter", interpreterWithoutDiceLsp(folder));
        mock.answer = "Open settings";
        const current = session(path.join(folder, "storage"));
        mock.commands.set("workbench.action.openSettings", () => undefined);
        await current.refresh("test");
        await new Promise((resolve) => setImmediate(resolve)); // the message box's answer is handled after refresh
        assert.equal(current.running, false);
        assert.equal(mock.messages.length, 1);
        assert.match(mock.messages[0].text, /cannot run the DICE server: ModuleNotFoundError: No module named 'dice_lsp'/);
        assert.deepEqual(mock.messages[0].items, [INSTALL, ...FIXES]);
        assert.match(mock.statusItems[0].text, /error/);
        assert.deepEqual(mock.executed, [{ command: "workbench.action.openSettings", args: ["dice.interpreter"] }]);
        await current.stop();
    });

    it("offers no install for an interpreter that does not exist", async () => {
        mock.settings.set("dice.interpreter", path.join(folder, "no-python"));
        const current = session(path.join(folder, "storage"));
        await current.refresh("test");
        assert.match(mock.messages[0].text, /was not found/);
        assert.deepEqual(mock.messages[0].items, [...FIXES]);
        await current.stop();
    });
});

describe("an untrusted workspace's own dice_lsp", () => {
    let folder: string;
    beforeEach(() => {
        mock.reset();
        folder = temporaryFolder("dice-untrusted-");
    });
    afterEach(() => fs.rmSync(folder, { recursive: true, force: true }));

    it("is not imported by the probe or the server: they run outside the workspace until it is trusted", async () => {
        // The attack: a repository ships dice_lsp/__init__.py; `python -m dice_lsp` and `python -c` in its folder
        // would import it first, before the interpreter's own dice-lsp, and run it on opening.
        const workspace = path.join(folder, "workspace");
        const marker = path.join(folder, "ran");
        fs.mkdirSync(path.join(workspace, "dice_lsp"), { recursive: true });
        fs.writeFileSync(
            path.join(workspace, "dice_lsp", "__init__.py"),
            `open(${JSON.stringify(marker)}, "w").write("the workspace's code ran")\n`,
        );
        mock.trusted = false;
        mock.workspaceFolders = [{ uri: Uri.file(workspace), name: "workspace", index: 0 }];
        const current = session(path.join(folder, "storage"));
        await current.refresh("test");
        assert.equal(current.running, true, mock.output());
        await current.stop();
        assert.equal(fs.existsSync(marker), false, "the workspace's dice_lsp ran");
        // Trusted, the workspace's code may run (and the marker shows when it does).
        mock.trusted = true;
        const home = testHome(path.join(folder, "storage"));
        await probeServer("python3", EXTENSION_ROOT, { cwd: processFolder(Uri.file(workspace), home) }, false);
        assert.equal(fs.existsSync(marker), true);
    });
});
