// The client commands: which server command each runs, on which document, and what a user sees on failure.
import "./register-vscode";
import { beforeEach, describe, it } from "node:test";
import * as assert from "node:assert/strict";
import * as vscode from "vscode";
import { MessageType } from "vscode-languageclient/node";
import { mock } from "./vscode-mock";
import { CommandTarget, refused, registerCommands } from "../src/commands";
import { ServerMessages } from "../src/notifications";

function fakeTarget(running: boolean) {
    const calls: string[] = [];
    const target: CommandTarget = {
        running,
        messages: new ServerMessages(vscode.window.createOutputChannel("DICE", { log: true })),
        refresh: async (reason, force) => {
            calls.push(`refresh ${reason} force=${force}`);
        },
        showLogs: () => calls.push("showLogs"),
    };
    return { target, calls };
}

describe("registerCommands", () => {
    beforeEach(() => mock.reset());

    it("registers the five client commands under ids other than the server's", () => {
        registerCommands(fakeTarget(true).target);
        assert.deepEqual(
            [...mock.commands.keys()].sort(),
            ["dice.benchmark", "dice.generate", "dice.infill", "dice.restart", "dice.showLogs"],
        );
    });

    for (const [client, server] of [
        ["dice.generate", "dice.server.generate"],
        ["dice.infill", "dice.server.infill"],
        ["dice.benchmark", "dice.server.benchmark"],
    ]) {
        it(`${client} runs ${server} with the active document's uri`, async () => {
            registerCommands(fakeTarget(true).target);
            let received: unknown[] | undefined;
            mock.commands.set(server, (...args: unknown[]) => (received = args));
            const document = mock.openDocument("/work/project/conv.py", "class Model: ...\n");
            await vscode.commands.executeCommand(client);
            assert.deepEqual(received, [document.uri.toString()]);
        });
    }

    it("asks for a Python file when none is active", async () => {
        registerCommands(fakeTarget(true).target);
        mock.openDocument("/work/project/notes.md", "# notes", "markdown");
        await vscode.commands.executeCommand("dice.generate");
        assert.equal(mock.messages[0]?.kind, "warning");
        assert.ok(!mock.executed.some((call) => call.command === "dice.server.generate"));
    });

    it("offers a restart when the server is not running", async () => {
        const { target, calls } = fakeTarget(false);
        registerCommands(target);
        mock.openDocument("/work/project/conv.py", "");
        mock.answer = "Restart";
        await vscode.commands.executeCommand("dice.benchmark");
        assert.match(mock.messages[0]?.text ?? "", /not running/);
        assert.deepEqual(calls, ["refresh restart from a command force=true"]);
    });

    it("shows the server's error when its command fails", async () => {
        registerCommands(fakeTarget(true).target);
        mock.commands.set("dice.server.infill", () => {
            throw new Error("no ModelNew in this file");
        });
        mock.openDocument("/work/project/conv.py", "");
        await vscode.commands.executeCommand("dice.infill");
        assert.deepEqual(mock.messages, [{ kind: "error", text: "DICE: no ModelNew in this file", items: [] }]);
    });

    it("shows once why the server did not start a command, when the server said nothing of it", async () => {
        registerCommands(fakeTarget(true).target);
        const why = "this file has no `class ModelNew` to check";
        mock.commands.set("dice.server.benchmark", () => ({ started: false, message: why }));
        mock.openDocument("/work/project/conv.py", "");
        const answer = await vscode.commands.executeCommand("dice.benchmark");
        assert.deepEqual(answer, { started: false, message: why });
        assert.deepEqual(mock.messages, [{ kind: "warning", text: `DICE: Benchmark now: ${why}`, items: [] }]);
    });

    it("adds nothing to what the server showed while the command ran", async () => {
        const { target } = fakeTarget(true);
        registerCommands(target);
        mock.commands.set("dice.server.generate", () => {
            const message = "dice-lsp: no `class Model` in this file";
            target.messages.fromServer({ type: MessageType.Warning, message });
            return { ok: false, message: "no `class Model` in this file to generate a kernel for" };
        });
        mock.openDocument("/work/project/conv.py", "");
        await vscode.commands.executeCommand("dice.generate");
        assert.deepEqual(mock.messages.map((m) => m.text), ["dice-lsp: no `class Model` in this file"]);
    });

    it("leaves the refusal in the log only where dice.showNotifications keeps warnings from popping up", async () => {
        registerCommands(fakeTarget(true).target);
        mock.settings.set("dice.showNotifications", "onError");
        mock.commands.set("dice.server.infill", () => ({ ok: false, message: "no ModelNew skeleton to infill" }));
        mock.openDocument("/work/project/conv.py", "");
        await vscode.commands.executeCommand("dice.infill");
        assert.deepEqual(mock.messages, []);
        assert.match(mock.output(), /\[warning\] DICE: Infill kernel core: no ModelNew skeleton to infill/);
    });

    it("says nothing of a command that went ahead, was cancelled, or whose edit the user declined", () => {
        assert.equal(refused({ started: true, message: "checking" }), undefined);
        assert.equal(refused({ ok: true, message: "wrote /work/conv_dice.py" }), undefined);
        assert.equal(refused({ ok: false, message: "cancelled" }), undefined);
        assert.equal(refused({ ok: false, message: "" }), undefined);
        assert.equal(refused(null), undefined);
        assert.equal(refused({ ok: false, message: "the edit was not applied" }), "the edit was not applied");
    });

    it("restarts and shows logs", async () => {
        const { target, calls } = fakeTarget(true);
        registerCommands(target);
        await vscode.commands.executeCommand("dice.restart");
        await vscode.commands.executeCommand("dice.showLogs");
        assert.deepEqual(calls, ["refresh restart command force=true", "showLogs"]);
    });
});
